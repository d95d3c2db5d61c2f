"""stacks.sources.hypershift through derive(): a HyperShift HostedCluster as a HubCluster, attacks first. A tenant
writes its HostedCluster; HyperShift (trusted, as the hub administrator) writes the control-plane namespace and the
HostedControlPlane in it. The naive control-plane namespace `<namespace>-<name>` may be another tenant's. Any
field absent or any value anywhere: tests/test_sources.py's property test, which covers HostedClusters too."""
from __future__ import annotations

import json
from typing import Any

import pytest

from doubles.factories import hub
from doubles.sources import (aws_cluster_doc, capi_cluster_doc, cluster_deployment_doc, control_plane_namespace_doc,
                             derived, hosted_cluster_doc, hosted_control_plane_doc, refusal, related_in)
from stacks.errors import FieldError
from stacks.model.cluster import Cluster
from stacks.names import OWNER_ACCOUNT_ANNOTATION, SHARED_INGRESS_ANNOTATION
from stacks.sources.derive import derive
from stacks.sources.hypershift import CLUSTER_LINK, control_plane_namespace
from stacks.sources.outcome import Pending, Refused

ACCOUNT = "222222222222"
INGRESS = {"address": "ingress.example.com:6443", "allowedBackends": ["svc"]}


def run(source: dict, *related: dict, account: str | None = ACCOUNT, **hub_spec: Any):
    return derive(source, related_in(*related), owner_account=account,
                  hub=hub(**({"sharedIngress": INGRESS} | hub_spec)))


def waiting(outcome: object) -> FieldError:
    assert isinstance(outcome, Pending), outcome
    return outcome.wait


def control_plane(namespace: str = "acme", name: str = "hc-1", **kw: Any) -> list[dict]:
    """HyperShift's control-plane namespace and HostedControlPlane for the HostedCluster namespace/name."""
    return [control_plane_namespace_doc(namespace, name, **{k: v for k, v in kw.items() if k != "link"}),
            hosted_control_plane_doc(namespace, name, **({"link": kw["link"]} if "link" in kw else {}))]


# --------------------------------------------------------------------------- attacks

def test_a_control_plane_namespace_that_is_another_tenants_is_refused_whatever_it_holds():
    """Tenant acme's HostedCluster `prod` computes `acme-prod`, which is tenant acme-prod's own namespace. Even with a
    HyperShift label and a HostedControlPlane linked to acme/prod in it (which acme-prod could write), acme's route
    never goes there."""
    hostile = control_plane("acme", "prod", annotations={OWNER_ACCOUNT_ANNOTATION: "333333333333"})
    outcome = run(hosted_cluster_doc("prod", shared_ingress=True), *hostile)
    error = refusal(outcome)
    assert error.field == f"metadata.annotations[{SHARED_INGRESS_ANNOTATION}]"
    assert "acme-prod" in error.reason and "tenant's namespace" in error.reason and "333333333333" in error.reason
    assert control_plane_namespace("acme", "prod") == "acme-prod"


def test_a_namespace_hypershift_did_not_label_is_not_a_control_plane():
    outcome = run(hosted_cluster_doc(shared_ingress=True), *control_plane(hypershift_label=False))
    assert "not a HyperShift control-plane namespace" in refusal(outcome).reason


def test_a_hosted_control_plane_linked_to_another_hosted_cluster_is_not_this_ones():
    """`a-b/c` and `a/b-c` meet in namespace `a-b-c`; only the HostedControlPlane HyperShift linked to this
    HostedCluster proves the namespace is its."""
    outcome = run(hosted_cluster_doc("b-c", "a", shared_ingress=True), *control_plane("a", "b-c", link="a-b/c"))
    error = refusal(outcome)
    assert error.obj == "HostedControlPlane.hypershift.openshift.io a-b-c/b-c"
    assert error.field == f"metadata.annotations[{CLUSTER_LINK}]" and "'a-b/c'" in error.reason


