"""Kubernetes, through the official client: the object port over the API's REST paths (objects.py), informers
(list + watch into a store), the Lease, the Event recorder, the facts agents' identities, the cluster sources' kinds,
the shared ingress's ConfigMap, and where to find the API server. Controllers reach it through the controller kit
(automation/kit), never the other way round."""
