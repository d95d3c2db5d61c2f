"""The policy rules as plain functions: a stack's resources and its inputs in, violations out. No SDK.

The same functions run in three places (docs/security.md, "Guarantees the policy pack checks"):
    python -m automation plan --policy ...   over the mock runtime's recorded resources, and the whole plan
    the service's `up` and `preview`         the engine loads policy/ (policy/__main__.py) as a policy pack
    pulumi preview --policy-pack policy      by hand

    Context.of(inputs)      what the stack's inputs (hubwright:inputs) allow: accounts, the hub account, the API
                            port and hub CIDRs, the mesh members with their VPCs, route tables and gateways
    Resource                one resource as the engine or the plan shows it: URN, type, props, its provider
    RULES                   each Rule: a name, its scope (one resource, one stack) and its check
    check_stack()           every rule over one stack;  check_fleet(): the rules that span stacks

A check reads `props` with `get` and indexing only: in the pack, props are Pulumi's proxy, which raises on a value
the engine does not know yet (a preview), so the rule says it cannot run and runs at `up` instead.
"""
from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Literal, Mapping, Sequence

from stacks.inputs import StackInputs, stack_targets
from stacks.transit import GROUP_TAG, TransitInputs

Level = Literal["mandatory", "advisory", "disabled"]
LEVELS: tuple[Level, ...] = ("mandatory", "advisory", "disabled")

ENDPOINT_SERVICE = "aws:ec2/vpcEndpointService:VpcEndpointService"
ENDPOINT_PRINCIPAL = "aws:ec2/vpcEndpointServiceAllowedPrinciple:VpcEndpointServiceAllowedPrinciple"
NACL_RULE = "aws:ec2/networkAclRule:NetworkAclRule"
NACL_INLINE = ("aws:ec2/networkAcl:NetworkAcl", "aws:ec2/defaultNetworkAcl:DefaultNetworkAcl")
RAM_PRINCIPAL = "aws:ram/principalAssociation:PrincipalAssociation"
TGW_ROUTE = "aws:ec2transitgateway/route:Route"
TGW_TABLE = "aws:ec2transitgateway/routeTable:RouteTable"
TGW_PEERING = ("aws:ec2transitgateway/peeringAttachment:PeeringAttachment",
               "aws:ec2transitgateway/peeringAttachmentAccepter:PeeringAttachmentAccepter")
ROUTE = "aws:ec2/route:Route"
PEERING = "aws:ec2/vpcPeeringConnection:VpcPeeringConnection"
AWS_PROVIDER = "pulumi:providers:aws"
SG_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
SG_INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
SG_EGRESS = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
SG_INLINE = ("aws:ec2/securityGroup:SecurityGroup", "aws:ec2/defaultSecurityGroup:DefaultSecurityGroup")
API_SIDE = "hubwright:privatelink:HubEndpoint$"  # in a URN: a child of the hub's endpoint (its security group)
ROUTE_TARGETS = ("gatewayId", "natGatewayId", "networkInterfaceId", "vpcEndpointId", "egressOnlyGatewayId",
                 "localGatewayId", "carrierGatewayId", "coreNetworkArn")  # a route's targets other than these two
_DYNAMIC = re.compile(r"pulumi-python:dynamic/(?P<module>\w+):(?P<name>\w+)")
_PRINCIPAL = re.compile(r"arn:aws[a-z-]*:iam::(?P<account>\d{12}):(?:root|role/.+|user/.+)")


def kind_of(type_: str) -> str:
    """The AWS type a resource is checked as. A dynamic resource named after an AWS type (`class X(Resource,
    module="ec2", name="VpcEndpointService")`) is checked as that type: a program that makes AWS calls from a
    dynamic provider stays covered, and the live test imitates a violation without the AWS plugin."""
    m = _DYNAMIC.fullmatch(type_)
    if m is None:
        return type_
    name = m["name"]
    return f"aws:{m['module']}/{name[:1].lower()}{name[1:]}:{name}"


# --- what the rules read -------------------------------------------------------------

@dataclass(frozen=True)
class Provider:
    urn: str
    name: str
    props: Mapping[str, Any]


