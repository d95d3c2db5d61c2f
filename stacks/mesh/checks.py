"""Why a mesh candidate is refused (stacks.mesh.plan asks, in join order): a CIDR the hub owns or outside the
group's memberCIDRs, its own missing fields, an earlier member's CIDR or VPC, the group's quotas, and the
per-gateway quotas of its network account. Pure."""
from __future__ import annotations

import ipaddress
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from typing import Mapping

from stacks.errors import FieldError, InvalidSpec
from stacks.mesh.hub_cidrs import HubCidrs, hub_overlap
from stacks.mesh.labels import camel, label_unless_peering
from stacks.mesh.membership import group_rules
from stacks.mesh.routes import summaries_carry_pairs
from stacks.mesh.share import MeshMember
from stacks.model.cluster import Cluster
from stacks.model.hub import HubConfig, MeshGroup
from stacks.names import MESH_LABEL
from stacks.transit import Phase


@dataclass(frozen=True)
class Candidate:
    cluster: Cluster
    member: MeshMember
    nets: tuple[ipaddress.IPv4Network, ...]  # member.cidrs, parsed

    @cached_property  # read for every earlier member a joiner is checked against
    def blocks(self) -> tuple[tuple[str, str, ipaddress.IPv4Network], ...]:
        """(CIDR, the field that says it, the network) for each of the member's blocks, primary first."""
        return tuple((cidr, where, net) for (cidr, where), net in zip(self.member.blocks, self.nets))

    @property
    def block_count(self) -> int:
        return len(self.nets)


@dataclass
class Network:
    """One network account's gateways as the groups planned so far use them (the per-gateway quotas)."""

    groups: set[str] = field(default_factory=set)
    asn: int | None = None
    asn_group: str = ""
    attachments: Counter = field(default_factory=Counter)  # region -> VPC attachments
    routes: Counter = field(default_factory=Counter)  # region -> routes across the gateway's route tables
    peerings: Counter = field(default_factory=Counter)  # region -> peering attachments


def cidr_problems(c: Candidate, group: str, config: MeshGroup, owned: HubCidrs) -> InvalidSpec | None:
    """No block of a member may be the hub's, and each must lie in the group's memberCIDRs when it has any:
    checked before the other members', so a CIDR the hub owns never takes a place in the group."""
    for cidr, where, _ in c.blocks:
        refused = hub_overlap(c.cluster.ref, cidr, owned, group, field=where)
        if refused is not None:
            return refused
    ranges = [ipaddress.IPv4Network(cidr) for cidr in config.member_cidrs]
    for cidr, where, net in c.blocks:
        if ranges and not any(net.subnet_of(r) for r in ranges):
            return InvalidSpec.one(
                c.cluster.ref, where,
                f"CIDR {cidr} of {c.cluster.ref} is in none of mesh group {group}'s memberCIDRs "
                f"({', '.join(config.member_cidrs)}), the ranges the hub administrator lets its members declare",
                condition="MeshCIDRNotAllowed")
    return None


def own_problems(c: Candidate, group: str, dedicated: bool, phase: Phase, config: MeshGroup) -> InvalidSpec | None:
    errors = []
    ref = c.cluster.ref
    blocks = c.blocks
    for i, (cidr, where, net) in enumerate(blocks):
        mine = next(((other, at) for other, at, earlier in blocks[:i] if net.overlaps(earlier)), None)
        if mine is not None:
            errors.append(FieldError(ref, where, f"CIDR {cidr} overlaps its own CIDR {mine[0]} ({mine[1]}): the CIDR "
                                                 f"blocks of one VPC are disjoint, so one of them is not its VPC's"))
    if not c.member.route_table_ids:
        errors.append(FieldError(ref, "spec.network.routeTableIDs",
                                 f"mesh group {group} needs at least one route table to route to its peers"))
    if not dedicated and not c.cluster.spec.aws.network.node_security_group_ids:
        errors.append(FieldError(
            ref, "spec.network.nodeSecurityGroupIDs",
            f"mesh group {group} admits peers on the node security groups (securityGroup: nodes) and this "
            f"cluster lists none; list them, or set HubConfig spec.mesh.groups.{group}.securityGroup: dedicated"))
    if phase.attachments:
        if not c.cluster.spec.aws.network.transit_subnets:
            errors.append(FieldError(
                ref, "spec.network.transitSubnets",
                f"mesh group {group} uses a Transit Gateway, which attaches a VPC through one subnet per "
                f"availability zone; list them"))
        summaries = [ipaddress.IPv4Network(cidr) for cidr in config.summary_cidrs]
        for cidr, where, net in blocks:
            if summaries and not any(net.subnet_of(s) for s in summaries):
                errors.append(FieldError(
                    ref, where,
                    f"CIDR {cidr} is in none of mesh group {group}'s summaryCIDRs "
                    f"({', '.join(config.summary_cidrs)}): its peers would have no route to it"))
    return InvalidSpec(errors, "MeshInvalid") if errors else None


