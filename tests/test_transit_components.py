"""Transit Gateway resources under Pulumi's mock runtime: the transit stack and each member's share, per phase.

Plans come from automation.adapters.engine.plan.plan_fleet, which converges like the service (the transit stack, the
members with its gateway IDs, the transit stack again with their attachments).
"""
import pytest

from automation.adapters.engine.plan import plan_fleet
from stacks.transit import GroupState, MeshStatus, migration_steps
from doubles.factories import HUB_ACCOUNT, fleet
from tests.test_mesh import hub
from tests.test_transit import _covered as covered, elsewhere, tgw_member

TGW = "transitGateway"
T = "aws:ec2transitgateway/"
GATEWAY, TABLE = T + "transitGateway:TransitGateway", T + "routeTable:RouteTable"
ATTACH, ATTACH_ACCEPT = T + "vpcAttachment:VpcAttachment", T + "vpcAttachmentAccepter:VpcAttachmentAccepter"
ASSOC, PROPAGATE = T + "routeTableAssociation:RouteTableAssociation", T + "routeTablePropagation:RouteTablePropagation"
PEER, PEER_ACCEPT = T + "peeringAttachment:PeeringAttachment", T + "peeringAttachmentAccepter:PeeringAttachmentAccepter"
STATIC = T + "route:Route"
SHARE, SHARE_ACCEPT = "aws:ram/resourceShare:ResourceShare", "aws:ram/resourceShareAccepter:ResourceShareAccepter"
PRINCIPAL = "aws:ram/principalAssociation:PrincipalAssociation"
PEERING = "aws:ec2/vpcPeeringConnection:VpcPeeringConnection"
ROUTE = "aws:ec2/route:Route"
RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
TRANSIT = f"_tgw_{HUB_ACCOUNT}"


def plans_of(h, clusters, status=None):
    resolved, plans = plan_fleet(fleet(h, tuple(clusters), mesh_status=status or MeshStatus.empty()))
    return resolved, {p.stack: p for p in plans}


def where(res):
    return res.account, res.region


def tgw_hub(**group):
    return hub(mesh={"groups": {"core": {"topology": TGW, **group}}})


@pytest.fixture(scope="module")
def four():
    """Members c00..c03: accounts 222/333 alternate; c00, c01 in us-east-1; c02, c03 in eu-west-1."""
    clusters = [tgw_member(i) for i in range(4)]
    return clusters, plans_of(tgw_hub(), clusters)[1]


def test_one_gateway_per_region_in_the_network_account_with_nothing_on_by_default(four):
    _, plans = four
    gateways = plans[TRANSIT].of_type(GATEWAY)
    assert sorted(where(g) for g in gateways) == [(HUB_ACCOUNT, "eu-west-1"), (HUB_ACCOUNT, "us-east-1")]
    for g in gateways:
        assert g.inputs["defaultRouteTableAssociation"] == "disable"
        assert g.inputs["defaultRouteTablePropagation"] == "disable"
        assert g.inputs["autoAcceptSharedAttachments"] == "disable"
        assert g.inputs["amazonSideAsn"] == 64512


def test_the_gateway_is_shared_with_each_member_account_which_accepts_the_share_outside_an_organization(four):
    _, plans = four
    transit = plans[TRANSIT]
    assert all(s.inputs["allowExternalPrincipals"] is True for s in transit.of_type(SHARE))
    principals = sorted((p.region, p.inputs["principal"]) for p in transit.of_type(PRINCIPAL))
    assert principals == [(r, a) for r in ("eu-west-1", "us-east-1") for a in ("222222222222", "333333333333")]
    accepters = sorted(where(a) for a in transit.of_type(SHARE_ACCEPT))
    assert accepters == [(a, r) for a in ("222222222222", "333333333333") for r in ("eu-west-1", "us-east-1")]


def test_inside_an_organization_nobody_accepts_a_share():
    clusters = [tgw_member(i) for i in range(2)]
    _, plans = plans_of(hub(mesh={"organization": True, "groups": {"core": {"topology": TGW}}}), clusters)
    assert not plans[TRANSIT].of_type(SHARE_ACCEPT)
    assert all(s.inputs["allowExternalPrincipals"] is False for s in plans[TRANSIT].of_type(SHARE))


def test_each_member_attaches_in_its_own_account_and_the_network_accepts_associates_and_routes_it(four):
    clusters, plans = four
    transit = plans[TRANSIT]
    attachment_ids = {}
    for c in clusters:
        [attachment] = plans[c.stack].of_type(ATTACH)
        assert where(attachment) == (c.spec.account_id, c.spec.region)
        assert attachment.inputs["vpcId"] == c.spec.network.vpc_id
        assert attachment.inputs["subnetIds"] == [s.subnet_id for s in c.spec.network.transit_subnets]
        assert attachment.inputs["transitGatewayDefaultRouteTableAssociation"] is False
        attachment_ids[c.key] = plans[c.stack].outputs["mesh"]["transitAttachment"]
    tables = {t.urn: t for t in transit.of_type(TABLE)}
    for kind in (ATTACH_ACCEPT, ASSOC, STATIC):
        members = [r for r in transit.of_type(kind) if r.inputs["transitGatewayAttachmentId"].startswith("tgw-attach")
                   and r.inputs["transitGatewayAttachmentId"] in attachment_ids.values()]
        assert len(members) == 4, kind
        assert all(r.account == HUB_ACCOUNT for r in members)
    assert len(tables) == 2  # one group, two regions