@dataclass(frozen=True)
class Resource:
    urn: str
    type: str
    name: str
    props: Mapping[str, Any]
    provider: Provider | None = None

    @property
    def kind(self) -> str:
        return kind_of(self.type)


@dataclass(frozen=True)
class Member:
    """A mesh member as this stack's inputs show it."""
    key: str
    vpc_id: str
    cidr: str
    route_tables: tuple[str, ...]
    gateway: str | None  # its region's Transit Gateway, once made


@dataclass(frozen=True)
class TgwGroup:
    """A mesh group in a transit stack: what its route tables may route, and to which attachment."""
    group: str
    attachments: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # member attachment -> (cluster, CIDR)
    remotes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # a table's region -> the group's CIDRs in
    # other regions, which that table routes to the group's peering attachments


@dataclass(frozen=True)
class Context:
    """What a stack's inputs allow."""
    stack: str
    accounts: Mapping[str, str] = field(default_factory=dict)  # account -> what the stack uses it for
    hub_account: str | None = None
    hub_principal: str | None = None  # the endpoint service's one principal (None: the hub's role, looked up)
    api_port: int | None = None
    api_cidrs: tuple[str, ...] = ()  # the endpoint VPC's and the associated VPCs' CIDRs
    lookup_vpcs: tuple[str, ...] = ()  # associated VPCs whose CIDR the program looks up
    group: str | None = None
    members: tuple[Member, ...] = ()  # this cluster first, then the peers of the pairs this stack owns
    routes_via: str = "peering"
    summary_cidrs: tuple[str, ...] = ()
    summary_gateway: str | None = None
    share_principals: tuple[str, ...] = ()  # the accounts a RAM share may name: a transit stack's member accounts
    tgw_groups: Mapping[str, TgwGroup] = field(default_factory=dict)  # group key -> what its tables may route

    @classmethod
    def of(cls, inputs: StackInputs | TransitInputs) -> "Context":
        if isinstance(inputs, TransitInputs):
            return cls(inputs.stack, {t.account_id: "a member or network account of the transit stack"
                                      for t in inputs.targets()},
                       share_principals=tuple(sorted({m.account_id for r in inputs.regions for m in r.members})),
                       tgw_groups=_tgw_groups(inputs))
        targets = stack_targets(inputs)
        accounts = {inputs.cluster.account_id: "the cluster's own account"}
        if targets.endpoint_hub is not None or targets.hub_by_region:
            accounts.setdefault(inputs.hub.account_id, "the hub account")
        for peer, target in targets.peers.items():
            accounts.setdefault(target.account_id, f"the account of mesh peer {peer}")
        link, share = inputs.private_link, inputs.mesh
        context = cls(inputs.stack, accounts, hub_account=inputs.hub.account_id)
        if link is not None:
            context = _replace(context, api_port=link.api_port, hub_principal=link.allowed_principal,
                               api_cidrs=(link.endpoint_vpc.cidr, *(v.cidr for v in link.associated_vpcs if v.cidr)),
                               lookup_vpcs=tuple(v.vpc_id for v in link.associated_vpcs if v.cidr is None))
        if share is not None:
            members = (share.member, *(pair.peer for pair in share.pairs))
            attachment = share.attachment
            context = _replace(
                context, group=share.group, routes_via=share.routes_via,
                members=tuple(Member(m.key, m.vpc_id, m.cidr, m.route_table_ids, m.transit_gateway_id)
                              for m in members),
                summary_cidrs=attachment.summary_cidrs if attachment is not None else (),
                summary_gateway=attachment.transit_gateway_id if attachment is not None else None)
        return context


def _replace(context: Context, **changes: Any) -> Context:
    return Context(**{**context.__dict__, **changes})


def _tgw_groups(inputs: TransitInputs) -> dict[str, TgwGroup]:
    attachments: dict[str, dict[str, tuple[str, str]]] = {}
    remotes: dict[str, dict[str, tuple[str, ...]]] = {}
    for region in inputs.regions:
        for group in region.groups:
            attachments.setdefault(group.group, {}).update(
                {m.attachment_id: (m.cluster, m.cidr) for m in group.attachments})
            remotes.setdefault(group.group, {})[region.region] = tuple(sorted(c for r in group.remotes for c in r.cidrs))
    return {g: TgwGroup(g, attachments[g], remotes[g]) for g in sorted(attachments)}