def fit_problems(c: Candidate, group: str, admitted: list[Candidate], hub: HubConfig, config: MeshGroup,
                  phase: Phase) -> InvalidSpec | None:
    ref = c.cluster.ref
    for other in admitted:
        for cidr, where, net in c.blocks:
            theirs = next((o for o, _, n in other.blocks if net.overlaps(n)), None)
            if theirs is not None:
                return InvalidSpec.one(
                    ref, where,
                    f"CIDR {cidr} of {ref} overlaps CIDR {theirs} of {other.cluster.ref}, "
                    f"an earlier member of mesh group {group}; connected VPCs need disjoint CIDRs",
                    condition="MeshCIDROverlap")
        if c.member.vpc_id == other.member.vpc_id:
            return InvalidSpec.one(
                ref, "spec.network.vpcID",
                f"VPC {c.member.vpc_id} is also the VPC of {other.cluster.ref}, an earlier member of mesh group "
                f"{group}; a VPC cannot peer with itself", condition="MeshInvalid")
    peers = len(admitted)
    mesh = hub.spec.mesh
    # Joining gives the joiner and every earlier member `peers` of each: the tightest account decides.
    accounts_in = sorted({c.member.target.account_id, *(o.member.target.account_id for o in admitted)})

    def limit(name: str) -> tuple[int, str]:
        value, account = min((mesh.quota(a, name), a) for a in accounts_in)
        where = f"accountQuotas[{account}]" if account in mesh.account_quotas and \
            getattr(mesh.account_quotas[account], name) is not None else f"spec.mesh.{camel(name)}"
        return value, where

    # Each member's tables route to every block of its peers: the member with the fewest blocks has the most.
    blocks = [c.block_count, *(o.block_count for o in admitted)]
    peer_blocks = sum(blocks) - min(blocks)
    routes = mesh_routes(peer_blocks, phase, tuple(config.summary_cidrs))
    summary = tuple(config.summary_cidrs)
    rules = peer_blocks * len(group_rules(config))
    sources = f"{peers} peers" if peer_blocks == peers else f"{peer_blocks} CIDR blocks of {peers} peers"
    over = []
    if phase.peerings:
        most, where = limit("peerings_per_vpc")
        if peers > most:
            over.append(f"{peers} VPC peerings on its VPC (HubConfig {where} is {most}; AWS allows at most 125)")
    most, where = limit("routes_per_table")
    if routes > most:
        hint = "; declare summaryCIDRs to route the whole group with one route per table" \
            if phase.attachments and not summary else ""
        over.append(f"{routes} mesh routes in each of its route tables (HubConfig {where} is {most}; AWS allows "
                    f"at most 1000){hint}")
    most, where = limit("rules_per_security_group")
    if rules > most:
        over.append(f"{rules} mesh rules on each of its security groups ({sources} x {len(group_rules(config))} "
                    f"rules; HubConfig {where} is {most}; AWS allows at most 1000)")
    if over:
        return InvalidSpec.one(
            ref, f"metadata.labels[{MESH_LABEL}]",
            f"mesh group {group}{label_unless_peering(phase)} already has {peers} members; joining would need "
            f"{' and '.join(over)}. Raise the AWS quota and HubConfig spec.mesh (or accountQuotas), or split the "
            f"group{'' if phase.attachments else ', or connect it through a Transit Gateway (topology)'}",
            condition="MeshLimitExceeded")
    return None


