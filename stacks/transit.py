"""A mesh group over a Transit Gateway: topology, migration, the transit stack's inputs and its quotas. Pure.

Topology (HubConfig spec.mesh.groups.G.topology)
    peering | transitGateway | auto. `auto` is a Transit Gateway from autoThreshold members on and peering
    below autoPeeringBelow; in between the group keeps what it has (hysteresis), so it never flaps.

State (HubConfig status.mesh.groups[<group key>], written by the service)
    What the group's stacks are built for now: `topology`, and during a migration `migratingTo` and `step`.
    A migration X -> Y never leaves a member without a route to a peer:

        step      connections   routes via
        attach    X and Y       X            Y is built beside X (attachments, or peerings)
        routes    X and Y       Y            every route's target moves to Y: the same Route resource,
                                             updated in place (EC2 ReplaceRoute), so there is no gap
        (done)    Y             Y            X is removed

    The service advances a step when every stack of the group has applied it (`advance`). Turning back
    during `attach` drops Y; during `routes` it is a migration Y -> X at `attach`.

Ownership (so a join costs two stack runs: the joiner's and the transit stack)
    One transit stack per network account, named `_tgw_<account>` (a Kubernetes name cannot hold `_`, so it
    never collides with a cluster's stack), owns each region's gateway, its RAM share and the share's
    acceptance, each group's route table with its members' associations and static routes, the peering
    attachments between regions and their static routes. Groups naming the same network account share
    its gateways; each has its own route table, so two groups on one gateway never see each other.
    A member's stack owns its VPC attachment and, with summaryCIDRs, its routes to them. Routes per pair
    and security-group rules stay with the pair's owner (stacks.mesh), as in peering mode.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from stacks.model.hub import MeshGroup, Topology
from stacks.status import GroupStatus, MeshHubStatus, TransitOutputsStatus, TransitRegionStatus
from stacks.targets import AwsTarget, Frozen, config_digest

TRANSIT_STACK_PREFIX = "_tgw_"
TRANSIT_TAG = "hubwright.io/transit"  # on every resource of a transit stack: its name
GROUP_TAG = "hubwright.io/mesh-group"  # on a group's route tables and peering attachments: its key (policy reads it)
MTU = {"peering": 9001, "transitGateway": 8500}  # bytes, within a region (docs/mesh.md)
Step = Literal["attach", "routes"]


def transit_stack(account: str) -> str:
    """The transit stack of a network account: '_' is not allowed in a Kubernetes name."""
    return f"{TRANSIT_STACK_PREFIX}{account}"


def is_transit_stack(key: str) -> bool:
    return key.startswith(TRANSIT_STACK_PREFIX)


# --- state and migration ---------------------------------------------------------------

class GroupState(Frozen):
    """HubConfig status.mesh.groups[<group key>]: what the group's stacks are built for."""

    topology: Topology
    migrating_to: Topology | None = None
    step: Step | None = None

    @classmethod
    def of(cls, entry: GroupStatus) -> "GroupState":
        """The state a group's status.mesh.groups entry records."""
        return cls(topology=entry.topology, migrating_to=entry.migrating_to, step=entry.step)

    def entry(self, *, members: int, message: str | None = None) -> GroupStatus:
        """The group's status.mesh.groups entry: this state, its member count and a word on it (none: no message)."""
        return GroupStatus(topology=self.topology, migrating_to=self.migrating_to,
                           step=self.step if self.migrating_to is not None else None, members=members,
                           message=message or None)

    def describe(self) -> str:
        if self.migrating_to is None:
            return self.topology
        return f"{self.topology} -> {self.migrating_to} (step {self.step})"


@dataclass(frozen=True)
class Phase:
    """What every stack of a group builds in a state."""

    peerings: bool  # VPC peerings exist
    attachments: bool  # Transit Gateway attachments exist (and, with summaryCIDRs, routes to them)
    routes_via: Topology  # the target of every route to a peer CIDR


