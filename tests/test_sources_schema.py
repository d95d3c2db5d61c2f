"""Every field stacks.sources reads exists in the real CRDs (Cluster API v1.14.2, CAPA v2.13.0, HyperShift v0.1.0:
doubles.thirdparty; Hive's ClusterDeployment as controller-gen generates it from Hive's Go types, in
.tools/crds/hive-apis). The paths are recorded while derive() reads the doubles, so a path the code reads and the
schema lacks fails here. A HostedCluster's paths are walked in both versions its CRD serves, whichever version the
document read was; a HostedControlPlane's annotation and a Namespace's label are ObjectMeta, in no schema."""
from __future__ import annotations

import functools
from typing import Any

import pytest
import yaml

import stacks.sources.capi as capi
import stacks.sources.hive as hive
import stacks.sources.hypershift as hypershift
from doubles.factories import hub
from doubles.sources import (aws_cluster_doc, aws_managed_control_plane_doc, capi_cluster_doc,
                             cluster_deployment_doc, control_plane_namespace_doc, hosted_cluster_doc,
                             hosted_control_plane_doc, related_in)
from doubles.thirdparty import CRDS_DIR, crds
from stacks.sources.derive import derive
from stacks.sources.families import KINDS, kind_of
from stacks.sources.kinds import HOSTED_CLUSTER, HYPERSHIFT_GROUP, SourceKind
from stacks.sources.outcome import Derived
from stacks.sources.watched import watched_version

HIVE_CRD = CRDS_DIR / "hive-apis" / "hive.openshift.io_clusterdeployments.yaml"

# Read inside objects the recorder does not see as a document's path: a reference's fields, a subnet's, a secondary
# block's, a security group's (status.networkStatus.securityGroups is a map from role to group).
NESTED = {
    "Cluster": ["spec.infrastructureRef.name", "spec.infrastructureRef.kind", "spec.controlPlaneRef.name",
                "spec.controlPlaneRef.kind", "spec.controlPlaneEndpoint.port"],
    "Cluster/v1beta1": ["spec.infrastructureRef.apiVersion", "spec.infrastructureRef.namespace",
                        "spec.controlPlaneRef.apiVersion", "spec.controlPlaneRef.namespace"],
    "Cluster/v1beta2": ["spec.infrastructureRef.apiGroup", "spec.controlPlaneRef.apiGroup"],
    "AWSCluster": ["spec.network.subnets[].resourceID", "spec.network.subnets[].id",
                   "spec.network.subnets[].availabilityZone", "spec.network.subnets[].routeTableId",
                   "spec.network.subnets[].isPublic", "spec.network.vpc.secondaryCidrBlocks[].ipv4CidrBlock",
                   "status.networkStatus.securityGroups{}.id", "spec.controlPlaneEndpoint.port"],
}
NESTED["AWSManagedControlPlane"] = [p for p in NESTED["AWSCluster"]]
# A HostedCluster's lists: the machine network's entries, the services' and the resource tags'.
NESTED["HostedCluster"] = ["spec.networking.machineNetwork[].cidr", "spec.services[].service",
                           "spec.services[].servicePublishingStrategy.type", "spec.platform.aws.resourceTags[].key",
                           "spec.platform.aws.resourceTags[].value"]
# Read only where machineNetwork is absent: v1alpha1's single machine CIDR, which v1beta1 dropped.
V1ALPHA1_ONLY = {"spec.networking.machineCIDR"}
# Read to be refused, and added by HyperShift after the pinned CRDs (docs/sources.md names the differences): absent
# from every object the pinned CRDs serve.
NEWER = {"spec.platform.aws.sharedVPC"}
INGRESS = {"address": "ingress.example.com:6443", "allowedBackends": ["svc"]}


@functools.cache
def _crds(project: str) -> list[dict]:
    return crds(project)


