"""stacks.sources.derive: which source objects are taken and what HubCluster each keeps, attacks first (a tenant
writes these objects: another namespace's object, a classic ELB, Hive's own PrivateLink, a kind we do not read)."""
from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from doubles.factories import hub
from doubles.sources import (aws_cluster_doc, aws_managed_control_plane_doc, capi_cluster_doc,
                             cluster_deployment_doc, control_plane_namespace_doc, derived, hosted_cluster_doc,
                             hosted_control_plane_doc, refusal, related_in)
from stacks.model.cluster import Cluster
from stacks.model.loading import parse
from stacks.names import (DELETION_POLICY_ANNOTATION, ENABLED_ANNOTATION, MESH_ENABLED_ANNOTATION, MESH_LABEL,
                          PRIVATELINK_ANNOTATION,
                          REGION_ANNOTATION)
from stacks.sources.derive import derive
from stacks.sources.outcome import Derived, Pending, Refused

ACCOUNT = "222222222222"


def run(source: dict, *related: dict, account: str | None = ACCOUNT, **hub_spec: Any):
    return derive(source, related_in(*related), owner_account=account, hub=hub(**hub_spec))


# --------------------------------------------------------------------------- attacks

def test_a_source_without_the_annotation_is_never_taken():
    for annotations in ({}, {ENABLED_ANNOTATION: "false"}, {ENABLED_ANNOTATION: "True"}, {ENABLED_ANNOTATION: "yes"}):
        cluster = capi_cluster_doc(enabled=False, annotations=annotations)
        assert run(cluster, aws_cluster_doc()) is None
        assert run(cluster_deployment_doc(enabled=False, annotations=annotations)) is None
    # the mesh label alone, or PrivateLink alone, takes nothing either
    assert run(capi_cluster_doc(enabled=False, mesh="payments", privatelink=True), aws_cluster_doc()) is None


def test_a_v1beta1_infrastructure_ref_to_another_namespace_is_refused_and_never_read():
    victim = aws_cluster_doc("web-1", "globex", vpc="vpc-0globex")
    related = related_in(victim)
    outcome = derive(capi_cluster_doc("web-1", "acme", version="v1beta1", infra_namespace="globex"), related,
                     owner_account=ACCOUNT, hub=hub())
    error = refusal(outcome)
    assert (error.obj, error.field) == ("Cluster.cluster.x-k8s.io acme/web-1", "spec.infrastructureRef.namespace")
    assert "'globex'" in error.reason and "its own namespace (acme)" in error.reason
    assert related.asked == []  # the other tenant's AWSCluster is not even fetched


def test_a_v1beta2_ref_carrying_a_namespace_is_refused_too():
    cluster = capi_cluster_doc("web-1", "acme")
    cluster["spec"]["infrastructureRef"]["namespace"] = "globex"  # not in v1beta2's schema; a plan folder is not pruned
    assert refusal(run(cluster, aws_cluster_doc("web-1", "globex"))).field == "spec.infrastructureRef.namespace"


def test_a_reference_to_a_kind_not_read_is_refused_naming_it():
    error = refusal(run(capi_cluster_doc(infra_kind="DockerCluster")))
    assert error.field == "spec.infrastructureRef"
    assert "DockerCluster.infrastructure.cluster.x-k8s.io" in error.reason and "does not read" in error.reason
    # A kind of ours by name, in another group, is not ours: recognised by group and kind together.
    cluster = capi_cluster_doc()
    cluster["spec"]["infrastructureRef"]["apiGroup"] = "evil.example.com"
    assert "AWSCluster.evil.example.com" in refusal(run(cluster, aws_cluster_doc())).reason


def test_the_account_is_the_namespaces_owner_never_the_source():
    assert derived(run(capi_cluster_doc(), aws_cluster_doc(), account="222222222222")).doc["spec"]["accountID"] == \
        "222222222222"
    outcome = run(capi_cluster_doc(), aws_cluster_doc(), account=None)
    error = refusal(outcome)
    assert isinstance(outcome, Refused) and outcome.reason == "NamespaceNotOwned"
    assert error.field == "metadata.namespace" and "owns no account" in error.reason


