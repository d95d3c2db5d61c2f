"""Routes and peerings (stack scope: a route names its peering by ID): routes into the mesh target their pair,
every peering is routed on both sides, member CIDRs are disjoint (overlaps, which the fleet check uses too)."""
from __future__ import annotations

from typing import Iterator, Mapping, Sequence

from policy.rules.cidrs import network
from policy.rules.kinds import PEERING, ROUTE, ROUTE_TARGETS
from policy.rules.view import Config, Context, Member, Resource

def _members(ctx: Context) -> tuple[dict[str, Member], dict[str, Member]]:
    return {c: m for m in ctx.members for c in m.cidrs}, {t: m for m in ctx.members for t in m.route_tables}


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
        if not any((n := network(c)) is not None and (d := network(dest)) is not None and n.overlaps(d)
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
            for cidr in other.cidrs:
                missing = [t for t in side.route_tables if (t, cidr, pid) not in routes]
                if missing:
                    yield pcx.urn, (f"{side.key}'s route tables {', '.join(missing)} have no route to {other.key} "
                                    f"({cidr}) through this peering")


def peerings_join_their_pair(ctx: Context, resources: Sequence[Resource],
                             _config: Config) -> Iterator[tuple[str | None, str]]:
    """A peering joins the stack's own member's VPC and a peer's, as the stack's inputs give them; no two members
    of the stack name one VPC (over the whole fleet: check.check_fleet)."""
    yield from ((None, reason) for reason in shared_vpcs({m.key: m.vpc_id for m in ctx.members}))
    if not ctx.members:
        return
    own, peers = ctx.members[0].vpc_id, {m.vpc_id for m in ctx.members[1:]}
    for pcx in (r for r in resources if r.kind == PEERING):
        vpc, peer = str(pcx.props.get("vpcId")), str(pcx.props.get("peerVpcId"))
        if {vpc, peer} & {own} != {own} or not ({vpc, peer} - {own}) <= peers or vpc == peer:
            yield pcx.urn, (f"the peering joins {vpc} and {peer}: not {ctx.members[0].key}'s VPC {own} and a peer's "
                            f"VPC from the stack's inputs ({', '.join(sorted(peers)) or 'none'})")


def shared_vpcs(vpcs: Mapping[str, str]) -> Iterator[str]:
    """Each VPC that two members (member key -> its VPC) name."""
    by_vpc: dict[str, list[str]] = {}
    for key, vpc in vpcs.items():
        by_vpc.setdefault(vpc, []).append(key)
    for vpc, keys in sorted(by_vpc.items()):
        if len(keys) > 1:
            yield f"VPC {vpc} is named by {len(keys)} members ({', '.join(sorted(keys))}): a VPC is one cluster's"


def cidrs_disjoint(ctx: Context, _resources: Sequence[Resource], _config: Config) -> Iterator[tuple[str | None, str]]:
    for reason in overlaps({m.key: m.cidrs for m in ctx.members}, ctx.group):
        yield None, reason


def overlaps(cidrs: Mapping[str, tuple[str, ...]], group: str | None) -> Iterator[str]:
    """Each pair of blocks of two members (member key -> its CIDR blocks) that overlap."""
    keys = sorted(cidrs)
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            for ca in cidrs[a]:
                for cb in cidrs[b]:
                    na, nb = network(ca), network(cb)
                    if na is None or nb is None or (na.version == nb.version and na.overlaps(nb)):
                        yield f"mesh group {group}: {a} ({ca}) and {b} ({cb}) overlap"
