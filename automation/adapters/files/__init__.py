"""Files and HAProxy: a hub and a folder of clusters read from YAML (inputs), the install rendered as manifests
(install), and a running HAProxy given a new config without dropping connections (haproxy)."""
