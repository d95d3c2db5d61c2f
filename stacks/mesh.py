"""Cluster mesh: who is in which group, which stack owns each pair, and each stack's share. Pure.

Membership
    A Cluster asks to join group G with the label `hubwright.io/mesh: G` AND the annotation
    `hubwright.io/mesh-enabled: "true"`; it is a member when it is not being deleted and its account and
    region resolve. Removing either takes it out. A label has one value, so a cluster is in one group at most.

Tenancy: a group is namespace-local unless the hub administrator says otherwise
    Clusters of different namespaces with the same label are different groups ("acme/G", "globex/G") and
    never peer. A group spans namespaces only when HubConfig spec.mesh.groups.G.namespaces lists them; a
    cluster of an unlisted namespace asking for G is refused (NotInMeshGroup). An entry without
    `namespaces` gives the settings (rules, securityGroup) of every namespace-local group named G.
    Join stamps and pair names do not depend on which kind of group it is, so declaring or undeclaring a
    group's namespaces never replaces a peering between clusters of one namespace.

Join order (durable, restart-proof)
    Members are ordered by their join stamp `status.meshJoin = {group: G, order: n}`, which the service
    writes once (`MeshPlan.stamps`, in the order given) and never rewrites while the cluster stays in G.
    Members without a stamp come after every stamped one, oldest `creationTimestamp` first, then by
    namespace/name. So a new joiner is always last, and writing its stamp does not move it.

Ownership rule
    The later-joined member of a pair owns it: the requester peering in its own account, the accepter
    in the peer's account/region (through the peer's provider), the routes in every route table of
    BOTH members and the ingress rules on BOTH members' security groups. Each resource of the mesh is
    therefore in exactly one stack.

Cost in stack runs (group of N members, the joiner/leaver included)
    join:  1 (the joiner's; no other member's share changes).
    leave or delete of the k-th member in join order: 1 + (N - k) -- its own stack (update or destroy)
    removes the pairs it owns, and every later joiner's stack removes its pair with it.
    From 1 (the last joiner) to N (the first); (N + 1) / 2 on average.

Validation, in join order, so an existing member is never blocked by a newcomer's mistake: a member
whose CIDR overlaps a CIDR the hub owns (`hub_cidrs`: its endpoint and associated VPCs, spec.mesh.reservedCIDRs;
checked first, so it never takes a place) or lies outside its group's memberCIDRs, whose CIDR overlaps an
earlier member's, or that would push a VPC past `HubConfig spec.mesh` (or its
account's accountQuotas) peeringsPerVPC / routesPerTable / rulesPerSecurityGroup, or a gateway past its
quotas, is rejected (an InvalidSpec on that cluster naming both clusters and both CIDRs, or the numbers)
and left out of the mesh; the others go on.

Topology (stacks.transit): a group is built for its recorded state (peering, a Transit Gateway, or a step
of a migration between them); the share says whether the pairs' peerings exist, where their routes point
and whether the member attaches. Pair ownership, routes per pair and rules are the same in every topology,
so a join costs the joiner's stack (+ the transit stack's, with a gateway) and a move changes targets only.
"""
from __future__ import annotations

import ipaddress
from bisect import bisect_right
from collections import Counter
from itertools import accumulate
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from stacks import accounts
from stacks.errors import FieldError, InvalidSpec
from stacks.targets import AwsTarget, Frozen
from stacks.model.cluster import Cluster
from stacks.model.hub import HubConfig, MeshGroup, MeshRule, Topology
from stacks.names import MANAGED_BY, MANAGED_BY_TAG
from stacks.transit import (MTU, TRANSIT_TAG, GroupState, MeshStatus, Phase, TransitAttachment, TransitGroupInputs,
                            TransitInputs, TransitMember, TransitRegionInputs, TransitRemote, migration_steps,
                            next_state, phase_of, transit_stack, wanted_topology)
from stacks.names import JOIN_STATUS_KEY, MESH_ENABLED_ANNOTATION, MESH_LABEL
from stacks.tenancy import namespace_of

NOT_IN_MESH_GROUP = "NotInMeshGroup"

ALL_TRAFFIC = MeshRule(protocol="-1", from_port=0, to_port=0)


# --- the share: what one stack builds -------------------------------------------

class MeshMember(Frozen):
    """One cluster as the mesh sees it."""

    key: str  # namespace/name
    stack: str  # namespace.name
    target: AwsTarget  # its account, region and role: the provider that reaches its VPC
    vpc_id: str
    cidr: str
    route_table_ids: tuple[str, ...]
    security_group_ids: tuple[str, ...] = ()  # node security groups ("nodes" mode)
    dedicated_security_group: str | None = None  # the group's name ("dedicated" mode)
    transit_gateway_id: str | None = None  # the gateway of its region, once the transit stack has made it