@functools.cache
def schema(kind: SourceKind, version: str) -> dict[str, Any]:
    if kind.group == "hive.openshift.io":
        assert HIVE_CRD.is_file(), f"{HIVE_CRD} missing: scripts/crds-gen.sh generates it"
        found = [yaml.safe_load(HIVE_CRD.read_text())]
    elif kind.group == HYPERSHIFT_GROUP:
        found = [c for c in _crds("hypershift") if c["spec"]["names"]["kind"] == kind.kind]
    else:
        found = [c for c in _crds("cluster-api" if kind.group == "cluster.x-k8s.io" else "cluster-api-provider-aws")
                 if c["spec"]["names"]["kind"] == kind.kind and c["spec"]["group"] == kind.group]
    (crd,) = found
    assert crd["spec"]["names"]["plural"] == kind.plural
    served = {v["name"]: v for v in crd["spec"]["versions"] if v.get("served")}
    assert version in served, f"{kind.qualified} does not serve {version} (serves {sorted(served)})"
    return served[version]["schema"]["openAPIV3Schema"]


def walk(node: dict[str, Any], path: str) -> dict[str, Any]:
    for part in path.split("."):
        for suffix, key in (("[]", "items"), ("{}", "additionalProperties")):
            if part.endswith(suffix):
                node = node["properties"][part[:-2]][key]
                break
        else:
            node = node["properties"][part]
    return node


@pytest.fixture
def recorded(monkeypatch):
    """(kind, apiVersion, path) of every document path derive() reads."""
    seen: set[tuple[str, str, str]] = set()
    read = capi.get

    def get(doc: Any, path: str) -> Any:
        if isinstance(doc, dict) and "apiVersion" in doc:
            seen.add((doc["kind"], doc["apiVersion"], path))
        return read(doc, path)

    monkeypatch.setattr(capi, "get", get)
    monkeypatch.setattr(hive, "get", get)
    monkeypatch.setattr(hypershift, "get", get)
    return seen


def hosted_clusters() -> list[tuple[dict, tuple[dict, ...]]]:
    """HostedClusters in both versions, each with what it reads, reaching every branch that reads a field: derived
    with its tags and its route, pending (no endpoint: the APIServer's publishing is named), and PrivateLink
    refused either way."""
    out = []
    for version in HOSTED_CLUSTER.versions:
        routed = hosted_cluster_doc(version=version, shared_ingress=True)
        routed["spec"]["platform"]["aws"]["resourceTags"] = [{"key": "cost-center", "value": "acme-platform"}]
        made = (control_plane_namespace_doc(), hosted_control_plane_doc(version=version))
        out += [(routed, made), (hosted_cluster_doc(version=version, endpoint=None), ()),
                (hosted_cluster_doc(version=version, privatelink=True), ()),
                (hosted_cluster_doc(version=version, privatelink=True, endpoint_access="PublicAndPrivate"), ())]
    return out


def test_every_path_read_is_in_the_real_crds(recorded):
    index: dict[tuple, dict] = {}

    def related(kind: SourceKind, namespace: str, name: str) -> dict | None:
        return index.get((kind, namespace, name))

    eks = capi_cluster_doc("eks-1", infra_kind="AWSManagedCluster", endpoint="api.eks-1.acme.example.com",
                           control_plane=("controlplane.cluster.x-k8s.io", "AWSManagedControlPlane"))
    for doc in (aws_cluster_doc("web-1", elb_name="web-1-api", secondary=("100.64.0.0/16",)),
                aws_managed_control_plane_doc("eks-1")):
        index[(kind_of(doc), "acme", doc["metadata"]["name"])] = doc
    for source in (capi_cluster_doc("web-1", privatelink=True), capi_cluster_doc("web-1", version="v1beta1"), eks,
                   cluster_deployment_doc(privatelink=True), cluster_deployment_doc(privatelink=True,
                                                                                    hive_privatelink=True)):
        derive(source, related, owner_account="222222222222", hub=hub())
    for source, made in hosted_clusters():
        derive(source, related_in(*made), owner_account="222222222222", hub=hub(sharedIngress=INGRESS))
    kinds = {k.kind: k for k in KINDS}
    assert {kind for kind, _, _ in recorded} == {"Cluster", "AWSCluster", "AWSManagedControlPlane", "ClusterDeployment",
                                                 "HostedCluster", "HostedControlPlane", "Namespace"}
    checked = 0
    for kind, api_version, path in sorted(recorded):
        version = api_version.rpartition("/")[2]
        paths = [path, *NESTED.get(kind, []), *NESTED.get(f"{kind}/{version}", [])]
        for one in paths:
            if one in NEWER:
                with pytest.raises(KeyError):
                    walk(schema(kinds[kind], version), one)
                continue
            if one.startswith("metadata."):  # ObjectMeta: the same for every kind, never in a CRD's schema
                assert one.split(".")[1] in ("name", "namespace", "labels", "annotations", "uid", "creationTimestamp")
                continue
            try:
                walk(schema(kinds[kind], version), one)
            except KeyError:
                pytest.fail(f"{kind} {api_version} has no field {one} in its CRD")
            checked += 1
    assert checked > 60


