"""A member's network is a list of CIDR blocks (spec.network.cidr, then secondaryCIDRs: a VPC may have several
associations), and every mesh rule applies to each block: memberCIDRs and summaryCIDRs containment, overlap with
another member's blocks and with the hub's CIDRs, the routes and rules each pair writes, the Transit Gateway's
static routes, the quotas, the route-hijack check and the preflight against the VPC's real blocks (moto)."""
import json
import subprocess
import sys

import pytest
import yaml

from automation.adapters.aws.mesh_cidrs import MeshCidrPreflight
from automation.adapters.engine.plan import plan_fleet
from automation.cli.picture import render_mermaid
from stacks.errors import InvalidSpec, NeedsAttention
from stacks.inputs import StackInputs
from stacks.mesh.routes import FoundRoute, pair_routes, route_hijacks
from stacks.resolve import resolve_all
from stacks.transit import MeshStatus
from doubles.engine import RecordingEngine
from doubles.factories import HUB_ACCOUNT, cluster_doc, fleet, namespace_doc
from doubles.service_env import wait_until
from tests.envtest import kube_apiserver_alone  # noqa: F401 - fixture
from tests.test_aws_sessions import CLUSTER_ACCOUNT, sessions  # noqa: F401 - fixture
from tests.test_mesh import hub, member, plan_mesh
from tests.test_mesh_plan import ROUTE, RULE, plans_of
from tests.test_preflight import ATTACKER_ACCOUNT, _vpc
from tests.test_tenancy_envtest import MESH, env, settle  # noqa: F401 - fixture
from tests.test_transit import tgw_member

SECONDARY = "spec.network.secondaryCIDRs"


def refusal(plan, key):
    error = plan.errors[key]
    [one] = error.errors
    return error.reason, one.obj, one.field, one.reason


# --- the planner: each block is checked as the primary is --------------------------------------------------

def test_two_members_whose_secondary_blocks_overlap_are_refused_naming_both_objects_and_both_blocks():
    clusters = [member(0, secondaryCIDRs=["100.64.0.0/16"]),
                member(1, secondaryCIDRs=["100.65.0.0/16", "100.64.128.0/17"])]
    plan = plan_mesh(hub(), clusters)
    assert plan.groups["core"].members == ("acme/c00",) and plan.groups["core"].rejected == ("globex/c01",)
    reason, obj, field, why = refusal(plan, "globex/c01")
    assert (reason, obj, field) == ("MeshCIDROverlap", "HubCluster globex/c01", f"{SECONDARY}[1]")
    assert why.startswith("CIDR 100.64.128.0/17 of HubCluster globex/c01 overlaps CIDR 100.64.0.0/16 of HubCluster "
                          "acme/c00, an earlier member of mesh group core")


def test_a_primary_cidr_overlapping_an_earlier_members_secondary_block_is_refused_and_the_other_way_round():
    plan = plan_mesh(hub(), [member(0, secondaryCIDRs=["10.1.0.0/16"]), member(1)])  # c01's primary is 10.1.0.0/16
    reason, _, field, why = refusal(plan, "globex/c01")
    assert (reason, field) == ("MeshCIDROverlap", "spec.network.cidr")
    assert why.startswith("CIDR 10.1.0.0/16 of HubCluster globex/c01 overlaps CIDR 10.1.0.0/16 of HubCluster acme/c00")
    plan = plan_mesh(hub(), [member(0), member(1, secondaryCIDRs=["10.0.8.0/24"])])  # inside c00's 10.0.0.0/16
    reason, _, field, why = refusal(plan, "globex/c01")
    assert (reason, field) == ("MeshCIDROverlap", f"{SECONDARY}[0]")
    assert why.startswith("CIDR 10.0.8.0/24 of HubCluster globex/c01 overlaps CIDR 10.0.0.0/16 of HubCluster acme/c00")


def test_a_secondary_block_overlapping_a_hub_cidr_is_refused_before_it_takes_a_place():
    plan = plan_mesh(hub(), [member(0, secondaryCIDRs=["100.64.0.0/16", "172.16.4.0/24"]), member(1)])
    assert plan.groups["core"].members == ("globex/c01",)  # the refused one never took the first place
    reason, obj, field, why = refusal(plan, "acme/c00")
    assert (reason, obj, field) == ("MeshCIDROverlap", "HubCluster acme/c00", f"{SECONDARY}[1]")
    assert why.startswith("CIDR 172.16.4.0/24 of HubCluster acme/c00 overlaps CIDR 172.16.0.0/16 of HubConfig default "
                          "spec.associatedVPCs[0] (VPC vpc-0mgmt), which the hub owns")