class MeshPair(Frozen):
    """A pair owned by this stack: peering requested here, accepted by `peer`."""

    name: str  # the two stack names in sorted order: "a.x+b.y"
    peer: MeshMember


class HubCidr(Frozen):
    """A CIDR the hub owns, and where the HubConfig says so."""

    owner: str  # "HubConfig default spec.associatedVPCs[0] (VPC vpc-0mgmt)"
    cidr: str


class HubVpc(Frozen):
    """A VPC of the hub account (endpoint inventory or associated): every CIDR block it has is the hub's."""

    owner: str
    region: str
    vpc_id: str


class MeshLimits(Frozen):
    """What the preflight counts against for this member's VPC (its account's quotas) and what the mesh puts
    there. Outside the digest (StackInputs.to_config): a quota edit changes no stack."""

    routes_per_table: int
    rules_per_security_group: int
    transit_gateways_per_vpc: int
    mesh_routes: int  # routes the whole group puts in each of its route tables
    mesh_rules: int  # rules the whole group puts on each of its security groups
    group_cidrs: tuple[str, ...] = ()  # every member CIDR and summary: routes to these are the mesh's own
    member_cidrs: tuple[str, ...] = ()  # the group's memberCIDRs: routes inside them are the members' range
    hub_vpcs: tuple[HubVpc, ...] = ()  # the hub's VPCs, whose real CIDR blocks the preflight looks up


class MeshShare(Frozen):
    """One stack's share of the mesh: part of its StackInputs, so its digest moves only when this changes."""

    group: str
    member: MeshMember
    rules: tuple[MeshRule, ...]  # never empty: all traffic from peer CIDRs by default
    pairs: tuple[MeshPair, ...] = ()  # sorted by name
    # The group's phase (stacks.transit.phase_of): whether the pairs' VPC peerings exist, and where every
    # pair route points. A route keeps its resource when its target moves, so the move is one in-place update.
    peerings: bool = True
    routes_via: Topology = "peering"
    attachment: TransitAttachment | None = None  # this member's attachment (Transit Gateway phases)
    limits: MeshLimits | None = None  # for the preflight's look-ups; not part of the digest


# --- the whole mesh -----------------------------------------------------------------

@dataclass(frozen=True)
class PairView:
    name: str
    owner: str  # cluster key of the stack that builds it
    peer: str


@dataclass(frozen=True)
class GroupView:
    name: str  # "G" for a group the HubConfig spans across namespaces, "<namespace>/G" for a local one
    members: tuple[str, ...]  # admitted, in join order
    pairs: tuple[PairView, ...]
    rejected: tuple[str, ...] = ()
    state: GroupState = GroupState(topology="peering")  # what its stacks are built for now
    wanted: Topology = "peering"  # where it is heading (spec, or auto's choice)
    transit_stack: str | None = None  # the transit stack of its network account (Transit Gateway phases)
    network_account: str | None = None
    note: str = ""  # why it is not where it is heading yet

    @property
    def phase(self) -> Phase:
        return phase_of(self.state)


@dataclass(frozen=True)
class MeshPlan:
    shares: Mapping[str, MeshShare]  # cluster key → its share (admitted members only)
    errors: Mapping[str, InvalidSpec]  # cluster key → why it was left out of its group
    groups: Mapping[str, GroupView]
    stamps: Mapping[str, dict]  # join stamps the service should write, in this order: key → status.meshJoin
    unstamp: tuple[str, ...] = ()  # clusters holding a stamp of a group they are no longer in
    transit: Mapping[str, TransitInputs] = field(default_factory=dict)  # transit stack → its inputs

    def share(self, key: str) -> MeshShare | None:
        return self.shares.get(key)

    def states(self) -> dict[str, GroupState]:
        """HubConfig status.mesh.groups as it should read: group key → state."""
        return {key: view.state for key, view in self.groups.items()}


# --- membership and order ---------------------------------------------------------------

def group_of(cluster: Cluster) -> str | None:
    """The group the cluster asks to be in: label AND annotation, and not being deleted."""
    meta = cluster.metadata
    group = meta.labels.get(MESH_LABEL)
    if not group or meta.annotations.get(MESH_ENABLED_ANNOTATION) != "true" or meta.deletion_timestamp:
        return None
    return group


def join_stamp(cluster: Cluster, group: str) -> int | None:
    """The recorded join order in `group`, if the service has written one for that group."""
    stamp = (cluster.status or {}).get(JOIN_STATUS_KEY)
    if isinstance(stamp, dict) and stamp.get("group") == group and isinstance(stamp.get("order"), int):
        return stamp["order"]
    return None


def join_key(cluster: Cluster, group: str) -> tuple:
    """Sort key of the join order: stamped members by stamp, then the rest oldest first, then by key."""
    stamp = join_stamp(cluster, group)
    if stamp is not None:
        return (0, stamp, "", cluster.key)
    return (1, 0, cluster.metadata.creation_timestamp or "", cluster.key)


