"""The routes a mesh stack writes (stacks.mesh), and the routes already in its tables they must not beat. Pure."""
from __future__ import annotations

import ipaddress
from typing import Iterable, Mapping, Sequence

from stacks.mesh.share import MeshShare
from stacks.model.hub import Topology
from stacks.targets import Frozen


# --- the routes a stack writes, and the routes they must not beat -------------------------------

class PlannedRoute(Frozen):
    """A pair route this stack writes: in `table` of `member`'s VPC, to `cidr` (a CIDR block of the other member),
    pointing where the group's phase routes pairs (`via`)."""

    member: str  # the cluster key whose route table it is
    table: str
    cidr: str
    pair: str
    to: str  # the cluster key the route leads to
    via: Topology  # its target: the pair's VPC peering, or the Transit Gateway of `member`'s region
    gateway: str | None = None  # via a Transit Gateway: `member`'s gateway; None until the transit stack made it


def summaries_carry_pairs(routes_via: Topology, summary_cidrs: Sequence[str]) -> bool:
    """Whether the group's summary routes carry its pairs, so that no pair route exists: its routes go via a
    Transit Gateway and it declares summaryCIDRs (each member's own routes to them, components.transit.TransitLink,
    reach every peer)."""
    return routes_via == "transitGateway" and bool(summary_cidrs)


def every_pair_route(share: MeshShare) -> tuple[PlannedRoute, ...]:
    """Every pair route the share's phase gives its pairs, built now or once its target exists: in both members'
    tables, one per table and block of the other member, via the pair's peering or via the gateway of the table's
    region (`share.routes_via`); none when summary routes carry the pairs (summaries_carry_pairs, read from this
    member's attachment: until the transit stack has made the member's gateway it has none, and the routes are
    listed). A route keeps its table and CIDR whichever its target, so these are the (table, CIDR) of every route
    the pair ever has outside summary phases.

    A superset of pair_routes: the route-hijack preflight (hijacking_routes) checks these, the safe side. The
    routes-per-table quota (stacks.mesh.checks.mesh_routes) counts these, across the group's shares, by the same
    rule (summaries_carry_pairs) applied to the group's summaryCIDRs, whether or not the member is attached yet."""
    summary = share.attachment.summary_cidrs if share.attachment is not None else ()
    if summaries_carry_pairs(share.routes_via, summary):
        return ()
    owner = share.member
    out = []
    for pair in share.pairs:
        for member, other in ((owner, pair.peer), (pair.peer, owner)):
            gateway = member.transit_gateway_id if share.routes_via == "transitGateway" else None
            out += [PlannedRoute(member=member.key, table=table, cidr=cidr, pair=pair.name, to=other.key,
                                 via=share.routes_via, gateway=gateway)
                    for table in member.route_table_ids for cidr in other.cidrs]
    return tuple(out)


def pair_routes(share: MeshShare) -> tuple[PlannedRoute, ...]:
    """The pair routes the stack's program builds now (components.mesh.MeshPeering makes one aws:ec2/route each,
    in this order): every_pair_route's whose target exists in this phase. Left out: via a peering when the phase
    has none (share.peerings false), and via a gateway the transit stack has not made yet (`gateway` None),
    until the run after it has."""
    if share.routes_via == "peering":
        return every_pair_route(share) if share.peerings else ()
    return tuple(route for route in every_pair_route(share) if route.gateway is not None)


class FoundRoute(Frozen):
    """A route already in a route table (DescribeRouteTables). A route to a managed prefix list is one FoundRoute per
    IPv4 entry of the list (GetManagedPrefixListEntries), with `prefix_list` naming the list."""

    cidr: str
    target: str  # "local", "tgw-...", "pcx-...", "vgw-...", "vpce-..." (a gateway endpoint), ...
    prefix_list: str = ""  # the managed prefix list this is an entry of; "" for a route to a CIDR block


class UnreadableList(Frozen):
    """A route to a managed prefix list whose entries could not be read: any pair route in its table might beat one."""

    prefix_list: str
    target: str
    why: str  # AWS's answer


TableRoute = FoundRoute | UnreadableList  # what a route table holds, as the hijack check reads it


def route_hijacks(share: MeshShare, found: Mapping[str, Iterable[TableRoute]]) -> list[str]:
    """Why each hijacking pair route (hijacking_routes) would take another route's traffic."""
    return [why for _, why in hijacking_routes(share, found)]


def hijacking_routes(share: MeshShare, found: Mapping[str, Iterable[TableRoute]]) -> list[tuple[PlannedRoute, str]]:
    """Each pair route (every_pair_route: built now or once its target exists, the safe side) that would take
    traffic from a route already in its table that is not the mesh's: one it is strictly more specific than
    (longest prefix wins), or an entry of a prefix-list route it is as specific as (AWS ranks a CIDR route above a
    prefix-list route of the same length; two CIDR routes of one destination cannot exist, AWS refuses the second).

    Not counted: `local` routes, the default route (0.0.0.0/0: every route beats it, as intended), routes to the
    group's member CIDR blocks and summaries (the mesh's own: it writes CIDR routes only, so an entry of a prefix
    list is never the mesh's), and routes inside the group's memberCIDRs (the range the hub administrator gave the
    members). A prefix list that could not be read (UnreadableList) refuses every pair route in its table: it is
    never skipped. `found`: route table -> its routes.
    """
    limits = share.limits
    own = set(limits.group_cidrs) if limits is not None else set()
    ranges = [ipaddress.IPv4Network(c) for c in (limits.member_cidrs if limits is not None else ())]
    out = []
    for route in every_pair_route(share):
        for there in found.get(route.table, ()):
            why = _loses(route, there, own, ranges)
            if why is not None:
                out.append((route, why))
    return out


def _loses(route: PlannedRoute, there: TableRoute, own: set[str], ranges: list[ipaddress.IPv4Network]) -> str | None:
    """Why `there` would lose traffic to the pair route `route`, or None when it would not."""
    where = f"route table {route.table} of HubCluster {route.member}"
    adds = f"mesh pair {route.pair} would add {route.cidr} (to HubCluster {route.to})"
    if isinstance(there, UnreadableList):
        return (f"{where} routes prefix list {there.prefix_list} -> {there.target}, whose entries could not be read "
                f"({there.why}), and {adds}, which could beat any of them: a list that cannot be read refuses every "
                f"pair route in its table")
    mine, theirs = ipaddress.IPv4Network(route.cidr), ipaddress.IPv4Network(there.cidr)
    listed = bool(there.prefix_list)
    if there.target == "local" or theirs.prefixlen == 0 or (there.cidr in own and not listed) \
            or any(theirs.subnet_of(r) for r in ranges):
        return None
    if not mine.subnet_of(theirs) or (mine.prefixlen == theirs.prefixlen and not listed):
        return None
    has = f"{there.cidr} (an entry of prefix list {there.prefix_list})" if listed else there.cidr
    how = "more specific" if mine.prefixlen > theirs.prefixlen else \
        "as specific, and AWS ranks a CIDR route above a prefix-list route of the same length"
    return (f"{where} has {has} -> {there.target}, and {adds}, which is {how}: {there.cidr} -> {there.target} would "
            f"lose {route.cidr}'s traffic")