def test_a_secondary_block_outside_the_groups_member_cidrs_is_refused():
    h = hub(mesh={"groups": {"core": {"memberCIDRs": ["10.0.0.0/8"]}}})
    plan = plan_mesh(h, [member(0, secondaryCIDRs=["10.200.0.0/16", "100.64.0.0/16"]), member(1)])
    reason, _, field, why = refusal(plan, "acme/c00")
    assert (reason, field) == ("MeshCIDRNotAllowed", f"{SECONDARY}[1]")
    assert why.startswith("CIDR 100.64.0.0/16 of HubCluster acme/c00 is in none of mesh group core's memberCIDRs "
                          "(10.0.0.0/8)")
    assert plan_mesh(h, [member(0, secondaryCIDRs=["10.200.0.0/16"]), member(1)]).errors == {}


def test_a_secondary_block_outside_the_summary_cidrs_is_refused_on_a_transit_gateway():
    h = hub(mesh={"groups": {"core": {"topology": "transitGateway", "summaryCIDRs": ["10.0.0.0/8"]}}})
    plan = plan_mesh(h, [tgw_member(0, secondaryCIDRs=["100.64.0.0/16"]), tgw_member(1)])
    reason, _, field, why = refusal(plan, "acme/c00")
    assert (reason, field) == ("MeshInvalid", f"{SECONDARY}[0]")
    assert why.startswith("CIDR 100.64.0.0/16 is in none of mesh group core's summaryCIDRs (10.0.0.0/8)")


def test_blocks_of_one_vpc_that_overlap_each_other_are_refused_and_a_repeated_block_counts_once():
    plan = plan_mesh(hub(), [member(0, secondaryCIDRs=["10.0.1.0/24"]), member(1)])
    reason, _, field, why = refusal(plan, "acme/c00")
    assert (reason, field) == ("MeshInvalid", f"{SECONDARY}[0]")
    assert "overlaps its own CIDR 10.0.0.0/16 (spec.network.cidr)" in why
    plan = plan_mesh(hub(), [member(0, secondaryCIDRs=["10.0.0.0/16", "100.64.0.0/16", "100.64.0.0/16"]), member(1)])
    assert plan.errors == {} and plan.shares["acme/c00"].member.cidrs == ("10.0.0.0/16", "100.64.0.0/16")


def test_the_quotas_count_every_peer_block():
    """Routes per table and rules per group grow by one per peer block, not per peer."""
    h = hub(mesh={"routesPerTable": 2})
    assert plan_mesh(h, [member(0), member(1), member(2)]).errors == {}  # 2 peers, 1 block each: 2 routes
    plan = plan_mesh(h, [member(0, secondaryCIDRs=["100.64.0.0/16"]), member(1), member(2)])
    reason, _, field, why = refusal(plan, "acme/c02")
    assert (reason, field) == ("MeshLimitExceeded", "metadata.labels[hubwright.io/mesh]")
    assert "3 mesh routes in each of its route tables" in why
    share = plan_mesh(hub(), [member(0, secondaryCIDRs=["100.64.0.0/16"]), member(1)]).shares["globex/c01"]
    assert (share.limits.mesh_routes, share.limits.mesh_rules) == (2, 2)  # c01's tables: c00's two blocks
    assert set(share.limits.group_cidrs) == {"10.0.0.0/16", "100.64.0.0/16", "10.1.0.0/16"}
    # The plan's summary of a gateway group without summaryCIDRs says the same: c01 and c02 route c00's two blocks
    # and each other's one.
    from stacks.mesh.summary import summary
    h = hub(mesh={"groups": {"core": {"topology": "transitGateway"}}})
    plan = plan_mesh(h, [tgw_member(0, secondaryCIDRs=["100.64.0.0/16"]), tgw_member(1), tgw_member(2)])
    assert summary(plan, h)["core"]["routesPerTable"] == 3


# --- what the stacks build: a route and a rule per peer block; the primary's keep their names -------------------

def _urns(plans, type_):
    return {r.urn: r for p in plans.values() for r in p.of_type(type_)}