def pair_name(a_stack: str, b_stack: str) -> str:
    """Stable whichever side asks: '+' cannot occur in a namespace or a name."""
    return "+".join(sorted((a_stack, b_stack)))


def group_key(cluster: Cluster, group: str, hub: HubConfig) -> str | InvalidSpec:
    """Which group `group` is for this cluster: shared ("G"), namespace-local ("ns/G"), or refused."""
    namespace = namespace_of(cluster)
    config = hub.spec.mesh.groups.get(group)
    if config is None or config.namespaces is None:
        return f"{namespace}/{group}"
    if namespace in config.namespaces:
        return group
    return InvalidSpec.one(
        cluster.ref, f"metadata.labels[{MESH_LABEL}]",
        f"mesh group {group} spans only the namespaces the hub administrator listed (HubConfig "
        f"spec.mesh.groups.{group}.namespaces), and {namespace} is not one of them", condition=NOT_IN_MESH_GROUP)


def membership(cluster: Cluster, hub: HubConfig) -> tuple[str | InvalidSpec | None, bool]:
    """(the key of the group the cluster is in, the refusal of the one it asks for, or None; whether it holds a
    join stamp of a group it is not in, which must go)."""
    group = group_of(cluster)
    key = group_key(cluster, group, hub) if group is not None else None
    stamp = (cluster.status or {}).get(JOIN_STATUS_KEY)
    stale = bool(stamp) and (group is None or not isinstance(key, str) or join_stamp(cluster, group) is None)
    return key, stale


def mesh_view(cluster: Cluster) -> tuple:
    """Everything plan_mesh reads of a cluster besides its target (its key, name and namespace are fixed): two
    versions with equal views plan alike."""
    meta = cluster.metadata
    return (meta.labels.get(MESH_LABEL), meta.annotations.get(MESH_ENABLED_ANNOTATION), bool(meta.deletion_timestamp),
            meta.creation_timestamp, (cluster.status or {}).get(JOIN_STATUS_KEY), cluster.spec.network)


def coupling(hub: HubConfig, key: str, status: MeshStatus) -> str:
    """Groups that plan_mesh plans together: those that may use a Transit Gateway share their network account's
    gateways (route tables, ASN, per-gateway quotas, one transit stack); a peering group stands alone."""
    config = hub.spec.mesh.groups.get(key.rsplit("/", 1)[-1], MeshGroup())
    recorded = status.groups.get(key)
    gateway = config.topology != "peering" or (
        recorded is not None and "transitGateway" in (recorded.topology, recorded.migrating_to))
    return f"network:{config.transit_gateway.account_id or hub.spec.account_id}" if gateway else f"group:{key}"


def dedicated_group_name(stack: str) -> str:
    return f"hubwright-mesh-{stack}"


def group_rules(config: MeshGroup) -> tuple[MeshRule, ...]:
    return tuple(config.rules) or (ALL_TRAFFIC,)


# --- the hub's CIDRs: no member may declare one -------------------------------------------------

def hub_vpcs(hub: HubConfig) -> tuple[HubVpc, ...]:
    """The hub's VPCs (endpoint inventory, then associated), each named where the HubConfig lists it."""
    inventory = (HubVpc(owner=f"{hub.ref} spec.endpointVPCInventory[{i}] (VPC {v.vpc_id})", region=v.region,
                        vpc_id=v.vpc_id) for i, v in enumerate(hub.spec.endpoint_vpc_inventory))
    associated = (HubVpc(owner=f"{hub.ref} spec.associatedVPCs[{i}] (VPC {v.vpc_id})", region=v.region,
                         vpc_id=v.vpc_id) for i, v in enumerate(hub.spec.associated_vpcs))
    return (*inventory, *associated)


def hub_cidrs(hub: HubConfig, looked_up: Mapping[str, Iterable[str]] | None = None) -> tuple[HubCidr, ...]:
    """Every CIDR the hub owns: its endpoint VPCs', its associated VPCs' (as declared, and every block the
    service looked up in the hub account: `looked_up`, VPC ID -> CIDR blocks), and spec.mesh.reservedCIDRs.
    A member's route to any of them would take the hub's (or another tenant's) traffic to the member."""
    out = [HubCidr(owner=f"{hub.ref} spec.endpointVPCInventory[{i}] (VPC {v.vpc_id})", cidr=v.cidr)
           for i, v in enumerate(hub.spec.endpoint_vpc_inventory)]
    out += [HubCidr(owner=f"{hub.ref} spec.associatedVPCs[{i}] (VPC {v.vpc_id})", cidr=v.cidr)
            for i, v in enumerate(hub.spec.associated_vpcs) if v.cidr is not None]
    out += [HubCidr(owner=f"{hub.ref} spec.mesh.reservedCIDRs[{i}]", cidr=cidr)
            for i, cidr in enumerate(hub.spec.mesh.reserved_cidrs)]
    return (*out, *looked_up_cidrs(hub_vpcs(hub), looked_up or {}))


