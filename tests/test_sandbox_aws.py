"""The sandbox's fake AWS (automation/sandbox/aws.py): moto in server mode, seeded from a fleet folder, is enough for
the service's own AWS code.

1. Each example fleet, seeded, passes what `serve` does in AWS before a stack runs, with the environment the sandbox
   gives the service: the caller identity is the hub account's; discovery (automation.adapters.aws.discovery) finds
   every cluster's declared VPC, CIDR, route tables and node groups, private subnets in two zones and, for
   PrivateLink, the installer's NLB; the fleet resolves with what it found; `serve`'s AWS guards (the preflight,
   the mesh's quota and CIDR preflights) pass; the endpoint census reads the hub's inventory.
2. Seeding twice creates nothing new; a cluster the resolution refuses is skipped, with its reason.
3. The real `python -m automation serve` against a real kube-apiserver and the seeded moto: every example HubCluster
   gets its network discovered, passes the preflights, and its run stops where the Pulumi AWS provider plugin is
   needed (the documented end of a local run).
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import boto3
import pytest
from kubernetes import client

from automation.adapters.aws.discovery import AwsDiscovery
from automation.adapters.aws.lookups import foreign_endpoint_counts
from automation.adapters.aws.mesh_cidrs import MeshCidrPreflight
from automation.adapters.aws.mesh_quotas import MeshQuotaPreflight
from automation.adapters.aws.preflight import Preflight
from automation.adapters.aws.sessions import AwsSessions
from automation.adapters.files.inputs import load_fleet
from automation.sandbox.aws import MotoMissing, SeedSummary, seed_fleet, service_env, start_moto
from automation.sandbox.aws_seed import Seeder, role_arn
from stacks.accounts import hub_target
from stacks.inputs import StackInputs
from stacks.names import GROUP, NETWORK_STATUS_KEY, VERSION
from stacks.network.found import FoundLoadBalancer
from stacks.network.query import query_of
from stacks.resolve import fleet_targets, resolve_all

from doubles.envtest import free_port, project_crds, start_envtest
from doubles.kubectl import against
from doubles.service_env import wait_until

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
FLEETS = {  # name -> (hub, clusters), every example fleet with a hub of its own
    "examples": (EXAMPLES / "hub.yaml", EXAMPLES / "clusters"),
    "mesh": (EXAMPLES / "mesh" / "hub.yaml", EXAMPLES / "mesh" / "clusters"),
    "transit": (EXAMPLES / "transit" / "hub.yaml", EXAMPLES / "transit" / "clusters"),
    "capi": (EXAMPLES / "capi" / "hub.yaml", EXAMPLES / "capi" / "clusters"),
}
NOW = "2026-12-01T10:00:00Z"
PLUGIN_MISSING = "no resource plugin 'pulumi-resource-aws' found"


def _as_the_service(monkeypatch: pytest.MonkeyPatch, summary: SeedSummary) -> dict[str, str]:
    """The sandbox's environment in this process, as `serve` would have it; the environment."""
    env = service_env(summary.endpoint_url, summary.hub_account_id, summary.hub_region)
    for name in ("AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_WEB_IDENTITY_TOKEN_FILE",
                 "AWS_ROLE_ARN"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


@pytest.mark.parametrize("name", FLEETS)
def test_a_seeded_example_fleet_passes_discovery_and_every_aws_guard_of_the_service(moto, monkeypatch, name):
    hub_path, clusters_path = FLEETS[name]
    summary = seed_fleet(moto.url, hub_path, clusters_path)
    fleet = load_fleet(str(hub_path), str(clusters_path))
    assert summary.skipped == {} and set(summary.seeded) == {c.key for c in fleet.clusters}
    env = _as_the_service(monkeypatch, summary)
    assert env["AWS_ENDPOINT_URL"] == env["HUBWRIGHT_AWS_ENDPOINT_URL"] == moto.url
    # The service's own credentials are the hub account's (botocore reads AWS_ENDPOINT_URL by itself).
    assert boto3.Session().client("sts").get_caller_identity()["Account"] == fleet.hub.spec.account_id
    sessions = AwsSessions.from_env()  # as `serve`: the endpoint from HUBWRIGHT_AWS_ENDPOINT_URL
    targets = fleet_targets(fleet)
    discovery = AwsDiscovery(sessions)
    clusters = []
    for cluster in fleet.clusters:
        query = query_of(cluster, targets[cluster.key], fleet.hub)
        if query is None:  # builds nothing on its network (mesh's sandbox): never read
            clusters.append(cluster)
            continue
        found = discovery.discover(query, now=NOW)
        declared = cluster.spec.network
        assert declared is not None and found.vpc_id == declared.vpc_id and declared.cidr in found.cidrs
        assert set(declared.secondary_cidrs) <= set(found.cidrs)
        assert set(declared.route_table_ids) <= set(found.route_table_ids)
        assert set(found.node_security_group_ids) == set(declared.node_security_group_ids)
        assert len({s.availability_zone for s in found.subnets if s.private and s.route_table_id}) >= 2
        if query.load_balancer_name:
            assert found.load_balancer == FoundLoadBalancer(
                name=query.load_balancer_name, arn=found.load_balancer.arn, type="network",
                scheme="internal", vpc_id=found.vpc_id)
        clusters.append(cluster.model_copy(update={"status": {NETWORK_STATUS_KEY: found.to_status()}}))
    resolved = resolve_all(replace(fleet, clusters=tuple(clusters), discovery=True)).inputs
    assert {key: str(value) for key, value in resolved.items() if not isinstance(value, StackInputs)} == {}
    guards = [Preflight(sessions), MeshQuotaPreflight(sessions), MeshCidrPreflight(sessions)]  # serve's AWS guards
    for inputs in resolved.values():
        for guard in guards:
            guard(None, inputs)  # raises when the service would not run the stack
    inventory = fleet.hub.spec.endpoint_vpc_inventory
    assert foreign_endpoint_counts(sessions, hub_target(fleet.hub), inventory) == {v.vpc_id: 0 for v in inventory}


def _vpcs(url: str, summary: SeedSummary) -> dict[tuple[str, str], list[dict]]:
    """Every VPC seeding made, by account and region (seen from inside each account)."""
    out = {}
    for place in summary.places:
        if place.region:
            ec2 = Seeder(url).client(role_arn(place.account_id, place.region), place.region, "ec2")
            out[(place.account_id, place.region)] = [v for v in ec2.describe_vpcs()["Vpcs"] if not v["IsDefault"]]
    return out


def test_seeding_twice_creates_nothing_new_and_declared_ids_are_made_as_declared(moto):
    hub_path, clusters_path = FLEETS["examples"]
    first = seed_fleet(moto.url, hub_path, clusters_path)
    made = {(p.account_id, p.region): dict(p.created) for p in first.places}
    assert made == {
        ("111111111111", ""): {"role": 2},  # the controller and the hub role
        ("111111111111", "eu-west-1"): {"VPC": 2, "subnet": 2},  # the inventory's eu VPC, the associated one
        ("111111111111", "us-east-1"): {"VPC": 3, "subnet": 4},
        ("222222222222", ""): {"role": 1},
        ("222222222222", "us-east-1"): {"VPC": 2, "subnet": 4, "route table": 3, "security group": 2,
                                        "load balancer": 2},
        ("333333333333", ""): {"role": 1},
        ("333333333333", "eu-west-1"): {"VPC": 1, "subnet": 2, "route table": 2, "security group": 1,
                                        "load balancer": 1},
    }
    before = _vpcs(moto.url, first)
    second = seed_fleet(moto.url, hub_path, clusters_path)
    assert second.created == 0 and {(p.account_id, p.region): dict(p.found) for p in second.places} == made
    assert _vpcs(moto.url, second) == before
    assert "created nothing new" in str(second) and str(second).count("\n") == len(second.places)
    ids = {vpc["VpcId"]: vpc for vpcs in before.values() for vpc in vpcs}
    assert {"vpc-0c1", "vpc-0c2", "vpc-0c3", "vpc-0hub1", "vpc-0hub2", "vpc-0hubeu", "vpc-0mgmt", "vpc-0mgmteu"} \
        == set(ids)
    assert all(tag["Key"] != "_custom_id_" for vpc in ids.values() for tag in vpc.get("Tags", []))
    assert {"Key": "kubernetes.io/cluster/prod1-x7k2p", "Value": "owned"} in ids["vpc-0c1"]["Tags"]


def test_a_cluster_the_resolution_refuses_is_skipped_with_its_reason(moto, tmp_path):
    hub_path, clusters_path = FLEETS["examples"]
    folder = tmp_path / "clusters"
    shutil.copytree(clusters_path, folder)
    (folder / "elsewhere.yaml").write_text(
        (clusters_path / "prod-2.yaml").read_text().replace("name: prod-2", "name: elsewhere")
        .replace('"222222222222"', '"444444444444"').replace("prod2-m4q8z", "else-abcde").replace("vpc-0c2", "vpc-0c9"))
    summary = seed_fleet(moto.url, hub_path, folder)
    assert set(summary.seeded) == {"acme/prod-1", "acme/prod-2", "globex/eu-1"}
    assert list(summary.skipped) == ["acme/elsewhere"]
    why = summary.skipped["acme/elsewhere"]
    assert why == ("AccountMismatch: spec.accountID: account 444444444444 is not the namespace's owner account "
                   "222222222222 (hubwright.io/owner-account-id); clusters in this namespace must live in 222222222222")
    assert f"  skipped acme/elsewhere: {why}" in summary.lines()
    assert "444444444444" not in {p.account_id for p in summary.places}  # nothing made for it


def test_without_moto_the_sandbox_says_what_to_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "moto" else real(name, *a))
    with pytest.raises(MotoMissing) as caught:
        start_moto()
    assert str(caught.value) == "the sandbox's AWS needs moto[server]: pip install -r requirements-dev.txt"


