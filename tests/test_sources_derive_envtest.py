"""Source objects as the real kube-apiserver keeps them (Cluster API v1.14.2's and CAPA v2.13.0's published CRDs,
Hive's ClusterDeployment CRD generated from its Go types): created at v1beta2 (envtest runs no conversion webhook),
read back after the API server's pruning and defaulting, derived, and the derived HubCluster accepted by our own
CRD with its ownerReference to the source."""
from __future__ import annotations

import uuid
from typing import Any

import pytest
import yaml
from kubernetes import client

from doubles.factories import namespace_doc
from doubles.sources import aws_cluster_doc, capi_cluster_doc, cluster_deployment_doc
from doubles.thirdparty import CRDS_DIR, crds
from stacks.model.hub import HubConfig
from stacks.model.loading import parse
from stacks.names import CLUSTERS, GROUP, VERSION
from stacks.sources.derive import derive
from stacks.sources.families import RELATED
from stacks.sources.kinds import AWS_CLUSTER, CAPI_CLUSTER, CLUSTER_DEPLOYMENT, SourceKind
from stacks.sources.outcome import Derived, Refused
from tests.envtest import install_crds, kube_apiserver  # noqa: F401

TIMEOUT = 30  # every API call's


def hub() -> HubConfig:
    hub_ = parse(yaml.safe_load(open("examples/hub.yaml")))
    assert isinstance(hub_, HubConfig)
    return hub_


@pytest.fixture(scope="module")
def api(kube_apiserver):  # noqa: F811
    api_client = kube_apiserver.api_client()
    wanted = {CAPI_CLUSTER.plural + "." + CAPI_CLUSTER.group} | {f"{k.plural}.{k.group}" for k in RELATED}
    found = [c for project in ("cluster-api", "cluster-api-provider-aws") for c in crds(project)
             if c["metadata"]["name"] in wanted]
    found.append(yaml.safe_load((CRDS_DIR / "hive-apis" / "hive.openshift.io_clusterdeployments.yaml").read_text()))
    assert len(found) == 4
    install_crds(api_client, found)
    return api_client


@pytest.fixture
def namespace(api):
    name = f"src-{uuid.uuid4().hex[:8]}"
    body = namespace_doc("acme")
    body["metadata"]["name"] = name
    client.CoreV1Api(api).create_namespace(body, _request_timeout=TIMEOUT)
    return name


def create(api, kind: SourceKind, doc: dict[str, Any], namespace: str) -> dict[str, Any]:
    """Create `doc` (its status through the status subresource) and return it as the API server keeps it."""
    objects = client.CustomObjectsApi(api)
    version = doc["apiVersion"].rpartition("/")[2]
    body = {**doc, "metadata": {**doc["metadata"], "namespace": namespace}}
    body["metadata"].pop("creationTimestamp", None)
    status = body.pop("status", None)
    created = objects.create_namespaced_custom_object(kind.group, version, namespace, kind.plural, body,
                                                      _request_timeout=TIMEOUT)
    if status:
        created = objects.patch_namespaced_custom_object_status(
            kind.group, version, namespace, kind.plural, doc["metadata"]["name"], {"status": status},
            _request_timeout=TIMEOUT)
    return created


def related_from(api):
    objects = client.CustomObjectsApi(api)

    def related(kind: SourceKind, namespace: str, name: str) -> dict | None:
        try:
            return objects.get_namespaced_custom_object(kind.group, kind.versions[-1], namespace, kind.plural, name,
                                                        _request_timeout=TIMEOUT)
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    return related


def keep(api, outcome: Derived) -> dict[str, Any]:
    """Create the derived HubCluster as the service does."""
    ns = outcome.doc["metadata"]["namespace"]
    doc = {**outcome.doc, "metadata": {k: v for k, v in outcome.doc["metadata"].items() if k != "creationTimestamp"}}
    return client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, ns, CLUSTERS, doc,
                                                                        _request_timeout=TIMEOUT)


def test_a_capi_cluster_and_its_awscluster_as_the_api_server_keeps_them_derive_a_hubcluster_it_accepts(api, namespace):
    infra = create(api, AWS_CLUSTER, aws_cluster_doc("web-1", secondary=("100.64.0.0/16",),
                                                     elb_name="web-1-apiserver"), namespace)
    source = create(api, CAPI_CLUSTER, capi_cluster_doc("web-1", mesh="payments", privatelink=True), namespace)
    assert source["apiVersion"] == "cluster.x-k8s.io/v1beta2" and infra["status"]["networkStatus"]["apiServerElb"]
    outcome = derive(source, related_from(api), owner_account="222222222222", hub=hub())
    assert isinstance(outcome, Derived), outcome
    network = outcome.doc["spec"]["network"]
    assert (network["vpcID"], network["cidr"], network["secondaryCIDRs"]) == ("vpc-0web1", "10.20.0.0/16",
                                                                              ["100.64.0.0/16"])
    assert network["nodeSecurityGroupIDs"] == ["sg-0web1node"] and len(network["routeTableIDs"]) == 4
    assert outcome.doc["spec"]["privateLink"] == {"enabled": True, "loadBalancerName": "web-1-apiserver"}
    kept = keep(api, outcome)
    assert kept["metadata"]["ownerReferences"] == [{
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "web-1",
        "uid": source["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
    assert outcome.same_as(kept) and outcome.merge_patch(kept) is None  # what the server added asks for no patch


def test_capas_defaulted_load_balancer_is_classic_and_refused_for_privatelink(api, namespace):
    infra = aws_cluster_doc("web-2", lb_type=None, elb_name="web-2-apiserver")
    infra["spec"]["controlPlaneLoadBalancer"] = {"scheme": "internal"}  # no type: the CRD defaults it
    kept = create(api, AWS_CLUSTER, infra, namespace)
    assert kept["spec"]["controlPlaneLoadBalancer"]["loadBalancerType"] == "classic"
    source = create(api, CAPI_CLUSTER, capi_cluster_doc("web-2", privatelink=True), namespace)
    outcome = derive(source, related_from(api), owner_account="222222222222", hub=hub())
    assert isinstance(outcome, Refused) and "is classic" in outcome.errors[0].reason


def test_hive_cluster_deployments_from_the_generated_crd(api, namespace):
    both = create(api, CLUSTER_DEPLOYMENT, cluster_deployment_doc("ocp-1", privatelink=True, hive_privatelink=True),
                  namespace)
    outcome = derive(both, related_from(api), owner_account="222222222222", hub=hub())
    assert isinstance(outcome, Refused)
    assert outcome.errors[0].field == "spec.platform.aws.privateLink.enabled"
    ours = create(api, CLUSTER_DEPLOYMENT, cluster_deployment_doc("ocp-2", privatelink=True), namespace)
    outcome = derive(ours, related_from(api), owner_account="222222222222", hub=hub())
    assert isinstance(outcome, Derived), outcome
    kept = keep(api, outcome)
    assert kept["spec"]["infraID"] == "ocp-1-x7k2p" and kept["spec"]["privateLink"] == {"enabled": True}
    assert kept["metadata"]["ownerReferences"][0]["kind"] == "ClusterDeployment"