def test_only_the_mesh_opt_in_is_copied_from_the_source():
    # Only the mesh label and the mesh-enabled annotation are copied: a tenant's own region annotation on the source
    # does not move its cluster (the region is the AWSCluster's).
    cluster = capi_cluster_doc(annotations={REGION_ANNOTATION: "eu-west-1", "hubwright.io/overrides-source": "true"},
                               labels={"hubwright.io/tenant": "globex"})
    doc = derived(run(cluster, aws_cluster_doc(region="us-west-2"))).doc
    assert doc["metadata"]["annotations"] == {REGION_ANNOTATION: "us-west-2"}
    assert "labels" not in doc["metadata"]


# --------------------------------------------------------------------------- PrivateLink

def test_privatelink_on_a_classic_elb_is_refused_with_the_reason():
    for lb_type in ("classic", "elb", "alb", None):
        error = refusal(run(capi_cluster_doc(privatelink=True), aws_cluster_doc(lb_type=lb_type, elb_name="web-1-api")))
        assert (error.obj, error.field) == ("AWSCluster.infrastructure.cluster.x-k8s.io acme/web-1",
                                            "spec.controlPlaneLoadBalancer.loadBalancerType")
        assert "needs a network load balancer" in error.reason
        assert ("CAPA's default: classic" if lb_type is None else f"is {lb_type}:") in error.reason


def test_privatelink_on_an_nlb_uses_capas_load_balancer_name_and_waits_for_it():
    doc = derived(run(capi_cluster_doc(privatelink=True), aws_cluster_doc(elb_name="web-1-apiserver"))).doc
    assert doc["spec"]["privateLink"] == {"enabled": True, "loadBalancerName": "web-1-apiserver"}
    pending = run(capi_cluster_doc(privatelink=True), aws_cluster_doc(elb_name=None))
    assert isinstance(pending, Pending)
    assert pending.wait.field == "status.networkStatus.apiServerElb.name"
    # Without the annotation there is no PrivateLink, whatever the load balancer.
    assert "privateLink" not in derived(run(capi_cluster_doc(), aws_cluster_doc(lb_type="classic"))).doc["spec"]


def test_hive_with_both_privatelink_flags_is_refused_naming_hives_field():
    error = refusal(run(cluster_deployment_doc(privatelink=True, hive_privatelink=True)))
    assert (error.obj, error.field) == ("ClusterDeployment.hive.openshift.io acme/ocp-1",
                                        "spec.platform.aws.privateLink.enabled")
    assert "Route 53 refuses two private zones of one name" in error.reason
    # Either one alone is fine: Hive's own (we publish nothing), or ours on the installer's NLB <infraID>-int.
    assert "privateLink" not in derived(run(cluster_deployment_doc(hive_privatelink=True))).doc["spec"]
    ours = derived(run(cluster_deployment_doc(privatelink=True, hive_privatelink=False))).cluster
    assert ours.spec.private_link.enabled and ours.spec.private_link.load_balancer_name is None  # <infraID>-int


def test_eks_has_no_load_balancer_of_its_own_to_publish():
    cluster = capi_cluster_doc("eks-1", infra_kind="AWSManagedCluster", privatelink=True,
                               control_plane=("controlplane.cluster.x-k8s.io", "AWSManagedControlPlane"))
    error = refusal(run(cluster, aws_managed_control_plane_doc("eks-1")))
    assert error.field == f"metadata.annotations[{PRIVATELINK_ANNOTATION}]" and "EKS" in error.reason


def test_eks_is_read_from_its_control_plane_and_its_aws_endpoint_is_refused_by_the_models_rule():
    cluster = capi_cluster_doc("eks-1", infra_kind="AWSManagedCluster",
                               control_plane=("controlplane.cluster.x-k8s.io", "AWSManagedControlPlane"))
    # EKS's endpoint is under eks.amazonaws.com: the model refuses an API host in AWS's domains (a private zone of
    # that name would shadow AWS's endpoints); named where it was read.
    error = refusal(run(cluster, aws_managed_control_plane_doc("eks-1")))
    assert (error.obj, error.field) == ("AWSManagedControlPlane.controlplane.cluster.x-k8s.io acme/eks-1",
                                        "spec.controlPlaneEndpoint")
    assert "amazonaws.com" in error.reason and "spec.apiURL" in error.reason
    # With an endpoint of its own (a DNS name the platform gives it), the rest is read from the control plane.
    doc = derived(run(cluster, aws_managed_control_plane_doc("eks-1", endpoint="api.eks-1.acme.example.com"))).doc
    assert doc["spec"]["network"]["vpcID"] == "vpc-0eks1" and doc["spec"]["network"]["nodeSecurityGroupIDs"] == \
        ["sg-0e1node"]


