"""StackInputs: everything one cluster's stack needs, resolved, validated and frozen.

(AwsTarget lives in stacks.targets and is re-exported here for its many users.)

One StackInputs feeds `pulumi up` (as stack config), the offline plan and the
service (whose skip-check is `digest()`), so the three can never disagree.
`stack_targets(inputs)` says which (account, region) each of the stack's providers
points at: components.program builds its providers from it, and the audit and the
preflight read the same list, so what they check is what the program uses.

StackProgramInputs is what the engine, its worker pool and the stack program read of any
stack's inputs: a cluster's (StackInputs) or a network account's transit stack
(stacks.transit.TransitInputs). Both satisfy it as they are; neither fakes a field of the other.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from stacks.mesh.share import MeshShare
from stacks.transit import TransitInputs
from stacks.model.hub import AssociatedVPC, EndpointVPC
from stacks.targets import AwsTarget, Frozen, config_digest

INPUTS_CONFIG_KEY = "inputs"  # stack config key (hubwright:inputs) that holds the JSON


class StackProgramInputs(Protocol):
    """One stack's inputs, as the engine (automation.adapters.engine), its worker pool and components.program
    see them, whatever the stack builds. inputs_from_config() reads them back from the config JSON."""

    @property
    def stack(self) -> str:
        """The Pulumi stack's name (stacks.names)."""
        ...

    @property
    def key(self) -> str:
        """What the stack is reconciled for: a cluster's namespace/name, or the transit stack's own name."""
        ...

    def to_config(self) -> str:
        """The JSON held in the stack's config (hubwright:inputs): what the program is built from."""
        ...

    def digest(self) -> str:
        """A stable hash of to_config(): equal digests build the same stack."""
        ...

    def describe(self) -> dict[str, Any]:
        """The stack's tags: who and where, for the console and for humans."""
        ...


class PrivateLinkInputs(Frozen):
    infra_id: str
    nlb_name: str  # "{infraID}-int", created by the installer
    api_host: str
    api_port: int
    # None: discovered at run time from the hub provider's caller identity.
    allowed_principal: str | None
    endpoint_vpc: EndpointVPC  # chosen by stacks.placement; stable once chosen
    associated_vpcs: tuple[AssociatedVPC, ...] = ()
    dns_record_type: Literal["Alias", "ARecord"] = "Alias"


class SharedIngressInputs(Frozen):
    """What the cluster's node-side proxy needs: its ID, where it listens, whom it dials and how."""

    cluster_id: str
    central_address: str  # host:port of the central load balancer
    proxy_bind: str  # host:port on every node (the kubernetes service IP)
    wire_mode: Literal["unique-id", "custom-tlv"] = "unique-id"
    tlv_type: int = 0xE0
    image: str = "haproxy:2.6"
    # Another project writes the node-side proxy (spec.sharedIngress.nodeProxy External): routed, never rendered.
    # Left out of the config while False, so no other stack moves.
    external_proxy: bool = False


class StackInputs(Frozen):
    stack: str  # "<namespace>.<name>": stable, readable, unique
    namespace: str
    name: str
    tenant: str
    generation: int | None = None  # not part of the digest: a no-op edit must not cost a run
    cluster: AwsTarget  # the cluster's account and region
    hub: AwsTarget  # the hub account in its default region
    tags: dict[str, str]
    # The cluster's own tags (its spec.tags), on what is built in its account beside `tags`. Left out of the config
    # while empty, so no stack of a cluster without any moves.
    cluster_tags: dict[str, str] = {}
    private_link: PrivateLinkInputs | None = None
    shared_ingress: SharedIngressInputs | None = None
    mesh: MeshShare | None = None  # this stack's share of its mesh group
    # Kept after its HubCluster was deleted with deletionPolicy Retain (stacks.retention.retained_inputs): only
    # its own account's part is built. Left out of the config while False, so no other stack's digest moves.
    retained: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def to_config(self) -> str:
        # Neither the generation nor the mesh limits change what the stack builds (a no-op edit must not run).
        exclude: dict[str, Any] = {"generation": True, "mesh": {"limits"}}
        if not self.retained:
            exclude["retained"] = True
        if not self.cluster_tags:
            exclude["cluster_tags"] = True
        if self.shared_ingress is not None and not self.shared_ingress.external_proxy:
            exclude["shared_ingress"] = {"external_proxy"}
        return self.model_dump_json(exclude=exclude)

    @classmethod
    def from_config(cls, raw: str) -> "StackInputs":
        return cls.model_validate_json(raw)

    def digest(self) -> str:
        """A stable hash of what the stack should look like."""
        return config_digest(self.to_config())

    def __hash__(self) -> int:  # dict fields make the default hash impossible
        return hash(self.digest())

    def describe(self) -> dict[str, Any]:
        """The stack tags: who and where, for the console and for humans."""
        return {
            "hubwright:cluster": self.key,
            "hubwright:namespace": self.namespace,
            "hubwright:tenant": self.tenant,
            "hubwright:account": self.cluster.account_id,
            "hubwright:region": self.cluster.region,
        }


def inputs_from_config(raw: str) -> StackInputs | TransitInputs:
    """A stack's inputs from its config JSON: a cluster's, or a transit stack's (`"kind": "transit"`)."""
    if json.loads(raw).get("kind") == "transit":
        return TransitInputs.from_config(raw)
    return StackInputs.from_config(raw)


@dataclass(frozen=True)
class StackTargets:
    """The (account, region) of every aws.Provider the stack program builds, by what it is for."""

    cluster: AwsTarget | None = None  # the cluster's own account: its endpoint service, its mesh side
    # The hub in the endpoint VPC's region: the interface endpoint, the zone and its associations, and the CIDR
    # lookup of an associated VPC given without one (in that VPC's region, through this provider: no provider of
    # its own, so no plugin process and no AssumeRole for a region where nothing is built).
    endpoint_hub: AwsTarget | None = None
    peers: dict[str, AwsTarget] = field(default_factory=dict)  # peer cluster key -> its account (owned pairs)

    def all(self) -> list[AwsTarget]:
        """Each distinct target once, in a stable order (the audit logs one pivot per target)."""
        ordered = [self.cluster, self.endpoint_hub, *self.peers.values()]
        unique: dict[str, AwsTarget] = {}
        for target in ordered:
            if target is not None:
                unique.setdefault(target.key, target)
        return list(unique.values())


def stack_targets(inputs: StackInputs) -> StackTargets:
    """Where the stack's providers point: only where some resource of the stack is built (each provider is a
    plugin process and an AssumeRole per run). A stack with no AWS resources (shared ingress only) has none, and
    a mesh member that owns no pair, no dedicated group and no attachment builds nothing on its own side."""
    link, share = inputs.private_link, inputs.mesh
    builds_own_side = share is not None and bool(
        share.pairs or share.member.dedicated_security_group is not None or share.attachment is not None)
    return StackTargets(
        cluster=inputs.cluster if link is not None or builds_own_side else None,
        endpoint_hub=inputs.hub.in_region(link.endpoint_vpc.region) if link is not None else None,
        peers={pair.peer.key: pair.peer.target for pair in share.pairs} if share is not None else {},
    )