@dataclass(frozen=True)
class Violation:
    rule: str
    urn: str | None  # None: the stack (or the plan) as a whole
    reason: str
    level: Level = "mandatory"

    def __str__(self) -> str:
        return f"[{self.level}] {self.rule}: {self.urn or 'stack'}: {self.reason}"


Config = Mapping[str, Any]
ResourceCheck = Callable[[Context, Resource, Config], Iterable[str]]
StackCheck = Callable[[Context, Sequence[Resource], Config], Iterable[tuple[str | None, str]]]


@dataclass(frozen=True)
class Rule:
    name: str
    description: str
    scope: Literal["resource", "stack"]
    check: Callable[..., Iterable[Any]]
    preview: str = "runs at preview"  # or why it needs `up` (values the engine does not know at preview)
    config: Mapping[str, Any] = field(default_factory=dict)  # JSON schema properties of its config, with defaults

    def defaults(self) -> dict[str, Any]:
        return {k: v["default"] for k, v in self.config.items() if "default" in v}


# --- endpoint services ----------------------------------------------------------------

def principal_account(principal: str) -> str | None:
    if re.fullmatch(r"\d{12}", principal):
        return principal
    m = _PRINCIPAL.fullmatch(principal)
    return m["account"] if m else None


def endpoint_service_principal(ctx: Context, r: Resource, _config: Config) -> Iterator[str]:
    if r.kind == ENDPOINT_PRINCIPAL:  # beside the service's own list: the hub's principal again, or nothing
        # (the message names no service ID: it is unknown at preview, where this rule runs)
        problem = _principal_problem(ctx, str(r.props.get("principalArn") or ""))
        if problem:
            yield (f"{problem}: a principal allowed on an endpoint service beside its allowedPrincipals must be the "
                   f"hub's")
        return
    if r.kind != ENDPOINT_SERVICE:
        return
    principals = list(r.props.get("allowedPrincipals") or [])
    problems = []
    if len(principals) != 1:
        problems.append(f"allowedPrincipals holds {len(principals)} principals, not exactly one")
    problems += [p for p in (_principal_problem(ctx, str(principal)) for principal in principals) if p]
    if problems and not r.props.get("acceptanceRequired"):
        problems.append("and acceptanceRequired is false, so such a principal connects without approval")
    if problems:
        yield "; ".join(problems)


def _principal_problem(ctx: Context, principal: str) -> str | None:
    if "*" in principal:
        return f"principal {principal!r} is a wildcard"
    if principal_account(principal) != ctx.hub_account:
        return f"principal {principal!r} is not in the hub account {ctx.hub_account}"
    if ctx.hub_principal is not None and principal != ctx.hub_principal:
        return f"principal {principal!r} is not the hub's principal {ctx.hub_principal}"
    return None


# --- security-group rules, every way AWS writes them ----------------------------------

@dataclass(frozen=True)
class SgRule:
    direction: str  # ingress | egress
    cidrs: tuple[str, ...]
    others: tuple[str, ...]  # sources that are not CIDRs: security groups, prefix lists, the group itself
    protocol: str
    from_port: Any
    to_port: Any


def sg_rules(r: Resource) -> list[SgRule]:
    p, kind = r.props, r.kind
    if kind == SG_RULE:
        return [_sg_rule(str(p.get("type")), p, p.get("protocol"),
                         [*(p.get("cidrBlocks") or []), *(p.get("ipv6CidrBlocks") or [])],
                         _others(p.get("sourceSecurityGroupId"), p.get("prefixListIds"), p.get("self")))]
    if kind in (SG_INGRESS, SG_EGRESS):
        return [_sg_rule("ingress" if kind == SG_INGRESS else "egress", p, p.get("ipProtocol"),
                         [c for c in (p.get("cidrIpv4"), p.get("cidrIpv6")) if c],
                         _others(p.get("referencedSecurityGroupId"), [p.get("prefixListId")], False))]
    if kind in SG_INLINE:
        return [_sg_rule(direction, rule, rule.get("protocol"),
                         [*(rule.get("cidrBlocks") or []), *(rule.get("ipv6CidrBlocks") or [])],
                         _others(rule.get("securityGroups"), rule.get("prefixListIds"), rule.get("self")))
                for direction in ("ingress", "egress") for rule in p.get(direction) or []]
    return []