def test_pair_routes_and_rules_are_made_for_every_peer_block_and_the_primarys_keep_their_names():
    blocks = {0: ["100.64.0.0/16", "100.65.0.0/16"], 2: ["100.66.0.0/16"]}
    single = [member(i) for i in range(3)]
    multi = [member(i, secondaryCIDRs=blocks.get(i, [])) for i in range(3)]
    plans = plans_of(multi)
    cidrs = {c.key: (c.spec.network.cidr, *blocks.get(i, [])) for i, c in enumerate(multi)}
    tables = {t: c.key for c in multi for t in c.spec.network.route_table_ids}
    groups = {g: c.key for c in multi for g in c.spec.network.node_security_group_ids}
    routes = _urns(plans, ROUTE)
    found = {}
    for r in routes.values():
        found.setdefault(tables[r.inputs["routeTableId"]], set()).add((r.inputs["routeTableId"],
                                                                      r.inputs["destinationCidrBlock"]))
    for c in multi:
        want = {(t, block) for t in c.spec.network.route_table_ids
                for k, bs in cidrs.items() if k != c.key for block in bs}
        assert found[c.key] == want, c.key
    rules = _urns(plans, RULE)
    sources = {}
    for r in rules.values():
        sources.setdefault(groups[r.inputs["securityGroupId"]], []).append(r.inputs["cidrIpv4"])
    for c in multi:
        assert sorted(sources[c.key]) == sorted(b for k, bs in cidrs.items() if k != c.key for b in bs), c.key
    # The single-CIDR fleet's routes and rules are all still there, with the same names and properties.
    before = plans_of(single)
    for type_, now in ((ROUTE, routes), (RULE, rules)):
        for urn, res in _urns(before, type_).items():
            assert urn in now and now[urn].inputs == res.inputs, urn
    # A secondary block's names derive from the block: the same on every run.
    assert {urn for urn in routes if "100.64.0.0/16" in urn} == {urn for urn in _urns(plans_of(multi), ROUTE)
                                                                 if "100.64.0.0/16" in urn} != set()


def test_a_single_cidr_members_config_is_the_wire_form_it_always_was_and_a_secondary_block_is_added_to_it():
    resolved = resolve_all(fleet(hub(), (member(0), member(1, secondaryCIDRs=["100.65.0.0/16"]))))
    c00, c01 = resolved.inputs["acme/c00"], resolved.inputs["globex/c01"]
    owner = json.loads(c00.to_config())["mesh"]["member"]
    assert owner["cidr"] == "10.0.0.0/16" and not {"cidrs", "secondary_cidrs", "cidr_fields"} & set(owner)
    config = json.loads(c01.to_config())["mesh"]
    assert (config["member"]["cidr"], config["member"]["secondary_cidrs"]) == ("10.1.0.0/16", ["100.65.0.0/16"])
    assert config["pairs"][0]["peer"]["cidr"] == "10.0.0.0/16" and "secondary_cidrs" not in config["pairs"][0]["peer"]
    back = StackInputs.from_config(c01.to_config())
    assert back.mesh.member.cidrs == ("10.1.0.0/16", "100.65.0.0/16") and back.digest() == c01.digest()


# --- the route-hijack check and the preflight cover every block ---------------------------------------------

def test_the_route_hijack_check_covers_a_secondary_block():
    clusters = [member(1), member(2, secondaryCIDRs=["10.40.9.0/24"])]  # c02 joins last: owns the pair
    share = plan_mesh(hub(), clusters).shares["acme/c02"]
    assert {(r.member, r.table, r.cidr) for r in pair_routes(share)} == {
        ("globex/c01", "rtb-001a", "10.2.0.0/16"), ("globex/c01", "rtb-001b", "10.2.0.0/16"),
        ("globex/c01", "rtb-001a", "10.40.9.0/24"), ("globex/c01", "rtb-001b", "10.40.9.0/24"),
        ("acme/c02", "rtb-002a", "10.1.0.0/16")}
    [hijack] = route_hijacks(share, {"rtb-001b": (FoundRoute(cidr="10.40.0.0/16", target="vgw-1"),)})
    assert "would add 10.40.9.0/24 (to HubCluster acme/c02)" in hijack


