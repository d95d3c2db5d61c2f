"""A plan folder holding Cluster API, CAPA, Hive and HyperShift objects beside ours (docs/sources.md): the loader
derives their HubClusters with the one derive() the service calls, names every refused or pending source object, and
lets a hand-written HubCluster win only when it says so. A HostedCluster's route reads the folder's control-plane
Namespace (with its labels) and HostedControlPlane, as the service reads the API server's."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from automation.adapters.files.inputs import load_fleet
from doubles.factories import cluster_doc, namespace_doc
from doubles.sources import (aws_cluster_doc, capi_cluster_doc, cluster_deployment_doc, control_plane_namespace_doc,
                             hosted_cluster_doc, hosted_control_plane_doc)
from stacks.errors import InvalidSpec
from stacks.haproxy import parse_map
from stacks.ingress import ingress_error
from stacks.names import OVERRIDES_SOURCE_ANNOTATION

HUB = "examples/hub.yaml"
HYPERSHIFT = "examples/hypershift/clusters"


def folder(tmp_path: Path, *docs: dict) -> str:
    where = tmp_path / "clusters"
    where.mkdir(exist_ok=True)
    (where / "all.yaml").write_text(yaml.safe_dump_all([namespace_doc("acme"), *docs]))
    return str(where)


def test_a_cluster_api_cluster_in_a_plan_folder_is_read_as_a_source_not_refused_as_ours(tmp_path):
    # Before sources, a Cluster API Cluster was parsed as one of our kinds and refused.
    fleet = load_fleet(HUB, folder(tmp_path, capi_cluster_doc("web-1"), aws_cluster_doc("web-1")))
    (cluster,) = fleet.clusters
    assert cluster.key == "acme/web-1"
    assert cluster.spec.account_id == "222222222222"  # the namespace's owner account, not anything the source says
    assert cluster.spec.network is not None and cluster.spec.network.vpc_id == "vpc-0web1"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "automation", *args], capture_output=True, text=True)


def resources(plan: dict, stack: str, type_: str) -> list[dict]:
    (found,) = [s for s in plan["stacks"] if s["stack"] == stack]
    return [r for r in found["resources"] if r["type"] == type_]


@pytest.mark.live
def test_the_capi_example_plans_a_mesh_of_three_and_publishes_one_on_capas_nlb():
    done = run("plan", "--hub", "examples/capi/hub.yaml", "--clusters", "examples/capi/clusters", "--format", "json")
    assert done.returncode == 0, done.stderr
    plan = yaml.safe_load(done.stdout)
    assert {s["stack"] for s in plan["stacks"]} == {"web.web-use1", "web.web-use1b", "web.web-euw1"}
    (service,) = resources(plan, "web.web-use1", "aws:ec2/vpcEndpointService:VpcEndpointService")
    assert "/net/web-use1-apiserver/" in service["inputs"]["networkLoadBalancerArns"][0]
    routes = [r["name"] for s in plan["stacks"] for r in s["resources"] if r["type"] == "aws:ec2/route:Route"]
    assert len({r.split("+")[0] + "+" + r.split("+")[1].split("-rtb")[0] for r in routes}) == 3  # three peerings
    # HubConfig spec.discovery.routeTables: private: the public subnets' table gets no route.
    assert routes and not [r for r in routes if r.endswith("rtb-0wu1q") or r.endswith("rtb-0wu1bq")]


@pytest.mark.live
def test_the_hive_example_publishes_each_cluster_on_the_installers_nlb():
    done = run("plan", "--hub", "examples/hub.yaml", "--clusters", "examples/hive/clusters", "--format", "json")
    assert done.returncode == 0, done.stderr
    plan = yaml.safe_load(done.stdout)
    for stack, nlb, account in (("ocp.ocp-prod", "ocp-prod-7xk2q-int", "333333333333"),
                                ("ocp.ocp-eu", "ocp-eu-m4p9z-int", "333333333333")):
        (service,) = resources(plan, stack, "aws:ec2/vpcEndpointService:VpcEndpointService")
        assert f"/net/{nlb}/" in service["inputs"]["networkLoadBalancerArns"][0] and service["account"] == account


@pytest.mark.live
def test_the_hypershift_example_plans_a_mesh_of_two_hosted_clusters():
    done = run("plan", "--hub", HUB, "--clusters", HYPERSHIFT, "--format", "json")
    assert done.returncode == 0, done.stderr
    plan = yaml.safe_load(done.stdout)
    assert {s["stack"] for s in plan["stacks"]} == {"acme.prod", "acme.edge"}
    (peering,) = [r for s in plan["stacks"] for r in s["resources"]
                  if r["type"] == "aws:ec2/vpcPeeringConnection:VpcPeeringConnection"]
    assert peering["account"] == "222222222222"  # the namespace's owner account, where the VPCs are


@pytest.mark.live
def test_a_hosted_cluster_is_routed_but_hubwright_never_writes_its_guests_node_proxy(tmp_path):
    """HyperShift writes its guests' kube-apiserver-proxy (the NodePool's ignition): the central proxy routes the
    HostedCluster's ID, and neither its stack's outputs nor `ingress render` carry a node-side proxy for it."""
    done = run("plan", "--hub", HUB, "--clusters", HYPERSHIFT, "--format", "json")
    assert done.returncode == 0, done.stderr
    (edge,) = [s for s in yaml.safe_load(done.stdout)["stacks"] if s["stack"] == "acme.edge"]
    assert "sharedIngress" not in edge["outputs"] and "mesh" in edge["outputs"]
    done = run("ingress", "render", "--hub", HUB, "--clusters", HYPERSHIFT, "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert parse_map((tmp_path / "central" / "clusters.map").read_text()) == {"acme.edge": "cluster_acme.edge"}
    assert "server api kube-apiserver.acme-edge.svc:6443" in (tmp_path / "central" / "haproxy.cfg").read_text()
    assert not (tmp_path / "guest").exists()


def test_the_hypershift_examples_hosted_clusters_become_their_hubclusters():
    fleet = load_fleet(HUB, HYPERSHIFT)
    clusters = {c.key: c for c in fleet.clusters}
    assert sorted(clusters) == ["acme/edge", "acme/prod"]  # the control plane's Namespace and HCP are no clusters
    for key, infra_id, vpc, cidr in (("acme/prod", "prod-7tq2m", "vpc-0hcprod", "10.40.0.0/16"),
                                     ("acme/edge", "edge-x4k9p", "vpc-0hcedge", "10.41.0.0/16")):
        spec = clusters[key].spec
        assert (spec.account_id, spec.region, spec.infra_id) == ("222222222222", "us-east-1", infra_id)
        # status.controlPlaneEndpoint: a Route on the hub's router, under the platform's name (port 443)
        assert spec.api_url == f"https://api-{key.split('/')[1]}.hcp.acme.example.com:443"
        assert spec.network is not None and (spec.network.vpc_id, spec.network.cidr) == (vpc, cidr)
        assert clusters[key].metadata.labels == {"hubwright.io/mesh": "hcp"}
    prod, edge = clusters["acme/prod"], clusters["acme/edge"]
    assert prod.spec.tags == {"cost-center": "acme-platform"} and not prod.spec.shared_ingress.enabled
    assert edge.spec.shared_ingress.enabled and edge.spec.shared_ingress.backend == "kube-apiserver.acme-edge.svc:6443"
    # ... which the hub routes: it has an address for guests to dial, and the backend is inside allowedBackends
    assert ingress_error(edge, fleet.hub, fleet.namespaces["acme"]) is None


def test_a_plan_folders_control_plane_namespace_is_trusted_only_as_hypershift_labels_it(tmp_path):
    hosted, hcp = hosted_cluster_doc("hc-1", shared_ingress=True), hosted_control_plane_doc()
    (cluster,) = load_fleet(HUB, folder(tmp_path, hosted, control_plane_namespace_doc(), hcp)).clusters
    assert cluster.spec.shared_ingress.backend == "kube-apiserver.acme-hc-1.svc:6443"
    for namespace, said in ((control_plane_namespace_doc(hypershift_label=False),
                             "namespace acme-hc-1 is not a HyperShift control-plane namespace"),
                            (None, "not ready: HyperShift has not made its control-plane namespace acme-hc-1")):
        invalid: list = []
        fleet = load_fleet(HUB, folder(tmp_path, hosted, *([namespace] if namespace else []), hcp), invalid)
        assert fleet.clusters == () and [e.obj for e in invalid] == ["HostedCluster.hypershift.openshift.io acme/hc-1"]
        assert said in invalid[0].reason, invalid


@pytest.mark.live
def test_refused_and_pending_sources_are_named_by_the_plan_never_dropped(tmp_path):
    where = folder(tmp_path,
                   capi_cluster_doc("web-1", privatelink=True), aws_cluster_doc("web-1", lb_type="classic"),
                   capi_cluster_doc("web-2", version="v1beta1", infra_namespace="globex"),
                   aws_cluster_doc("web-2", "globex"), namespace_doc("globex"),
                   cluster_deployment_doc("ocp-1", privatelink=True, hive_privatelink=True),
                   cluster_deployment_doc("ocp-2", infra_id=None),
                   capi_cluster_doc("web-3"), aws_cluster_doc("web-3"))
    done = run("plan", "--hub", HUB, "--clusters", where, "--format", "json")
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    err = done.stderr
    assert "AWSCluster.infrastructure.cluster.x-k8s.io acme/web-1: spec.controlPlaneLoadBalancer.loadBalancerType: " \
           "is classic" in err
    assert "Cluster.cluster.x-k8s.io acme/web-2: spec.infrastructureRef.namespace: is 'globex'" in err
    assert "ClusterDeployment.hive.openshift.io acme/ocp-1: spec.platform.aws.privateLink.enabled: is true" in err
    assert "ClusterDeployment.hive.openshift.io acme/ocp-2: spec.installed: not ready: Hive has not installed" in err
    # The good one is still read (the plan names every problem before planning nothing).
    invalid: list = []
    fleet = load_fleet(HUB, where, invalid)
    assert [c.key for c in fleet.clusters] == ["acme/web-3"] and len(invalid) == 4


def test_a_source_in_a_namespace_that_owns_no_account_is_refused(tmp_path):
    where = tmp_path / "clusters"
    where.mkdir()
    (where / "a.yaml").write_text(yaml.safe_dump_all([capi_cluster_doc("web-1", "strays"), aws_cluster_doc("web-1", "strays")]))
    with pytest.raises(InvalidSpec) as exc:
        load_fleet(HUB, str(where))
    (error,) = exc.value.errors
    assert error.obj == "Cluster.cluster.x-k8s.io strays/web-1" and "owns no account" in error.reason


def test_only_opted_in_sources_are_taken_and_other_capi_objects_are_ignored(tmp_path):
    other = {"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
             "metadata": {"name": "web-1-cp", "namespace": "acme"}, "spec": {"replicas": 3}}
    # Our kind's name under another project's group is that project's, never ours.
    posing = {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "HubCluster",
              "metadata": {"name": "posing", "namespace": "acme"}, "spec": {}}
    fleet = load_fleet(HUB, folder(tmp_path, capi_cluster_doc("web-1"), aws_cluster_doc("web-1"), other, posing,
                                   capi_cluster_doc("web-2", enabled=False), aws_cluster_doc("web-2"),
                                   cluster_deployment_doc("ocp-1", enabled=False)))
    assert [c.key for c in fleet.clusters] == ["acme/web-1"]


def test_another_groups_api_version_is_refused_as_ours_naming_it(tmp_path):
    stray = {**cluster_doc("prod-9"), "apiVersion": "example.com/v1"}
    with pytest.raises(InvalidSpec) as exc:
        load_fleet(HUB, folder(tmp_path, stray))
    (error,) = exc.value.errors
    assert error.field == "apiVersion" and "is example.com/v1, not hubwright's hubwright.io/v1alpha1" in error.reason


def test_a_hand_written_hubcluster_wins_only_when_it_says_so(tmp_path):
    hand = cluster_doc("web-1", network={"vpcID": "vpc-0hand", "cidr": "10.9.0.0/16", "routeTableIDs": ["rtb-0hand"]})
    fleet = load_fleet(HUB, folder(tmp_path, hand, capi_cluster_doc("web-1"), aws_cluster_doc("web-1")))
    (cluster,) = fleet.clusters
    assert cluster.spec.network is not None and cluster.spec.network.vpc_id == "vpc-0web1"  # the source replaced it
    hand["metadata"]["annotations"] = {OVERRIDES_SOURCE_ANNOTATION: "true"}
    fleet = load_fleet(HUB, folder(tmp_path, hand, capi_cluster_doc("web-1"), aws_cluster_doc("web-1")))
    (cluster,) = fleet.clusters
    assert cluster.spec.network is not None and cluster.spec.network.vpc_id == "vpc-0hand"  # said so: kept


def test_two_sources_of_one_name_are_both_named(tmp_path):
    with pytest.raises(InvalidSpec) as exc:
        load_fleet(HUB, folder(tmp_path, capi_cluster_doc("prod-1"), aws_cluster_doc("prod-1"),
                               cluster_deployment_doc("prod-1")))
    (error,) = exc.value.errors
    assert error.obj == "HubCluster acme/prod-1" and "defined 2 times" in error.reason
    assert "Cluster.cluster.x-k8s.io acme/prod-1" in error.reason and "ClusterDeployment.hive.openshift.io" in error.reason


@pytest.mark.live
def test_the_sources_doc_picture_is_what_the_command_draws():
    text = Path("docs/sources.md").read_text()
    [block] = re.findall(r"```mermaid\n(.*?)```", text, re.S)
    done = run("plan", "--hub", "examples/capi/hub.yaml", "--clusters", "examples/capi/clusters", "--format", "mermaid")
    assert done.returncode == 0, done.stderr
    assert block == done.stdout


@pytest.mark.live
def test_a_malformed_source_object_in_a_folder_is_named_never_a_traceback(tmp_path):
    broken = [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": [1]},
              {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": 7}},
              {**capi_cluster_doc("web-1"), "spec": "infrastructureRef"},
              {**aws_cluster_doc("web-2"), "spec": {"network": {"subnets": 3, "vpc": [2]}, "region": "us-east-1"}},
              capi_cluster_doc("web-2", endpoint="api.web-2.acme.example.com")]
    done = run("plan", "--hub", HUB, "--clusters", folder(tmp_path, *broken, capi_cluster_doc("web-3"),
                                                           aws_cluster_doc("web-3")), "--format", "json")
    assert "Traceback" not in done.stderr
    assert done.returncode == 2 and "Cluster.cluster.x-k8s.io acme/web-1: spec.infrastructureRef: not ready" in \
        done.stderr  # names no infrastructure object yet: a spec that is not an object holds none
