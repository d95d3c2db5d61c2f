"""Shared ingress: one load balancer for every cluster's API server, routed by PROXY protocol v2.

render.py   pure: central haproxy.cfg + map file, and each cluster's node-side haproxy.cfg
runtime.py  apply a new central config to a running HAProxy without dropping other clusters' connections
"""