def _inputs(victim, attacker, *, cidr, secondary, **hub_spec):
    """globex/c01 (joins after acme/c00, so it owns the pair) declares `cidr` and `secondary`: its inputs."""
    clusters = [member(0, vpcID=victim[1], routeTableIDs=[victim[2]], cidr="10.1.0.0/16"),
                member(1, vpcID=attacker[1], routeTableIDs=[attacker[2]], cidr=cidr, secondaryCIDRs=secondary)]
    inputs = resolve_all(fleet(hub(**hub_spec), clusters)).inputs["globex/c01"]
    assert not isinstance(inputs, InvalidSpec), inputs
    return inputs


def test_the_preflight_refuses_a_declared_secondary_block_the_vpc_does_not_have(moto, sessions):  # noqa: F811
    victim = _vpc(moto, CLUSTER_ACCOUNT, "10.1.0.0/16")
    attacker = _vpc(moto, ATTACKER_ACCOUNT, "10.50.0.0/16", "10.51.0.0/16")
    assert MeshCidrPreflight(sessions)(None, _inputs(victim, attacker, cidr="10.50.0.0/16",
                                                     secondary=["10.51.0.0/16"])) is None
    with pytest.raises(NeedsAttention) as caught:
        MeshCidrPreflight(sessions)(None, _inputs(victim, attacker, cidr="10.50.0.0/16",
                                                  secondary=["10.51.0.0/16", "10.7.0.0/16"]))
    assert caught.value.reason == "MeshCIDRNotInVPC"
    assert str(caught.value) == (
        f"HubCluster globex/c01: {SECONDARY}[1]: CIDR 10.7.0.0/16 is not a CIDR block of VPC {attacker[1]} in account "
        f"{ATTACKER_ACCOUNT} (us-east-1), which has 10.50.0.0/16, 10.51.0.0/16; a member declares one of its VPC's own "
        f"CIDR blocks, since its peers route exactly that range to it")


def test_the_preflight_refuses_a_secondary_block_the_hub_account_says_is_the_hubs(moto, sessions):  # noqa: F811
    _, mgmt, _ = _vpc(moto, HUB_ACCOUNT, "10.20.0.0/16", "10.21.0.0/16")
    victim = _vpc(moto, CLUSTER_ACCOUNT, "10.1.0.0/16")
    attacker = _vpc(moto, ATTACKER_ACCOUNT, "10.50.0.0/16", "10.21.0.0/16")
    desired = _inputs(victim, attacker, cidr="10.50.0.0/16", secondary=["10.21.0.0/16"],
                      associatedVPCs=[{"region": "us-east-1", "vpcID": mgmt}])
    with pytest.raises(InvalidSpec) as caught:
        MeshCidrPreflight(sessions)(None, desired)
    [error] = caught.value.errors
    assert (caught.value.reason, error.field) == ("MeshCIDROverlap", f"{SECONDARY}[0]")
    assert error.reason.startswith(f"CIDR 10.21.0.0/16 of HubCluster globex/c01 overlaps CIDR 10.21.0.0/16 of HubConfig "
                                   f"default spec.associatedVPCs[0] (VPC {mgmt}), a CIDR block of the VPC in the hub "
                                   f"account, which the hub owns")


def test_the_preflight_stalls_a_secondary_block_that_would_hijack_a_peers_route(moto, sessions):  # noqa: F811
    victim = _vpc(moto, CLUSTER_ACCOUNT, "10.1.0.0/16")
    ec2, _, table = victim
    vgw = ec2.create_vpn_gateway(Type="ipsec.1")["VpnGateway"]["VpnGatewayId"]
    ec2.attach_vpn_gateway(VpnGatewayId=vgw, VpcId=victim[1])
    ec2.create_route(RouteTableId=table, DestinationCidrBlock="10.40.0.0/16", GatewayId=vgw)
    attacker = _vpc(moto, ATTACKER_ACCOUNT, "10.50.0.0/16", "10.40.9.0/24")  # really its VPC's: only the route tells
    with pytest.raises(NeedsAttention) as caught:
        MeshCidrPreflight(sessions)(None, _inputs(victim, attacker, cidr="10.50.0.0/16", secondary=["10.40.9.0/24"]))
    assert caught.value.reason == "MeshRouteHijack"
    assert str(caught.value).startswith(
        f"HubCluster globex/c01: {SECONDARY}[0]: route table {table} of HubCluster acme/c00 has 10.40.0.0/16 -> {vgw}, "
        f"and mesh pair acme.c00+globex.c01 would add 10.40.9.0/24 (to HubCluster globex/c01), which is more specific")


# --- Transit Gateway: a static route per block, and the other regions' tables route every block --------------

