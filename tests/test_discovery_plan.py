"""The offline plan's discovery step: the deterministic stand-in (automation.adapters.aws.discovery_standin), how
`python -m automation plan` fills status.network before resolving, and `plan --discover` reading moto (server
mode) through the real command line."""
from __future__ import annotations

import dataclasses
import ipaddress
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from automation.adapters.aws.discovery_standin import StandInDiscovery
from automation.adapters.files.inputs import load_fleet
from automation.cli.plan import discovered
from stacks.network.found import found_of
from stacks.network.query import NetworkQuery, query_of
from stacks.resolve import fleet_targets
from stacks.targets import AwsTarget

from doubles.factories import cluster, cluster_doc, fleet, hub, hub_doc, namespace_doc
from tests.test_aws_sessions import CLUSTER_ACCOUNT, _setup_session

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = [(ROOT / "examples/hub.yaml", ROOT / "examples/clusters"),
            (ROOT / "examples/mesh/hub.yaml", ROOT / "examples/mesh/clusters"),
            (ROOT / "examples/transit/hub.yaml", ROOT / "examples/transit/clusters")]
NOW = "2026-11-25T10:00:00Z"


def _queries(f) -> dict[str, NetworkQuery]:
    targets = fleet_targets(dataclasses.replace(f, clusters=tuple(c for c in f.clusters if c.spec.provisioned)))
    queries = {c.key: query_of(c, target, f.hub) for c in f.clusters
               if isinstance(target := targets.get(c.key), AwsTarget)}
    return {key: query for key, query in queries.items() if query is not None}


# --- the stand-in ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("hub_path,clusters_path", EXAMPLES, ids=["main", "mesh", "transit"])
def test_the_stand_in_finds_exactly_what_each_bundled_example_declares(hub_path, clusters_path):
    f = load_fleet(str(hub_path), str(clusters_path))
    standin = StandInDiscovery({c.key: c.spec.network for c in f.clusters})
    queries = _queries(f)
    assert queries, "the examples have provisioned clusters"
    for c in f.clusters:
        if c.key not in queries:
            continue
        net, found = c.spec.aws.network, standin.discover(queries[c.key], now=NOW)
        assert (found.account_id, found.vpc_id) == (c.spec.account_id, net.vpc_id)
        assert found.cidrs == net.cidrs
        assert list(found.route_table_ids) == net.route_table_ids
        assert list(found.node_security_group_ids) == net.node_security_group_ids
        private = {(s.subnet_id, s.availability_zone) for s in found.subnets if s.private}
        assert {(s.subnet_id, s.availability_zone) for s in net.transit_subnets} <= private
        # the tables of private subnets are the declared ones, all of them: "all" and "private" choose the same
        assert {s.route_table_id for s in found.subnets if s.private} == set(net.route_table_ids)
        assert found.same_as(standin.discover(queries[c.key], now="2030-01-01T00:00:00Z"))  # deterministic
        if c.spec.private_link.enabled:
            assert found.load_balancer is not None and found.load_balancer.name == f"{c.spec.infra_id}-int"


def test_the_stand_in_makes_up_what_is_not_declared_the_same_each_time_and_different_per_cluster():
    clusters = [cluster(name, network={}, privateLink={"enabled": True, "loadBalancerName": f"{name}-capa-nlb"})
                for name in ("prod-1", "prod-2")]
    f = fleet(hub(), clusters)
    queries = _queries(f)
    standin = StandInDiscovery({c.key: c.spec.network for c in clusters})
    one, two = (standin.discover(queries[c.key], now=NOW) for c in clusters)

    assert one == StandInDiscovery({}).discover(queries["acme/prod-1"], now=NOW)  # nothing declared: the same
    assert one.vpc_id.startswith("vpc-") and one.vpc_id != two.vpc_id
    (cidr,) = one.cidrs
    assert ipaddress.IPv4Network(cidr).prefixlen == 16 and ipaddress.IPv4Network(cidr).subnet_of(
        ipaddress.IPv4Network("10.0.0.0/8"))
    zones = ["us-east-1a", "us-east-1b", "us-east-1c"]
    assert sorted(s.availability_zone for s in one.subnets if s.private) == zones
    assert sorted(s.availability_zone for s in one.subnets if not s.private) == zones
    private_tables = [s.route_table_id for s in one.subnets if s.private]
    (main,) = {s.route_table_id for s in one.subnets if not s.private}
    assert len(set(private_tables)) == 3 and main not in private_tables
    assert set(one.route_table_ids) == {*private_tables, main}
    assert len(one.node_security_group_ids) == 1 and set(one.node_security_group_ids) < set(one.security_group_ids)
    assert one.load_balancer is not None and (one.load_balancer.name, one.load_balancer.type,
                                              one.load_balancer.vpc_id) == ("prod-1-capa-nlb", "network", one.vpc_id)
    assert not set(one.route_table_ids) & set(two.route_table_ids)


