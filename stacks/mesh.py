"""Cluster mesh: who is in which group, which stack owns each pair, and each stack's share. Pure.

Membership
    A Cluster asks to join group G with the label `clusternet.io/mesh: G` AND the annotation
    `clusternet.io/mesh-enabled: "true"`; it is a member when it is not being deleted and its account and
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
whose CIDR overlaps an earlier member's, or that would push a VPC past `HubConfig spec.mesh`
peeringsPerVPC / routesPerTable, is rejected (an InvalidSpec on that cluster naming both clusters and
both CIDRs, or the numbers) and left out of the mesh; the others go on.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Iterable, Mapping

from stacks import accounts
from stacks.errors import FieldError, InvalidSpec
from stacks.targets import AwsTarget, Frozen
from stacks.model import Cluster, HubConfig, MeshGroup, MeshRule
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


class MeshPair(Frozen):
    """A pair owned by this stack: peering requested here, accepted by `peer`."""

    name: str  # the two stack names in sorted order: "a.x+b.y"
    peer: MeshMember


class MeshShare(Frozen):
    """One stack's share of the mesh: part of its StackInputs, so its digest moves only when this changes."""

    group: str
    member: MeshMember
    rules: tuple[MeshRule, ...]  # never empty: all traffic from peer CIDRs by default
    pairs: tuple[MeshPair, ...] = ()  # sorted by name


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


@dataclass(frozen=True)
class MeshPlan:
    shares: Mapping[str, MeshShare]  # cluster key → its share (admitted members only)
    errors: Mapping[str, InvalidSpec]  # cluster key → why it was left out of its group
    groups: Mapping[str, GroupView]
    stamps: Mapping[str, dict]  # join stamps the service should write, in this order: key → status.meshJoin
    unstamp: tuple[str, ...] = ()  # clusters holding a stamp of a group they are no longer in

    def share(self, key: str) -> MeshShare | None:
        return self.shares.get(key)


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


def dedicated_group_name(stack: str) -> str:
    return f"clusternet-mesh-{stack}"


def group_rules(config: MeshGroup) -> tuple[MeshRule, ...]:
    return tuple(config.rules) or (ALL_TRAFFIC,)


# --- planning -------------------------------------------------------------------------

@dataclass(frozen=True)
class _Candidate:
    cluster: Cluster
    member: MeshMember
    net: ipaddress.IPv4Network


Targets = Mapping[str, "AwsTarget | InvalidSpec"]  # cluster key -> where it lives, or why it cannot be placed


def plan_mesh(hub: HubConfig, clusters: Iterable[Cluster], targets: Targets) -> MeshPlan:
    """Every group, its admitted members in join order, every pair and its owner, and each stack's share.

    `targets` are the clusters' resolved accounts and regions (stacks.resolve.fleet_targets): a cluster
    whose target is refused cannot be peered with and is left out (resolve reports why).
    """
    by_group: dict[str, list[Cluster]] = {}
    names: dict[str, str] = {}  # group key -> the label value G
    unstamp: list[str] = []
    errors: dict[str, InvalidSpec] = {}
    for cluster in clusters:
        group = group_of(cluster)
        if group is not None:
            key = group_key(cluster, group, hub)
            if isinstance(key, InvalidSpec):
                errors[cluster.key] = key
                group = None
            else:
                by_group.setdefault(key, []).append(cluster)
                names[key] = group
        stamp = (cluster.status or {}).get(JOIN_STATUS_KEY)
        if stamp and (group is None or join_stamp(cluster, group) is None):
            unstamp.append(cluster.key)

    shares: dict[str, MeshShare] = {}
    groups: dict[str, GroupView] = {}
    stamps: dict[str, dict] = {}
    for key in sorted(by_group):
        group = names[key]
        members = sorted(by_group[key], key=lambda c: join_key(c, group))
        view, group_shares, group_errors = _plan_group(hub, key, group, members, targets)
        groups[key] = view
        shares.update(group_shares)
        errors.update(group_errors)
        stamped = [s for c in members if (s := join_stamp(c, group)) is not None]
        nxt = max(stamped, default=0) + 1
        by_key = {c.key: c for c in members}
        for member in view.members:
            if join_stamp(by_key[member], group) is None:
                stamps[member] = {"group": group, "order": nxt}
                nxt += 1
    return MeshPlan(shares=shares, errors=errors, groups=groups, stamps=stamps, unstamp=tuple(unstamp))


