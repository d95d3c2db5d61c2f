"""The routes a mesh stack writes (stacks.mesh), and the routes already in its tables they must not beat. Pure."""
from __future__ import annotations

import ipaddress
from typing import Iterable, Mapping

from stacks.mesh.share import MeshShare
from stacks.targets import Frozen


# --- the routes a stack writes, and the routes they must not beat -------------------------------

class PlannedRoute(Frozen):
    """A pair route this stack writes: in `table` of `member`'s VPC, to `cidr` (a CIDR block of the other member)."""

    member: str  # the cluster key whose route table it is
    table: str
    cidr: str
    pair: str
    to: str  # the cluster key the route leads to


def pair_routes(share: MeshShare) -> tuple[PlannedRoute, ...]:
    """Every pair route of the share, in both members' tables, one per table and block of the other member
    (components.mesh.MeshPeering writes them); none when the group's summary routes carry the pairs."""
    if share.routes_via == "transitGateway" and share.attachment is not None and share.attachment.summary_cidrs:
        return ()
    owner = share.member
    out = []
    for pair in share.pairs:
        for member, other in ((owner, pair.peer), (pair.peer, owner)):
            out += [PlannedRoute(member=member.key, table=table, cidr=cidr, pair=pair.name, to=other.key)
                    for table in member.route_table_ids for cidr in other.cidrs]
    return tuple(out)


class FoundRoute(Frozen):
    """A route already in a route table (DescribeRouteTables)."""

    cidr: str
    target: str  # "local", "tgw-...", "pcx-...", "vgw-...", ...


def route_hijacks(share: MeshShare, found: Mapping[str, Iterable[FoundRoute]]) -> list[str]:
    """Why each hijacking pair route (hijacking_routes) would take another route's traffic."""
    return [why for _, why in hijacking_routes(share, found)]


def hijacking_routes(share: MeshShare, found: Mapping[str, Iterable[FoundRoute]]) -> list[tuple[PlannedRoute, str]]:
    """Each pair route that would be strictly more specific than a route already in its table that is not the
    mesh's: longest prefix wins, so the pair route would take that route's traffic for its range.

    Not counted: `local` routes, the default route (0.0.0.0/0: every route beats it, as intended), routes to the
    group's member CIDR blocks and summaries (the mesh's own), and routes inside the group's memberCIDRs (the range the
    hub administrator gave the members). `found`: route table -> its routes.
    """
    limits = share.limits
    own = set(limits.group_cidrs) if limits is not None else set()
    ranges = [ipaddress.IPv4Network(c) for c in (limits.member_cidrs if limits is not None else ())]
    out = []
    for route in pair_routes(share):
        mine = ipaddress.IPv4Network(route.cidr)
        for there in found.get(route.table, ()):
            theirs = ipaddress.IPv4Network(there.cidr)
            if there.target == "local" or theirs.prefixlen == 0 or there.cidr in own \
                    or any(theirs.subnet_of(r) for r in ranges):
                continue
            if mine.prefixlen > theirs.prefixlen and mine.subnet_of(theirs):
                out.append((route, f"route table {route.table} of HubCluster {route.member} has {there.cidr} -> "
                                   f"{there.target}, and mesh pair {route.pair} would add {route.cidr} (to HubCluster "
                                   f"{route.to}), which is more specific: {there.cidr} -> {there.target} would lose "
                                   f"{route.cidr}'s traffic"))
    return out