def test_the_account_is_the_namespaces_never_the_objects():
    made = derived(run(hosted_cluster_doc(), account=ACCOUNT))
    assert made.doc["spec"]["accountID"] == ACCOUNT
    assert "999999999999" not in json.dumps(made.doc)  # the rolesRef ARNs' account is never read
    assert isinstance(run(hosted_cluster_doc(), account=None), Refused)  # a namespace owning no account


def test_shared_ingress_is_derived_only_where_the_control_plane_runs_on_the_hub():
    for source, related in ((capi_cluster_doc(shared_ingress=True), [aws_cluster_doc()]),
                            (cluster_deployment_doc(shared_ingress=True), [])):
        error = refusal(run(source, *related))
        assert error.field == f"metadata.annotations[{SHARED_INGRESS_ANNOTATION}]"
        assert "only a HyperShift HostedCluster's" in error.reason


# --------------------------------------------------------------------------- taken

@pytest.mark.parametrize("version", ["v1alpha1", "v1beta1"])
def test_an_opted_in_hosted_cluster_becomes_a_hubcluster_in_both_served_versions(version):
    made = derived(run(hosted_cluster_doc(version=version, uid="u-1")))
    spec = made.doc["spec"]
    assert spec == {"accountID": ACCOUNT, "region": "us-east-1", "infraID": "hc-1-9m2xq",
                    "apiURL": "https://api-hc-1.hcp.acme.example.com:6443",
                    "network": {"vpcID": "vpc-0hc1", "cidr": "10.40.0.0/16"}}
    assert made.doc["metadata"]["ownerReferences"] == [{
        "apiVersion": f"hypershift.openshift.io/{version}", "kind": "HostedCluster", "name": "hc-1", "uid": "u-1",
        "controller": True, "blockOwnerDeletion": True}]
    assert isinstance(made.cluster, Cluster)


def test_every_machine_network_is_a_cidr_of_the_vpc_the_first_its_primary():
    doc = hosted_cluster_doc()
    doc["spec"]["networking"]["machineNetwork"] = [{"cidr": "10.40.0.0/16"}, {"cidr": "10.41.0.0/16"}]
    network = derived(run(doc)).doc["spec"]["network"]
    assert (network["cidr"], network["secondaryCIDRs"]) == ("10.40.0.0/16", ["10.41.0.0/16"])


def test_a_routed_hosted_cluster_goes_to_its_control_planes_kube_apiserver():
    made = derived(run(hosted_cluster_doc(shared_ingress=True), *control_plane()))
    assert made.doc["spec"]["sharedIngress"] == {"enabled": True, "backend": "kube-apiserver.acme-hc-1.svc:6443",
                                                 "nodeProxy": "External"}  # HyperShift writes its guests' proxy


def test_a_dotted_name_runs_in_the_dashed_namespace_hypershift_makes():
    made = derived(run(hosted_cluster_doc("hc.1", shared_ingress=True), *control_plane("acme", "hc.1")))
    assert made.doc["spec"]["sharedIngress"]["backend"] == "kube-apiserver.acme-hc-1.svc:6443"


def test_what_hypershift_has_not_made_yet_is_waited_for():
    assert "control-plane namespace acme-hc-1" in waiting(run(hosted_cluster_doc(shared_ingress=True))).reason
    only_namespace = control_plane()[:1]
    assert "HostedControlPlane" in waiting(run(hosted_cluster_doc(shared_ingress=True), *only_namespace)).reason
    assert waiting(run(hosted_cluster_doc(infra_id=None))).field == "spec.infraID"
    wait = waiting(run(hosted_cluster_doc(endpoint=None)))
    assert wait.field == "status.controlPlaneEndpoint" and "published as LoadBalancer" in wait.reason