# --- the real service, on a real API server, against the seeded moto ---------------------------------------------

def _hubclusters(env: Any) -> list[dict]:
    with env.api_client() as api:
        return client.CustomObjectsApi(api).list_cluster_custom_object(GROUP, VERSION, "hubclusters")["items"]


def _condition(obj: dict, type_: str) -> dict:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


def _stopped_at_the_plugin(obj: dict) -> bool:
    """Past discovery and every preflight: its network read as declared, its `up` failed for want of the plugin."""
    network, spec = (obj.get("status") or {}).get(NETWORK_STATUS_KEY) or {}, obj["spec"]
    reconciling = _condition(obj, "Reconciling")
    return (network.get("vpcID") == spec["network"]["vpcID"]
            and (not spec.get("privateLink", {}).get("enabled")
                 or (network.get("loadBalancer") or {}).get("name") == f"{spec['infraID']}-int")
            and reconciling.get("reason") == "UpdateFailed" and PLUGIN_MISSING in reconciling.get("message", ""))


@pytest.fixture
def serve(moto, tmp_path) -> Iterator[tuple[Any, Path, dict[str, str]]]:
    """A real kube-apiserver with the CRDs, and the environment `serve` runs in against `moto`."""
    with start_envtest(crds=project_crds()) as env:
        run_env = {k: v for k, v in os.environ.items() if not k.startswith(("HUBWRIGHT_", "AWS_", "KUBERNETES_"))}
        run_env.update(KUBECONFIG=str(env.kubeconfig()), PULUMI_CONFIG_PASSPHRASE="sandbox", HOME=str(tmp_path),
                       PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION="true", PYTHONPATH=str(ROOT),
                       PATH=os.pathsep.join([str(ROOT / ".tools" / "bin"), os.environ.get("PATH", "/usr/bin:/bin")]))
        yield env, tmp_path, run_env