# --------------------------------------------------------------------------- what is read

@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
def test_both_reference_shapes_are_read(version):
    doc = derived(run(capi_cluster_doc("web-1", version=version, infra_name="web-1-infra"),
                      aws_cluster_doc("web-1-infra", secondary=("100.64.0.0/16",)))).doc
    network = doc["spec"]["network"]
    assert network["vpcID"] == "vpc-0web1" and network["cidr"] == "10.20.0.0/16"
    assert network["secondaryCIDRs"] == ["100.64.0.0/16"]
    assert network["routeTableIDs"] == ["rtb-0w10", "rtb-0w11", "rtb-0w12", "rtb-0w13"]
    assert network["transitSubnets"] == [{"subnetID": "subnet-0w10", "availabilityZone": "us-east-1a"},
                                         {"subnetID": "subnet-0w12", "availabilityZone": "us-east-1b"}]
    assert network["nodeSecurityGroupIDs"] == ["sg-0web1node"]
    assert doc["spec"]["infraID"] == "web-1" and doc["spec"]["region"] == "us-east-1"
    assert doc["spec"]["apiURL"] == "https://api.web-1-infra.acme.example.com:6443"


@pytest.mark.parametrize("zone", ["", "z" * 40, 7])
def test_a_subnet_whose_zone_is_not_a_zone_is_left_out_not_an_exception(zone):
    """Found by the property test below (an AWSCluster subnet's availabilityZone replaced by ""): the subnet cannot
    be placed in a zone, so it is not a transit subnet; the rest is derived as before."""
    infra = aws_cluster_doc("web-1-infra")
    first = infra["spec"]["network"]["subnets"][0]
    first["availabilityZone"] = zone
    network = derived(run(capi_cluster_doc("web-1", infra_name="web-1-infra"), infra)).doc["spec"]["network"]
    assert first["resourceID"] not in [s["subnetID"] for s in network["transitSubnets"]]
    assert all(s["availabilityZone"] for s in network["transitSubnets"])


def test_private_route_tables_only_when_the_hub_says_so():
    doc = derived(run(capi_cluster_doc(), aws_cluster_doc(), discovery={"routeTables": "private"})).doc
    assert doc["spec"]["network"]["routeTableIDs"] == ["rtb-0w10", "rtb-0w12"]  # the private subnets' tables


def test_the_derived_document_is_our_hubcluster_with_the_mesh_opt_in_and_an_owner_reference():
    source = capi_cluster_doc("web-1", mesh="payments", uid="3f1c-uid")
    outcome = derived(run(source, aws_cluster_doc("web-1")))
    parsed = parse(outcome.doc)
    assert isinstance(parsed, Cluster) and parsed == outcome.cluster
    meta = outcome.doc["metadata"]
    assert (meta["name"], meta["namespace"]) == ("web-1", "acme")
    assert meta["labels"] == {MESH_LABEL: "payments"}
    assert meta["annotations"] == {MESH_ENABLED_ANNOTATION: "true", REGION_ANNOTATION: "us-east-1"}
    assert meta["ownerReferences"] == [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "web-1",
                                        "uid": "3f1c-uid", "controller": True, "blockOwnerDeletion": True}]
    hive = derived(run(cluster_deployment_doc("ocp-1", mesh="payments", uid="9a-uid")))
    assert parse(hive.doc) == hive.cluster
    assert hive.doc["spec"] == {"accountID": ACCOUNT, "region": "us-east-1", "infraID": "ocp-1-x7k2p",
                                "apiURL": "https://api.ocp-1.acme.example.com:6443", "network": {}}
    assert hive.doc["metadata"]["labels"] == {MESH_LABEL: "payments"}