def mesh_routes(peer_blocks: int, phase: Phase, summary: tuple[str, ...]) -> int:
    """Routes the group puts in each table of a member whose peers have `peer_blocks` CIDR blocks in all: the pair
    routes stacks.mesh.routes.every_pair_route lists into it across the group's shares, one per peer block, none
    when the summaries carry the pairs (summaries_carry_pairs, with the group's summaryCIDRs); and while the phase
    has attachments, one summary route per summaryCIDR (components.transit.TransitLink)."""
    pairs = 0 if summaries_carry_pairs(phase.routes_via, summary) else peer_blocks
    return pairs + (len(summary) if phase.attachments else 0)


def gateway_problems(c: Candidate, group: str, network: str, net: Network, regions: set[str], blocks: int,
                      hub: HubConfig) -> InvalidSpec | None:
    """The per-gateway quotas of the network account, with this member added; counts it in when it fits.
    `blocks`: the CIDR blocks of the group's members admitted so far."""
    mesh = hub.spec.mesh
    region = c.member.target.region
    new_region = region not in regions
    touched = regions | {region}
    # Routes: each region's group table holds every block of every member (static routes, here and elsewhere).
    added_routes = {r: c.block_count for r in touched}
    if new_region:
        added_routes[region] = blocks + c.block_count
    added_peerings = {r: 1 for r in regions} if new_region else {}
    if new_region:
        added_peerings[region] = len(regions)
    over = []
    limit = mesh.quota(network, "attachments_per_transit_gateway")
    if net.attachments[region] + 1 > limit:
        over.append(f"{net.attachments[region] + 1} attachments on the gateway of account {network} in {region} "
                    f"(attachmentsPerTransitGateway is {limit})")
    limit = mesh.quota(network, "routes_per_transit_gateway")
    for r, n in sorted(added_routes.items()):
        if net.routes[r] + n > limit:
            over.append(f"{net.routes[r] + n} routes across the route tables of the gateway of account {network} in "
                        f"{r} (routesPerTransitGateway is {limit})")
    limit = mesh.quota(network, "peering_attachments_per_transit_gateway")
    for r, n in sorted(added_peerings.items()):
        if net.peerings[r] + n > limit:
            over.append(f"{net.peerings[r] + n} peering attachments on the gateway of account {network} in {r} "
                        f"(peeringAttachmentsPerTransitGateway is {limit})")
    if over:
        return InvalidSpec.one(
            c.cluster.ref, f"metadata.labels[{MESH_LABEL}]",
            f"mesh group {group} connects through a Transit Gateway and joining would need {' and '.join(over)}; "
            f"raise the AWS quota and HubConfig spec.mesh (or accountQuotas[{network}]), or give the group "
            f"another network account (transitGateway.accountID)", condition="MeshLimitExceeded")
    net.attachments[region] += 1
    for r, n in added_routes.items():
        net.routes[r] += n
    for r, n in added_peerings.items():
        net.peerings[r] += n
    return None


def network_problem(hub: HubConfig, group: str, network: str, config: MeshGroup, net: Network,
                     roles: Mapping[str, str] | None) -> str | None:
    """Why the group cannot use its network account's gateways at all, or None."""
    if network != hub.spec.account_id and not (roles or hub.spec.role_account_map).get(network):
        return (f"mesh group {group}'s Transit Gateways live in account {network} (transitGateway.accountID), "
                f"which has no role in the role map")
    if net.asn is not None and net.asn != config.transit_gateway.asn:
        return (f"mesh group {group} asks for ASN {config.transit_gateway.asn} on account {network}'s gateways, which "
                f"group {net.asn_group} already set to {net.asn}; groups sharing a network account share its gateways")
    limit = hub.spec.mesh.quota(network, "route_tables_per_transit_gateway")
    if len(net.groups) + 1 > limit:
        return (f"account {network}'s gateways already serve {len(net.groups)} groups, one route table each "
                f"(routeTablesPerTransitGateway is {limit}); give mesh group {group} another network account")
    if net.asn is None:
        net.asn, net.asn_group = config.transit_gateway.asn, group
    return None
