"""The policy pack's rules (policy.rules) over mock-runtime plans of the bundled examples: each rule passes on what
the program builds, and catches the violation a bug or a bad input would cause, saying which and why."""
from __future__ import annotations

import dataclasses
import ipaddress
import json
from pathlib import Path
from typing import Any, Callable

import pytest
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, UnknownValueError, unknown_checking_proxy

from automation.adapters.files.inputs import load_fleet
from automation.adapters.engine.plan import plan_fleet
from automation.adapters.engine.policy import PolicySettings, resources_of
from automation.cli import main
from policy.rules.catalog import RULES
from policy.rules.check import check_fleet, check_stack
from policy.rules.enforcement import settings
from policy.rules.kinds import (API_SIDE, ENDPOINT_PRINCIPAL, NACL_RULE, PEERING, RAM_PRINCIPAL, ROUTE, SG_EGRESS,
                                SG_INGRESS, SG_RULE, TGW_PEERING, TGW_ROUTE)
from policy.rules.view import Context, Member, Resource, Violation
from tests.test_transit import elsewhere, tgw_member
from tests.test_transit_components import TRANSIT, hub, plans_of

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
ENDPOINT = "aws:ec2/vpcEndpointService:VpcEndpointService"


@dataclasses.dataclass
class Planned:
    context: Context
    resources: list[Resource]

    def check(self, rule: str, resources: list[Resource] | None = None, **config: Any) -> list[Violation]:
        chosen = settings({rule: {"enforcementLevel": "mandatory", **config}})
        return [v for v in check_stack(self.context, resources or self.resources, chosen) if v.rule == rule]

    def of_kind(self, kind: str) -> list[Resource]:
        return [r for r in self.resources if r.kind == kind]

    def changed(self, pick: Callable[[Resource], bool], **props: Any) -> list[Resource]:
        """The resources with the first picked one's props changed (None: removed from props)."""
        target = next(r for r in self.resources if pick(r))
        new = {k: v for k, v in {**target.props, **props}.items() if v is not None}
        return [dataclasses.replace(r, props=new) if r is target else r for r in self.resources]


def planned_example(hub: Path, clusters: Path) -> dict[str, Planned]:
    fleet = load_fleet(str(hub), str(clusters))
    resolved, plans = plan_fleet(fleet)
    transit = dict(resolved.mesh.transit) if resolved.mesh is not None else {}
    out = {}
    for plan in plans:
        inputs = resolved.inputs.get(plan.cluster) or transit[plan.stack]
        out[plan.stack] = Planned(Context.of(inputs), resources_of(plan))
    return out


@pytest.fixture(scope="module")
def link() -> dict[str, Planned]:
    return planned_example(EXAMPLES / "hub.yaml", EXAMPLES / "clusters")


@pytest.fixture(scope="module")
def mesh() -> dict[str, Planned]:
    return planned_example(EXAMPLES / "mesh" / "hub.yaml", EXAMPLES / "mesh" / "clusters")


@pytest.fixture(scope="module")
def transit() -> dict[str, Planned]:
    return planned_example(EXAMPLES / "transit" / "hub.yaml", EXAMPLES / "transit" / "clusters")


def with_kind(stacks: dict[str, Planned], kind: str, pick: Callable[[Resource], bool] = lambda r: True) -> Planned:
    return next(p for p in stacks.values() if any(r.kind == kind and pick(r) for r in p.resources))


def test_every_rule_passes_on_what_the_program_builds_and_had_something_to_check(link, mesh, transit):
    for stacks in (link, mesh, transit):
        for planned in stacks.values():
            assert check_stack(planned.context, planned.resources) == [], planned.context.stack
    kinds = {r.kind for stacks in (link, mesh, transit) for p in stacks.values() for r in p.resources}
    assert {ENDPOINT, ROUTE, PEERING, SG_INGRESS, "pulumi:providers:aws", RAM_PRINCIPAL, TGW_ROUTE} <= kinds
    assert any(r.props.get("transitGatewayId") for p in transit.values() for r in p.of_kind(ROUTE))


# --- endpoint services -------------------------------------------------------------

