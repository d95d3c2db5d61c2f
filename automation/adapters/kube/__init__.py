"""Kubernetes, through the official client: informers (list + watch into a store), the Lease, the status and
Event writers, the facts agents' identities, the shared ingress's ConfigMap, and where to find the API server."""
from automation.adapters.kube.clusters import FINALIZER_ATTEMPTS, ClusterClient, FinalizerConflict, KubeClusters

__all__ = ["FINALIZER_ATTEMPTS", "ClusterClient", "FinalizerConflict", "KubeClusters"]