def looked_up_cidrs(vpcs: Iterable[HubVpc], looked_up: Mapping[str, Iterable[str]]) -> tuple[HubCidr, ...]:
    """The CIDR blocks the hub account says its VPCs have, secondary ones included."""
    return tuple(HubCidr(owner=f"{vpc.owner}, a CIDR block of the VPC in the hub account", cidr=cidr)
                 for vpc in vpcs for cidr in sorted(set(looked_up.get(vpc.vpc_id, ()))))


class HubCidrs:
    """The hub's CIDRs as address intervals sorted by start: which one a member CIDR overlaps, in O(log n)
    (a fleet's members against an inventory of hundreds of VPCs)."""

    def __init__(self, cidrs: Iterable[HubCidr]):
        spans = sorted((int(net.network_address), int(net.broadcast_address), i, c)
                       for i, c in enumerate(cidrs) for net in (ipaddress.IPv4Network(c.cidr),))
        self._starts = [start for start, _, _, _ in spans]
        self._ends = [end for _, end, _, _ in spans]
        self._reach = list(accumulate(self._ends, max))  # the highest address any of the first k reaches
        self._cidrs = [c for _, _, _, c in spans]

    def overlapping(self, net: ipaddress.IPv4Network) -> HubCidr | None:
        first, last = int(net.network_address), int(net.broadcast_address)
        below = bisect_right(self._starts, last)  # these start at or before the member's last address
        if below == 0 or self._reach[below - 1] < first:
            return None
        return next(c for c, end in zip(self._cidrs[:below], self._ends[:below]) if end >= first)


def hub_overlap(ref: str, cidr: str, owned: HubCidrs | Iterable[HubCidr], group: str) -> InvalidSpec | None:
    """The refusal of a member CIDR that overlaps a CIDR of the hub's, naming both objects and both CIDRs."""
    owned = owned if isinstance(owned, HubCidrs) else HubCidrs(owned)
    hub_cidr = owned.overlapping(ipaddress.IPv4Network(cidr))
    if hub_cidr is not None:
        return InvalidSpec.one(
            ref, "spec.network.cidr",
            f"CIDR {cidr} of {ref} overlaps CIDR {hub_cidr.cidr} of {hub_cidr.owner}, which the hub owns; "
            f"mesh group {group} would route it to this cluster in its peers' route tables, taking the hub's "
            f"traffic. Declare the VPC's own CIDR", condition="MeshCIDROverlap")
    return None


def vpc_cidr_problem(member: MeshMember, blocks: tuple[str, ...] | None) -> str | None:
    """Why the member's declared CIDR is not its VPC's (`blocks`: what the member's account says the VPC has;
    None: no such VPC), or None. Its peers route exactly the declared range to it."""
    where = f"VPC {member.vpc_id} in account {member.target.account_id} ({member.target.region})"
    if blocks is None:
        return f"there is no {where}"
    if ipaddress.IPv4Network(member.cidr) not in {ipaddress.IPv4Network(b) for b in blocks}:
        return (f"CIDR {member.cidr} is not a CIDR block of {where}, which has {', '.join(blocks)}; a member "
                f"declares one of its VPC's own CIDR blocks, since its peers route exactly that range to it")
    return None


# --- the routes a stack writes, and the routes they must not beat -------------------------------

class PlannedRoute(Frozen):
    """A pair route this stack writes: in `table` of `member`'s VPC, to `cidr` (the other member's)."""

    member: str  # the cluster key whose route table it is
    table: str
    cidr: str
    pair: str
    to: str  # the cluster key the route leads to


def pair_routes(share: MeshShare) -> tuple[PlannedRoute, ...]:
    """Every pair route of the share, in both members' tables (components.mesh.MeshPeering writes them); none
    when the group's summary routes carry the pairs."""
    if share.routes_via == "transitGateway" and share.attachment is not None and share.attachment.summary_cidrs:
        return ()
    owner = share.member
    out = []
    for pair in share.pairs:
        for member, other in ((owner, pair.peer), (pair.peer, owner)):
            out += [PlannedRoute(member=member.key, table=table, cidr=other.cidr, pair=pair.name, to=other.key)
                    for table in member.route_table_ids]
    return tuple(out)


class FoundRoute(Frozen):
    """A route already in a route table (DescribeRouteTables)."""

    cidr: str
    target: str  # "local", "tgw-...", "pcx-...", "vgw-...", ...


