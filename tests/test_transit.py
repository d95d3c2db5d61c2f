"""Transit Gateway topology, auto's hysteresis, migration states and the per-gateway quotas (pure, no Pulumi)."""
import ipaddress

import pytest

from stacks.inputs import StackInputs
from stacks.mesh.routes import pair_routes
from stacks.resolve import resolve_all
from stacks.transit import (GroupState, MeshStatus, TransitOutputs, TransitRegionOutputs, advance, migration_steps,
                            next_state, phase_of, transit_stack, wanted_topology)
from stacks.model.hub import MeshGroup
from stacks.model.loading import parse
from stacks.names import MESH_ENABLED_ANNOTATION, MESH_LABEL
from doubles.factories import HUB_ACCOUNT, cluster_doc, fleet
from tests.test_mesh import REGIONS, hub, member

TGW = "transitGateway"


def tgw_member(i: int, **kw):
    """member(i) with one transit subnet per AZ (two AZs)."""
    region = REGIONS[(i // 2) % 2]
    subnets = [{"subnetID": f"subnet-0t{i:03d}{z}", "availabilityZone": f"{region}{z}"} for z in "ab"]
    return member(i, transitSubnets=subnets, **kw)


def big_member(i: int):
    """b<i>: 10.(100 + i/64).(4*(i%64)).0/22 in us-east-1, account 222222222222: any group size, disjoint."""
    doc = cluster_doc(
        f"b{i:04d}", "acme", labels={MESH_LABEL: "core"}, annotations={MESH_ENABLED_ANNOTATION: "true"},
        privateLink={"enabled": False},
        network={"vpcID": f"vpc-0b{i:04d}", "cidr": f"10.{100 + i // 64}.{(i % 64) * 4}.0/22",
                 "routeTableIDs": [f"rtb-0b{i:04d}"], "nodeSecurityGroupIDs": [f"sg-0b{i:04d}"],
                 "transitSubnets": [{"subnetID": f"subnet-0b{i:04d}", "availabilityZone": "us-east-1a"}]})
    doc["metadata"]["creationTimestamp"] = f"2025-01-01T{i // 60:02d}:{i % 60:02d}:00Z"
    return parse(doc)


def elsewhere(cluster, region):
    return cluster.model_copy(update={"spec": cluster.spec.model_copy(update={"region": region})})


def plan(h, clusters, status=None):
    return resolve_all(fleet(h, clusters, mesh_status=status or MeshStatus.empty()))


def status_with_gateways(groups=None, attachments=None, regions=REGIONS, account=HUB_ACCOUNT, route_tables=None):
    outputs = TransitOutputs(regions={r: TransitRegionOutputs(transit_gateway_id=f"tgw-{r}",
                                                              route_tables=route_tables or {})
                                      for r in regions})
    return MeshStatus(groups=groups or {}, transit={transit_stack(account): outputs}, attachments=attachments or {})


# --- auto and its hysteresis ------------------------------------------------------------------

@pytest.mark.parametrize("members,current,expected", [
    (39, None, "peering"), (40, None, TGW), (40, "peering", TGW),
    (35, TGW, TGW), (30, TGW, TGW), (29, TGW, "peering"),  # back only below 3/4 of the threshold
    (35, "peering", "peering"), (35, None, "peering"),
])
def test_auto_switches_at_the_threshold_and_back_only_well_below_it(members, current, expected):
    assert wanted_topology(MeshGroup(topology="auto"), members, current) == expected


def test_auto_peering_below_is_configurable_and_must_lie_below_the_threshold():
    config = MeshGroup(topology="auto", auto_threshold=10, auto_peering_below=4)
    assert wanted_topology(config, 5, TGW) == TGW and wanted_topology(config, 3, TGW) == "peering"
    with pytest.raises(ValueError, match="autoPeeringBelow 10 must be below autoThreshold 10"):
        MeshGroup(topology="auto", auto_threshold=10, auto_peering_below=10)


def test_a_fixed_topology_ignores_the_member_count():
    assert wanted_topology(MeshGroup(topology=TGW), 2, "peering") == TGW
    assert wanted_topology(MeshGroup(), 500, TGW) == "peering"


# --- migration states -----------------------------------------------------------------------------

@pytest.mark.parametrize("start,end", [("peering", TGW), (TGW, "peering")])
def test_a_migration_attaches_first_moves_the_routes_then_removes_the_old_connections(start, end):
    steps = migration_steps(start, end)
    assert [s.step for s in steps] == [None, "attach", "routes", None]
    phases = [phase_of(s) for s in steps]
    old_is_peering = start == "peering"
    # the old connections stay until the last step; the new exist from `attach` on
    assert [p.peerings for p in phases] == ([True, True, True, False] if old_is_peering else [False, True, True, True])
    assert [p.attachments for p in phases] == ([False, True, True, True] if old_is_peering else [True, True, True, False])
    # routes move once, at `routes`, from the old to the new
    assert [p.routes_via for p in phases] == [start, start, end, end]


def test_turning_back_mid_migration_never_skips_a_step():
    attach = GroupState(topology="peering", migrating_to=TGW, step="attach")
    assert next_state(attach, "peering", existed=True) == GroupState(topology="peering")  # nothing moved yet
    routes = advance(attach)
    back = next_state(routes, "peering", existed=True)
    assert back == GroupState(topology=TGW, migrating_to="peering", step="attach")
    assert phase_of(back) == phase_of(routes)  # the same resources: turning back changes nothing at once
    assert advance(advance(back)) == GroupState(topology="peering")


def test_a_group_that_existed_before_states_were_recorded_is_on_peering():
    assert next_state(None, TGW, existed=True) == GroupState(topology="peering", migrating_to=TGW, step="attach")
    assert next_state(None, TGW, existed=False) == GroupState(topology=TGW)


# --- the plan in Transit Gateway mode ----------------------------------------------------------------

def test_a_new_transit_gateway_group_plans_one_transit_stack_with_each_region_and_account():
    h = hub(mesh={"groups": {"core": {"topology": TGW}}})
    clusters = [tgw_member(i) for i in range(4)]  # accounts 222/333 alternate, regions us-east-1 x2, eu-west-1 x2
    resolved = plan(h, clusters, status_with_gateways(attachments={c.key: f"tgw-attach-{i}"
                                                                   for i, c in enumerate(clusters)}))
    view = resolved.mesh.groups["core"]
    assert view.state == GroupState(topology=TGW) and view.transit_stack == f"_tgw_{HUB_ACCOUNT}"
    [transit] = resolved.mesh.transit.values()
    assert transit.stack == "_tgw_111111111111" and transit.account_id == HUB_ACCOUNT
    assert [r.region for r in transit.regions] == sorted(REGIONS)
    for region in transit.regions:
        assert (region.network.account_id, region.network.region) == (HUB_ACCOUNT, region.region)
        assert {t.account_id for t in region.members} == {"222222222222", "333333333333"}  # the share's principals
        [group] = region.groups
        here = [c for c in clusters if c.spec.region == region.region]
        assert {a.cluster for a in group.attachments} == {c.key for c in here}
        assert all(a.accept for a in group.attachments)  # other accounts' attachments are accepted by the network
        [remote] = group.remotes
        assert remote.region != region.region
        assert set(remote.cidrs) == {c.spec.network.cidr for c in clusters if c.spec.region == remote.region}
    for c in clusters:
        share = resolved.inputs[c.key].mesh
        assert share.peerings is False and share.routes_via == TGW
        assert share.attachment.transit_gateway_id == f"tgw-{c.spec.region}"
        assert share.attachment.subnet_ids == tuple(s.subnet_id for s in c.spec.network.transit_subnets)


def test_members_wait_for_the_gateway_and_the_transit_stack_for_their_attachments():
    h = hub(mesh={"groups": {"core": {"topology": TGW}}})
    clusters = [tgw_member(i) for i in range(2)]
    first = plan(h, clusters)  # nothing made yet
    assert all(first.inputs[c.key].mesh.attachment is None for c in clusters)
    [transit] = first.mesh.transit.values()
    assert all(not g.attachments for r in transit.regions for g in r.groups)
    second = plan(h, clusters, status_with_gateways())  # the transit stack ran
    assert all(second.inputs[c.key].mesh.attachment is not None for c in clusters)


def test_groups_on_one_network_account_share_its_gateways_with_a_route_table_each():
    h = hub(mesh={"groups": {"core": {"topology": TGW}, "edge": {"topology": TGW}}})
    clusters = [tgw_member(0), tgw_member(1, cidr="10.1.0.0/16"),
                tgw_member(2, group="edge", cidr="10.1.0.0/16"), tgw_member(3, group="edge")]
    resolved = plan(h, clusters)
    [transit] = resolved.mesh.transit.values()
    assert {g.group for r in transit.regions for g in r.groups} == {"core", "edge"}


def test_a_group_naming_a_network_account_gets_gateways_there():
    h = hub(mesh={"groups": {"core": {"topology": TGW, "transitGateway": {"accountID": "333333333333",
                                                                        "asn": 65010}}}})
    resolved = plan(h, [tgw_member(0), tgw_member(1)])
    [transit] = resolved.mesh.transit.values()
    assert transit.stack == "_tgw_333333333333" and transit.asn == 65010
    [region] = transit.regions
    assert region.network.role_arn == "arn:aws:iam::333333333333:role/hubwright"
    assert [t.account_id for t in region.members] == ["222222222222"]  # its own account is no principal


def test_a_network_account_without_a_role_refuses_the_group():
    h = hub(mesh={"groups": {"core": {"topology": TGW, "transitGateway": {"accountID": "444444444444"}}}})
    resolved = plan(h, [tgw_member(0), tgw_member(1)])
    assert not resolved.mesh.transit
    assert "account 444444444444 (transitGateway.accountID), which has no role in the role map" in str(resolved.inputs["acme/c00"])


def test_transit_subnets_are_required_for_a_new_gateway_member():
    h = hub(mesh={"groups": {"core": {"topology": TGW}}})
    resolved = plan(h, [tgw_member(0), member(1)])
    assert "spec.network.transitSubnets" in str(resolved.inputs["globex/c01"])
    assert isinstance(resolved.inputs["acme/c00"], StackInputs)


def test_a_migration_does_not_start_until_every_member_can_attach():
    h = hub(mesh={"groups": {"core": {"topology": TGW}}})
    clusters = [tgw_member(0, stamp=1), member(1, stamp=2)]
    resolved = plan(h, clusters, MeshStatus(groups={"core": GroupState(topology="peering")}, transit={},
                                            attachments={}))
    view = resolved.mesh.groups["core"]
    assert view.state == GroupState(topology="peering") and view.wanted == TGW
    assert "globex/c01" in view.note and "transitSubnets" in view.note
    assert all(isinstance(v, StackInputs) for v in resolved.inputs.values())  # nobody dropped


def _summary_hub(n, **group):
    return hub(mesh={"groups": {"core": {"topology": TGW, **group}},
                     "rulesPerSecurityGroup": 1000})


def test_a_200_member_group_with_summary_cidrs_plans_in_transit_gateway_mode():
    clusters = [big_member(i) for i in range(200)]
    resolved = plan(_summary_hub(200, summaryCIDRs=["10.100.0.0/14"]), clusters, status_with_gateways())
    assert len(resolved.mesh.groups["core"].members) == 200
    share = resolved.inputs[clusters[-1].key].mesh
    assert share.attachment.summary_cidrs == ("10.100.0.0/14",)
    assert share.routes_via == TGW and not share.peerings


def test_a_200_member_group_without_summary_cidrs_is_refused_past_the_route_quota_with_the_numbers():
    clusters = [big_member(i) for i in range(200)]
    resolved = plan(_summary_hub(200), clusters, status_with_gateways())
    assert len(resolved.mesh.groups["core"].members) == 51
    err = str(resolved.inputs[clusters[51].key])
    assert "mesh group core (Transit Gateway) already has 51 members" in err
    assert "51 mesh routes in each of its route tables (HubConfig spec.mesh.routesPerTable is 50" in err
    assert "declare summaryCIDRs" in err


def test_a_member_outside_the_summary_cidrs_is_refused():
    resolved = plan(_summary_hub(2, summaryCIDRs=["10.0.0.0/16"]), [tgw_member(0), tgw_member(1)])
    assert "CIDR 10.1.0.0/16 is in none of mesh group core's summaryCIDRs (10.0.0.0/16)" in \
        str(resolved.inputs["globex/c01"])


def test_security_group_rules_count_against_the_quota_in_both_topologies():
    for topology in ("peering", TGW):
        h = hub(mesh={"groups": {"core": {"topology": topology, "rules": [
            {"protocol": "tcp", "fromPort": 443, "toPort": 443}, {"protocol": "udp", "fromPort": 53, "toPort": 53}]}},
            "rulesPerSecurityGroup": 5})
        resolved = plan(h, [tgw_member(i) for i in range(5)])
        assert len(resolved.mesh.groups["core"].members) == 3  # 2 peers x 2 rules = 4 <= 5; 3 x 2 = 6 > 5
        assert "6 mesh rules on each of its security groups (3 peers x 2 rules; HubConfig " \
               "spec.mesh.rulesPerSecurityGroup is 5" in str(resolved.inputs["globex/c03"])


def test_quota_overrides_are_per_account():
    h = hub(mesh={"groups": {"core": {}}, "peeringsPerVPC": 2,
                  "accountQuotas": {"222222222222": {"peeringsPerVPC": 10}, "333333333333": {"peeringsPerVPC": 10}}})
    assert len(plan(h, [member(i) for i in range(6)]).mesh.groups["core"].members) == 6
    h = hub(mesh={"groups": {"core": {}}, "accountQuotas": {"333333333333": {"peeringsPerVPC": 2}}})
    resolved = plan(h, [member(i) for i in range(6)])
    assert len(resolved.mesh.groups["core"].members) == 3
    assert "HubConfig accountQuotas[333333333333] is 2" in str(resolved.inputs["globex/c03"])


def test_per_gateway_quotas_name_the_limit_and_the_numbers():
    h = hub(mesh={"groups": {"core": {"topology": TGW}}, "attachmentsPerTransitGateway": 1})
    resolved = plan(h, [tgw_member(0), tgw_member(1)])  # both in us-east-1
    assert "2 attachments on the gateway of account 111111111111 in us-east-1 (attachmentsPerTransitGateway is 1)" \
        in str(resolved.inputs["globex/c01"])
    h = hub(mesh={"groups": {g: {"topology": TGW} for g in ("core", "edge")}, "routeTablesPerTransitGateway": 1})
    resolved = plan(h, [tgw_member(0), tgw_member(1, group="edge")])
    assert "already serve 1 groups, one route table each (routeTablesPerTransitGateway is 1)" in \
        str(resolved.inputs["globex/c01"])
    h = hub(mesh={"groups": {"core": {"topology": TGW}}, "peeringAttachmentsPerTransitGateway": 1})
    three = [tgw_member(0), tgw_member(2), elsewhere(tgw_member(4), "ap-south-1")]
    resolved = plan(h, three)
    assert "peering attachments on the gateway of account 111111111111" in str(resolved.inputs["acme/c04"])


def test_groups_asking_for_different_asns_on_one_network_account_are_refused():
    h = hub(mesh={"groups": {"core": {"topology": TGW}, "edge": {"topology": TGW, "transitGateway": {"asn": 65001}}}})
    resolved = plan(h, [tgw_member(0), tgw_member(1, group="edge")])
    assert "asks for ASN 65001" in str(resolved.inputs["globex/c01"])


def test_auto_switches_at_the_threshold_through_a_migration():
    h = hub(mesh={"groups": {"core": {"topology": "auto", "autoThreshold": 4}}})
    three = [tgw_member(i, stamp=i + 1) for i in range(3)]
    assert plan(h, three).mesh.groups["core"].state == GroupState(topology="peering")
    four = [*three, tgw_member(3)]
    view = plan(h, four, MeshStatus({"core": GroupState(topology="peering")}, {}, {})).mesh.groups["core"]
    assert view.wanted == TGW and view.state == GroupState(topology="peering", migrating_to=TGW, step="attach")


# --- every step keeps a route to every peer CIDR ------------------------------------------------

def _routes(resolved, clusters):
    """(route table, destination) -> target kind, for every member, from the shares (who builds which route): the
    summary routes of each attachment, and the pair routes stacks.mesh.routes.pair_routes says are built now."""
    routes = {}
    for key, inputs in resolved.inputs.items():
        share = inputs.mesh
        if share.attachment is not None:
            for table in share.member.route_table_ids:
                for cidr in share.attachment.summary_cidrs:
                    routes[(table, cidr)] = TGW
        for route in pair_routes(share):
            routes[(route.table, route.cidr)] = route.via
    return routes


def _covered(routes, clusters):
    for c in clusters:
        for other in clusters:
            if other is c:
                continue
            net = ipaddress.ip_network(other.spec.network.cidr)
            for table in c.spec.network.route_table_ids:
                assert any(t == table and net.subnet_of(ipaddress.ip_network(d)) for t, d in routes), \
                    f"{c.key} table {table} has no route to {other.key} {net}"


@pytest.mark.parametrize("summary", [[], ["10.0.0.0/8"]])
@pytest.mark.parametrize("start,end", [("peering", TGW), (TGW, "peering")])
def test_every_step_of_a_migration_keeps_a_route_to_every_peer_cidr(start, end, summary):
    clusters = [tgw_member(i, stamp=i + 1) for i in range(4)]
    attachments = {c.key: f"tgw-attach-{i}" for i, c in enumerate(clusters)}
    steps = migration_steps(start, end)
    for state in steps:  # each as recorded, with the spec asking for `end` (the first: before it asked)
        h = hub(mesh={"groups": {"core": {"topology": start if state is steps[0] else end, "summaryCIDRs": summary}}})
        resolved = plan(h, clusters, status_with_gateways({"core": state}, attachments))
        assert resolved.mesh.groups["core"].state == state
        _covered(_routes(resolved, clusters), clusters)


def test_the_plan_summary_shows_a_switch_and_its_steps_before_it_happens():
    from stacks.mesh.summary import summary

    h = hub(mesh={"groups": {"core": {"topology": "auto", "autoThreshold": 4}}})
    peering = MeshStatus({"core": GroupState(topology="peering")}, {}, {})
    three = [tgw_member(i, stamp=i + 1) for i in range(3)]
    before = summary(plan(h, three, peering).mesh, h)["core"]
    assert before["state"] == "peering" and "migration" not in before
    assert before["auto"] == "transitGateway from 4 members, peering below 3"
    after = summary(plan(h, [*three, tgw_member(3)], peering).mesh, h)["core"]
    assert after["state"] == "peering -> transitGateway (step attach)" and after["wanted"] == TGW
    assert after["migration"] == ["peering -> transitGateway (step attach)", "peering -> transitGateway (step routes)",
                                  "transitGateway"]
    assert after["mtu"].startswith("9001 -> 8500 bytes")
    blocked = summary(plan(h, [*three, member(3)], peering).mesh, h)["core"]  # one member cannot attach
    assert blocked["state"] == "peering" and blocked["migration"][-1] == "transitGateway"
    assert "globex/c03" in blocked["note"]
