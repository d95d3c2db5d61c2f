"""The mesh under Pulumi's mock runtime: what each stack's `pulumi up` would register, across stacks."""
import ipaddress
import itertools
import json
import subprocess
import sys

import pytest

from automation.adapters.engine.plan import plan_stack
from stacks.inputs import StackInputs
from stacks.mesh.membership import pair_name
from stacks.resolve import resolve_fleet
from doubles.factories import fleet as make_fleet
from doubles.plans import destroy_order
from tests.test_mesh import group, hub, member

PEERING = "aws:ec2/vpcPeeringConnection:VpcPeeringConnection"
ACCEPTER = "aws:ec2/vpcPeeringConnectionAccepter:VpcPeeringConnectionAccepter"
ROUTE = "aws:ec2/route:Route"
RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
SG = "aws:ec2/securityGroup:SecurityGroup"
MESH_TYPES = (PEERING, ACCEPTER, ROUTE, RULE, SG)


def plans_of(clusters, h=None):
    resolved = resolve_fleet(make_fleet(h or hub(), tuple(clusters)))
    assert all(isinstance(v, StackInputs) for v in resolved.values()), resolved
    return {key: plan_stack(inputs) for key, inputs in resolved.items()}


def everything(plans, type_):
    return [(key, res) for key, p in plans.items() for res in p.of_type(type_)]


@pytest.fixture(scope="module", params=[2, 3, 10])
def fleet(request):
    clusters = group(request.param)
    return {c.key: c for c in clusters}, plans_of(clusters)


def test_one_peering_per_pair_requested_by_the_owner_and_accepted_in_the_peers_account_and_region(fleet):
    clusters, plans = fleet
    n = len(clusters)
    peerings = everything(plans, PEERING)
    assert len(peerings) == n * (n - 1) // 2
    expected = {pair_name(a.replace("/", "."), b.replace("/", ".")) for a, b in itertools.combinations(clusters, 2)}
    assert {res.inputs["tags"]["Name"] for _, res in peerings} == expected

    accepters = {res.inputs["vpcPeeringConnectionId"]: (key, res) for key, res in everything(plans, ACCEPTER)}
    assert len(accepters) == len(peerings)
    for key, peering in peerings:
        owner = clusters[key]
        peer = next(c for c in clusters.values() if c.spec.network.vpc_id == peering.inputs["peerVpcId"])
        assert owner.metadata.creation_timestamp > peer.metadata.creation_timestamp  # the later joiner owns it
        assert (peering.account, peering.region) == (owner.spec.account_id, owner.spec.region)
        assert peering.inputs["vpcId"] == owner.spec.network.vpc_id
        assert (peering.inputs["peerOwnerId"], peering.inputs["peerRegion"]) == (peer.spec.account_id, peer.spec.region)
        [pcx] = [p["id"] for p in plans[key].outputs["mesh"]["peerings"] if p["name"] == peering.inputs["tags"]["Name"]]
        accepter_stack, accepter = accepters[pcx]
        assert accepter_stack == key  # built by the same stack, through the peer's provider
        assert (accepter.account, accepter.region) == (peer.spec.account_id, peer.spec.region)
        assert accepter.inputs["autoAccept"] is True


def test_routes_in_every_table_of_both_members_to_the_other_cidr_through_the_pairs_peering(fleet):
    clusters, plans = fleet
    by_cidr = {c.spec.network.cidr: c for c in clusters.values()}
    want = set()
    for a, b in itertools.combinations(clusters.values(), 2):
        for x, y in ((a, b), (b, a)):
            want |= {(t, y.spec.network.cidr) for t in x.spec.network.route_table_ids}
    routes = everything(plans, ROUTE)
    got = [(r.inputs["routeTableId"], r.inputs["destinationCidrBlock"]) for _, r in routes]
    assert sorted(got) == sorted(want)  # every table, every peer, each route once in the whole fleet

    for key, route in routes:
        table_owner = next(c for c in clusters.values() if route.inputs["routeTableId"] in c.spec.network.route_table_ids)
        other = by_cidr[route.inputs["destinationCidrBlock"]]
        assert (route.account, route.region) == (table_owner.spec.account_id, table_owner.spec.region)
        [peering] = [p for p in plans[key].outputs["mesh"]["peerings"]
                     if {p["requester"]["cluster"], p["accepter"]["cluster"]} == {table_owner.key, other.key}]
        assert route.inputs["vpcPeeringConnectionId"] == peering["id"]