def route_hijacks(share: MeshShare, found: Mapping[str, Iterable[FoundRoute]]) -> list[str]:
    """Each pair route that would be strictly more specific than a route already in its table that is not the
    mesh's: longest prefix wins, so the pair route would take that route's traffic for its range.

    Not counted: `local` routes, the default route (0.0.0.0/0: every route beats it, as intended), routes to the
    group's member CIDRs and summaries (the mesh's own), and routes inside the group's memberCIDRs (the range the
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
                out.append(f"route table {route.table} of HubCluster {route.member} has {there.cidr} -> {there.target}, "
                           f"and mesh pair {route.pair} would add {route.cidr} (to HubCluster {route.to}), which is "
                           f"more specific: {there.cidr} -> {there.target} would lose {route.cidr}'s traffic")
    return out


# --- planning -------------------------------------------------------------------------

@dataclass(frozen=True)
class _Candidate:
    cluster: Cluster
    member: MeshMember
    net: ipaddress.IPv4Network


Targets = Mapping[str, "AwsTarget | InvalidSpec"]  # cluster key -> where it lives, or why it cannot be placed


@dataclass
class _Network:
    """One network account's gateways as the groups planned so far use them (the per-gateway quotas)."""

    groups: set[str] = field(default_factory=set)
    asn: int | None = None
    asn_group: str = ""
    attachments: Counter = field(default_factory=Counter)  # region -> VPC attachments
    routes: Counter = field(default_factory=Counter)  # region -> routes across the gateway's route tables
    peerings: Counter = field(default_factory=Counter)  # region -> peering attachments


def plan_mesh(hub: HubConfig, clusters: Iterable[Cluster], targets: Targets, status: MeshStatus | None = None,
              roles: Mapping[str, str] | None = None) -> MeshPlan:
    """Every group, its admitted members in join order, every pair and its owner, and each stack's share.

    `targets` are the clusters' resolved accounts and regions (stacks.resolve.fleet_targets): a cluster
    whose target is refused cannot be peered with and is left out (resolve reports why). `status`: what
    the service recorded (each group's state, the transit stacks' outputs, the members' attachments).
    `roles`: the merged role map, for network accounts other than the hub's.
    """
    status = status or MeshStatus.empty()
    by_group: dict[str, list[Cluster]] = {}
    names: dict[str, str] = {}  # group key -> the label value G
    unstamp: list[str] = []
    errors: dict[str, InvalidSpec] = {}
    for cluster in clusters:
        key, stale = membership(cluster, hub)
        if isinstance(key, InvalidSpec):
            errors[cluster.key] = key
        elif key is not None and (name := group_of(cluster)) is not None:  # a key is always some group's
            by_group.setdefault(key, []).append(cluster)
            names[key] = name
        if stale:
            unstamp.append(cluster.key)

    shares: dict[str, MeshShare] = {}
    groups: dict[str, GroupView] = {}
    stamps: dict[str, dict] = {}
    networks: dict[str, _Network] = {}
    admitted_by_group: dict[str, list[_Candidate]] = {}
    owned, vpcs = HubCidrs(hub_cidrs(hub)), hub_vpcs(hub)  # once: every group checks against the same hub
    for key in sorted(by_group):
        group = names[key]
        members = sorted(by_group[key], key=lambda c: join_key(c, group))
        view, admitted, group_errors = _plan_group(hub, key, group, members, targets, status, networks, roles,
                                                   owned)
        groups[key] = view
        admitted_by_group[key] = admitted
        errors.update(group_errors)
        stamped = [s for c in members if (s := join_stamp(c, group)) is not None]
        nxt = max(stamped, default=0) + 1
        by_key = {c.key: c for c in members}
        for member in view.members:
            if join_stamp(by_key[member], group) is None:
                stamps[member] = {"group": group, "order": nxt}
                nxt += 1
        shares.update(_shares(hub, view, group, admitted, status, vpcs))
    transit = _transit_inputs(hub, groups, admitted_by_group, networks, status, roles)
    return MeshPlan(shares=shares, errors=errors, groups=groups, stamps=stamps, unstamp=tuple(unstamp),
                    transit=transit)


