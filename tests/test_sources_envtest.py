"""Cluster sources on the real kube-apiserver with Cluster API's, CAPA's and Hive's real CRDs: the service keeps
one HubCluster per opted-in object, reads its network through discovery, runs its stack (engine double), and
cleans everything up when the object opts out or goes (automation/service/sources.py, docs/sources.md)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from doubles.engine import RecordingEngine
from doubles.envtest import install_crds
from doubles.service_env import ServiceEnv, quiet, wait_until
from doubles.sources import aws_cluster_doc, capi_cluster_doc, cluster_deployment_doc
from doubles.thirdparty import crds
from tests.docblocks import blocks, script
from tests.envtest import find_binary, kube_apiserver_alone  # noqa: F401 - the fixture
from stacks.names import ENABLED_ANNOTATION, SOURCE_FINALIZER
from stacks.network.found import FoundLoadBalancer, FoundNetwork, FoundSubnet
from stacks.network.query import NetworkQuery

ACCOUNT = "222222222222"
GROUP_MESH = {"mesh": {"groups": {"payments": {"topology": "peering"}}}}
KINDS = {"Cluster": ("cluster.x-k8s.io", "v1beta2", "clusters"),
         "AWSCluster": ("infrastructure.cluster.x-k8s.io", "v1beta2", "awsclusters"),
         "ClusterDeployment": ("hive.openshift.io", "v1", "clusterdeployments")}


class Cloud:
    """What the cluster accounts hold, as discovery reads it (the moto-backed AWS discovery has its own tests):
    VPCs by ID and by the installer tag, in one account and region; every read counted."""

    def __init__(self) -> None:
        self.vpcs: dict[str, FoundNetwork] = {}
        self.tags: dict[str, str] = {}  # infraID -> VPC ID
        self.reads: list[str] = []

    def add(self, vpc: str, cidr: str, tag: str, *, infra_id: str | None = None, nlb: str | None = None) -> None:
        subnets = (FoundSubnet(subnet_id=f"subnet-0{tag}0", availability_zone="us-east-1a",
                               route_table_id=f"rtb-0{tag}0", private=True),
                   FoundSubnet(subnet_id=f"subnet-0{tag}1", availability_zone="us-east-1a",
                               route_table_id=f"rtb-0{tag}1"),
                   FoundSubnet(subnet_id=f"subnet-0{tag}2", availability_zone="us-east-1b",
                               route_table_id=f"rtb-0{tag}2", private=True),
                   FoundSubnet(subnet_id=f"subnet-0{tag}3", availability_zone="us-east-1b",
                               route_table_id=f"rtb-0{tag}3"))
        self.vpcs[vpc] = FoundNetwork(
            account_id=ACCOUNT, region="us-east-1", vpc_id=vpc, cidrs=(cidr,), subnets=subnets,
            route_table_ids=tuple(f"rtb-0{tag}{n}" for n in range(4)),
            security_group_ids=(f"sg-0{tag}node", f"sg-0{tag}cp"), node_security_group_ids=(f"sg-0{tag}node",),
            load_balancer=FoundLoadBalancer(name=nlb, type="network", scheme="internal", vpc_id=vpc) if nlb else None)
        if infra_id:
            self.tags[infra_id] = vpc

    def discover(self, query: NetworkQuery, *, now: str) -> FoundNetwork:
        from automation.adapters.aws.lookups import LookupFailed
        self.reads.append(query.key)
        assert query.target.account_id == ACCOUNT  # only ever the namespace's owner account
        vpc = query.vpc_id or self.tags.get(query.infra_id)
        if vpc not in self.vpcs:
            raise LookupFailed(f"no VPC for {query.key}", reason="VpcNotFound")
        return self.vpcs[vpc].model_copy(update={"observed_at": now})


@pytest.fixture(scope="module")
def api(kube_apiserver_alone) -> Iterator[client.ApiClient]:
    api_client = kube_apiserver_alone.api_client()
    wanted = {"clusters.cluster.x-k8s.io", "awsclusters.infrastructure.cluster.x-k8s.io",
              "awsmanagedcontrolplanes.controlplane.cluster.x-k8s.io", "clusterdeployments.hive.openshift.io"}
    install_crds(api_client, [c for project in ("cluster-api", "cluster-api-provider-aws", "hive-apis")
                              for c in crds(project) if c["metadata"]["name"] in wanted])
    yield api_client


def create(api: client.ApiClient, doc: dict[str, Any]) -> dict:
    group, version, plural = KINDS[doc["kind"]]
    custom = client.CustomObjectsApi(api)
    meta = doc["metadata"]
    body = {k: v for k, v in doc.items() if k != "status"}
    body["metadata"] = {k: v for k, v in meta.items() if k not in ("uid", "creationTimestamp")}
    made = custom.create_namespaced_custom_object(group, version, meta["namespace"], plural, body)
    if doc.get("status"):
        made = custom.patch_namespaced_custom_object_status(group, version, meta["namespace"], plural, meta["name"],
                                                            {"status": doc["status"]})
    return made


def get(api: client.ApiClient, kind: str, namespace: str, name: str) -> dict | None:
    group, version, plural = KINDS[kind]
    try:
        return client.CustomObjectsApi(api).get_namespaced_custom_object(group, version, namespace, plural, name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def patch(api: client.ApiClient, kind: str, namespace: str, name: str, body: dict) -> None:
    group, version, plural = KINDS[kind]
    client.CustomObjectsApi(api).patch_namespaced_custom_object(group, version, namespace, plural, name, body)


def delete(api: client.ApiClient, kind: str, namespace: str, name: str) -> None:
    group, version, plural = KINDS[kind]
    client.CustomObjectsApi(api).delete_namespaced_custom_object(group, version, namespace, plural, name)


def capi(api: client.ApiClient, ns: str, name: str, vpc: str, cidr: str, tag: str, cloud: Cloud) -> None:
    cloud.add(vpc, cidr, tag)
    create(api, aws_cluster_doc(name, ns, vpc=vpc, cidr=cidr, tag=tag, node_group=f"sg-0{tag}node"))
    create(api, capi_cluster_doc(name, ns, mesh="payments"))


def ready(env: ServiceEnv, name: str) -> bool:
    return env.ready(name)


def test_the_clustermesh_seed_flow_two_capi_clusters_are_peered_a_third_joins_with_one_run_and_all_clean_up(api):
    env = ServiceEnv.isolated(api)
    ns = env.ns
    env.patch_hub({"spec": GROUP_MESH})
    cloud, engine = Cloud(), RecordingEngine()
    with env.running(engine, discovery=cloud, sources="capi,hive", watch_namespace=ns) as service:
        capi(api, ns, "web-1", "vpc-0web1", "10.20.0.0/16", "w1", cloud)
        capi(api, ns, "web-2", "vpc-0web2", "10.21.0.0/16", "w2", cloud)
        for name in ("web-1", "web-2"):
            wait_until(lambda n=name: ready(env, n), 30, what=f"HubCluster {name} Ready")
            hub_cluster = env.get(name)
            source = get(api, "Cluster", ns, name)
            assert hub_cluster["metadata"]["ownerReferences"][0]["uid"] == source["metadata"]["uid"]
            assert hub_cluster["metadata"]["ownerReferences"][0]["controller"] is True
            assert SOURCE_FINALIZER in source["metadata"]["finalizers"]
            network = hub_cluster["status"]["network"]
            assert network["vpcID"] == f"vpc-0{name.replace('-', '')}" and network["observedAt"]
        # The two are peered: the younger owns the pair, routed into both VPCs' tables (all of them: the default).
        # Waited for: web-2 may be Ready from a run before web-1's network was discovered, its pair one run later.
        wait_until(lambda: (s := engine.stacks[f"{ns}.web-2"].mesh) is not None and
                   [p.peer.key for p in s.pairs] == [f"{ns}/web-1"], 30, what="web-2's stack to own the pair")
        share = engine.stacks[f"{ns}.web-2"].mesh
        assert share is not None
        assert share.member.route_table_ids == ("rtb-0w20", "rtb-0w21", "rtb-0w22", "rtb-0w23")
        assert share.member.security_group_ids == ("sg-0w2node",)

        # A third joins: one run, its own (it owns its pairs with both).
        quiet(service)
        before = engine.count("up")
        capi(api, ns, "web-3", "vpc-0web3", "10.22.0.0/16", "w3", cloud)
        wait_until(lambda: ready(env, "web-3"), 30, what="web-3 Ready")
        quiet(service)
        assert [c.stack for c in engine.runs("up")][before:] == [f"{ns}.web-3"]
        assert sorted(p.peer.key for p in engine.stacks[f"{ns}.web-3"].mesh.pairs) == [f"{ns}/web-1", f"{ns}/web-2"]

        # Opting out cleans up: the HubCluster goes (its stack destroyed first), then our finalizer on the source.
        patch(api, "Cluster", ns, "web-3", {"metadata": {"annotations": {ENABLED_ANNOTATION: None}}})
        wait_until(lambda: env.get("web-3") is None, 30, what="HubCluster web-3 gone")
        assert engine.count("destroy", f"{ns}.web-3") == 1
        wait_until(lambda: SOURCE_FINALIZER not in (get(api, "Cluster", ns, "web-3")["metadata"].get("finalizers")
                                                    or []), 30, what="our finalizer off web-3")

        # Deleting a source does too; the source itself goes once its HubCluster and its group's stacks are done.
        delete(api, "Cluster", ns, "web-2")
        wait_until(lambda: get(api, "Cluster", ns, "web-2") is None, 30, what="Cluster web-2 gone")
        assert env.get("web-2") is None and engine.count("destroy", f"{ns}.web-2") == 1
        assert ready(env, "web-1")


def test_a_hive_clusterdeployment_gets_privatelink_on_its_installers_nlb_and_hive_s_own_privatelink_is_refused(api):
    env = ServiceEnv.isolated(api)
    ns = env.ns
    cloud, engine = Cloud(), RecordingEngine()
    cloud.add("vpc-0ocp1", "10.40.0.0/16", "o1", infra_id="ocp-1-x7k2p", nlb="ocp-1-x7k2p-int")
    with env.running(engine, discovery=cloud, sources="capi,hive", watch_namespace=ns):
        create(api, cluster_deployment_doc("ocp-1", ns, privatelink=True))
        wait_until(lambda: ready(env, "ocp-1"), 30, what="HubCluster ocp-1 Ready")
        inputs = engine.stacks[f"{ns}.ocp-1"]
        assert inputs.private_link is not None and inputs.private_link.nlb_name == "ocp-1-x7k2p-int"
        assert env.get("ocp-1")["status"]["network"]["vpcID"] == "vpc-0ocp1"  # found by the installer's tag

        create(api, cluster_deployment_doc("ocp-2", ns, infra_id="ocp-2-abcde", privatelink=True,
                                           hive_privatelink=True))
        wait_until(lambda: [e for e in env.events(ns, "ocp-2") if e[0] == "Warning"], 30, what="a refusal Event")
        (event,) = [e for e in env.events(ns, "ocp-2") if e[0] == "Warning"]
        assert "spec.platform.aws.privateLink.enabled" in event[2]
        assert env.get("ocp-2") is None


def test_a_hand_written_hubcluster_is_adopted_by_its_source_unless_it_says_it_overrides_it(api):
    env = ServiceEnv.isolated(api)
    ns = env.ns
    cloud, engine = Cloud(), RecordingEngine()
    cloud.add("vpc-0web1", "10.20.0.0/16", "w1")
    cloud.add("vpc-0web2", "10.21.0.0/16", "w2")
    network = {"vpcID": "vpc-0web1", "cidr": "10.20.0.0/16", "routeTableIDs": ["rtb-0w10"],
               "nodeSecurityGroupIDs": ["sg-0w1node"]}
    with env.running(engine, discovery=cloud, sources="capi,hive", watch_namespace=ns):
        # Hand-written, overriding: kept as written while its source opts in beside it.
        env.create("web-1", network=network, privateLink={"enabled": False},
                   annotations={"hubwright.io/overrides-source": "true"})
        wait_until(lambda: ready(env, "web-1"), 30, what="hand-written web-1 Ready")
        create(api, aws_cluster_doc("web-1", ns, vpc="vpc-0web1", cidr="10.20.0.0/16", tag="w1",
                                    node_group="sg-0w1node"))
        create(api, capi_cluster_doc("web-1", ns))
        wait_until(lambda: [e for e in env.events(ns, "web-1") if e[1] == "Overridden"], 30, what="Overridden")
        kept = env.get("web-1")
        assert "ownerReferences" not in kept["metadata"] and kept["spec"]["network"] == network
        # Hand-written, not overriding: its source adopts it, and its stack is kept (same name, same stack).
        env.create("web-2", network={**network, "vpcID": "vpc-0web2", "cidr": "10.21.0.0/16",
                                     "routeTableIDs": ["rtb-0w20"], "nodeSecurityGroupIDs": ["sg-0w2node"]},
                   privateLink={"enabled": False})
        wait_until(lambda: ready(env, "web-2"), 30, what="hand-written web-2 Ready")
        create(api, aws_cluster_doc("web-2", ns, vpc="vpc-0web2", cidr="10.21.0.0/16", tag="w2",
                                    node_group="sg-0w2node"))
        create(api, capi_cluster_doc("web-2", ns))
        wait_until(lambda: (env.get("web-2")["metadata"].get("ownerReferences") or [{}])[0].get("kind") == "Cluster",
                   30, what="web-2 adopted")
        wait_until(lambda: env.get("web-2")["spec"]["network"]["routeTableIDs"] == [f"rtb-0w2{n}" for n in range(4)]
                   and ready(env, "web-2"), 30, what="web-2 follows its source, and is Ready")
        assert engine.count("destroy", f"{ns}.web-2") == 0  # adopted, never destroyed


def test_a_cluster_waits_for_discovery_and_a_route_table_added_later_is_picked_up_with_one_run(api):
    env = ServiceEnv.isolated(api)
    ns = env.ns
    env.patch_hub({"spec": {**GROUP_MESH, "discovery": {"interval": "2s"}}})
    cloud, engine = Cloud(), RecordingEngine()
    with env.running(engine, discovery=cloud, sources="capi,hive", watch_namespace=ns) as service:
        # A ClusterDeployment types no network: discovery finds its VPC by the installer's tag.
        create(api, cluster_deployment_doc("ocp-1", ns, mesh="payments"))
        # The VPC is not in the account yet: the cluster waits, Progressing, and nothing runs.
        wait_until(lambda: (env.condition("ocp-1", "Reconciling") or {}).get("reason") == "NetworkNotDiscovered", 30,
                   what="ocp-1 waiting for discovery")
        assert env.condition("ocp-1", "Stalled")["status"] == "False" and engine.count("up") == 0
        cloud.add("vpc-0ocp1", "10.40.0.0/16", "o1", infra_id="ocp-1-x7k2p")
        wait_until(lambda: ready(env, "ocp-1"), 30, what="ocp-1 Ready once discovered")
        quiet(service)
        ups = engine.count("up", f"{ns}.ocp-1")
        # A new subnet's route table: found at the next read (one interval), one run, and its route is planned.
        found = cloud.vpcs["vpc-0ocp1"]
        cloud.vpcs["vpc-0ocp1"] = found.model_copy(update={
            "route_table_ids": (*found.route_table_ids, "rtb-0o1new"),
            "subnets": (*found.subnets, FoundSubnet(subnet_id="subnet-0o1new", availability_zone="us-east-1c",
                                                   route_table_id="rtb-0o1new", private=True))})
        wait_until(lambda: "rtb-0o1new" in engine.stacks[f"{ns}.ocp-1"].mesh.member.route_table_ids, 30,
                   what="the new route table in ocp-1's inputs")
        quiet(service)
        assert engine.count("up", f"{ns}.ocp-1") == ups + 1


@pytest.fixture(scope="module")
def kubectl_dir(kube_apiserver_alone, tmp_path_factory) -> Path:  # noqa: F811 - the fixture
    """A folder whose `kubectl` is the real one talking to this module's API server: a doc's commands run as
    written with it first on PATH."""
    where = tmp_path_factory.mktemp("kubectl")
    binary = Path(find_binary("kubectl") or "kubectl")
    (where / "kubectl").write_text(f'#!/bin/sh\nexec "{binary}" --kubeconfig={kube_apiserver_alone.kubeconfig()} "$@"\n')
    (where / "kubectl").chmod(0o755)
    return where


def run_doc(kubectl_dir: Path, heading: str, **variables: str) -> str:
    """docs/sources.md's one command block under `heading`, run as written by bash and kubectl_dir's kubectl with
    `variables` set; its output."""
    chosen = blocks(Path("docs/sources.md"), heading)
    assert len(chosen) == 1 and chosen[0].not_run is None
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script(chosen)], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PATH": f"{kubectl_dir}:{os.environ['PATH']}", **variables})
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_documented_hand_release_removes_our_finalizer_only(api, kubectl_dir):
    """docs/sources.md, "Releasing a source whose peer is broken for good": its commands, run as written by bash
    and the real kubectl against the real API server, remove `hubwright.io/source` from a deleted Cluster API
    Cluster and leave Cluster API's own finalizer, which does the deletion."""
    ns = "release-by-hand"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": ns}})
    doc = capi_cluster_doc("web-9", ns)
    doc["metadata"]["finalizers"] = ["cluster.cluster.x-k8s.io", SOURCE_FINALIZER, "example.com/after-ours"]
    create(api, doc)
    group, version, plural = KINDS["Cluster"]
    client.CustomObjectsApi(api).delete_namespaced_custom_object(group, version, ns, plural, "web-9")
    run_doc(kubectl_dir, "Releasing a source whose peer is broken for good", NAME="web-9", NS=ns)
    left = get(api, "Cluster", ns, "web-9")
    assert left is not None and left["metadata"]["finalizers"] == ["cluster.cluster.x-k8s.io", "example.com/after-ours"]