def test_the_transit_stack_routes_every_block_of_a_member_to_its_attachment_and_to_the_other_regions():
    h = hub(mesh={"groups": {"core": {"topology": "transitGateway"}}})
    clusters = [tgw_member(0, secondaryCIDRs=["100.64.0.0/16"]), tgw_member(1), tgw_member(2)]  # c02: eu-west-1
    _, plans = plan_fleet(fleet(h, tuple(clusters), mesh_status=MeshStatus.empty()))
    plans = {p.stack: p for p in plans}
    transit = plans[f"_tgw_{HUB_ACCOUNT}"]
    c00 = plans["acme.c00"].outputs["mesh"]["transitAttachment"]
    static = transit.of_type("aws:ec2transitgateway/route:Route")
    mine = sorted((r.name, r.inputs["destinationCidrBlock"]) for r in static
                  if r.inputs["transitGatewayAttachmentId"] == c00)
    prefix = f"_tgw_{HUB_ACCOUNT}-us-east-1-core-acme.c00-to-"
    assert mine == [(f"{prefix}10.0.0.0/16", "10.0.0.0/16"), (f"{prefix}100.64.0.0/16", "100.64.0.0/16")]
    remote = {r.inputs["destinationCidrBlock"] for r in static if r.region == "eu-west-1" and "-to-" in r.name
              and r.inputs["transitGatewayAttachmentId"] != plans["acme.c02"].outputs["mesh"]["transitAttachment"]}
    assert {"10.0.0.0/16", "100.64.0.0/16", "10.1.0.0/16"} <= remote


def test_the_picture_shows_every_block_of_a_member():
    mesh = resolve_all(fleet(hub(), (member(0, secondaryCIDRs=["100.64.0.0/16"]), member(1)))).mesh
    text = render_mermaid(mesh)
    assert "10.0.0.0/16, 100.64.0.0/16" in text and "10.1.0.0/16\"]" in text


# --- the policy pack (policy.rules) reads the same blocks: it passes what the program builds for them -------------

@pytest.mark.parametrize("topology", ["peering", "transitGateway"])
def test_the_policy_pack_passes_the_routes_and_rules_of_every_block_and_the_fleet_check_sees_each_block(topology):
    from automation.adapters.engine.policy import resources_of
    from policy.rules.check import check_fleet, check_stack
    from policy.rules.view import Context, Member

    h = hub(mesh={"groups": {"core": {"topology": topology}}})
    clusters = [tgw_member(0, secondaryCIDRs=["100.64.0.0/16"]), tgw_member(1),
                tgw_member(2, secondaryCIDRs=["100.66.0.0/16"])]
    resolved, plans = plan_fleet(fleet(h, tuple(clusters), mesh_status=MeshStatus.empty()))
    contexts, destinations = [], set()
    for plan in plans:
        inputs = resolved.inputs.get(plan.cluster) or resolved.mesh.transit[plan.stack]
        contexts.append(Context.of(inputs))
        destinations |= {r.inputs.get("destinationCidrBlock") for r in plan.resources}
        assert check_stack(contexts[-1], resources_of(plan)) == [], plan.stack
    assert {"100.64.0.0/16", "100.66.0.0/16"} <= destinations  # the secondary blocks are routed, and checked
    assert check_fleet(contexts) == []
    # Two stacks whose members' secondary blocks overlap: the fleet check names both members and both blocks.
    a = Context("x.a", group="acme/g", members=(Member("x/a", "vpc-a", "10.0.0.0/16", (), None, ("100.64.0.0/16",)),))
    b = Context("x.b", group="acme/g", members=(Member("x/b", "vpc-b", "10.1.0.0/16", (), None, ("100.64.8.0/24",)),))
    [violation] = check_fleet([a, b])
    assert violation.reason == "mesh group acme/g: x/a (100.64.0.0/16) and x/b (100.64.8.0/24) overlap"


# --- through the real surfaces: the CLI's offline plan and the service on the real API server ----------------------