def _plan_group(hub: HubConfig, key: str, group: str, members: list[Cluster], targets: Targets,
                status: MeshStatus, networks: dict[str, _Network], roles: Mapping[str, str] | None,
                owned: HubCidrs):
    config = hub.spec.mesh.groups.get(group, MeshGroup())
    dedicated = config.security_group == "dedicated"
    reachable = [(c, t) for c in members if isinstance(t := targets.get(c.key), AwsTarget)]
    # (a cluster whose target is refused cannot be peered with: resolve() reports why)

    recorded = status.groups.get(key)
    existed = any(join_stamp(c, group) is not None for c, _ in reachable)
    heading = (recorded.migrating_to or recorded.topology) if recorded is not None else None
    wanted = wanted_topology(config, len(reachable), heading)
    state = next_state(recorded, wanted, existed=existed)
    note = ""
    starting = state.migrating_to == "transitGateway" and (recorded is None or recorded.migrating_to is None)
    if starting:  # a migration to a gateway starts only when every member can attach: nobody is dropped
        missing = [c.key for c, _ in reachable if not c.spec.aws.network.transit_subnets]
        if missing:
            state = recorded or GroupState(topology="peering")
            note = (f"stays on {state.topology}: a Transit Gateway needs spec.network.transitSubnets on every "
                    f"member, and {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''} list none")
    phase = phase_of(state)
    network = config.transit_gateway.account_id or hub.spec.account_id
    tstack = transit_stack(network) if phase.attachments else None
    net = networks.setdefault(network, _Network()) if phase.attachments else None
    network_problem = _network_problem(hub, group, network, config, net, roles) if net is not None else None
    if net is not None and network_problem is None:
        net.groups.add(key)

    admitted: list[_Candidate] = []
    rejected: list[str] = []
    errors: dict[str, InvalidSpec] = {}
    regions: set[str] = set()
    for cluster, target in reachable:
        gateway = status.gateway(tstack, target.region) if tstack is not None else None
        candidate = _candidate(cluster, target, dedicated, gateway.transit_gateway_id if gateway else None)
        problems = (network_problem and InvalidSpec.one(cluster.ref, f"metadata.labels[{MESH_LABEL}]",
                                                        network_problem, condition="MeshLimitExceeded")) \
            or _cidr_problems(candidate, group, config, owned) \
            or _own_problems(candidate, group, dedicated, phase, config) \
            or _fit_problems(candidate, group, admitted, hub, config, phase) \
            or (net is not None and _gateway_problems(candidate, group, network, net, regions, len(admitted), hub))
        if problems:
            errors[cluster.key] = problems
            rejected.append(cluster.key)
        else:
            admitted.append(candidate)
            regions.add(target.region)

    pairs = [PairView(name=pair_name(owner.member.stack, earlier.member.stack), owner=owner.member.key,
                      peer=earlier.member.key)
             for i, owner in enumerate(admitted) for earlier in admitted[:i]]
    view = GroupView(name=key, members=tuple(c.member.key for c in admitted),
                     pairs=tuple(sorted(pairs, key=lambda p: p.name)), rejected=tuple(rejected), state=state,
                     wanted=wanted, transit_stack=tstack, network_account=network if tstack else None, note=note)
    return view, admitted, errors


def _shares(hub: HubConfig, view: GroupView, group: str, admitted: list[_Candidate],
            status: MeshStatus, vpcs: tuple[HubVpc, ...]) -> dict[str, MeshShare]:
    config = hub.spec.mesh.groups.get(group, MeshGroup())
    mesh = hub.spec.mesh
    phase = view.phase
    cidrs = tuple(sorted({c.member.cidr for c in admitted} | set(config.summary_cidrs)))
    shares: dict[str, MeshShare] = {}
    for i, owner in enumerate(admitted):
        session = accounts.session_name("mesh", owner.cluster)
        owned = []
        for earlier in admitted[:i]:
            peer = earlier.member.model_copy(update={"target": earlier.member.target.model_copy(
                update={"session_name": session})})
            owned.append(MeshPair(name=pair_name(owner.member.stack, earlier.member.stack), peer=peer))
        attachment = None
        if phase.attachments and owner.member.transit_gateway_id is not None:
            attachment = TransitAttachment(
                transit_stack=view.transit_stack,
                transit_gateway_id=owner.member.transit_gateway_id,
                subnet_ids=tuple(s.subnet_id for s in sorted(owner.cluster.spec.aws.network.transit_subnets,
                                                              key=lambda s: s.availability_zone)),
                summary_cidrs=tuple(config.summary_cidrs))
        account = owner.member.target.account_id
        shares[owner.member.key] = MeshShare(
            group=group, member=owner.member, rules=group_rules(config),
            pairs=tuple(sorted(owned, key=lambda p: p.name)),
            peerings=phase.peerings, routes_via=phase.routes_via, attachment=attachment,
            limits=MeshLimits(
                routes_per_table=mesh.quota(account, "routes_per_table"),
                rules_per_security_group=mesh.quota(account, "rules_per_security_group"),
                transit_gateways_per_vpc=mesh.quota(account, "transit_gateways_per_vpc"),
                mesh_routes=_mesh_routes(len(admitted) - 1, phase, tuple(config.summary_cidrs)),
                mesh_rules=(len(admitted) - 1) * len(group_rules(config)),
                group_cidrs=cidrs, member_cidrs=tuple(config.member_cidrs), hub_vpcs=vpcs))
    return shares