def _others(groups: Any, prefix_lists: Any, itself: Any) -> list[str]:
    """The sources of a rule that are not CIDRs."""
    groups = [groups] if isinstance(groups, str) else list(groups or [])
    return [*(f"security group {g}" for g in groups if g), *(f"prefix list {x}" for x in prefix_lists or [] if x),
            *(["the group itself"] if itself else [])]


def _sg_rule(direction: str, p: Mapping[str, Any], protocol: Any, cidrs: list, others: list) -> SgRule:
    return SgRule(direction, tuple(str(c) for c in cidrs), tuple(others), str(protocol).lower(),
                  p.get("fromPort"), p.get("toPort"))


def _network(cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return None


def _within(cidr: str, allowed: Iterable[str]) -> bool:
    net = _network(cidr)
    for x in allowed:
        a = _network(x)
        if isinstance(net, ipaddress.IPv4Network) and isinstance(a, ipaddress.IPv4Network) and net.subnet_of(a):
            return True
        if isinstance(net, ipaddress.IPv6Network) and isinstance(a, ipaddress.IPv6Network) and net.subnet_of(a):
            return True
    return False


def no_world_cidr(_ctx: Context, r: Resource, config: Config) -> Iterator[str]:
    shortest = int(config.get("minPrefixLength", 1))
    for rule in sg_rules(r):
        for cidr in rule.cidrs:
            net = _network(cidr)
            if net is None:
                yield f"{rule.direction} {cidr!r} is not a CIDR"
            elif net.prefixlen < shortest:
                yield (f"{rule.direction} {cidr} admits everyone" if net.prefixlen == 0 else
                       f"{rule.direction} {cidr} is broader than /{shortest} (minPrefixLength)")


def nacl_entries(r: Resource) -> list[tuple[str, str, str]]:
    """A network ACL's entries that allow traffic, every way AWS writes them: (direction, CIDR, rule number)."""
    p, kind = r.props, r.kind
    if kind == NACL_RULE:
        entries = [("egress" if p.get("egress") else "ingress", p.get("ruleAction"), p.get("ruleNumber"), p)]
    elif kind in NACL_INLINE:
        entries = [(direction, e.get("action"), e.get("ruleNo"), e)
                   for direction in ("ingress", "egress") for e in p.get(direction) or []]
    else:
        return []
    return [(direction, str(cidr), str(number)) for direction, action, number, e in entries
            if str(action).lower() != "deny" for cidr in (e.get("cidrBlock"), e.get("ipv6CidrBlock")) if cidr]


def no_world_nacl(_ctx: Context, r: Resource, config: Config) -> Iterator[str]:
    shortest = int(config.get("minPrefixLength", 1))
    for direction, cidr, number in nacl_entries(r):
        net = _network(cidr)
        if net is None:
            yield f"{direction} rule {number}: {cidr!r} is not a CIDR"
        elif net.prefixlen < shortest:
            yield (f"{direction} rule {number} allows {cidr}: everyone" if net.prefixlen == 0 else
                   f"{direction} rule {number} allows {cidr}, broader than /{shortest} (minPrefixLength)")


def mesh_ingress_from_members(ctx: Context, r: Resource, _config: Config) -> Iterator[str]:
    if API_SIDE in r.urn:
        return
    cidrs = [m.cidr for m in ctx.members]
    for rule in sg_rules(r):
        if rule.direction != "ingress":
            continue
        for other in rule.others:
            yield f"ingress from {other}: a mesh rule admits member CIDRs only"
        for cidr in rule.cidrs:
            if not cidrs:
                yield f"ingress from {cidr}: stack {ctx.stack} is in no mesh group, so it has no member CIDRs"
            elif not _within(cidr, cidrs):
                yield f"ingress from {cidr}, which is not a CIDR of mesh group {ctx.group} ({', '.join(cidrs)})"


def api_port_from_hub(ctx: Context, r: Resource, _config: Config) -> Iterator[str]:
    if API_SIDE not in r.urn:
        return
    for rule in sg_rules(r):
        if rule.direction != "ingress":
            continue
        ports = (rule.protocol in ("tcp", "6") and rule.from_port == ctx.api_port == rule.to_port)
        if not ports:
            yield (f"ingress {rule.protocol} {rule.from_port}-{rule.to_port}: the API endpoint admits tcp "
                   f"{ctx.api_port} only")
        for other in rule.others:
            yield f"ingress from {other}: the API endpoint admits hub VPC CIDRs only"
        for cidr in rule.cidrs:
            if _within(cidr, ctx.api_cidrs) or _looked_up(ctx, r, cidr):
                continue
            yield (f"ingress from {cidr}, which is neither the endpoint VPC's nor an associated VPC's CIDR "
                   f"({', '.join(ctx.api_cidrs) or 'none'})")


def _looked_up(ctx: Context, r: Resource, cidr: str) -> bool:
    """An associated VPC whose CIDR the program looks up in the hub account: the pack cannot look it up, so the
    rule must be named for that VPC and its CIDR be a VPC's size (/16 to /28)."""
    net = _network(cidr)
    return (net is not None and net.version == 4 and 16 <= net.prefixlen <= 28
            and any(r.name.endswith(f"-from-{vpc}") for vpc in ctx.lookup_vpcs))


# --- providers --------------------------------------------------------------------

def provider_accounts(ctx: Context, r: Resource, _config: Config) -> Iterator[str]:
    if r.type == AWS_PROVIDER:
        yield from _provider_problems(ctx, r.props, "this provider")
    elif r.type.startswith("aws:"):
        if r.provider is None or r.provider.name.startswith("default"):
            yield "made by the default aws provider: every AWS resource names an explicit, account-pinned provider"
        else:
            yield from _provider_problems(ctx, r.provider.props, f"its provider {r.provider.name}")


def _provider_problems(ctx: Context, props: Mapping[str, Any], what: str) -> Iterator[str]:
    pinned = [str(a) for a in _decoded(props.get("allowedAccountIds"))]
    allowed = ", ".join(f"{a} ({why})" for a, why in ctx.accounts.items()) or "none"
    if len(pinned) != 1:
        yield f"{what} pins {len(pinned)} accounts (allowedAccountIds), not exactly one"
    for account in pinned:
        if account not in ctx.accounts:
            yield f"{what} is for account {account}, which stack {ctx.stack} may not use (its inputs allow {allowed})"
    for role in _decoded(props.get("assumeRoles")):
        arn = str((role or {}).get("roleArn") or "") if isinstance(role, Mapping) else ""
        if arn and principal_account(arn) not in pinned:
            yield f"{what} assumes {arn}, outside the account it pins"


def _decoded(value: Any) -> list:
    """A provider's list input: the engine hands providers non-string inputs JSON-encoded."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return [value]
    return list(value or [])


# --- routes and peerings (stack scope: a route names its peering by ID) ------------------------------

def _members(ctx: Context) -> tuple[dict[str, Member], dict[str, Member]]:
    return {m.cidr: m for m in ctx.members}, {t: m for m in ctx.members for t in m.route_tables}


def _peerings(resources: Sequence[Resource]) -> dict[str, Resource]:
    return {str(r.props.get("id")): r for r in resources if r.kind == PEERING}


def mesh_routes(ctx: Context, resources: Sequence[Resource], _config: Config) -> Iterator[tuple[str | None, str]]:
    by_cidr, by_table = _members(ctx)
    peerings = None
    for r in resources:
        if r.kind != ROUTE:
            continue
        dest = str(r.props.get("destinationCidrBlock") or r.props.get("destinationIpv6CidrBlock") or "")
        if dest in ctx.summary_cidrs:
            if r.props.get("transitGatewayId") != ctx.summary_gateway:
                yield r.urn, (f"the route to summary CIDR {dest} targets {_target(r)}, not the member's gateway "
                              f"{ctx.summary_gateway}")
            continue
        if not any((n := _network(c)) is not None and (d := _network(dest)) is not None and n.overlaps(d)
                   for c in by_cidr):
            continue  # not a route into the mesh
        peer, owner = by_cidr.get(dest), by_table.get(str(r.props.get("routeTableId")))
        if peer is None:
            yield r.urn, f"the route to {dest} covers a member CIDR without being one ({', '.join(by_cidr)})"
            continue
        if owner is None or owner is peer:
            yield r.urn, f"route table {r.props.get('routeTableId')} is not a route table of a peer of {peer.key}"
            continue
        others = [k for k in ROUTE_TARGETS if r.props.get(k)]
        if others:
            yield r.urn, f"the route to {peer.key} ({dest}) targets {others[0]}, not its peering or gateway"
        elif r.props.get("transitGatewayId"):
            if r.props.get("transitGatewayId") != owner.gateway:
                yield r.urn, (f"the route to {peer.key} targets gateway {r.props.get('transitGatewayId')}, not "
                              f"{owner.key}'s gateway ({owner.gateway})")
        elif r.props.get("vpcPeeringConnectionId"):
            peerings = _peerings(resources) if peerings is None else peerings
            pcx = peerings.get(str(r.props.get("vpcPeeringConnectionId")))
            if pcx is None or {pcx.props.get("vpcId"), pcx.props.get("peerVpcId")} != {owner.vpc_id, peer.vpc_id}:
                yield r.urn, (f"the route from {owner.key} to {peer.key} targets peering "
                              f"{r.props.get('vpcPeeringConnectionId')}, not the one between their VPCs")
        else:
            yield r.urn, f"the route to {peer.key} ({dest}) has no target"


def _target(r: Resource) -> str:
    named = [f"{k} {r.props.get(k)}" for k in ("transitGatewayId", "vpcPeeringConnectionId", *ROUTE_TARGETS)
             if r.props.get(k)]
    return named[0] if named else "nothing"


def peerings_routed(ctx: Context, resources: Sequence[Resource], _config: Config) -> Iterator[tuple[str | None, str]]:
    if ctx.routes_via != "peering":
        return  # a migration keeps the peerings while every route already goes through the gateway
    by_vpc = {m.vpc_id: m for m in ctx.members}
    routes = {(str(r.props.get("routeTableId")), str(r.props.get("destinationCidrBlock")),
               str(r.props.get("vpcPeeringConnectionId"))) for r in resources if r.kind == ROUTE}
    for pcx in (r for r in resources if r.kind == PEERING):
        requester, accepter = (by_vpc.get(str(pcx.props.get(k))) for k in ("vpcId", "peerVpcId"))
        if requester is None or accepter is None:
            yield pcx.urn, f"the peering joins {pcx.props.get('vpcId')} and {pcx.props.get('peerVpcId')}: not two members"
            continue
        pid = str(pcx.props.get("id"))
        for side, other in ((requester, accepter), (accepter, requester)):
            missing = [t for t in side.route_tables if (t, other.cidr, pid) not in routes]
            if missing:
                yield pcx.urn, (f"{side.key}'s route tables {', '.join(missing)} have no route to {other.key} "
                                f"({other.cidr}) through this peering")


def cidrs_disjoint(ctx: Context, _resources: Sequence[Resource], _config: Config) -> Iterator[tuple[str | None, str]]:
    for reason in overlaps({m.key: m.cidr for m in ctx.members}, ctx.group):
        yield None, reason


def overlaps(cidrs: Mapping[str, str], group: str | None) -> Iterator[str]:
    keys = sorted(cidrs)
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            na, nb = _network(cidrs[a]), _network(cidrs[b])
            if na is None or nb is None or (na.version == nb.version and na.overlaps(nb)):
                yield f"mesh group {group}: {a} ({cidrs[a]}) and {b} ({cidrs[b]}) overlap"


# --- a transit stack: its RAM share and its gateways' route tables -------------------------

def ram_principals(ctx: Context, r: Resource, _config: Config) -> Iterator[str]:
    if r.kind != RAM_PRINCIPAL:
        return
    principal = str(r.props.get("principal") or "")
    if principal not in ctx.share_principals:
        allowed = ", ".join(ctx.share_principals) or "none: it is not a transit stack with members in other accounts"
        yield (f"the share names principal {principal!r}, which is not a member account of stack {ctx.stack} "
               f"(it may name {allowed})")


def tgw_routes(ctx: Context, resources: Sequence[Resource], _config: Config) -> Iterator[tuple[str | None, str]]:
    routes = [r for r in resources if r.kind == TGW_ROUTE]
    if not routes:
        return
    tables = {str(r.props.get("id")): _group_tag(r) for r in resources if r.kind == TGW_TABLE}
    peerings = {str(r.props.get("id")): _group_tag(r) for r in resources if r.kind in TGW_PEERING}
    for r in routes:
        table, dest = str(r.props.get("transitGatewayRouteTableId")), str(r.props.get("destinationCidrBlock") or "")
        attachment = str(r.props.get("transitGatewayAttachmentId") or "")
        group = ctx.tgw_groups.get(tables.get(table) or "")
        if group is None:
            yield r.urn, f"route table {table} is not the route table of a mesh group of stack {ctx.stack}"
        elif r.props.get("blackhole") or not attachment:
            yield r.urn, f"the route to {dest} in mesh group {group.group}'s table has no attachment"
        elif attachment in group.attachments:
            cluster, cidr = group.attachments[attachment]
            if not _within(dest, [cidr]):
                yield r.urn, (f"the route to {dest} targets {cluster}'s attachment {attachment}, whose declared CIDR "
                              f"is {cidr}: a member's attachment is routed only its own CIDR")
        elif peerings.get(attachment) == group.group:
            region = r.provider.props.get("region") if r.provider is not None else None
            remote = group.remotes.get(str(region), ())
            if not _within(dest, remote):
                yield r.urn, (f"the route to {dest} targets mesh group {group.group}'s peering attachment "
                              f"{attachment}, but is inside no CIDR of its members outside {region} "
                              f"({', '.join(remote) or 'none'})")
        else:
            yield r.urn, (f"the route to {dest} in mesh group {group.group}'s table targets attachment {attachment}, "
                          f"which is neither a member's attachment of that group nor its peering attachment")


def _group_tag(r: Resource) -> str | None:
    tags = r.props.get("tags") or {}
    return tags.get(GROUP_TAG) if isinstance(tags, Mapping) else None


# --- the rules ------------------------------------------------------------------

_AT_UP = "needs the peerings' IDs, which the engine knows once they exist: at preview it says so and runs at up"
_TGW_AT_UP = ("needs the route tables' and peering attachments' IDs, which the engine knows once they exist: at "
              "preview it says so and runs at up")
_MIN_PREFIX = {"minPrefixLength": {"type": "integer", "minimum": 1, "maximum": 128, "default": 1,
                                   "description": "refuse CIDRs with a shorter prefix than this (1: only /0)"}}

RULES: tuple[Rule, ...] = (
    Rule("endpoint-service-one-hub-principal",
         "An endpoint service allows exactly one principal, no wildcard: the hub's (in the hub account); "
         "acceptanceRequired is false only when that holds; a VpcEndpointServiceAllowedPrinciple names the hub's "
         "principal too.", "resource", endpoint_service_principal),
    Rule("no-world-open-rule",
         "No security-group rule (SecurityGroupRule, SecurityGroupIngressRule/EgressRule, a group's inline rules) "
         "has 0.0.0.0/0 or ::/0.", "resource", no_world_cidr, config=_MIN_PREFIX),
    Rule("mesh-ingress-from-members",
         "An ingress rule outside the API endpoint admits only CIDRs of the stack's mesh group.", "resource",
         mesh_ingress_from_members),
    Rule("api-port-from-hub-vpcs",
         "The API endpoint's security group admits only the API port, from the endpoint VPC's and associated VPCs' "
         "CIDRs.", "resource", api_port_from_hub),
    Rule("mesh-routes-target-their-pair",
         "Every route to a peer CIDR targets the peering of that pair or the group's Transit Gateway in the "
         "route table's region.", "stack", mesh_routes, preview=_AT_UP),
    Rule("providers-in-allowed-accounts",
         "Every AWS resource is made by an explicit provider pinned to one account its stack's inputs allow.",
         "resource", provider_accounts),
    Rule("peerings-routed-both-sides",
         "Every peering has routes in every route table of both members (while the group routes over peerings).",
         "stack", peerings_routed, preview=_AT_UP),
    Rule("member-cidrs-disjoint",
         "No two member CIDRs of a mesh group overlap (over one stack's pairs in the pack, over the whole fleet "
         "in the plan).", "stack", cidrs_disjoint),
    Rule("no-world-open-nacl",
         "No network ACL entry (NetworkAclRule, a NetworkAcl's or the default ACL's inline ingress/egress) allows "
         "0.0.0.0/0 or ::/0.", "resource", no_world_nacl, config=_MIN_PREFIX),
    Rule("ram-principals-member-accounts",
         "A RAM share names only the member accounts of its transit stack (no other stack shares anything).",
         "resource", ram_principals),
    Rule("tgw-routes-in-their-group",
         "Every Transit Gateway route is in a mesh group's table, to a member's declared CIDR through that member's "
         "attachment, or to the group's CIDRs in another region through the group's own peering attachment.",
         "stack", tgw_routes, preview=_TGW_AT_UP),
)
BY_NAME = {rule.name: rule for rule in RULES}


# --- enforcement ------------------------------------------------------------------

@dataclass(frozen=True)
class Setting:
    level: Level
    config: Mapping[str, Any]


def settings(pack_config: Mapping[str, Any] | None = None, level: str = "mandatory") -> dict[str, Setting]:
    """Each rule's level and config from a pack config in Pulumi's format (`--policy-pack-config`:
    {"all": "advisory", "<rule>": "disabled" | {"enforcementLevel": ..., "<key>": value}}), under an overall
    `level`: "off" turns every rule off, "advisory" makes none mandatory, "mandatory" keeps each rule's own."""
    pack_config = dict(pack_config or {})
    unknown = sorted(set(pack_config) - set(BY_NAME) - {"all"})
    if unknown:
        raise ValueError(f"policy config: no rule named {', '.join(unknown)} (rules: {', '.join(BY_NAME)})")
    everyone = _level(pack_config.get("all", "mandatory"), "all")
    out = {}
    for rule in RULES:
        raw = pack_config.get(rule.name, {})
        entry = raw if isinstance(raw, Mapping) else {"enforcementLevel": raw}
        own = _level(entry.get("enforcementLevel", everyone), rule.name)
        config = {**rule.defaults(), **{k: v for k, v in entry.items() if k != "enforcementLevel"}}
        if level == "off":
            own = "disabled"
        elif level == "advisory" and own == "mandatory":
            own = "advisory"
        elif level != "mandatory":
            raise ValueError(f"policy level {level!r}: one of off, advisory, mandatory")
        out[rule.name] = Setting(own, config)
    return out


def _level(raw: Any, where: str) -> Level:
    if isinstance(raw, Mapping):
        raw = raw.get("enforcementLevel", "mandatory")
    if raw not in LEVELS:
        raise ValueError(f"policy config {where}: enforcement level {raw!r} is not one of {', '.join(LEVELS)}")
    return raw


# --- running them ------------------------------------------------------------------

def check_stack(ctx: Context, resources: Sequence[Resource],
                chosen: Mapping[str, Setting] | None = None) -> list[Violation]:
    """Every enabled rule over one stack: resource rules on each resource, stack rules once."""
    chosen = chosen or settings()
    found: list[Violation] = []
    for rule in RULES:
        setting = chosen[rule.name]
        if setting.level == "disabled":
            continue
        if rule.scope == "resource":
            found += [Violation(rule.name, r.urn, reason, setting.level)
                      for r in resources for reason in rule.check(ctx, r, setting.config)]
        else:
            found += [Violation(rule.name, urn, reason, setting.level)
                      for urn, reason in rule.check(ctx, resources, setting.config)]
    return found


def check_fleet(contexts: Iterable[Context], chosen: Mapping[str, Setting] | None = None) -> list[Violation]:
    """The rules that span stacks, over every stack of a plan: no two member CIDRs of a group overlap."""
    setting = (chosen or settings())["member-cidrs-disjoint"]
    if setting.level == "disabled":
        return []
    groups: dict[str, dict[str, str]] = {}
    for ctx in contexts:
        if ctx.group is not None:
            groups.setdefault(ctx.group, {}).update({m.key: m.cidr for m in ctx.members})
    return [Violation("member-cidrs-disjoint", None, reason, setting.level)
            for group, cidrs in sorted(groups.items()) for reason in overlaps(cidrs, group)]