@pytest.mark.live
def test_the_plan_refuses_a_secondary_block_inside_the_hubs_management_vpc_naming_its_field(tmp_path):
    """The hijack of issue 31 moved to the second block: globex declares a harmless primary CIDR and, as its
    VPC's other block, 10.0.9.0/24, inside the hub's management VPC 10.0.0.0/16."""
    hub_doc = yaml.safe_load(open("examples/hub.yaml"))
    hub_doc["spec"]["mesh"] = {"groups": {"core": {"namespaces": ["acme", "globex"]}}}
    (tmp_path / "hub.yaml").write_text(yaml.safe_dump(hub_doc))
    clusters = tmp_path / "clusters"
    clusters.mkdir()
    (clusters / "ns.yaml").write_text(yaml.safe_dump_all([namespace_doc("acme"), namespace_doc("globex")]))
    mesh = {"labels": {"hubwright.io/mesh": "core"}, "annotations": {"hubwright.io/mesh-enabled": "true"}}
    (clusters / "victim.yaml").write_text(yaml.safe_dump(cluster_doc("victim", "acme", privateLink={"enabled": False},
                                                                     **mesh)))
    evil = cluster_doc("evil", "globex", accountID="333333333333", privateLink={"enabled": False}, **mesh,
                       network={"vpcID": "vpc-0e1", "cidr": "10.77.0.0/16", "secondaryCIDRs": ["10.0.9.0/24"],
                                "routeTableIDs": ["rtb-0e1"], "nodeSecurityGroupIDs": ["sg-0e1"]})
    (clusters / "evil.yaml").write_text(yaml.safe_dump(evil))
    done = subprocess.run([sys.executable, "-m", "automation", "plan", "--hub", str(tmp_path / "hub.yaml"),
                           "--clusters", str(clusters), "--format", "json"], capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    # The plan reads the VPC (the stand-in discovery finds what is declared): the block is named where the cloud
    # confirmed it, status.network.cidrs[1] (stacks.mesh.plan.member_blocks).
    assert "HubCluster globex/evil: status.network.cidrs[1]: CIDR 10.0.9.0/24 of HubCluster globex/evil overlaps " \
           "CIDR 10.0.0.0/16 of HubConfig default spec.associatedVPCs[0] (VPC vpc-0mgmt)" in done.stderr
    assert "HubCluster acme/victim" not in done.stderr


def test_on_the_api_server_a_member_whose_secondary_block_overlaps_a_peers_is_stalled_and_runs_nothing(env):  # noqa: F811
    """A tenant of another namespace in a spanning group declares, besides a CIDR of its own, a second block inside
    the first member's second block: Stalled naming both objects and both blocks; it runs nothing, and the first
    member's stack does not change."""
    evil = f"evil-{env.suffix}"
    env.namespace(evil, owner="333333333333")
    env.patch_hub({"spec": {"mesh": {"groups": {"payments": {"namespaces": [env.ns, evil]}}}}})

    def member_of(name, namespace, cidr, secondary, **spec):
        return env.create(name, namespace, **MESH, privateLink={"enabled": False}, **spec,
                          network={"vpcID": f"vpc-0{name.replace('-', '')}", "cidr": cidr, "secondaryCIDRs": secondary,
                                   "routeTableIDs": ["rtb-01"], "nodeSecurityGroupIDs": ["sg-01"]})

    engine = RecordingEngine()
    member_of("pay-1", env.ns, "10.1.0.0/16", ["100.64.0.0/16"])
    with env.running(engine) as service:
        wait_until(lambda: env.ready("pay-1"), 30, what="the first member")
        before = env.get("pay-1")["status"]
        member_of("hijack", evil, "10.9.0.0/16", ["100.65.0.0/16", "100.64.7.0/24"], accountID="333333333333")
        wait_until(lambda: env.reason("hijack", evil) == "MeshCIDROverlap", 20, what=f"{evil}/hijack MeshCIDROverlap")
        message = env.condition("hijack", "Stalled", evil)["message"]
        assert f"HubCluster {evil}/hijack: {SECONDARY}[1]: CIDR 100.64.7.0/24 of HubCluster {evil}/hijack overlaps " \
               f"CIDR 100.64.0.0/16 of HubCluster {env.ns}/pay-1, an earlier member of mesh group payments" in message
        settle(env, service)
        assert [c.stack for c in engine.calls] == [f"{env.ns}.pay-1"]  # the refused member ran nothing
        assert engine.stacks[f"{env.ns}.pay-1"].mesh.member.cidrs == ("10.1.0.0/16", "100.64.0.0/16")
        assert engine.stacks[f"{env.ns}.pay-1"].mesh.pairs == ()
        now = env.get("pay-1")["status"]
        assert (now["inputsHash"], now["lastUpdate"]) == (before["inputsHash"], before["lastUpdate"])