def _candidate(cluster: Cluster, target: AwsTarget, dedicated: bool, gateway: str | None) -> _Candidate:
    net = cluster.spec.aws.network
    stack = cluster.stack
    member = MeshMember(
        key=cluster.key,
        stack=stack,
        target=target,
        vpc_id=net.vpc_id,
        cidr=net.cidr,
        route_table_ids=tuple(sorted(set(net.route_table_ids))),
        security_group_ids=() if dedicated else tuple(sorted(set(net.node_security_group_ids))),
        dedicated_security_group=dedicated_group_name(stack) if dedicated else None,
        transit_gateway_id=gateway,
    )
    return _Candidate(cluster, member, ipaddress.IPv4Network(net.cidr))


def _cidr_problems(c: _Candidate, group: str, config: MeshGroup, owned: HubCidrs) -> InvalidSpec | None:
    """A member CIDR must not be the hub's, and must lie in the group's memberCIDRs when it has any: checked
    before the other members', so a CIDR the hub owns never takes a place in the group."""
    refused = hub_overlap(c.cluster.ref, c.member.cidr, owned, group)
    if refused is not None:
        return refused
    ranges = [ipaddress.IPv4Network(cidr) for cidr in config.member_cidrs]
    if ranges and not any(c.net.subnet_of(r) for r in ranges):
        return InvalidSpec.one(
            c.cluster.ref, "spec.network.cidr",
            f"CIDR {c.member.cidr} of {c.cluster.ref} is in none of mesh group {group}'s memberCIDRs "
            f"({', '.join(config.member_cidrs)}), the ranges the hub administrator lets its members declare",
            condition="MeshCIDRNotAllowed")
    return None


def _own_problems(c: _Candidate, group: str, dedicated: bool, phase: Phase, config: MeshGroup) -> InvalidSpec | None:
    errors = []
    ref = c.cluster.ref
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
        if summaries and not any(c.net.subnet_of(s) for s in summaries):
            errors.append(FieldError(
                ref, "spec.network.cidr",
                f"CIDR {c.member.cidr} is in none of mesh group {group}'s summaryCIDRs "
                f"({', '.join(config.summary_cidrs)}): its peers would have no route to it"))
    return InvalidSpec(errors, "MeshInvalid") if errors else None