def test_ingress_only_from_the_peer_cidr_on_every_node_group_all_traffic_by_default(fleet):
    clusters, plans = fleet
    n = len(clusters)
    rules = everything(plans, RULE)
    assert len(rules) == n * (n - 1)  # one SG per member, one rule per peer
    for _, rule in rules:
        target = next(c for c in clusters.values() if rule.inputs["securityGroupId"] in c.spec.network.node_security_group_ids)
        source = ipaddress.ip_network(rule.inputs["cidrIpv4"])
        assert rule.inputs["cidrIpv4"] != "0.0.0.0/0" and source.prefixlen > 0
        peers = {c.spec.network.cidr for c in clusters.values() if c.key != target.key}
        assert rule.inputs["cidrIpv4"] in peers
        assert (rule.account, rule.region) == (target.spec.account_id, target.spec.region)
        assert rule.inputs["ipProtocol"] == "-1" and "fromPort" not in rule.inputs and "toPort" not in rule.inputs
    pairs = {(r.inputs["securityGroupId"], r.inputs["cidrIpv4"]) for _, r in rules}
    assert len(pairs) == len(rules)


def test_routes_and_rules_are_deleted_before_the_accepter_and_the_peering(fleet):
    _, plans = fleet
    for p in plans.values():
        if not p.of_type(PEERING):
            continue
        order = [r.urn for r in destroy_order(p)]
        for peering in p.of_type(PEERING):
            pair = peering.parent
            accepter = next(r for r in p.of_type(ACCEPTER) if r.parent == pair)
            assert order.index(accepter.urn) < order.index(peering.urn)
            for child in (r for r in p.resources if r.parent == pair and r.type in (ROUTE, RULE)):
                assert {peering.urn, accepter.urn} <= set(child.dependencies)
                assert order.index(child.urn) < order.index(accepter.urn)


def test_every_mesh_resource_names_an_explicit_provider_and_sits_under_the_mesh_component(fleet):
    _, plans = fleet
    for p in plans.values():
        by_urn = {r.urn: r for r in p.resources}
        providers = {r.urn for r in p.of_type("pulumi:providers:aws")}
        for res in p.resources:
            if res.type in MESH_TYPES:
                assert res.provider in providers
                chain, parent = [], res.parent
                while parent in by_urn:
                    chain.append(by_urn[parent].type)
                    parent = by_urn[parent].parent
                assert "hubwright:mesh:Mesh" in chain


def test_stack_outputs_show_members_peerings_with_state_and_routes():
    plans = plans_of(group(3))
    out = plans["acme/c02"].outputs["mesh"]
    assert out["group"] == "core" and out["member"] == "acme/c02"
    assert [m["cluster"] for m in out["members"]] == ["acme/c02", "acme/c00", "globex/c01"]
    assert [(p["name"], p["state"]) for p in out["peerings"]] == [
        ("acme.c00+acme.c02", "active"), ("acme.c02+globex.c01", "active")]
    assert {(r["routeTableId"], r["destination"]) for r in out["routes"]} == {
        ("rtb-002a", "10.0.0.0/16"), ("rtb-000a", "10.2.0.0/16"),
        ("rtb-002a", "10.1.0.0/16"), ("rtb-001a", "10.2.0.0/16"), ("rtb-001b", "10.2.0.0/16")}
    assert plans["acme/c00"].outputs["mesh"]["peerings"] == []  # the first member owns nothing


