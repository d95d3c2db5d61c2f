"""Every field stacks.sources reads exists in the real CRDs (Cluster API v1.14.2, CAPA v2.13.0: doubles.thirdparty;
Hive's ClusterDeployment as controller-gen generates it from Hive's Go types, in .tools/crds/hive-apis). The paths
are recorded while derive() reads the doubles, so a path the code reads and the schema lacks fails here."""
from __future__ import annotations

import functools
from typing import Any

import pytest
import yaml

import stacks.sources.capi as capi
import stacks.sources.hive as hive
from doubles.factories import hub
from doubles.sources import (aws_cluster_doc, aws_managed_control_plane_doc, capi_cluster_doc,
                             cluster_deployment_doc)
from doubles.thirdparty import CRDS_DIR, crds
from stacks.sources.derive import derive
from stacks.sources.families import KINDS, kind_of
from stacks.sources.kinds import SourceKind

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


@functools.cache
def _crds(project: str) -> list[dict]:
    return crds(project)


@functools.cache
def schema(kind: SourceKind, version: str) -> dict[str, Any]:
    if kind.group == "hive.openshift.io":
        assert HIVE_CRD.is_file(), f"{HIVE_CRD} missing: scripts/crds-gen.sh generates it"
        found = [yaml.safe_load(HIVE_CRD.read_text())]
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
    return seen


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
    kinds = {k.kind: k for k in KINDS}
    assert {kind for kind, _, _ in recorded} == {"Cluster", "AWSCluster", "AWSManagedControlPlane", "ClusterDeployment"}
    checked = 0
    for kind, api_version, path in sorted(recorded):
        version = api_version.rpartition("/")[2]
        paths = [path, *NESTED.get(kind, []), *NESTED.get(f"{kind}/{version}", [])]
        for one in paths:
            if one.startswith("metadata."):  # ObjectMeta: the same for every kind, never in a CRD's schema
                assert one.split(".")[1] in ("name", "namespace", "labels", "annotations", "uid", "creationTimestamp")
                continue
            try:
                walk(schema(kinds[kind], version), one)
            except KeyError:
                pytest.fail(f"{kind} {api_version} has no field {one} in its CRD")
            checked += 1
    assert checked > 40


def test_the_hive_crd_read_is_the_generated_one_with_privatelink():
    assert "controller-tools" in (HIVE_CRD.parent / ".source").read_text()
    enabled = walk(schema(KINDS[1], "v1"), hive.HIVE_PRIVATELINK)
    assert enabled["type"] == "boolean"


def test_capa_defaults_the_control_plane_load_balancer_to_classic():
    # docs/sources.md and the refusal say so: an AWSCluster that sets no type has a classic ELB.
    kind = next(k for k in KINDS if k.kind == "AWSCluster")
    assert walk(schema(kind, "v1beta2"), "spec.controlPlaneLoadBalancer.loadBalancerType")["default"] == "classic"