def _member_routes(plans, clusters):
    """The transit stack's static routes to member attachments: attachment ID -> [(table, destination, route)]."""
    attachments = {plans[c.stack].outputs["mesh"]["transitAttachment"] for c in clusters}
    out = {}
    for r in plans[TRANSIT].of_type(STATIC):
        if r.inputs["transitGatewayAttachmentId"] in attachments:
            out.setdefault(r.inputs["transitGatewayAttachmentId"], []).append(
                (r.inputs["transitGatewayRouteTableId"], r.inputs["destinationCidrBlock"], r))
    return out


def test_a_members_attachment_is_routed_by_its_declared_cidr_only_never_propagated(four):
    """Attack (issue 31): a propagation advertises every CIDR the member's VPC has, an undeclared secondary CIDR
    inside another tenant's or the hub's range included. The group's table holds one static route per member, to
    exactly its declared CIDR, through its own attachment, in its region's table of its group."""
    clusters, plans = four
    transit = plans[TRANSIT]
    assert transit.of_type(PROPAGATE) == []
    tables = transit.outputs["regions"]
    routes = _member_routes(plans, clusters)
    for c in clusters:
        attachment = plans[c.stack].outputs["mesh"]["transitAttachment"]
        [(table, destination, route)] = routes[attachment]
        assert (table, destination) == (tables[c.spec.region]["routeTables"]["core"], c.spec.network.cidr)
        assert where(route) == (HUB_ACCOUNT, c.spec.region)
        assert route.name == f"{TRANSIT}-{c.spec.region}-core-{c.key.replace('/', '.')}-to-{c.spec.network.cidr}"
    assert len(routes) == len(clusters)


def test_the_static_route_replaces_the_propagation_without_a_gap(four):
    """The upgrade order (docs/mesh.md): the static route has another type and name than the propagation it
    replaces, so one update creates it (Pulumi registers new resources as the program runs) and deletes the
    propagation after (removed resources go at the end of the update); a static route wins over a propagated one
    for the same prefix, so the declared CIDR is routed throughout. Nothing in it deletes before it creates, and it
    waits for the acceptance of another account's attachment (a route to an unaccepted attachment fails)."""
    clusters, plans = four
    transit = plans[TRANSIT]
    accepters = {a.inputs["transitGatewayAttachmentId"]: a.urn for a in transit.of_type(ATTACH_ACCEPT)}
    for attachment, [(_, _, route)] in _member_routes(plans, clusters).items():
        assert route.options["deleteBeforeReplace"] is False and not route.options["replaceOnChanges"]
        assert route.type != PROPAGATE and not route.name.endswith("-propagate")
        assert accepters[attachment] in route.dependencies


def test_regions_are_joined_by_the_groups_own_peering_with_static_routes_both_ways(four):
    clusters, plans = four
    transit = plans[TRANSIT]
    [peering] = transit.of_type(PEER)
    [accepter] = transit.of_type(PEER_ACCEPT)
    assert where(peering) == (HUB_ACCOUNT, "eu-west-1") and peering.inputs["peerRegion"] == "us-east-1"
    assert where(accepter) == (HUB_ACCOUNT, "us-east-1")
    peerings = {peering.id, accepter.id}  # the stand-in IDs the routes name
    statics = sorted((r.region, r.inputs["destinationCidrBlock"]) for r in transit.of_type(STATIC)
                     if r.inputs["transitGatewayAttachmentId"] in peerings)
    by_region = {c.spec.region: [] for c in clusters}
    for c in clusters:
        by_region[c.spec.region].append(c.spec.network.cidr)
    assert statics == sorted([("eu-west-1", cidr) for cidr in by_region["us-east-1"]]
                             + [("us-east-1", cidr) for cidr in by_region["eu-west-1"]])
    assoc = [a for a in transit.of_type(ASSOC) if "core-eu-west-1-us-east-1" in a.name]
    assert sorted(where(a) for a in assoc) == [(HUB_ACCOUNT, "eu-west-1"), (HUB_ACCOUNT, "us-east-1")]


