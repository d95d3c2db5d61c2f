"""The whole mesh (stacks.mesh): plan_mesh takes the fleet to every group's view, each admitted member's share,
the join stamps to write and each transit stack's inputs. Pure."""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from stacks import accounts
from stacks.errors import InvalidSpec
from stacks.mesh.blocks import declared_fields
from stacks.mesh.checks import (Candidate, Network, cidr_problems, fit_problems, gateway_problems, mesh_routes,
                                network_problem, own_problems)
from stacks.mesh.hub_cidrs import HubCidrs, hub_cidrs, hub_vpcs
from stacks.mesh.membership import dedicated_group_name, group_of, group_rules, join_key, join_stamp, membership, \
    pair_name
from stacks.mesh.share import HubVpc, MeshLimits, MeshMember, MeshPair, MeshShare
from stacks.model.cluster import Cluster
from stacks.model.hub import HubConfig, MeshGroup, Topology
from stacks.names import MANAGED_BY, MANAGED_BY_TAG, MESH_LABEL
from stacks.network.found import found_of
from stacks.targets import AwsTarget
from stacks.transit import (TRANSIT_TAG, GroupState, MeshStatus, Phase, TransitAttachment, TransitGroupInputs,
                            TransitInputs, TransitMember, TransitRegionInputs, TransitRemote, next_state, phase_of,
                            transit_stack, wanted_topology)


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


# --- planning -------------------------------------------------------------------------

Targets = Mapping[str, "AwsTarget | InvalidSpec"]  # cluster key -> where it lives, or why it cannot be placed


def plan_mesh(hub: HubConfig, clusters: Iterable[Cluster], targets: Targets, status: MeshStatus | None = None,
              roles: Mapping[str, str] | None = None, held: frozenset[str] = frozenset()) -> MeshPlan:
    """Every group, its admitted members in join order, every pair and its owner, and each stack's share.

    `targets` are the clusters' resolved accounts and regions (stacks.resolve.fleet_targets): a cluster
    whose target is refused cannot be peered with and is left out (resolve reports why). `status`: what
    the service recorded (each group's state, the transit stacks' outputs, the members' attachments).
    `roles`: the merged role map, for network accounts other than the hub's. `held`: clusters that join before
    the unstamped rest (membership.join_key).
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
    networks: dict[str, Network] = {}
    admitted_by_group: dict[str, list[Candidate]] = {}
    owned, vpcs = HubCidrs(hub_cidrs(hub)), hub_vpcs(hub)  # once: every group checks against the same hub
    for key in sorted(by_group):
        group = names[key]
        members = sorted(by_group[key], key=lambda c: join_key(c, group, held))
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
                status: MeshStatus, networks: dict[str, Network], roles: Mapping[str, str] | None,
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
    net = networks.setdefault(network, Network()) if phase.attachments else None
    unusable = network_problem(hub, group, network, config, net, roles) if net is not None else None
    if net is not None and unusable is None:
        net.groups.add(key)

    admitted: list[Candidate] = []
    rejected: list[str] = []
    errors: dict[str, InvalidSpec] = {}
    regions: set[str] = set()
    for cluster, target in reachable:
        gateway = status.gateway(tstack, target.region) if tstack is not None else None
        candidate = _candidate(cluster, target, dedicated, gateway.transit_gateway_id if gateway else None)
        problems = (unusable and InvalidSpec.one(cluster.ref, f"metadata.labels[{MESH_LABEL}]",
                                                 unusable, condition="MeshLimitExceeded")) \
            or cidr_problems(candidate, group, config, owned) \
            or own_problems(candidate, group, dedicated, phase, config) \
            or fit_problems(candidate, group, admitted, hub, config, phase) \
            or (net is not None and gateway_problems(candidate, group, network, net, regions,
                                                     sum(a.block_count for a in admitted), hub))
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


def _shares(hub: HubConfig, view: GroupView, group: str, admitted: list[Candidate],
            status: MeshStatus, vpcs: tuple[HubVpc, ...]) -> dict[str, MeshShare]:
    config = hub.spec.mesh.groups.get(group, MeshGroup())
    mesh = hub.spec.mesh
    phase = view.phase
    cidrs = tuple(sorted({cidr for c in admitted for cidr in c.member.cidrs} | set(config.summary_cidrs)))
    blocks = sum(c.block_count for c in admitted)
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
                mesh_routes=mesh_routes(blocks - owner.block_count, phase, tuple(config.summary_cidrs)),
                mesh_rules=(blocks - owner.block_count) * len(group_rules(config)),
                group_cidrs=cidrs, member_cidrs=tuple(config.member_cidrs), hub_vpcs=vpcs))
    return shares


def member_blocks(cluster: Cluster) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The cluster's CIDR blocks as the mesh takes them, and the field that says each: spec.network.cidr first,
    then each of secondaryCIDRs not already taken (a block repeated counts once, where it first stands). Once
    discovery has read the VPC (stacks.network.merge took its other blocks from status.network), those are named
    where the cloud said them: status.network.cidrs[i]."""
    net = cluster.spec.aws.network
    found = found_of(cluster.status)
    said = {cidr: f"status.network.cidrs[{i}]" for i, cidr in enumerate(found.cidrs)} if found is not None else {}
    blocks: dict[str, str] = {}
    fields = declared_fields(1 + len(net.secondary_cidrs))
    for n, (cidr, where) in enumerate(zip((net.cidrs[0], *net.secondary_cidrs), fields)):
        blocks.setdefault(cidr, where if n == 0 else said.get(cidr, where))
    return tuple(blocks), tuple(blocks.values())


def _candidate(cluster: Cluster, target: AwsTarget, dedicated: bool, gateway: str | None) -> Candidate:
    net = cluster.spec.aws.network
    stack = cluster.stack
    cidrs, fields = member_blocks(cluster)
    member = MeshMember(
        key=cluster.key,
        stack=stack,
        target=target,
        vpc_id=net.vpc,
        cidrs=cidrs,
        cidr_fields=fields,
        route_table_ids=tuple(sorted(set(net.route_table_ids))),
        security_group_ids=() if dedicated else tuple(sorted(set(net.node_security_group_ids))),
        dedicated_security_group=dedicated_group_name(stack) if dedicated else None,
        transit_gateway_id=gateway,
    )
    return Candidate(cluster, member, tuple(ipaddress.IPv4Network(cidr) for cidr in cidrs))


def _transit_inputs(hub: HubConfig, groups: Mapping[str, GroupView], admitted: Mapping[str, list[Candidate]],
                    networks: Mapping[str, Network], status: MeshStatus,
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
                        elsewhere.setdefault(c.member.target.region, []).extend(c.member.cidrs)
                if not here and not elsewhere:
                    continue
                for c in here:
                    if c.member.target.account_id != network:
                        members.setdefault(c.member.target.account_id, c.member.target.model_copy(
                            update={"session_name": accounts.session_name("transit")}))
                attachments = tuple(
                    TransitMember(cluster=c.member.key, account_id=c.member.target.account_id, cidrs=c.member.cidrs,
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