def test_the_real_service_gets_every_example_cluster_past_discovery_and_preflight_to_the_missing_plugin(moto, serve):
    env, work, run_env = serve
    hub_path, clusters_path = FLEETS["examples"]
    summary = seed_fleet(moto.url, hub_path, clusters_path)
    run_env.update(service_env(summary.endpoint_url, summary.hub_account_id, summary.hub_region))
    kubectl = against(env)
    kubectl("apply", "-f", str(clusters_path / "namespaces.yaml"))
    kubectl("apply", "-f", str(hub_path))
    kubectl("apply", "-f", str(clusters_path))
    log = work / "serve.log"
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "automation", "serve", "--state-dir", str(work / "state"), "--no-leader-election",
             "--metrics-bind", "127.0.0.1", "--metrics-port", str(free_port())],
            cwd=ROOT, env=run_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        stopped = wait_until(
            lambda: len(found := _hubclusters(env)) == len(summary.seeded)
            and all(_stopped_at_the_plugin(o) for o in found) and found, 240,
            what="every example HubCluster to stop at the missing AWS plugin",
            diagnose=lambda: [(o["metadata"]["name"], (o.get("status") or {}).get("conditions"))
                              for o in _hubclusters(env)] + [log.read_text(errors="replace")[-3000:]])
        for obj in stopped:
            stack = f"{obj['metadata']['namespace']}.{obj['metadata']['name']}"
            reconciling = _condition(obj, "Reconciling")
            assert (reconciling["status"], reconciling["observedGeneration"]) == ("True", 1), stack
            # Between two tries it says the error itself; while one runs, that it is retrying after it.
            assert re.fullmatch(
                rf"(retrying the stack's first up; the last attempt failed: )?up {re.escape(stack)}: error: "
                rf"{re.escape(PLUGIN_MISSING)} in the workspace at version v[0-9.]+ or on your \$PATH"
                rf"( \(retrying with backoff\))?", reconciling["message"]), reconciling
            assert (_condition(obj, "Stalled")["status"], _condition(obj, "Ready")["reason"]) == ("False", "UpdateFailed")
            assert obj["status"]["account"] == obj["spec"]["accountID"]
            assert obj["status"]["network"]["accountID"] == obj["spec"]["accountID"]
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