@pytest.mark.parametrize("principals, says", [
    (["*"], "principal '*' is a wildcard"),
    (["arn:aws:iam::*:root"], "is a wildcard"),
    (["arn:aws:iam::999999999999:role/x"], "principal 'arn:aws:iam::999999999999:role/x' is not in the hub account 111111111111"),
    (["arn:aws:iam::111111111111:role/a", "arn:aws:iam::111111111111:role/b"], "holds 2 principals, not exactly one"),
    ([], "holds 0 principals"),
])
def test_an_endpoint_service_allows_one_principal_of_the_hub_account(link, principals, says):
    planned = with_kind(link, ENDPOINT)
    [violation] = planned.check("endpoint-service-one-hub-principal",
                                planned.changed(lambda r: r.kind == ENDPOINT, allowedPrincipals=principals))
    assert says in violation.reason
    assert "acceptanceRequired is false" in violation.reason
    assert violation.urn.endswith(planned.of_kind(ENDPOINT)[0].name)


def extra(planned: Planned, like: Resource, type_: str, name: str, props: dict[str, Any]) -> list[Resource]:
    """The stack's resources and one more of `type_`, made by the same provider as `like`."""
    added = Resource(like.urn.rsplit("::", 1)[0].replace(like.type, type_) + f"::{name}", type_, name, props,
                     like.provider)
    return [*planned.resources, added]


def the_pack(planned: Planned, resources: list[Resource]) -> list[tuple[str, str]]:
    """Every rule at its default level, as the engine runs the pack: (rule, reason) of each violation."""
    return [(v.rule, v.reason) for v in check_stack(planned.context, resources)]


HUB_PRINCIPAL = "arn:aws:iam::111111111111:role/hubwright-hub"  # examples/hub.yaml


@pytest.mark.parametrize("principal, says", [
    ("*", "principal '*' is a wildcard"),
    ("arn:aws:iam::999999999999:root", "principal 'arn:aws:iam::999999999999:root' is not in the hub account "
                                       "111111111111"),
    ("arn:aws:iam::111111111111:role/intern", "principal 'arn:aws:iam::111111111111:role/intern' is not the hub's "
                                              f"principal {HUB_PRINCIPAL}"),
])
def test_a_principal_allowed_beside_the_endpoint_service_is_the_hubs_own(link, principal, says):
    """Attack (issue 31): a VpcEndpointServiceAllowedPrinciple with '*' passed the pack, which read only the
    service's allowedPrincipals."""
    planned = with_kind(link, ENDPOINT)
    service = planned.of_kind(ENDPOINT)[0]
    assert service.props["allowedPrincipals"] == [HUB_PRINCIPAL] and planned.context.hub_principal == HUB_PRINCIPAL
    [(rule, reason)] = the_pack(planned, extra(planned, service, ENDPOINT_PRINCIPAL, "more", {
        "principalArn": principal, "vpcEndpointServiceId": service.props["id"]}))
    assert rule == "endpoint-service-one-hub-principal"
    assert reason == (f"{says}: a principal allowed on an endpoint service beside its allowedPrincipals must be the "
                      f"hub's")
    assert the_pack(planned, extra(planned, service, ENDPOINT_PRINCIPAL, "more", {
        "principalArn": HUB_PRINCIPAL, "vpcEndpointServiceId": service.props["id"]})) == []


def test_the_services_own_principal_is_the_hubs_principal_not_any_of_its_account(link):
    planned = with_kind(link, ENDPOINT)
    [violation] = planned.check("endpoint-service-one-hub-principal", planned.changed(
        lambda r: r.kind == ENDPOINT, allowedPrincipals=["arn:aws:iam::111111111111:role/intern"]))
    assert f"principal 'arn:aws:iam::111111111111:role/intern' is not the hub's principal {HUB_PRINCIPAL}" in \
        violation.reason


# --- network ACLs ----------------------------------------------------------------------