# --- the plan's discovery step -----------------------------------------------------------------------------------

def test_the_plan_writes_status_network_only_where_discovery_is_asked():
    seen = cluster("prod-2", network={})
    seen = seen.model_copy(update={"status": {"network": {"accountID": CLUSTER_ACCOUNT, "region": "us-east-1",
                                                          "vpcID": "vpc-0seen"}, "stack": "x"}})
    clusters = [cluster("prod-1", network={}), seen,
                cluster("strays", namespace="globex", network={}),  # globex does not own 222222222222: refused
                cluster("registered", accountID=None, infraID=None, apiURL=None, network=None,
                        privateLink={"enabled": False})]
    f = fleet(hub(), clusters)
    invalid: list = []
    done = discovered(f, StandInDiscovery({}), invalid)
    assert invalid == []
    after = {c.key: c for c in done.clusters}
    found = found_of(after["acme/prod-1"].status)
    assert found is not None and found.account_id == CLUSTER_ACCOUNT and found.observed_at
    assert after["acme/prod-2"].status == seen.status  # already has one: left as it is
    assert after["globex/strays"].status is None  # left for resolve to refuse: discovery never looks
    assert after["acme/registered"].status is None


# --- `plan --discover` against moto, through the command line --------------------------------------------------------

def _plan_folder(tmp_path: Path, vpc_id: str, cidr: str, table: str, group: str) -> tuple[Path, Path]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    hub_path = tmp_path / "hub.yaml"
    hub_path.write_text(yaml.safe_dump(hub_doc(mesh={"groups": {"core": {"topology": "peering"}}})))
    folder = tmp_path / "clusters"
    folder.mkdir()
    (folder / "namespaces.yaml").write_text(yaml.safe_dump(namespace_doc("acme")))
    network = {"vpcID": vpc_id, "cidr": cidr, "routeTableIDs": [table], "nodeSecurityGroupIDs": [group]}
    # A mesh member: its network is built on, so it is read (a cluster with neither PrivateLink nor a mesh group
    # builds nothing there, and is not: stacks.network.query.uses_network).
    (folder / "prod-1.yaml").write_text(yaml.safe_dump(cluster_doc(
        network=network, privateLink={"enabled": False}, labels={"hubwright.io/mesh": "core"},
        annotations={"hubwright.io/mesh-enabled": "true"})))
    return hub_path, folder


def _plan(moto, hub_path: Path, folder: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1",
               HUBWRIGHT_AWS_ENDPOINT_URL=moto.url)
    return subprocess.run([sys.executable, "-m", "automation", "plan", "--hub", str(hub_path), "--clusters",
                           str(folder), "--format", "json", "--jobs", "1", *extra],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)


def test_plan_discover_reads_the_clusters_account_and_names_what_it_could_not_find(moto, tmp_path):
    ec2 = _setup_session(moto, CLUSTER_ACCOUNT).client("ec2", endpoint_url=moto.url)
    vpc = ec2.create_vpc(CidrBlock="10.7.0.0/16")["Vpc"]["VpcId"]
    table = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
    group = ec2.create_security_group(GroupName="nodes", Description="nodes", VpcId=vpc)["GroupId"]

    hub_path, folder = _plan_folder(tmp_path, vpc, "10.7.0.0/16", table, group)
    done = _plan(moto, hub_path, folder, "--discover")
    assert done.returncode == 0, done.stderr
    assert '"stack": "acme.prod-1"' in done.stdout  # the VPC was found in 222222222222 (see the refusal below)

    # The same cluster naming a VPC its account does not have: refused, named, nothing planned
    hub_path, folder = _plan_folder(tmp_path / "missing", "vpc-0123456789abcdef0", "10.7.0.0/16", table, group)
    refused = _plan(moto, hub_path, folder, "--discover")
    assert refused.returncode == 2, refused.stderr
    assert ("HubCluster acme/prod-1: status.network: discovery failed (VpcNotFound): no VPC vpc-0123456789abcdef0 "
            f"in account {CLUSTER_ACCOUNT} (us-east-1)") in refused.stderr
    assert refused.stdout == ""
    # ...while the offline plan (the stand-in) reads no cloud and plans it
    offline = _plan(moto, hub_path, folder)
    assert offline.returncode == 0, offline.stderr