def phase_of(state: GroupState) -> Phase:
    if state.migrating_to is None:
        peering = state.topology == "peering"
        return Phase(peerings=peering, attachments=not peering, routes_via=state.topology)
    routes = state.migrating_to if state.step == "routes" else state.topology
    return Phase(peerings=True, attachments=True, routes_via=routes)


def wanted_topology(config: MeshGroup, members: int, current: Topology | None) -> Topology:
    """The topology a group of `members` should have; `auto` keeps `current` between its two thresholds."""
    if config.topology != "auto":
        return config.topology
    if members >= config.auto_threshold:
        return "transitGateway"
    if members < config.peering_below:
        return "peering"
    return current or "peering"


def next_state(recorded: GroupState | None, wanted: Topology, *, existed: bool) -> GroupState:
    """The state to build now. `existed`: the group has members from before (join stamps) though no state was
    recorded; such a group is on peering, the only topology there was."""
    if recorded is None:
        if not existed:
            return GroupState(topology=wanted)
        recorded = GroupState(topology="peering")
    if recorded.migrating_to is None:
        if recorded.topology == wanted:
            return recorded
        return GroupState(topology=recorded.topology, migrating_to=wanted, step="attach")
    if recorded.migrating_to == wanted:
        return recorded
    if recorded.step == "attach":  # turned back before any route moved: drop what was being built
        return GroupState(topology=recorded.topology)
    return GroupState(topology=recorded.migrating_to, migrating_to=wanted, step="attach")


def advance(state: GroupState) -> GroupState:
    """The next state, once every stack of the group has applied `state`."""
    if state.step == "attach":
        return state.model_copy(update={"step": "routes"})
    if state.step == "routes" and state.migrating_to is not None:
        return GroupState(topology=state.migrating_to)
    return state


def migration_steps(start: Topology, end: Topology) -> list[GroupState]:
    """Every state from `start` to `end`, both included (one state when they are the same)."""
    states = [GroupState(topology=start)]
    while states[-1].topology != end or states[-1].migrating_to is not None:
        current = states[-1]
        states.append(next_state(current, end, existed=True) if current.migrating_to is None else advance(current))
    return states


# --- what the transit stack made (HubConfig status.mesh.transit[<stack>].outputs) ---------------

# A transit stack's outputs, as member stacks read them: the status model itself (stacks.status), one model.
TransitRegionOutputs = TransitRegionStatus
TransitOutputs = TransitOutputsStatus


@dataclass(frozen=True)
class MeshStatus:
    """What resolve reads of HubConfig status.mesh and of the members' status: the service writes both."""

    groups: Mapping[str, GroupState]  # group key -> state
    transit: Mapping[str, TransitOutputs]  # transit stack -> its outputs
    attachments: Mapping[str, str]  # cluster key -> its VPC attachment ID (status.outputs.transitAttachment)
    problems: tuple[str, ...] = ()  # entries of status.mesh the model could not parse (left out), by field

    @classmethod
    def empty(cls) -> "MeshStatus":
        return cls({}, {}, {})

    @classmethod
    def from_hub_status(cls, status: Any, attachments: Mapping[str, str] | None = None) -> "MeshStatus":
        """From a HubConfig's whole status, through the one model of status.mesh (stacks.status.MeshHubStatus)."""
        mesh, problems = MeshHubStatus.read(status)
        groups = {k: GroupState.of(v) for k, v in mesh.groups.items()}
        transit = {k: v.outputs or TransitOutputs() for k, v in mesh.transit.items()}
        return cls(groups, transit, dict(attachments or {}), problems)

    def gateway(self, stack: str, region: str) -> TransitRegionOutputs | None:
        outputs = self.transit.get(stack)
        return outputs.regions.get(region) if outputs is not None else None


# --- a member's side ------------------------------------------------------------------------

class TransitAttachment(Frozen):
    """A member's VPC attachment to its region's gateway (part of its MeshShare)."""

    transit_stack: str
    transit_gateway_id: str  # from HubConfig status.mesh.transit: the transit stack has made it
    subnet_ids: tuple[str, ...]  # spec.network.transitSubnets: one per availability zone
    summary_cidrs: tuple[str, ...] = ()  # routes from each of the member's route tables to these, via the gateway


