"""The hub's CIDRs (stacks.mesh): every CIDR the hub owns, which no member may declare, and whether each of a
member's declared CIDR blocks is its VPC's. Pure."""
from __future__ import annotations

import ipaddress
from bisect import bisect_right
from itertools import accumulate
from typing import Iterable, Mapping

from stacks.errors import InvalidSpec
from stacks.mesh.blocks import PRIMARY_FIELD
from stacks.mesh.share import HubVpc, MeshMember
from stacks.model.hub import HubConfig
from stacks.targets import Frozen


# --- the hub's CIDRs: no member may declare one -------------------------------------------------

class HubCidr(Frozen):
    """A CIDR the hub owns, and where the HubConfig says so."""

    owner: str  # "HubConfig default spec.associatedVPCs[0] (VPC vpc-0mgmt)"
    cidr: str


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


def hub_overlap(ref: str, cidr: str, owned: HubCidrs | Iterable[HubCidr], group: str,
                field: str = PRIMARY_FIELD) -> InvalidSpec | None:
    """The refusal of a member CIDR block (at `field` of the member) that overlaps a CIDR of the hub's, naming
    both objects and both CIDRs."""
    owned = owned if isinstance(owned, HubCidrs) else HubCidrs(owned)
    hub_cidr = owned.overlapping(ipaddress.IPv4Network(cidr))
    if hub_cidr is not None:
        return InvalidSpec.one(
            ref, field,
            f"CIDR {cidr} of {ref} overlaps CIDR {hub_cidr.cidr} of {hub_cidr.owner}, which the hub owns; "
            f"mesh group {group} would route it to this cluster in its peers' route tables, taking the hub's "
            f"traffic. Declare the VPC's own CIDR", condition="MeshCIDROverlap")
    return None


def vpc_cidr_problem(member: MeshMember, blocks: tuple[str, ...] | None) -> tuple[str, str] | None:
    """The field and why, when one of the member's declared CIDR blocks is not its VPC's (`blocks`: what the
    member's account says the VPC has; None: no such VPC), or None. Its peers route exactly each declared range
    to it."""
    where = f"VPC {member.vpc_id} in account {member.target.account_id} ({member.target.region})"
    if blocks is None:
        return member.cidr_fields[0], f"there is no {where}"
    real = {ipaddress.IPv4Network(b) for b in blocks}
    for cidr, field in member.blocks:
        if ipaddress.IPv4Network(cidr) not in real:
            return field, (f"CIDR {cidr} is not a CIDR block of {where}, which has {', '.join(blocks)}; a member "
                           f"declares one of its VPC's own CIDR blocks, since its peers route exactly that range to it")
    return None