def _plan_group(hub: HubConfig, key: str, group: str, members: list[Cluster], targets: Targets):
    config = hub.spec.mesh.groups.get(group, MeshGroup())
    limits = hub.spec.mesh
    rules = group_rules(config)
    dedicated = config.security_group == "dedicated"

    admitted: list[_Candidate] = []
    rejected: list[str] = []
    errors: dict[str, InvalidSpec] = {}
    for cluster in members:
        target = targets.get(cluster.key)
        if not isinstance(target, AwsTarget):
            continue  # not reachable: resolve() reports why; it cannot be peered with
        candidate = _candidate(cluster, target, dedicated)
        problems = _own_problems(candidate, group, dedicated) or _fit_problems(candidate, group, admitted, limits)
        if problems:
            errors[cluster.key] = problems
            rejected.append(cluster.key)
        else:
            admitted.append(candidate)

    shares: dict[str, MeshShare] = {}
    pairs: list[PairView] = []
    for i, owner in enumerate(admitted):
        session = accounts.session_name("mesh", owner.cluster)
        owned = []
        for earlier in admitted[:i]:
            name = pair_name(owner.member.stack, earlier.member.stack)
            peer = earlier.member.model_copy(update={"target": earlier.member.target.model_copy(
                update={"session_name": session})})
            owned.append(MeshPair(name=name, peer=peer))
            pairs.append(PairView(name=name, owner=owner.member.key, peer=earlier.member.key))
        shares[owner.member.key] = MeshShare(
            group=group, member=owner.member, rules=rules, pairs=tuple(sorted(owned, key=lambda p: p.name)))
    view = GroupView(name=key, members=tuple(c.member.key for c in admitted),
                     pairs=tuple(sorted(pairs, key=lambda p: p.name)), rejected=tuple(rejected))
    return view, shares, errors


def _candidate(cluster: Cluster, target: AwsTarget, dedicated: bool) -> _Candidate:
    net = cluster.spec.network
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
    )
    return _Candidate(cluster, member, ipaddress.ip_network(net.cidr))


def _own_problems(c: _Candidate, group: str, dedicated: bool) -> InvalidSpec | None:
    errors = []
    if not c.member.route_table_ids:
        errors.append(FieldError(c.cluster.ref, "spec.network.routeTableIDs",
                                 f"mesh group {group} needs at least one route table to route to its peers"))
    if not dedicated and not c.cluster.spec.network.node_security_group_ids:
        errors.append(FieldError(
            c.cluster.ref, "spec.network.nodeSecurityGroupIDs",
            f"mesh group {group} admits peers on the node security groups (securityGroup: nodes) and this "
            f"cluster lists none; list them, or set HubConfig spec.mesh.groups.{group}.securityGroup: dedicated"))
    return InvalidSpec(errors, "MeshInvalid") if errors else None


def _fit_problems(c: _Candidate, group: str, admitted: list[_Candidate], limits) -> InvalidSpec | None:
    ref = c.cluster.ref
    for other in admitted:
        if c.net.overlaps(other.net):
            return InvalidSpec.one(
                ref, "spec.network.cidr",
                f"CIDR {c.member.cidr} of {ref} overlaps CIDR {other.member.cidr} of {other.cluster.ref}, "
                f"an earlier member of mesh group {group}; peered VPCs need disjoint CIDRs",
                condition="MeshCIDROverlap")
        if c.member.vpc_id == other.member.vpc_id:
            return InvalidSpec.one(
                ref, "spec.network.vpcID",
                f"VPC {c.member.vpc_id} is also the VPC of {other.cluster.ref}, an earlier member of mesh group "
                f"{group}; a VPC cannot peer with itself", condition="MeshInvalid")
    peers = len(admitted)
    over = []
    if peers > limits.peerings_per_vpc:
        over.append(f"{peers} VPC peerings on its VPC (HubConfig spec.mesh.peeringsPerVPC is "
                    f"{limits.peerings_per_vpc}; AWS allows at most 125)")
    if peers > limits.routes_per_table:
        over.append(f"{peers} mesh routes in each of its route tables (HubConfig spec.mesh.routesPerTable is "
                    f"{limits.routes_per_table}; AWS allows at most 1000)")
    if over:
        return InvalidSpec.one(
            ref, f"metadata.labels[{MESH_LABEL}]",
            f"mesh group {group} already has {peers} members; joining would need {' and '.join(over)}. "
            f"Raise the AWS quota and HubConfig spec.mesh, split the group, or connect this many VPCs "
            f"through a Transit Gateway instead of peering", condition="MeshLimitExceeded")
    return None


def rule_label(rule: MeshRule) -> str:
    """A stable name fragment for a rule: 'all', 'tcp-443-443', 'icmp--1--1'."""
    return "all" if rule.protocol == "-1" else f"{rule.protocol}-{rule.from_port}-{rule.to_port}"