@pytest.mark.parametrize("type_, props, says", [
    (NACL_RULE, {"cidrBlock": "0.0.0.0/0", "egress": False, "ruleAction": "allow", "ruleNumber": 100,
                 "protocol": "-1"}, "ingress rule 100 allows 0.0.0.0/0: everyone"),
    (NACL_RULE, {"ipv6CidrBlock": "::/0", "egress": True, "ruleAction": "allow", "ruleNumber": 7, "protocol": "6"},
     "egress rule 7 allows ::/0: everyone"),
    ("aws:ec2/networkAcl:NetworkAcl", {"ingress": [{"cidrBlock": "10.0.0.0/16", "action": "allow", "ruleNo": 1},
                                                   {"cidrBlock": "0.0.0.0/0", "action": "allow", "ruleNo": 2}]},
     "ingress rule 2 allows 0.0.0.0/0: everyone"),
    ("aws:ec2/defaultNetworkAcl:DefaultNetworkAcl", {"egress": [{"ipv6CidrBlock": "::/0", "action": "allow",
                                                                 "ruleNo": 5}]}, "egress rule 5 allows ::/0"),
    (NACL_RULE, {"cidrBlock": "anywhere", "ruleAction": "allow", "ruleNumber": 9}, "ingress rule 9: 'anywhere' is not"),
])
def test_no_network_acl_entry_in_any_form_allows_the_world(mesh, type_, props, says):
    """Attack (issue 31): a NACL open to 0.0.0.0/0 passed the pack, which read security groups only."""
    planned = with_kind(mesh, SG_INGRESS)
    like = next(r for r in planned.of_kind(SG_INGRESS))
    [(rule, reason)] = the_pack(planned, extra(planned, like, type_, "acl", props))
    assert rule == "no-world-open-nacl" and says in reason


def test_a_network_acl_may_deny_the_world_and_allow_its_own_ranges(mesh):
    planned = with_kind(mesh, SG_INGRESS)
    like = next(r for r in planned.of_kind(SG_INGRESS))
    closed = {"ingress": [{"cidrBlock": "0.0.0.0/0", "action": "deny", "ruleNo": 32766},
                          {"cidrBlock": "10.0.0.0/16", "action": "allow", "ruleNo": 100}],
              "egress": [{"ipv6CidrBlock": "::/0", "action": "DENY", "ruleNo": 1}]}
    assert the_pack(planned, extra(planned, like, "aws:ec2/networkAcl:NetworkAcl", "acl", closed)) == []
    broad = extra(planned, like, NACL_RULE, "acl", {"cidrBlock": "10.0.0.0/4", "ruleAction": "allow", "ruleNumber": 3})
    assert planned.check("no-world-open-nacl", broad) == []
    [violation] = planned.check("no-world-open-nacl", broad, minPrefixLength=8)
    assert violation.reason == "ingress rule 3 allows 10.0.0.0/4, broader than /8 (minPrefixLength)"


# --- security-group rules --------------------------------------------------------------

def rule_like(planned: Planned, type_: str, **props: Any) -> list[Resource]:
    """A rule of another AWS form, where the program puts its mesh rules."""
    template = next(r for r in planned.of_kind(SG_INGRESS) if API_SIDE not in r.urn)
    extra = Resource(template.urn.replace(SG_INGRESS, type_) + "-extra", type_, template.name + "-extra", props,
                     template.provider)
    return [*planned.resources, extra]


@pytest.mark.parametrize("type_, props, says", [
    (SG_INGRESS, {"cidrIpv4": "0.0.0.0/0", "ipProtocol": "-1"}, "ingress 0.0.0.0/0 admits everyone"),
    (SG_EGRESS, {"cidrIpv6": "::/0", "ipProtocol": "-1"}, "egress ::/0 admits everyone"),
    (SG_RULE, {"type": "ingress", "cidrBlocks": ["10.0.0.0/16", "0.0.0.0/0"], "protocol": "tcp"}, "0.0.0.0/0 admits everyone"),
    ("aws:ec2/securityGroup:SecurityGroup", {"egress": [{"ipv6CidrBlocks": ["::/0"], "protocol": "-1"}]}, "egress ::/0"),
    ("aws:ec2/defaultSecurityGroup:DefaultSecurityGroup", {"ingress": [{"cidrBlocks": ["0.0.0.0/0"]}]}, "ingress 0.0.0.0/0"),
    (SG_INGRESS, {"cidrIpv4": "everyone", "ipProtocol": "-1"}, "'everyone' is not a CIDR"),
])
def test_no_security_group_rule_in_any_form_admits_the_world(mesh, type_, props, says):
    planned = with_kind(mesh, SG_INGRESS)
    violations = planned.check("no-world-open-rule", rule_like(planned, type_, **props))
    assert [says in v.reason for v in violations] == [True]


def test_the_broadest_prefix_is_configurable(mesh):
    planned = with_kind(mesh, SG_INGRESS)
    resources = rule_like(planned, SG_INGRESS, cidrIpv4="10.0.0.0/4", ipProtocol="-1")
    assert planned.check("no-world-open-rule", resources) == []
    [violation] = planned.check("no-world-open-rule", resources, minPrefixLength=8)
    assert violation.reason == "ingress 10.0.0.0/4 is broader than /8 (minPrefixLength)"