def test_a_hosted_clusters_paths_are_in_both_served_versions(recorded):
    """Whichever version a HostedCluster is written in, the API server serves it in both (HyperShift's conversion
    webhook; the service watches the stored one): every path read is walked in v1alpha1 and v1beta1, and the one
    path v1beta1 dropped is read only as v1alpha1's fallback."""
    outcomes = [derive(source, related_in(*made), owner_account="222222222222", hub=hub(sharedIngress=INGRESS))
                for source, made in hosted_clusters()]
    # in each version: derived (with its route), pending, and PrivateLink refused twice
    assert [type(o).__name__ for o in outcomes] == ["Derived", "Pending", "Refused", "Refused"] * 2
    assert all(o.doc["spec"]["sharedIngress"]["backend"] == "kube-apiserver.acme-hc-1.svc:6443"
               for o in outcomes if isinstance(o, Derived))
    paths = {path for kind, _, path in recorded if kind == "HostedCluster" and not path.startswith("metadata.")}
    paths |= set(NESTED["HostedCluster"]) | V1ALPHA1_ONLY
    assert {"spec.infraID", "spec.platform.aws.region", "spec.platform.aws.cloudProviderConfig.vpc",
            "spec.platform.aws.cloudProviderConfig.zone", "spec.platform.aws.endpointAccess",
            "spec.platform.aws.resourceTags", "spec.networking.machineNetwork", "spec.services",
            "status.controlPlaneEndpoint.host", "status.controlPlaneEndpoint.port"} <= paths
    for version in HOSTED_CLUSTER.versions:
        for path in sorted(paths - NEWER):
            if version != "v1alpha1" and path in V1ALPHA1_ONLY:
                with pytest.raises(KeyError):  # dropped in v1beta1: absent from every object served as it
                    walk(schema(HOSTED_CLUSTER, version), path)
                continue
            try:
                walk(schema(HOSTED_CLUSTER, version), path)
            except KeyError:
                pytest.fail(f"HostedCluster {version} has no field {path} in its CRD")


def test_the_hosted_cluster_crd_serves_the_versions_read_and_stores_the_one_watched():
    (crd,) = [c for c in _crds("hypershift") if c["spec"]["names"]["kind"] == HOSTED_CLUSTER.kind]
    assert [v["name"] for v in crd["spec"]["versions"] if v.get("served")] == list(HOSTED_CLUSTER.versions)
    (stored,) = [v["name"] for v in crd["spec"]["versions"] if v.get("storage")]
    assert stored == watched_version(HOSTED_CLUSTER)
    # endpointAccess defaults to Public: a HostedCluster that leaves it out is public, as _private_link reads it.
    assert walk(schema(HOSTED_CLUSTER, stored), hypershift.ENDPOINT_ACCESS)["default"] == "Public"


def test_the_hive_crd_read_is_the_generated_one_with_privatelink():
    assert "controller-tools" in (HIVE_CRD.parent / ".source").read_text()
    enabled = walk(schema(KINDS[1], "v1"), hive.HIVE_PRIVATELINK)
    assert enabled["type"] == "boolean"


def test_capa_defaults_the_control_plane_load_balancer_to_classic():
    # docs/sources.md and the refusal say so: an AWSCluster that sets no type has a classic ELB.
    kind = next(k for k in KINDS if k.kind == "AWSCluster")
    assert walk(schema(kind, "v1beta2"), "spec.controlPlaneLoadBalancer.loadBalancerType")["default"] == "classic"