def _fit_problems(c: _Candidate, group: str, admitted: list[_Candidate], hub: HubConfig, config: MeshGroup,
                  phase: Phase) -> InvalidSpec | None:
    ref = c.cluster.ref
    for other in admitted:
        if c.net.overlaps(other.net):
            return InvalidSpec.one(
                ref, "spec.network.cidr",
                f"CIDR {c.member.cidr} of {ref} overlaps CIDR {other.member.cidr} of {other.cluster.ref}, "
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
            getattr(mesh.account_quotas[account], name) is not None else f"spec.mesh.{_camel(name)}"
        return value, where

    routes = _mesh_routes(peers, phase, tuple(config.summary_cidrs))
    summary = tuple(config.summary_cidrs)
    rules = peers * len(group_rules(config))
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
        over.append(f"{rules} mesh rules on each of its security groups ({peers} peers x {len(group_rules(config))} "
                    f"rules; HubConfig {where} is {most}; AWS allows at most 1000)")
    if over:
        return InvalidSpec.one(
            ref, f"metadata.labels[{MESH_LABEL}]",
            f"mesh group {group}{_label_unless_peering(phase)} already has {peers} members; joining would need "
            f"{' and '.join(over)}. Raise the AWS quota and HubConfig spec.mesh (or accountQuotas), or split the "
            f"group{'' if phase.attachments else ', or connect it through a Transit Gateway (topology)'}",
            condition="MeshLimitExceeded")
    return None


def _mesh_routes(peers: int, phase: Phase, summary: tuple[str, ...]) -> int:
    """Routes the group puts in each member table: one per peer (unless summaries carry them), one per summary."""
    pair_routes = phase.routes_via == "peering" or not summary
    return (peers if pair_routes else 0) + (len(summary) if phase.attachments and summary else 0)


def _gateway_problems(c: _Candidate, group: str, network: str, net: _Network, regions: set[str], peers: int,
                      hub: HubConfig) -> InvalidSpec | None:
    """The per-gateway quotas of the network account, with this member added; counts it in when it fits."""
    mesh = hub.spec.mesh
    region = c.member.target.region
    new_region = region not in regions
    touched = regions | {region}
    # Routes: each region's group table holds every member CIDR (static routes, here and elsewhere).
    added_routes = {r: 1 for r in touched}
    if new_region:
        added_routes[region] = peers + 1
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


def _network_problem(hub: HubConfig, group: str, network: str, config: MeshGroup, net: _Network,
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


def _transit_inputs(hub: HubConfig, groups: Mapping[str, GroupView], admitted: Mapping[str, list[_Candidate]],
                    networks: Mapping[str, _Network], status: MeshStatus,
                    roles: Mapping[str, str] | None) -> dict[str, TransitInputs]:
    """One transit stack per network account that a group in a Transit Gateway phase uses."""
    by_network: dict[str, list[str]] = {}
    for key, view in sorted(groups.items()):
        if view.transit_stack is not None and view.network_account is not None and view.members:
            by_network.setdefault(view.network_account, []).append(key)
    out: dict[str, TransitInputs] = {}
    for network, keys in sorted(by_network.items()):
        stack = transit_stack(network)
        base = _network_target(hub, network, roles)
        regions = sorted({c.member.target.region for k in keys for c in admitted[k]})
        region_inputs = []
        for region in regions:
            members: dict[str, AwsTarget] = {}
            group_inputs = []
            for key in keys:
                here = [c for c in admitted[key] if c.member.target.region == region]
                elsewhere: dict[str, list[str]] = {}
                for c in admitted[key]:
                    if c.member.target.region != region:
                        elsewhere.setdefault(c.member.target.region, []).append(c.member.cidr)
                if not here and not elsewhere:
                    continue
                for c in here:
                    if c.member.target.account_id != network:
                        members.setdefault(c.member.target.account_id, c.member.target.model_copy(
                            update={"session_name": accounts.session_name("transit")}))
                attachments = tuple(
                    TransitMember(cluster=c.member.key, account_id=c.member.target.account_id, cidr=c.member.cidr,
                                  attachment_id=status.attachments[c.member.key],
                                  accept=c.member.target.account_id != network)
                    for c in sorted(here, key=lambda c: c.member.key) if c.member.key in status.attachments)
                remotes = tuple(TransitRemote(region=r, cidrs=tuple(sorted(cidrs)))
                                for r, cidrs in sorted(elsewhere.items()))
                if here:
                    group_inputs.append(TransitGroupInputs(group=key, attachments=attachments, remotes=remotes))
            region_inputs.append(TransitRegionInputs(
                region=region, network=base.in_region(region),
                members=tuple(t for _, t in sorted(members.items())), groups=tuple(group_inputs)))
        out[stack] = TransitInputs(
            stack=stack, account_id=network, asn=networks[network].asn or 64512,
            organization=hub.spec.mesh.organization,
            tags={MANAGED_BY_TAG: MANAGED_BY, TRANSIT_TAG: stack}, regions=tuple(region_inputs))
    return out


def _network_target(hub: HubConfig, network: str, roles: Mapping[str, str] | None) -> AwsTarget:
    hub_target = accounts.hub_target(hub)
    if network == hub.spec.account_id:
        return hub_target.model_copy(update={"session_name": accounts.session_name("transit")})
    return AwsTarget(account_id=network, region=hub.spec.region, role_arn=(roles or hub.spec.role_account_map).get(network),
                     session_name=accounts.session_name("transit"), external_id=hub.spec.credentials.external_id)


def phase_label(phase: Phase) -> str:
    if phase.peerings and phase.attachments:
        return f"migrating, routes via {phase.routes_via}"
    return "peering" if phase.peerings else "Transit Gateway"


def _label_unless_peering(phase: Phase) -> str:
    return "" if phase.peerings and not phase.attachments else f" ({phase_label(phase)})"


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.upper() if part == "vpc" else part.title() for part in rest)


def summary(plan: MeshPlan, hub: HubConfig) -> dict[str, dict]:
    """Each group as the plan's summary shows it: where it is, where it is heading and the steps still ahead."""
    out: dict[str, dict] = {}
    for key, view in sorted(plan.groups.items()):
        state = view.state
        config = hub.spec.mesh.groups.get(key.rsplit("/", 1)[-1], MeshGroup())
        entry: dict = {"members": len(view.members), "rejected": len(view.rejected), "state": state.describe(),
                       "wanted": view.wanted}
        if state.migrating_to is not None or view.wanted != state.topology:
            steps = migration_steps(state.topology, state.migrating_to or view.wanted)
            at = steps.index(state) if state in steps else 0
            entry["migration"] = [s.describe() for s in steps[at:]]
            entry["mtu"] = (f"{MTU[state.topology]} -> {MTU[state.migrating_to or view.wanted]} bytes within a "
                            f"region (the Transit Gateway carries 8500)")
        if config.topology == "auto":
            entry["auto"] = (f"transitGateway from {config.auto_threshold} members, peering below "
                             f"{config.peering_below}")
        if view.transit_stack is not None:
            entry["transitStack"] = view.transit_stack
            entry["routesPerTable"] = len(config.summary_cidrs) if config.summary_cidrs else max(0, len(view.members) - 1)
        if view.note:
            entry["note"] = view.note
        out[key] = entry
    return out


def rule_label(rule: MeshRule) -> str:
    """A stable name fragment for a rule: 'all', 'tcp-443-443', 'icmp--1--1'."""
    return "all" if rule.protocol == "-1" else f"{rule.protocol}-{rule.from_port}-{rule.to_port}"