def test_spec_sources_namespaces_narrows_the_namespaces_taken():
    for source, related in ((capi_cluster_doc("web-1", "acme"), [aws_cluster_doc("web-1", "acme")]),
                            (cluster_deployment_doc("ocp-1", "acme"), [])):
        assert run(source, *related, sources={"namespaces": ["globex"]}) is None
        assert isinstance(run(source, *related, sources={"namespaces": ["globex", "acme"]}), Derived)
        assert isinstance(run(source, *related, sources={}), Derived)  # unset: any namespace owning an account


def test_not_yet_is_pending_with_what_it_waits_for():
    cases = [
        (run(capi_cluster_doc()), "Cluster.cluster.x-k8s.io acme/web-1", "spec.infrastructureRef"),  # no AWSCluster yet
        (run(cluster_deployment_doc(infra_id=None)), "ClusterDeployment.hive.openshift.io acme/ocp-1", "spec.installed"),
    ]
    no_endpoint = capi_cluster_doc()
    infra = aws_cluster_doc()
    del infra["spec"]["controlPlaneEndpoint"]
    cases.append((run(no_endpoint, infra), "Cluster.cluster.x-k8s.io acme/web-1", "spec.controlPlaneEndpoint"))
    for outcome, obj, field in cases:
        assert isinstance(outcome, Pending), outcome
        assert (outcome.wait.obj, outcome.wait.field) == (obj, field)


def test_a_name_that_is_no_infra_id_is_refused_where_it_was_written():
    error = refusal(run(capi_cluster_doc("a-cluster-name-much-longer-than-28"),
                        aws_cluster_doc("a-cluster-name-much-longer-than-28")))
    assert (error.obj, error.field) == ("Cluster.cluster.x-k8s.io acme/a-cluster-name-much-longer-than-28",
                                        "metadata.name")
    assert "spec.infraID" in error.reason


def test_a_bad_value_in_the_infrastructure_object_is_named_there():
    infra = aws_cluster_doc()
    infra["spec"]["network"]["subnets"][0]["routeTableId"] = "table-1"
    error = refusal(run(capi_cluster_doc(), infra))
    assert (error.obj, error.field) == ("AWSCluster.infrastructure.cluster.x-k8s.io acme/web-1",
                                        "spec.network.subnets[].routeTableId")
    assert "route table ID" in error.reason


def test_a_non_aws_cluster_deployment_is_refused():
    deployment = cluster_deployment_doc()
    deployment["spec"]["platform"] = {"gcp": {"region": "europe-west1"}}
    error = refusal(run(deployment))
    assert error.field == "spec.platform.aws" and "gcp" in error.reason


# --------------------------------------------------------------------------- keeping it

def test_the_digest_and_merge_patch_see_only_what_the_source_decides():
    first = derived(run(capi_cluster_doc(mesh="payments", uid="u1"), aws_cluster_doc()))
    kept = {**first.doc, "metadata": {**first.doc["metadata"], "resourceVersion": "7", "finalizers": ["x"],
                                      "annotations": {**first.doc["metadata"]["annotations"], "other": "kept"}},
            "status": {"network": {"vpcID": "vpc-0web1"}}}
    assert first.same_as(kept) and first.merge_patch(kept) is None
    # The source leaves the group and its VPC gains a block: the label goes, the spec follows, the rest is kept.
    second = derived(run(capi_cluster_doc(uid="u1"), aws_cluster_doc(secondary=("100.64.0.0/16",))))
    assert not second.same_as(kept) and second.digest != first.digest
    patch = second.merge_patch(kept)
    assert patch == {"metadata": {"labels": {MESH_LABEL: None}, "annotations": {MESH_ENABLED_ANNOTATION: None}},
                     "spec": {"network": {"secondaryCIDRs": ["100.64.0.0/16"]}}}