def test_a_mesh_rule_admits_member_cidrs_only(mesh):
    planned = with_kind(mesh, SG_INGRESS)
    is_mesh = (lambda r: r.kind == SG_INGRESS and API_SIDE not in r.urn)
    [violation] = planned.check("mesh-ingress-from-members", planned.changed(is_mesh, cidrIpv4="192.168.0.0/16"))
    assert "ingress from 192.168.0.0/16, which is not a CIDR of mesh group" in violation.reason
    [violation] = planned.check("mesh-ingress-from-members",
                                planned.changed(is_mesh, cidrIpv4=None, referencedSecurityGroupId="sg-0other"))
    assert violation.reason == "ingress from security group sg-0other: a mesh rule admits member CIDRs only"
    members = [m.cidr for m in planned.context.members]
    inside = str(next(ipaddress.ip_network(members[0]).subnets(new_prefix=24)))
    assert planned.check("mesh-ingress-from-members", planned.changed(is_mesh, cidrIpv4=inside)) == []


def test_the_api_port_is_open_to_the_hub_vpcs_only(link):
    planned = with_kind(link, SG_INGRESS, lambda r: API_SIDE in r.urn)
    is_api = (lambda r: r.kind == SG_INGRESS and API_SIDE in r.urn)
    port = planned.context.api_port
    [violation] = planned.check("api-port-from-hub-vpcs", planned.changed(is_api, fromPort=22, toPort=22))
    assert violation.reason == f"ingress tcp 22-22: the API endpoint admits tcp {port} only"
    [violation] = planned.check("api-port-from-hub-vpcs", planned.changed(is_api, cidrIpv4="10.1.0.0/16"))
    assert violation.reason.startswith("ingress from 10.1.0.0/16, which is neither the endpoint VPC's nor an "
                                       "associated VPC's CIDR")
    # the same rule outside the endpoint's group is a mesh rule: a stack in no mesh group may have none
    assert "is in no mesh group" in planned.check("mesh-ingress-from-members", [
        dataclasses.replace(r, urn=r.urn.replace(API_SIDE, "")) if is_api(r) else r for r in planned.resources])[0].reason


# --- routes and peerings -------------------------------------------------------------

def peering_routes(planned: Planned) -> list[Resource]:
    return [r for r in planned.of_kind(ROUTE) if r.props.get("vpcPeeringConnectionId")]


def test_a_route_to_a_peer_targets_the_peering_of_that_pair(mesh):
    planned = next(p for p in mesh.values() if len(p.of_kind(PEERING)) >= 2)
    first, second = planned.of_kind(PEERING)[:2]
    route = next(r for r in peering_routes(planned) if r.props["vpcPeeringConnectionId"] == first.props["id"])
    [violation] = planned.check("mesh-routes-target-their-pair",
                                planned.changed(lambda r: r is route, vpcPeeringConnectionId=second.props["id"]))
    assert violation.urn == route.urn
    assert f"targets peering {second.props['id']}, not the one between their VPCs" in violation.reason
    [violation] = planned.check("mesh-routes-target-their-pair", planned.changed(
        lambda r: r is route, vpcPeeringConnectionId=None, gatewayId="igw-0123"))
    assert "targets gatewayId, not its peering or gateway" in violation.reason
    [violation] = planned.check("mesh-routes-target-their-pair", planned.changed(
        lambda r: r is route, routeTableId="rtb-0stranger"))
    assert "route table rtb-0stranger is not a route table of a peer" in violation.reason


def test_a_route_to_a_peer_over_a_gateway_targets_the_gateway_of_its_region(transit):
    planned = next(p for p in transit.values() if any(r.props.get("transitGatewayId") for r in p.of_kind(ROUTE)))
    route = next(r for r in planned.of_kind(ROUTE) if r.props.get("transitGatewayId"))
    [violation] = planned.check("mesh-routes-target-their-pair",
                                planned.changed(lambda r: r is route, transitGatewayId="tgw-0elsewhere"))
    assert "tgw-0elsewhere" in violation.reason and violation.urn == route.urn


def test_every_peering_has_routes_on_both_sides(mesh):
    planned = next(p for p in mesh.values() if p.of_kind(PEERING))
    pcx = planned.of_kind(PEERING)[0]
    dropped = next(r for r in peering_routes(planned) if r.props["vpcPeeringConnectionId"] == pcx.props["id"])
    resources = [r for r in planned.resources if r is not dropped]
    [violation] = planned.check("peerings-routed-both-sides", resources)
    assert violation.urn == pcx.urn
    assert f"route tables {dropped.props['routeTableId']} have no route to" in violation.reason


