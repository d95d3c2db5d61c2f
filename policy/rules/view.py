"""What the rules read, and what they say: a neutral view of a stack's resources (Resource, Provider), what its inputs
allow (Context.of), a Violation, and a Rule (a name, its scope and its check)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence

from policy.rules.kinds import kind_of
from stacks.inputs import StackInputs, stack_targets
from stacks.transit import TransitInputs

Level = Literal["mandatory", "advisory", "disabled"]
LEVELS: tuple[Level, ...] = ("mandatory", "advisory", "disabled")


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
    secondary: tuple[str, ...] = ()  # its VPC's other CIDR blocks, each routed and admitted as cidr is

    @property
    def cidrs(self) -> tuple[str, ...]:
        return (self.cidr, *self.secondary)


@dataclass(frozen=True)
class TgwGroup:
    """A mesh group in a transit stack: what its route tables may route, and to which attachment."""
    group: str
    attachments: Mapping[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)  # member attachment ->
    # (cluster, its CIDR blocks)
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
        if targets.endpoint_hub is not None:
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
                members=tuple(Member(m.key, m.vpc_id, m.cidrs[0], m.route_table_ids, m.transit_gateway_id,
                                     m.cidrs[1:]) for m in members),
                summary_cidrs=attachment.summary_cidrs if attachment is not None else (),
                summary_gateway=attachment.transit_gateway_id if attachment is not None else None)
        return context


def _replace(context: Context, **changes: Any) -> Context:
    return Context(**{**context.__dict__, **changes})


def _tgw_groups(inputs: TransitInputs) -> dict[str, TgwGroup]:
    attachments: dict[str, dict[str, tuple[str, tuple[str, ...]]]] = {}
    remotes: dict[str, dict[str, tuple[str, ...]]] = {}
    for region in inputs.regions:
        for group in region.groups:
            attachments.setdefault(group.group, {}).update(
                {m.attachment_id: (m.cluster, m.cidrs) for m in group.attachments})
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
