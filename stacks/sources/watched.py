"""What the service watches of other projects' cluster objects (docs/sources.md), and the RBAC that takes. Pure.

Each kind is named by its API group, version and plural, the way the API server serves it; envtest and a hub
without conversion webhooks serve what was stored: Cluster API stores v1beta2, CAPA v1beta2, Hive v1.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SourceKind:
    """Another project's kind the service watches: the informer's name and where the API serves it."""

    name: str  # the informer's (and the queue keys') name: "capi-clusters", ...
    group: str
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


# What the sources controller watches (stacks.sources.derive reads them): the sources, and the infrastructure
# objects a Cluster API Cluster refers to. Envtest and a hub without conversion webhooks serve what was stored:
# Cluster API stores v1beta2, CAPA v1beta2, Hive v1.
CAPI_CLUSTERS = SourceKind("capi-clusters", "cluster.x-k8s.io", "v1beta2", "clusters", "Cluster")
HIVE_CLUSTERDEPLOYMENTS = SourceKind("clusterdeployments", "hive.openshift.io", "v1", "clusterdeployments",
                                     "ClusterDeployment")
AWS_CLUSTERS = SourceKind("awsclusters", "infrastructure.cluster.x-k8s.io", "v1beta2", "awsclusters", "AWSCluster")
AWS_MANAGED_CONTROL_PLANES = SourceKind("awsmanagedcontrolplanes", "controlplane.cluster.x-k8s.io", "v1beta2",
                                        "awsmanagedcontrolplanes", "AWSManagedControlPlane")
# --sources names -> (the source kind, the infrastructure kinds it reads)
FAMILIES: dict[str, tuple[SourceKind, tuple[SourceKind, ...]]] = {
    "capi": (CAPI_CLUSTERS, (AWS_CLUSTERS, AWS_MANAGED_CONTROL_PLANES)),
    "hive": (HIVE_CLUSTERDEPLOYMENTS, ()),
}


def rules() -> list[dict[str, Any]]:
    """The RBAC the sources controller needs: its finalizer on the sources, a read of the infrastructure."""
    out = []
    for source, related in FAMILIES.values():
        out.append({"apiGroups": [source.group], "resources": [source.plural],
                    "verbs": ["get", "list", "watch", "update", "patch"]})
        out += [{"apiGroups": [r.group], "resources": [r.plural], "verbs": ["get", "list", "watch"]} for r in related]
    return out