def test_a_peering_joins_its_own_members_vpc_and_a_peers_and_no_two_members_name_one_vpc(mesh):
    """issue #45: a peering into a VPC the stack's inputs do not give a peer (a refused spy's, the victim's) is
    refused, and so is one VPC named by two members, in one stack and across the plan."""
    planned = next(p for p in mesh.values() if p.of_kind(PEERING))
    assert planned.check("peerings-join-their-pair") == []
    pcx = planned.of_kind(PEERING)[0]
    [violation] = planned.check("peerings-join-their-pair",
                                planned.changed(lambda r: r is pcx, peerVpcId="vpc-0victim"))
    assert violation.urn == pcx.urn and "joins" in violation.reason and "vpc-0victim" in violation.reason
    own, peer = planned.context.members[:2]
    spying = dataclasses.replace(planned.context, members=(own, dataclasses.replace(peer, vpc_id=own.vpc_id),
                                                            *planned.context.members[2:]))
    reasons = [v.reason for v in check_stack(spying, planned.resources) if v.rule == "peerings-join-their-pair"]
    assert f"VPC {own.vpc_id} is named by 2 members" in reasons[0]
    one = Context("x.a", group="acme/g", members=(Member("x/a", "vpc-0same", "10.0.0.0/16", (), None),))
    two = Context("y.b", group="globex/h", members=(Member("y/b", "vpc-0same", "10.9.0.0/16", (), None),))
    assert check_stack(one, []) == [] and check_stack(two, []) == []
    [violation] = check_fleet([one, two])
    assert violation.reason == "VPC vpc-0same is named by 2 members (x/a, y/b): a VPC is one cluster's"


def test_member_cidrs_never_overlap_in_one_stack_or_across_the_plan(mesh):
    planned = next(p for p in mesh.values() if len(p.context.members) >= 2)
    a, b = planned.context.members[:2]
    overlapping = dataclasses.replace(planned.context, members=(a, dataclasses.replace(b, cidr=a.cidr)))
    [violation] = [v for v in check_stack(overlapping, planned.resources) if v.rule == "member-cidrs-disjoint"]
    assert (violation.rule, violation.urn) == ("member-cidrs-disjoint", None)
    first, second = sorted([a.key, b.key])
    assert f"{first} ({a.cidr}) and {second} ({a.cidr}) overlap" in violation.reason
    # across stacks: each stack alone is fine, the plan is not
    one = Context("x.a", group="acme/g", members=(Member("x/a", "vpc-a", "10.0.0.0/16", (), None),))
    two = Context("x.b", group="acme/g", members=(Member("x/b", "vpc-b", "10.0.128.0/17", (), None),))
    other_group = dataclasses.replace(two, group="acme/h")
    assert check_stack(one, []) == [] and check_stack(two, []) == []
    [violation] = check_fleet([one, two])
    assert violation.reason == "mesh group acme/g: x/a (10.0.0.0/16) and x/b (10.0.128.0/17) overlap"
    assert check_fleet([one, other_group]) == []


# --- providers ------------------------------------------------------------------------

def test_every_resource_is_made_in_an_account_its_inputs_allow(link):
    planned = with_kind(link, ENDPOINT)
    provider = next(r for r in planned.resources if r.type == "pulumi:providers:aws")
    moved = dataclasses.replace(provider, props={**provider.props, "allowedAccountIds": '["999999999999"]'})
    resources = [dataclasses.replace(r, provider=moved) if r.provider and r.provider.urn == provider.urn else
                 moved if r is provider else r for r in planned.resources]
    violations = planned.check("providers-in-allowed-accounts", resources)
    assert any("is for account 999999999999, which stack" in v.reason for v in violations)
    assert all("999999999999" in v.reason or "outside the account it pins" in v.reason for v in violations)
    own = next(a for a, why in planned.context.accounts.items() if "own" in why)
    assert f"its inputs allow {own} (the cluster's own account), 111111111111 (the hub account)" in violations[0].reason
    assert {v.urn for v in violations} >= {provider.urn}
    defaulted = [dataclasses.replace(r, provider=None) if r.kind == ENDPOINT else r for r in planned.resources]
    [violation] = planned.check("providers-in-allowed-accounts", defaulted)
    assert violation.reason.startswith("made by the default aws provider")
    roles = '[{"roleArn": "arn:aws:iam::999999999999:role/hubwright"}]'
    [violation] = planned.check("providers-in-allowed-accounts", planned.changed(lambda r: r is provider,
                                                                                 assumeRoles=roles))
    assert "assumes arn:aws:iam::999999999999:role/hubwright, outside the account it pins" in violation.reason


