"""The declared network against the found one: one rule for what a cluster's stack is built from. Pure.

`merged(cluster, found, ...)` returns the cluster with spec.network filled from what discovery found in the
cluster's own account (status.network, stacks.network.found), or why it cannot be:

- every fact the cluster declares is compared with what was found, and a disagreement is refused by name
  (InvalidSpec, reason NetworkMismatch) before anything runs: a CIDR that is not one of the VPC's associations
  (naming the VPC and its real blocks), a route table not in the VPC, a security group in another VPC, a
  transit subnet not in the VPC or in another zone;
- what the cluster leaves out is taken from what was found: the VPC's every CIDR block (the primary first: the
  declared one, else the VPC's own), its route tables (all of them, or those of subnets tagged private, as
  HubConfig spec.discovery.routeTables chooses), its node security groups (by tag), one subnet per zone for a
  Transit Gateway attachment (a private one where there is one);
- nothing found yet: the declared network as it is when discovery is off (the offline plan without
  stand-ins, a service without AWS), else Pending (NetworkNotDiscovered: the cluster waits, nothing runs, and
  the message gives discovery's last failure, status.networkError); a failure a person must fix (NoCredentials,
  AccessDenied, VpcAmbiguous) is a refusal with the lookup's reason instead: Stalled, so it is counted and alerted;
- a cluster that builds nothing on its network (shared ingress only: stacks.network.query.uses_network) is taken
  as it is: its network is neither read nor waited for.

A load balancer PrivateLink would publish that is not in the cluster's VPC is refused too (NetworkMismatch): a cluster
publishes its own API server, never another's. Which cluster holds a VPC or a load balancer is the fleet's rule,
decided in admission (stacks.claims).
"""
from __future__ import annotations

from typing import Iterable

from stacks.errors import FieldError, InvalidSpec
from stacks.model.cluster import Cluster, Network
from stacks.model.hub import Discovery, Subnet
from stacks.network.found import FoundNetwork, FoundSubnet, error_of, found_of, stale
from stacks.network.query import uses_network
from stacks.targets import AwsTarget

MISMATCH = "NetworkMismatch"  # a declared fact the cluster's account contradicts
NOT_DISCOVERED = "NetworkNotDiscovered"  # discovery has not read the network yet (or read it elsewhere)


class Pending(InvalidSpec):
    """Not invalid: waiting for a fact from elsewhere (discovery). Nothing runs; the status says Progressing,
    and the discovery's status write is the input change that resolves it again."""

    def __init__(self, obj: str, field: str, reason: str):
        super().__init__([FieldError(obj, field, reason)], NOT_DISCOVERED)


def _where(found: FoundNetwork) -> str:
    return f"VPC {found.vpc_id} in account {found.account_id} ({found.region})"


def _blocks(found: FoundNetwork) -> str:
    return ", ".join(found.cidrs) or "no IPv4 block"


def chosen_tables(subnets: Iterable[FoundSubnet], every: Iterable[str], settings: Discovery) -> list[str]:
    """The route tables a cluster that names none takes (HubConfig spec.discovery.routeTables): all of them
    (`every`), or those of its private subnets. The one rule for discovery and for a source that knows its
    subnets (stacks.sources.capi)."""
    if settings.route_tables == "all":
        return sorted(set(every))
    return sorted({s.route_table_id for s in subnets if s.private and s.route_table_id})


def one_per_zone(subnets: Iterable[FoundSubnet]) -> list[Subnet]:
    """One subnet per zone for a Transit Gateway attachment: a private one where the zone has one (then by ID).
    The one rule for discovery and for a source that knows its subnets."""
    by_zone: dict[str, list] = {}
    for subnet in subnets:
        by_zone.setdefault(subnet.availability_zone, []).append(subnet)
    out = []
    for zone, subnets in sorted(by_zone.items()):
        best = sorted(subnets, key=lambda s: (not s.private, s.subnet_id))[0]
        out.append(Subnet(subnet_id=best.subnet_id, availability_zone=zone))
    return out