def test_hypershifts_resource_tags_go_on_what_hubwright_builds_in_the_clusters_account():
    doc = hosted_cluster_doc()
    doc["spec"]["platform"]["aws"]["resourceTags"] = [{"key": "cost-center", "value": "cc-42"},
                                                      {"key": "team", "value": "edge"}]
    assert derived(run(doc)).doc["spec"]["tags"] == {"cost-center": "cc-42", "team": "edge"}
    doc["spec"]["platform"]["aws"]["resourceTags"].append({"key": "hubwright.io/tenant", "value": "acme"})
    error = refusal(run(doc))  # a tag hubwright's permissions read is never the tenant's to set
    assert error.field == "spec.platform.aws.resourceTags" and "sets itself" in error.reason
    doc["spec"]["platform"]["aws"]["resourceTags"] = [{"key": "team", "value": "a"}, {"key": "team", "value": "b"}]
    assert refusal(run(doc)).field == "spec.platform.aws.resourceTags"


# --------------------------------------------------------------------------- refused

@pytest.mark.parametrize("access", ["Private", "PublicAndPrivate"])
def test_our_privatelink_beside_hypershifts_own_is_refused_naming_its_field(access):
    error = refusal(run(hosted_cluster_doc(endpoint_access=access, privatelink=True)))
    assert error.field == "spec.platform.aws.endpointAccess" and access in error.reason
    assert "AWSEndpointService" in error.reason


@pytest.mark.parametrize("access", ["Public", None])
def test_privatelink_for_a_public_hosted_control_plane_is_refused_there_is_nothing_of_the_clusters(access):
    error = refusal(run(hosted_cluster_doc(endpoint_access=access, privatelink=True)))
    assert error.field == "metadata.annotations[hubwright.io/privatelink]"
    assert "is Public" in error.reason and "PublicAndPrivate" in error.reason


def test_the_load_balancers_own_name_is_no_api_host():
    error = refusal(run(hosted_cluster_doc(endpoint="a1b2.elb.us-east-1.amazonaws.com")))
    assert error.field == "status.controlPlaneEndpoint.host" and "loadBalancer.hostname" in error.reason


def test_a_zone_outside_the_region_is_refused():
    doc = hosted_cluster_doc()
    doc["spec"]["platform"]["aws"]["cloudProviderConfig"]["zone"] = "eu-west-1a"
    error = refusal(run(doc))
    assert error.field == "spec.platform.aws.cloudProviderConfig.zone" and "us-east-1" in error.reason


def test_a_shared_vpc_of_another_account_is_refused_naming_hypershifts_field():
    doc = hosted_cluster_doc()
    doc["spec"]["platform"]["aws"]["sharedVPC"] = {"localZoneID": "Z1", "rolesRef": {"ingressARN": "arn:x"}}
    error = refusal(run(doc))
    assert error.field == "spec.platform.aws.sharedVPC" and "another account" in error.reason


def test_a_dual_stack_clusters_ipv6_machine_network_is_not_a_vpc_block():
    doc = hosted_cluster_doc()
    doc["spec"]["networking"]["machineNetwork"] = [{"cidr": "10.40.0.0/16"}, {"cidr": "fd00:10:40::/48"}]
    assert derived(run(doc)).doc["spec"]["network"] == {"vpcID": "vpc-0hc1", "cidr": "10.40.0.0/16"}


def test_another_platform_is_refused():
    doc = hosted_cluster_doc()
    doc["spec"]["platform"] = {"type": "KubeVirt", "kubevirt": {}}
    assert "KubeVirt" in refusal(run(doc)).reason


def test_a_value_the_model_refuses_is_named_where_hypershift_wrote_it():
    doc = hosted_cluster_doc()
    doc["spec"]["platform"]["aws"]["cloudProviderConfig"]["vpc"] = "not-a-vpc"
    error = refusal(run(doc))
    assert error.obj == "HostedCluster.hypershift.openshift.io acme/hc-1"
    assert error.field == "spec.platform.aws.cloudProviderConfig.vpc"