def test_a_transit_stack_may_use_its_network_and_member_accounts(transit):
    stack = next(k for k in transit if k.startswith("_tgw_"))
    planned = transit[stack]
    assert planned.check("providers-in-allowed-accounts") == []
    assert set(planned.context.accounts) >= {stack.removeprefix("_tgw_")}


# --- a transit stack's RAM share and Transit Gateway routes ------------------------------------

def transit_stack(transit: dict[str, Planned]) -> Planned:
    return transit[next(k for k in transit if k.startswith("_tgw_"))]


@pytest.mark.parametrize("principal", ["999999999999", "arn:aws:organizations::999999999999:organization/o-x",
                                       "444444444444"])
def test_a_ram_share_names_only_the_transit_stacks_member_accounts(transit, principal):
    """Attack (issue 31): a RAM share to a stranger account passed the pack. The network account (444...) is not a
    principal either: it owns the share."""
    planned = transit_stack(transit)
    members = planned.context.share_principals
    assert members == ("222222222222", "333333333333")
    assert sorted({r.props["principal"] for r in planned.of_kind(RAM_PRINCIPAL)}) == list(members)
    association = planned.of_kind(RAM_PRINCIPAL)[0]
    [(rule, reason)] = the_pack(planned, planned.changed(lambda r: r is association, principal=principal))
    assert rule == "ram-principals-member-accounts"
    assert reason == (f"the share names principal {principal!r}, which is not a member account of stack "
                      f"{planned.context.stack} (it may name 222222222222, 333333333333)")


def test_a_cluster_stack_shares_nothing(link):
    planned = with_kind(link, ENDPOINT)
    service = planned.of_kind(ENDPOINT)[0]
    [(rule, reason)] = the_pack(planned, extra(planned, service, RAM_PRINCIPAL, "share", {
        "principal": planned.context.hub_account, "resourceShareArn": "arn:aws:ram:us-east-1:1:resource-share/x"}))
    assert rule == "ram-principals-member-accounts"
    assert reason.endswith("(it may name none: it is not a transit stack with members in other accounts)")


def tgw_routes(planned: Planned) -> tuple[list[Resource], list[Resource]]:
    """The transit stack's routes to member attachments, and to peering attachments."""
    peerings = {r.props["id"] for r in planned.resources if r.kind in TGW_PEERING}
    routes = planned.of_kind(TGW_ROUTE)
    return ([r for r in routes if r.props["transitGatewayAttachmentId"] not in peerings],
            [r for r in routes if r.props["transitGatewayAttachmentId"] in peerings])


def test_a_tgw_route_goes_to_its_members_declared_cidr_through_its_attachment(transit):
    """Attack (issue 31): a Transit Gateway route to 0.0.0.0/0 passed the pack."""
    planned = transit_stack(transit)
    members, peered = tgw_routes(planned)
    assert members and peered
    route, other = members[0], next(r for r in members if r.props["transitGatewayAttachmentId"] !=
                                    members[0].props["transitGatewayAttachmentId"])
    attachment = route.props["transitGatewayAttachmentId"]
    cluster, (cidr,) = planned.context.tgw_groups["core"].attachments[attachment]
    [(rule, reason)] = the_pack(planned, planned.changed(lambda r: r is route, destinationCidrBlock="0.0.0.0/0"))
    assert rule == "tgw-routes-in-their-group"
    assert reason == (f"the route to 0.0.0.0/0 targets {cluster}'s attachment {attachment}, whose declared CIDR is "
                      f"{cidr}: a member's attachment is routed only its own CIDR")
    # another member's CIDR through this member's attachment: the hijack a propagation allowed
    [violation] = planned.check("tgw-routes-in-their-group", planned.changed(
        lambda r: r is route, destinationCidrBlock=other.props["destinationCidrBlock"]))
    assert f"the route to {other.props['destinationCidrBlock']} targets {cluster}'s attachment" in violation.reason
    # inside its own CIDR is fine (it is still the member's own range)
    inside = str(next(ipaddress.ip_network(cidr).subnets(new_prefix=24)))
    assert planned.check("tgw-routes-in-their-group", planned.changed(lambda r: r is route,
                                                                      destinationCidrBlock=inside)) == []