def disagreements(ref: str, declared: Network, found: FoundNetwork) -> list[FieldError]:
    """Every declared fact the cluster's account contradicts, each naming the field and what was found."""
    errors = []
    where = _where(found)
    blocks = set(found.cidrs)
    for field, cidr in [("spec.network.cidr", declared.cidr),
                        *((f"spec.network.secondaryCIDRs[{i}]", c) for i, c in enumerate(declared.secondary_cidrs))]:
        if cidr is not None and cidr not in blocks:
            errors.append(FieldError(ref, field, f"CIDR {cidr} is not a CIDR block of {where}, which has "
                                                 f"{_blocks(found)}"))
    tables = set(found.route_table_ids)
    for i, table in enumerate(declared.route_table_ids):
        if table not in tables:
            errors.append(FieldError(ref, f"spec.network.routeTableIDs[{i}]",
                                     f"route table {table} is not in {where}"))
    groups = set(found.security_group_ids)
    for i, group in enumerate(declared.node_security_group_ids):
        if group not in groups:
            errors.append(FieldError(ref, f"spec.network.nodeSecurityGroupIDs[{i}]",
                                     f"security group {group} is not in {where}: it belongs to another VPC or "
                                     "account"))
    zones = {s.subnet_id: s.availability_zone for s in found.subnets}
    for i, subnet in enumerate(declared.transit_subnets):
        zone = zones.get(subnet.subnet_id)
        if zone is None:
            errors.append(FieldError(ref, f"spec.network.transitSubnets[{i}]",
                                     f"subnet {subnet.subnet_id} is not in {where}"))
        elif zone != subnet.availability_zone:
            errors.append(FieldError(ref, f"spec.network.transitSubnets[{i}].availabilityZone",
                                     f"subnet {subnet.subnet_id} is in {zone}, not {subnet.availability_zone}"))
    return errors


def merged(cluster: Cluster, target: AwsTarget, settings: Discovery, *, discovery: bool) -> Cluster | InvalidSpec:
    """The cluster with its network filled from status.network, or why it cannot be (module docstring).
    `target`: the account and region the tenancy gate admitted it to; `discovery`: whether one is running."""
    declared = cluster.spec.network
    if declared is None or not uses_network(cluster):
        return cluster  # registered only, or nothing is built on its network (shared ingress only)
    found = found_of(cluster.status)
    ref = cluster.ref
    if stale(found, target.account_id, target.region, declared.vpc_id) is not None:
        found = None  # never read, or read where the cluster no longer is or for another VPC: read it (again)
    if found is None:
        if not discovery and declared.vpc_id is not None and declared.cidr is not None:
            return cluster
        what = (f"VPC {declared.vpc_id}" if declared.vpc_id else
                f"the VPC tagged kubernetes.io/cluster/{cluster.spec.infra_id}")
        where = f"{what} in account {target.account_id} ({target.region})"
        failed = error_of(cluster.status)
        if failed is not None and failed.refused:  # a person must act: Stalled, with the lookup's own reason
            return InvalidSpec.one(ref, "status.network", f"discovery cannot read {where}: {failed.message}",
                                   condition=failed.reason)
        last = f"; the last read failed ({failed.reason}): {failed.message}" if failed is not None else ""
        return Pending(ref, "status.network", f"waiting for discovery to read {where}{last}")
    errors = disagreements(ref, declared, found)
    balancer = found.load_balancer
    if cluster.spec.private_link.enabled and balancer is not None and balancer.vpc_id != found.vpc_id:
        errors.append(FieldError(ref, "spec.privateLink.loadBalancerName",
                                 f"load balancer {balancer.name} is in VPC {balancer.vpc_id or 'unknown'}, not the "
                                 f"cluster's {_where(found)}: PrivateLink publishes only the cluster's own API server"))
    if errors:
        return InvalidSpec(errors, MISMATCH)
    if not found.cidrs:
        return InvalidSpec.one(ref, "status.network.cidrs", f"{_where(found)} has no IPv4 CIDR block",
                               condition=MISMATCH)
    primary = declared.cidr or found.cidrs[0]
    network = declared.model_copy(update={
        "vpc_id": found.vpc_id,
        "cidr": primary,
        "secondary_cidrs": [c for c in found.cidrs if c != primary],
        "route_table_ids": list(declared.route_table_ids) or chosen_tables(found.subnets, found.route_table_ids,
                                                                           settings),
        "node_security_group_ids": list(declared.node_security_group_ids) or sorted(found.node_security_group_ids),
        "transit_subnets": list(declared.transit_subnets) or one_per_zone(found.subnets),
    })
    return cluster.model_copy(update={"spec": cluster.spec.model_copy(update={"network": network})})