def test_two_groups_on_one_gateway_have_a_route_table_each_and_see_only_their_own_members():
    h = hub(mesh={"groups": {"core": {"topology": TGW}, "edge": {"topology": TGW}}})
    clusters = [tgw_member(0), tgw_member(1), tgw_member(4, group="edge", cidr="10.0.0.0/16"),
                tgw_member(5, group="edge", cidr="10.1.0.0/16")]  # edge reuses core's CIDRs: apart, it may
    clusters = [*clusters[:2], elsewhere(clusters[2], "us-east-1"), elsewhere(clusters[3], "us-east-1")]
    _, plans = plans_of(h, clusters)
    transit = plans[TRANSIT]
    assert len(transit.of_type(GATEWAY)) == 1
    assert {t.inputs["tags"]["hubwright.io/mesh-group"] for t in transit.of_type(TABLE)} == {"core", "edge"}
    table_of = transit.outputs["regions"]["us-east-1"]["routeTables"]  # group -> its table's ID
    assert table_of["core"] != table_of["edge"]
    attachment_group = {plans[c.stack].outputs["mesh"]["transitAttachment"]: c.metadata.labels["hubwright.io/mesh"]
                        for c in clusters}
    for kind in (ASSOC, STATIC):
        found = transit.of_type(kind)
        assert len(found) == 4
        for res in found:
            group = attachment_group[res.inputs["transitGatewayAttachmentId"]]
            assert res.inputs["transitGatewayRouteTableId"] == table_of[group]


def test_with_summary_cidrs_each_member_routes_only_them_to_its_gateway():
    clusters = [tgw_member(i) for i in range(4)]
    _, plans = plans_of(tgw_hub(summaryCIDRs=["10.0.0.0/8"]), clusters)
    for c in clusters:
        routes = plans[c.stack].of_type(ROUTE)
        mine = [r for r in routes if r.inputs["routeTableId"] in c.spec.network.route_table_ids]
        assert {(r.inputs["routeTableId"], r.inputs["destinationCidrBlock"]) for r in mine} == \
            {(t, "10.0.0.0/8") for t in c.spec.network.route_table_ids}
        assert all(r.inputs["transitGatewayId"].startswith("tgw-") for r in routes)
        assert len(routes) == len(mine)  # nobody routes into another member's tables


def _every_route_and_rule(plans):
    for plan in plans.values():
        for res in plan.of_type(ROUTE):
            yield "route", res.inputs["destinationCidrBlock"]
        for res in plan.of_type(RULE):
            yield "rule", res.inputs["cidrIpv4"]


@pytest.mark.parametrize("summary", [[], ["10.0.0.0/8"]])
def test_no_route_or_rule_is_wider_than_a_member_cidr_but_the_administrators_summaries(summary):
    clusters = [tgw_member(i) for i in range(4)]
    _, plans = plans_of(tgw_hub(summaryCIDRs=summary), clusters)
    members = {c.spec.network.cidr for c in clusters}
    for kind, cidr in _every_route_and_rule(plans):
        assert cidr in members or (kind == "route" and cidr in summary), (kind, cidr)


def _routes_by_table(plans):
    """(route table, destination) -> (target key, URN) over every stack's routes."""
    out = {}
    for plan in plans.values():
        for res in plan.of_type(ROUTE):
            target = "transitGatewayId" if res.inputs.get("transitGatewayId") else "vpcPeeringConnectionId"
            out[(res.inputs["routeTableId"], res.inputs["destinationCidrBlock"])] = (target, res.urn)
    return out


@pytest.mark.parametrize("summary", [[], ["10.0.0.0/8"]])
@pytest.mark.parametrize("start,end", [("peering", TGW), (TGW, "peering")])
def test_the_migration_plan_keeps_a_route_to_every_peer_cidr_at_every_step(start, end, summary):
    clusters = [tgw_member(i, stamp=i + 1) for i in range(4)]
    steps = migration_steps(start, end)
    seen = []
    for state in steps:
        h = hub(mesh={"groups": {"core": {"topology": start if state is steps[0] else end, "summaryCIDRs": summary}}})
        resolved, plans = plans_of(h, clusters, MeshStatus(groups={"core": state}, transit={}, attachments={}))
        assert resolved.mesh.groups["core"].state == state
        routes = _routes_by_table(plans)
        covered(routes, clusters)  # as the engine would register them, not as the shares say
        peerings = sum(len(p.of_type(PEERING)) for p in plans.values())
        attachments = sum(len(p.of_type(ATTACH)) for p in plans.values())
        seen.append((state, peerings, attachments, routes))
    # the old connections stay until the last step, the new exist from `attach` on
    pairs = len(clusters) * (len(clusters) - 1) // 2
    assert [(p > 0, a > 0) for _, p, a, _ in seen] == (
        [(True, False), (True, True), (True, True), (False, True)] if start == "peering"
        else [(False, True), (True, True), (True, True), (True, False)])
    assert all(p in (0, pairs) for _, p, _, _ in seen)
    if not summary:  # a pair route keeps its URN when its target moves: an in-place update, never a gap
        before, after = seen[1][3], seen[2][3]
        assert before.keys() == after.keys()
        for key, (target, urn) in before.items():
            assert after[key][1] == urn and after[key][0] != target


def test_a_group_without_members_left_has_no_transit_stack():
    resolved, plans = plans_of(tgw_hub(), [])
    assert TRANSIT not in plans and not resolved.mesh.transit
    state = GroupState(topology=TGW)
    resolved, plans = plans_of(tgw_hub(), [tgw_member(0, label=False)], MeshStatus({"core": state}, {}, {}))
    assert TRANSIT not in plans