def test_configured_rules_and_a_dedicated_group_per_cluster():
    h = hub(mesh={"groups": {"core": {"securityGroup": "dedicated", "rules": [
        {"protocol": "tcp", "fromPort": 443, "toPort": 443}, {"protocol": "udp", "fromPort": 8472, "toPort": 8472}]}}})
    plans = plans_of(group(3), h)
    groups = {key: p.one(SG) for key, p in plans.items()}
    for key, sg in groups.items():
        assert sg.inputs["name"] == f"hubwright-mesh-{key.replace('/', '.')}"
        assert sg.inputs["vpcId"] == {"acme/c00": "vpc-0c00", "globex/c01": "vpc-0c01", "acme/c02": "vpc-0c02"}[key]
    sg_ids = {p.outputs["mesh"]["securityGroupId"]: key for key, p in plans.items()}
    cidrs = {"acme/c00": "10.0.0.0/16", "globex/c01": "10.1.0.0/16", "acme/c02": "10.2.0.0/16"}
    rules = everything(plans, RULE)
    assert len(rules) == 3 * 2 * 2  # 3 pairs, both sides, 2 rules
    for _, rule in rules:
        # Own side by reference, peer side by lookup: both resolve to the group its own stack creates.
        assert rule.inputs["securityGroupId"] in sg_ids
        target = sg_ids[rule.inputs["securityGroupId"]]
        assert rule.inputs["cidrIpv4"] in {cidr for key, cidr in cidrs.items() if key != target}
        assert (rule.inputs["ipProtocol"], rule.inputs["fromPort"]) in {("tcp", 443), ("udp", 8472)}
        assert rule.inputs["fromPort"] == rule.inputs["toPort"]
    assert not any(r.inputs["securityGroupId"].startswith("sg-00") for _, r in rules)  # node groups untouched


def test_after_a_leave_no_stack_builds_anything_for_the_leaver():
    clusters = group(4)
    plans = plans_of([member(1, label=False) if c.key == "globex/c01" else c for c in clusters])
    assert plans["globex/c01"].outputs.get("mesh") is None
    assert not any(plans["globex/c01"].of_type(t) for t in MESH_TYPES)
    text = json.dumps([p.to_json() for p in plans.values()])
    assert "vpc-0c01" not in text and "10.1.0.0/16" not in text and "rtb-001" not in text and "sg-001" not in text
    assert len(everything(plans, PEERING)) == 3


@pytest.mark.live
def test_plan_over_the_example_folder_shows_the_whole_mesh_each_resource_once():
    done = subprocess.run([sys.executable, "-m", "automation", "plan", "--hub", "examples/mesh/hub.yaml",
                           "--clusters", "examples/mesh/clusters", "--format", "json"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    stacks = json.loads(done.stdout)["stacks"]
    mesh = [(s["stack"], r) for s in stacks for r in s["resources"] if r["type"] in MESH_TYPES]
    names = [(r["type"], r["name"]) for _, r in mesh]
    assert len(names) == len(set(names))  # nothing built by two stacks
    peerings = [r for _, r in mesh if r["type"] == PEERING]
    accounts = {(r["account"], r["region"]) for _, r in mesh}
    assert len(peerings) == 6  # 4 members; the labelled but disabled sandbox is not one
    assert accounts == {(a, g) for a in ("222222222222", "333333333333") for g in ("us-east-1", "eu-west-1")}
    assert not any("sandbox" in r["name"] for _, r in mesh)
    rules = [r for _, r in mesh if r["type"] == RULE]
    assert {(r["inputs"]["ipProtocol"], r["inputs"].get("fromPort")) for r in rules} == {
        ("tcp", 443), ("tcp", 30000), ("icmp", -1)}
    assert all(r["inputs"]["cidrIpv4"].startswith("10.1") for r in rules)
