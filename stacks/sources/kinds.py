"""The other projects' kinds hubwright reads as cluster sources, recognised by apiVersion (group and version) and
kind together: a `Cluster` of any other group is not Cluster API's, and nothing of another group is ever ours.
Which kind belongs to which source family, and every list of them, is stacks.sources.families' table. Pure;
imports nothing of ours."""
from __future__ import annotations

from typing import Any, Mapping, NamedTuple

# The projects' API groups (docs/sources.md): Cluster API and its providers' (cluster.x-k8s.io and every
# *.cluster.x-k8s.io), Hive's and HyperShift's.
CAPI_GROUP = "cluster.x-k8s.io"
INFRASTRUCTURE_GROUP = f"infrastructure.{CAPI_GROUP}"
CONTROLPLANE_GROUP = f"controlplane.{CAPI_GROUP}"
HIVE_GROUP = "hive.openshift.io"
HYPERSHIFT_GROUP = "hypershift.openshift.io"


class SourceKind(NamedTuple):
    """A kind read from another project: its group, the versions read (the served ones whose fields are read), its
    kind and its resource (plural) name, as the project's CRD names them."""

    group: str
    versions: tuple[str, ...]
    kind: str
    plural: str

    @property
    def qualified(self) -> str:
        """kind.group, as kubectl names a kind unambiguously (AWSCluster.infrastructure.cluster.x-k8s.io)."""
        return f"{self.kind}.{self.group}"

    def api_version(self, version: str | None = None) -> str:
        return f"{self.group}/{version or self.versions[-1]}"

    def matches(self, doc: Mapping[str, Any]) -> bool:
        """Whether `doc` is of this kind: its group, one of the versions read, and its kind."""
        api_version = doc.get("apiVersion")
        if not isinstance(api_version, str) or "/" not in api_version:
            return False
        group, _, version = api_version.rpartition("/")
        return (group, doc.get("kind")) == (self.group, self.kind) and version in self.versions


# Cluster API v1.14 serves Cluster at v1beta1 and v1beta2 (stores v1beta2); CAPA v2.13's kinds are read at v1beta2.
CAPI_CLUSTER = SourceKind(CAPI_GROUP, ("v1beta1", "v1beta2"), "Cluster", "clusters")
AWS_CLUSTER = SourceKind(INFRASTRUCTURE_GROUP, ("v1beta2",), "AWSCluster", "awsclusters")
AWS_MANAGED_CONTROL_PLANE = SourceKind(CONTROLPLANE_GROUP, ("v1beta2",), "AWSManagedControlPlane",
                                       "awsmanagedcontrolplanes")
# EKS's infrastructureRef: a placeholder CAPA keeps beside the control plane; named by the Cluster, never read.
AWS_MANAGED_CLUSTER = SourceKind(INFRASTRUCTURE_GROUP, ("v1beta2",), "AWSManagedCluster", "awsmanagedclusters")
CLUSTER_DEPLOYMENT = SourceKind(HIVE_GROUP, ("v1",), "ClusterDeployment", "clusterdeployments")
# HyperShift's CRDs as pinned (tools/crds/modules.txt: hostedclusters, hostedcontrolplanes) serve v1alpha1
# and v1beta1 and store v1beta1; the published files have no conversion webhook (`hypershift install` adds one).
HOSTED_CLUSTER = SourceKind(HYPERSHIFT_GROUP, ("v1alpha1", "v1beta1"), "HostedCluster", "hostedclusters")
HOSTED_CONTROL_PLANE = SourceKind(HYPERSHIFT_GROUP, ("v1alpha1", "v1beta1"), "HostedControlPlane",
                                  "hostedcontrolplanes")
# Not another project's: a core Namespace, as a source reads one (HyperShift's control-plane namespace).
NAMESPACE = SourceKind("", ("v1",), "Namespace", "namespaces")


def group_of(api_version: object) -> str | None:
    """The group of an apiVersion ("cluster.x-k8s.io/v1beta2" -> "cluster.x-k8s.io"; core "v1" -> "")."""
    if not isinstance(api_version, str) or not api_version:
        return None
    return api_version.rpartition("/")[0]


class SourceRef(NamedTuple):
    """How a source object is named in every refusal: `Kind.group namespace/name` (kubectl's unambiguous form)."""

    group: str
    kind: str
    namespace: str
    name: str
    api_version: str = ""
    uid: str | None = None

    @classmethod
    def of(cls, doc: Mapping[str, Any]) -> "SourceRef":
        meta = doc.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        api_version, kind = doc.get("apiVersion"), doc.get("kind")
        text = lambda value, default: value if isinstance(value, str) and value else default  # noqa: E731
        uid = meta.get("uid")
        return cls(group_of(api_version) or "", text(kind, "object"), text(meta.get("namespace"), "default"),
                   text(meta.get("name"), "?"), text(api_version, ""), uid if isinstance(uid, str) and uid else None)

    def __str__(self) -> str:
        kind = f"{self.kind}.{self.group}" if self.group else self.kind
        return f"{kind} {self.namespace}/{self.name}"