def test_a_tgw_route_targets_an_attachment_of_its_group_in_a_table_of_its_group(transit):
    planned = transit_stack(transit)
    members, peered = tgw_routes(planned)
    route = members[0]
    [violation] = planned.check("tgw-routes-in-their-group", planned.changed(
        lambda r: r is route, transitGatewayAttachmentId="tgw-attach-0stranger"))
    assert violation.urn == route.urn
    assert violation.reason.endswith("targets attachment tgw-attach-0stranger, which is neither a member's attachment "
                                     "of that group nor its peering attachment")
    [violation] = planned.check("tgw-routes-in-their-group", planned.changed(
        lambda r: r is route, transitGatewayRouteTableId="tgw-rtb-0other"))
    assert violation.reason == ("route table tgw-rtb-0other is not the route table of a mesh group of stack "
                                f"{planned.context.stack}")
    [violation] = planned.check("tgw-routes-in-their-group", planned.changed(
        lambda r: r is route, transitGatewayAttachmentId=None, blackhole=True))
    assert "has no attachment" in violation.reason
    # a peering attachment carries the group's CIDRs in other regions, nothing else: not a summary, not a CIDR of
    # a member in the table's own region (which would send its traffic away and back)
    peer = peered[0]
    region = peer.provider.props["region"]
    local = next(cidr for a, (_, cidr) in planned.context.tgw_groups["core"].attachments.items()
                 if a in {r.props["transitGatewayAttachmentId"] for r in members if r.provider.props["region"] == region})
    for dest in ("10.64.0.0/12", local):
        [violation] = planned.check("tgw-routes-in-their-group", planned.changed(
            lambda r: r is peer, destinationCidrBlock=dest))
        assert f"the route to {dest} targets mesh group core's peering attachment" in violation.reason
        assert f"but is inside no CIDR of its members outside {region}" in violation.reason


def test_a_route_in_one_groups_table_never_reaches_another_groups_member_on_the_same_gateway():
    """Two groups sharing a network account's gateway have a table each: a route in core's table through an edge
    member's attachment, to that member's own CIDR, would join the groups, and is refused."""
    clusters = [tgw_member(0), tgw_member(1), elsewhere(tgw_member(4, group="edge", cidr="10.4.0.0/16"), "us-east-1"),
                elsewhere(tgw_member(5, group="edge", cidr="10.5.0.0/16"), "us-east-1")]
    resolved, plans = plans_of(hub(mesh={"groups": {"core": {"topology": "transitGateway"},
                                                    "edge": {"topology": "transitGateway"}}}), clusters)
    planned = Planned(Context.of(resolved.mesh.transit[TRANSIT]), resources_of(plans[TRANSIT]))
    assert check_stack(planned.context, planned.resources) == []
    core, edge = (planned.context.tgw_groups[g] for g in ("core", "edge"))
    edge_attachment, (_, edge_cidr) = next(iter(edge.attachments.items()))
    route = next(r for r in planned.of_kind(TGW_ROUTE) if r.props["transitGatewayAttachmentId"] in core.attachments)
    [violation] = planned.check("tgw-routes-in-their-group", planned.changed(
        lambda r: r is route, transitGatewayAttachmentId=edge_attachment, destinationCidrBlock=edge_cidr))
    assert violation.reason == (f"the route to {edge_cidr} in mesh group core's table targets attachment "
                                f"{edge_attachment}, which is neither a member's attachment of that group nor its "
                                f"peering attachment")


# --- settings and the plan command ------------------------------------------------------

def test_levels_and_config_follow_pulumis_pack_config_format():
    chosen = settings({"all": "advisory", "no-world-open-rule": {"enforcementLevel": "mandatory",
                                                                 "minPrefixLength": 8}})
    assert chosen["no-world-open-rule"].level == "mandatory" and chosen["no-world-open-rule"].config == {"minPrefixLength": 8}
    assert chosen["member-cidrs-disjoint"].level == "advisory"
    assert {s.level for s in settings({}, "off").values()} == {"disabled"}
    assert {s.level for s in settings({}, "advisory").values()} == {"advisory"}
    with pytest.raises(ValueError, match="no rule named no-such-rule"):
        settings({"no-such-rule": "mandatory"})
    with pytest.raises(ValueError, match="'sometimes' is not one of"):
        settings({"all": "sometimes"})
    assert PolicySettings("advisory").engine_config()["no-world-open-rule"] == {"enforcementLevel": "advisory",
                                                                                 "minPrefixLength": 1}