def test_capas_load_balancer_name_as_api_host_is_refused_and_the_clusters_own_endpoint_is_read_first():
    elb = "web-1-apiserver-1234567890.elb.us-east-1.amazonaws.com"
    error = refusal(run(capi_cluster_doc(), aws_cluster_doc(endpoint=elb)))
    assert (error.obj, error.field) == ("AWSCluster.infrastructure.cluster.x-k8s.io acme/web-1",
                                        "spec.controlPlaneEndpoint")
    assert "amazonaws.com" in error.reason
    doc = derived(run(capi_cluster_doc(endpoint="api.web-1.acme.example.com"), aws_cluster_doc(endpoint=elb))).doc
    assert doc["spec"]["apiURL"] == "https://api.web-1.acme.example.com:6443"


# --------------------------------------------------------------------------- whatever a tenant writes

JUNK = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8), st.lists(st.integers(), max_size=2),
                 st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    found = [prefix] if prefix else []
    if isinstance(doc, dict):
        for key, value in doc.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            found += _paths(value, (*prefix, i))
    return found


def _replace(doc: Any, path: tuple, value: Any, drop: bool = False) -> Any:
    """`doc` with `value` at `path`, or without what is there (`drop`)."""
    copy = json.loads(json.dumps(doc))
    node = copy
    for part in path[:-1]:
        node = node[part]
    if drop:
        node.pop(path[-1])
    else:
        node[path[-1]] = value
    return copy


@settings(max_examples=300, deadline=None)
@given(which=st.integers(min_value=0), at=st.integers(min_value=0), junk=JUNK, drop=st.booleans())
def test_any_value_anywhere_or_any_field_absent_in_a_source_gives_an_answer_never_an_exception(which, at, junk, drop):
    sources = [(capi_cluster_doc(privatelink=True, mesh="payments"), [aws_cluster_doc(elb_name="web-1-api")]),
               (cluster_deployment_doc(privatelink=True), []),
               *((hosted_cluster_doc(version=v, shared_ingress=True, mesh="payments"),
                  [control_plane_namespace_doc(), hosted_control_plane_doc(version=v)]) for v in ("v1alpha1", "v1beta1"))]
    source, related = sources[which % len(sources)]
    docs = [source, *related]
    paths = [(i, p) for i, d in enumerate(docs) for p in _paths(d) if p[0] not in ("apiVersion", "kind")]
    i, path = paths[at % len(paths)]
    docs[i] = _replace(docs[i], path, junk, drop)
    outcome = run(docs[0], *docs[1:], sharedIngress={"address": "ingress.example.com:6443", "allowedBackends": ["svc"]})
    assert outcome is None or isinstance(outcome, (Derived, Refused, Pending))
    if isinstance(outcome, Derived):  # whatever was written, what is kept is one of ours
        assert isinstance(parse(outcome.doc), Cluster)
    elif isinstance(outcome, (Refused, Pending)):
        assert all(e.obj and e.reason for e in (outcome.errors if isinstance(outcome, Refused) else [outcome.wait]))


# --------------------------------------------------------------------------- deletion (docs/service.md)

@pytest.mark.parametrize("policy", ["Delete", "Retain"])
def test_a_sources_deletion_policy_becomes_its_hubclusters(policy):
    annotations = {ENABLED_ANNOTATION: "true", DELETION_POLICY_ANNOTATION: policy}
    for source, related in ((capi_cluster_doc(annotations=annotations), (aws_cluster_doc(),)),
                            (cluster_deployment_doc(annotations=annotations), ())):
        made = derived(run(source, *related))
        assert made.doc["spec"]["deletionPolicy"] == policy and made.cluster.spec.deletion_policy == policy
    assert "deletionPolicy" not in derived(run(capi_cluster_doc(), aws_cluster_doc())).doc["spec"]


def test_a_deletion_policy_that_is_neither_is_refused_naming_the_sources_annotation():
    source = capi_cluster_doc(annotations={ENABLED_ANNOTATION: "true", DELETION_POLICY_ANNOTATION: "Orphan"})
    error = refusal(run(source, aws_cluster_doc()))
    assert (error.obj, error.field) == ("Cluster.cluster.x-k8s.io acme/web-1",
                                        f"metadata.annotations[{DELETION_POLICY_ANNOTATION}]")
    assert "spec.deletionPolicy" in error.reason