# --- the transit stack's inputs ------------------------------------------------------------

# --- a member's CIDR blocks in a config JSON (MeshMember, TransitMember) ------------------------------------

# In a stack's config JSON (StackInputs.to_config, TransitInputs.to_config) a member's CIDR blocks keep the form a
# member had when it had one: `cidr` is the primary, and `secondary_cidrs` is there only when it has others. So the
# config, and the digest, of every single-CIDR member is what it was: adding the list re-runs no stack.

def blocks_in(data: Any) -> Any:
    """The wire form (`cidr` + `secondary_cidrs`) read back as `cidrs` (a model's before-validator)."""
    if isinstance(data, dict) and "cidr" in data and "cidrs" not in data:
        data = dict(data)
        data["cidrs"] = (data.pop("cidr"), *data.pop("secondary_cidrs", ()))
    return data


def blocks_out(out: dict[str, Any]) -> dict[str, Any]:
    """`cidrs` written in the wire form, in its place among the other keys (a model's wrap serializer)."""
    written: dict[str, Any] = {}
    for key, value in out.items():
        if key != "cidrs":
            written[key] = value
            continue
        written["cidr"] = value[0]
        if len(value) > 1:
            written["secondary_cidrs"] = value[1:]
    return written


class TransitMember(Frozen):
    """A member's attachment as the transit stack sees it (known once the member's stack has made it)."""

    cluster: str  # namespace/name
    account_id: str
    # Its VPC's CIDR blocks, primary first: one static route each (stacks.mesh.blocks: the wire form).
    cidrs: tuple[str, ...] = Field(min_length=1)
    attachment_id: str
    accept: bool  # another account, outside an Organization: the network account accepts the attachment

    @model_validator(mode="before")
    @classmethod
    def _wire(cls, data: Any) -> Any:
        return blocks_in(data)

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return blocks_out(handler(self))


class TransitRemote(Frozen):
    """The group's members in another region: reached over a peering attachment of the group's own."""

    region: str
    cidrs: tuple[str, ...]  # static routes in this region's group route table, to the peering attachment


class TransitGroupInputs(Frozen):
    group: str  # group key
    attachments: tuple[TransitMember, ...] = ()  # members in this region whose attachment exists
    remotes: tuple[TransitRemote, ...] = ()  # sorted by region


class TransitRegionInputs(Frozen):
    """One region's gateway. Between two regions, each group spanning both has a peering attachment of its
    own, requested by the earlier region (sorted) and accepted in the later one, associated with the group's
    route table on both sides: groups stay apart across regions too."""

    region: str
    network: AwsTarget  # the network account in this region
    members: tuple[AwsTarget, ...] = ()  # member accounts here (not the network's): the share's principals
    groups: tuple[TransitGroupInputs, ...] = ()  # sorted by group key


class TransitInputs(Frozen):
    """One transit stack: everything shared by the groups of one network account."""

    kind: Literal["transit"] = "transit"
    stack: str
    account_id: str  # the network account
    asn: int
    organization: bool
    tags: dict[str, str]
    regions: tuple[TransitRegionInputs, ...]

    # Read by nothing: kept because it has always been in the config JSON (to_config), so dropping it would change
    # the digest of every applied transit stack (a run each) and make their stored configs unreadable (extra=forbid).
    generation: None = None

    # -- stacks.inputs.StackProgramInputs (with stack, to_config, digest, describe): what the engine and plan read

    @property
    def key(self) -> str:
        """A transit stack is reconciled under its own name (automation.service.transit)."""
        return self.stack

    def to_config(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_config(cls, raw: str) -> "TransitInputs":
        return cls.model_validate_json(raw)

    def digest(self) -> str:
        """A stable hash of what the stack should look like."""
        return config_digest(self.to_config())

    def describe(self) -> dict[str, Any]:
        return {"hubwright:transit": self.stack, "hubwright:account": self.account_id}

    def targets(self) -> list[AwsTarget]:
        seen: dict[str, AwsTarget] = {}
        for region in self.regions:
            for target in (region.network, *region.members):
                seen.setdefault(target.key, target)
        return list(seen.values())