def test_every_rule_is_named_described_and_runs_at_preview_or_says_why_not():
    assert len({r.name for r in RULES}) == len(RULES) == 12
    for rule in RULES:
        assert rule.description and rule.scope in ("resource", "stack")
        assert rule.preview == "runs at preview" or "at up" in rule.preview


@pytest.fixture
def foreign_principal_hub(tmp_path) -> Path:
    """The bundled hub, its administrator having typed another account's role as the endpoint's principal."""
    text = (EXAMPLES / "hub.yaml").read_text()
    path = tmp_path / "hub.yaml"
    path.write_text(text.replace('allowedPrincipal: "arn:aws:iam::111111111111:role/hubwright-hub"',
                                 'allowedPrincipal: "arn:aws:iam::999999999999:role/hubwright-hub"'))
    assert path.read_text() != text
    return path


def test_the_plan_fails_naming_the_rule_the_urn_and_the_reason(foreign_principal_hub, capsys):
    args = ["plan", "--hub", str(foreign_principal_hub), "--clusters", str(EXAMPLES / "clusters"), "--format", "json",
            "--jobs", "1"]
    assert main(args) == 3
    out, err = capsys.readouterr()
    assert json.loads(out)["stacks"]  # the whole plan is still written
    lines = [line for line in err.splitlines() if line.startswith("policy: ")]
    assert lines and all(line.startswith("policy: [mandatory] endpoint-service-one-hub-principal: urn:pulumi:")
                         for line in lines)
    assert "::hubwright::" in lines[0] and "is not in the hub account 111111111111" in lines[0]
    assert "error: the plan breaks 1 mandatory policy rule(s): endpoint-service-one-hub-principal" in err

    assert main([*args, "--policy", "advisory"]) == 0
    _, err = capsys.readouterr()
    assert "policy: [advisory] endpoint-service-one-hub-principal" in err and "error:" not in err
    assert main([*args, "--policy", "off"]) == 0
    assert "policy:" not in capsys.readouterr().err


def test_a_bad_policy_config_is_refused_before_anything_is_planned(tmp_path, capsys):
    config = tmp_path / "policy.json"
    config.write_text(json.dumps({"no-such-rule": "advisory"}))
    code = main(["plan", "--hub", str(EXAMPLES / "hub.yaml"), "--clusters", str(EXAMPLES / "clusters"),
                 "--policy-config", str(config)])
    assert code == 2
    assert "no rule named no-such-rule" in capsys.readouterr().err



def test_the_security_doc_lists_exactly_the_packs_rules():
    text = (Path(__file__).resolve().parent.parent / "docs" / "security.md").read_text()
    section = text.split("## Guarantees the policy pack checks", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:3] for line in section.splitlines() if line.startswith("| `")]
    assert [(name.strip().strip("`"), scope.strip()) for name, scope in rows] == [(r.name, r.scope) for r in RULES]


def test_a_rule_that_needs_a_value_unknown_at_preview_says_so_and_the_others_run(mesh, transit):
    """In the pack, props are pulumi_policy's proxy: reading a value the engine does not know yet raises, and the
    pack reports the rule as not run at preview (it runs at up). The route rules need the peerings' and the route
    tables' IDs; the resource rules read only what a preview knows."""
    unknown = ("id", "vpcPeeringConnectionId", "transitGatewayRouteTableId")
    raised: dict[str, int] = {rule.name: 0 for rule in RULES}
    for planned in (next(p for p in mesh.values() if p.of_kind(PEERING)), transit_stack(transit)):
        previewed = [dataclasses.replace(r, props=unknown_checking_proxy(
            {**r.props, **{k: UNKNOWN_STRING_VALUE for k in unknown if k in r.props}})) for r in planned.resources]
        for rule in RULES:
            if rule.scope == "stack":
                try:
                    assert list(rule.check(planned.context, previewed, rule.defaults())) == []
                except UnknownValueError:
                    raised[rule.name] += 1
            else:
                assert [reason for r in previewed for reason in rule.check(planned.context, r, rule.defaults())] == []
    # each rule that says it runs at up cannot run on the stack it is about; the others run on every stack
    assert {name for name, n in raised.items() if n} == {r.name for r in RULES if r.preview != "runs at preview"}
