"""A member's CIDR blocks (stacks.mesh): its VPC's primary block first, then its other associations, each checked,
routed and admitted as the primary is. Pure.

In a stack's config JSON the blocks keep the form a member had when it had one (stacks.transit.blocks_out, beside
TransitMember, the other model that carries them): adding the list re-runs no stack.
"""
from __future__ import annotations

PRIMARY_FIELD = "spec.network.cidr"
SECONDARY_FIELD = "spec.network.secondaryCIDRs"


def declared_fields(count: int) -> tuple[str, ...]:
    """Where `count` blocks stand when the object declares them: spec.network.cidr, then secondaryCIDRs[i]."""
    return (PRIMARY_FIELD, *(f"{SECONDARY_FIELD}[{i}]" for i in range(count - 1)))


def block_suffix(cidrs: tuple[str, ...], cidr: str) -> str:
    """What a resource made for one block of a member adds to its name: nothing for the primary (the names a
    member with one block always had), "-<block>" for another (derived from the block, so the same on every run
    and whichever other blocks come or go)."""
    return "" if cidr == cidrs[0] else f"-{cidr}"
