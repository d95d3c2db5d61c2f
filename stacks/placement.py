"""Where each cluster's hub endpoint goes: the least-used inventory VPC of its region.

Pure and stable: a cluster that already has a VPC keeps it (as long as the VPC is
still in the inventory); new clusters are placed one by one, oldest first, each
in the VPC of its region with the fewest endpoints (inventory order breaks ties),
never in a full one. A VPC's endpoints are hubwright's own (the placements) plus
the others already there (`foreign`: the service's endpoint census; none in the
offline plan), all against `privateLink.endpointsPerVPC`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from stacks.errors import InvalidSpec
from stacks.model.hub import EndpointVPC, HubConfig


@dataclass(frozen=True)
class Want:
    key: str  # namespace/name
    ref: str  # "HubCluster ns/name", for errors
    region: str
    created: str = ""  # creationTimestamp; older clusters are placed first


def place_endpoints(
    hub: HubConfig, wants: Iterable[Want], existing: Mapping[str, str], foreign: Mapping[str, int] | None = None,
) -> dict[str, EndpointVPC | InvalidSpec]:
    """Map each cluster key to its endpoint VPC, or to the error that prevents placing it.

    `existing`: cluster key → the VPC its endpoint already uses (kept). `foreign`: VPC → endpoints there
    that are not hubwright's."""
    inventory = hub.spec.endpoint_vpc_inventory
    by_id = {vpc.vpc_id: vpc for vpc in inventory}
    used = dict.fromkeys(by_id, 0)
    result: dict[str, EndpointVPC | InvalidSpec] = {}
    pending: list[Want] = []

    for want in wants:
        vpc = kept(by_id, want, existing.get(want.key))
        if vpc is not None:
            result[want.key] = vpc
            used[vpc.vpc_id] += 1
        else:
            pending.append(want)
    result.update(place_pending(hub, pending, used, foreign))
    return result


def kept(by_id: Mapping[str, EndpointVPC], want: Want, existing: str | None) -> EndpointVPC | None:
    """The VPC a cluster keeps: the one its endpoint already uses, while that is in the inventory, in its region."""
    vpc = by_id.get(existing or "")
    return vpc if vpc is not None and vpc.region == want.region else None


def place_pending(hub: HubConfig, pending: Iterable[Want], kept_per_vpc: Mapping[str, int],
                  foreign: Mapping[str, int] | None = None) -> dict[str, EndpointVPC | InvalidSpec]:
    """place_endpoints' second half: the clusters that keep no VPC, oldest first, each in the least-used VPC of its
    region, around `kept_per_vpc` (VPC -> hubwright's endpoints kept there). stacks.incremental calls it alone for
    a region whose other clusters all keep theirs, with counts it keeps, so a new cluster is placed without a pass
    over its region."""
    pending = sorted(pending, key=lambda w: (w.created, w.key))
    regions = {want.region for want in pending}
    inventory = [vpc for vpc in hub.spec.endpoint_vpc_inventory if vpc.region in regions]
    limit = hub.spec.private_link.endpoints_per_vpc
    others = {vpc.vpc_id: max(0, (foreign or {}).get(vpc.vpc_id, 0)) for vpc in inventory}
    used = {vpc_id: count + kept_per_vpc.get(vpc_id, 0) for vpc_id, count in others.items()}
    result: dict[str, EndpointVPC | InvalidSpec] = {}
    for want in pending:
        candidates = [vpc for vpc in inventory if vpc.region == want.region]
        if not candidates:
            result[want.key] = InvalidSpec.one(
                want.ref, "spec.region",
                f"no VPC of HubConfig {hub.metadata.name} spec.endpointVPCInventory is in region {want.region}",
                condition="NoEndpointVPC")
            continue
        free = [vpc for vpc in candidates if used[vpc.vpc_id] < limit]
        if not free:
            held = ", ".join(f"{vpc.vpc_id} {used[vpc.vpc_id]} ({others[vpc.vpc_id]} not hubwright's)"
                             for vpc in candidates)
            result[want.key] = InvalidSpec.one(
                want.ref, "spec.privateLink",
                f"every inventory VPC in {want.region} already holds {limit} endpoints "
                f"(HubConfig spec.privateLink.endpointsPerVPC): {held}; add a VPC to the inventory",
                condition="NoEndpointVPC")
            continue
        best = min(free, key=lambda vpc: used[vpc.vpc_id])  # min keeps inventory order on ties
        used[best.vpc_id] += 1
        result[want.key] = best
    return result
