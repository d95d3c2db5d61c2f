"""What one stack builds of the mesh (stacks.mesh): its member, the pairs it owns and its share. Pure."""
from __future__ import annotations

from typing import Any

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from stacks.mesh.blocks import declared_fields
from stacks.model.hub import MeshRule, Topology
from stacks.targets import AwsTarget, Frozen
from stacks.transit import TransitAttachment, blocks_in, blocks_out


# --- the share: what one stack builds -------------------------------------------

class MeshMember(Frozen):
    """One cluster as the mesh sees it."""

    key: str  # namespace/name
    stack: str  # namespace.name
    target: AwsTarget  # its account, region and role: the provider that reaches its VPC
    vpc_id: str
    # Its VPC's CIDR blocks: the primary first, then the others, each once (stacks.mesh.blocks: the wire form).
    cidrs: tuple[str, ...] = Field(min_length=1)
    route_table_ids: tuple[str, ...]
    security_group_ids: tuple[str, ...] = ()  # node security groups ("nodes" mode)
    dedicated_security_group: str | None = None  # the group's name ("dedicated" mode)
    transit_gateway_id: str | None = None  # the gateway of its region, once the transit stack has made it
    # Where each block stands in the object, parallel to cidrs ("spec.network.secondaryCIDRs[0]", or the status
    # field discovery wrote): what a refusal names. Outside the config JSON: where a block came from builds nothing.
    cidr_fields: tuple[str, ...] = Field((), exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _wire(cls, data: Any) -> Any:
        data = blocks_in(data)
        if isinstance(data, dict) and not data.get("cidr_fields") and data.get("cidrs"):
            data = {**data, "cidr_fields": declared_fields(len(data["cidrs"]))}
        return data

    @model_validator(mode="after")
    def _parallel(self) -> "MeshMember":
        if len(self.cidr_fields) != len(self.cidrs):
            raise ValueError(f"cidr_fields names {len(self.cidr_fields)} blocks and cidrs has {len(self.cidrs)}")
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return blocks_out(handler(self))

    @property
    def blocks(self) -> tuple[tuple[str, str], ...]:
        """(CIDR, the field that says it) for each block, primary first."""
        return tuple(zip(self.cidrs, self.cidr_fields))


class MeshPair(Frozen):
    """A pair owned by this stack: peering requested here, accepted by `peer`."""

    name: str  # the two stack names in sorted order: "a.x+b.y"
    peer: MeshMember


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
