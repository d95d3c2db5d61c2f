"""The mesh's quota pre-flight against what is already in the member's account (boto3 look-ups).

The planner (stacks.mesh) refuses a join that its own resources would push past a quota; AWS counts what
is already there too. Before a member's stack runs, this looks at its VPC and counts:

- routes in each of its route tables that are not the mesh's (the `local` routes and routes to the
  group's member or summary CIDRs left out; a route to a managed prefix list counted at the list's MaxEntries, as
  AWS counts it, an AWS-managed list of a gateway endpoint at 1: lookups.prefix_list_sizes), plus the routes the
  group puts there, against routesPerTable;
- inbound rules on each of its node security groups that are not the mesh's (description
  "hubwright mesh ..."), plus the mesh's, against rulesPerSecurityGroup;
- with an attachment, the VPC's Transit Gateway attachments to other gateways (not deleted, failed or
  rejected), plus this one, against transitGatewaysPerVPC.

An over-quota count stalls the cluster (NeedsAttention, looked at again every --stalled-recheck) with the
numbers, before anything runs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from botocore.exceptions import BotoCoreError, ClientError

from automation.adapters.aws.sessions import AwsSessions
from automation.adapters.aws.lookups import LookupFailed, prefix_list_sizes
from stacks.errors import NeedsAttention
from stacks.inputs import StackInputs
from stacks.mesh.share import MeshShare

GONE_ATTACHMENT_STATES = {"deleted", "deleting", "failed", "failing", "rejected", "rejecting"}
MESH_RULE_PREFIX = "hubwright mesh"


@dataclass(frozen=True)
class Found:
    routes: dict[str, int]  # route table -> routes that are not the mesh's
    rules: dict[str, int]  # security group -> inbound rules that are not the mesh's
    other_attachments: int  # the VPC's attachments to gateways other than the group's


def _pages(client: Any, method: str, key: str, **kwargs: Any) -> Iterable[dict]:
    for page in client.get_paginator(method).paginate(**kwargs):
        yield from page.get(key, [])


Sizes = Callable[[Iterable[str]], Mapping[str, int]]  # prefix list IDs -> what a route to each counts as


def routes_in_tables(ec2: Any, tables: Iterable[str], mesh_cidrs: set[str], sizes: Sizes) -> dict[str, int]:
    """Routes per table that are neither `local` nor to a CIDR the mesh manages; a route to a managed prefix list
    counts as `sizes` says (its MaxEntries)."""
    found = list(_pages(ec2, "describe_route_tables", "RouteTables", RouteTableIds=sorted(tables)))
    lists = {r["DestinationPrefixListId"] for table in found for r in table.get("Routes", [])
             if r.get("DestinationPrefixListId")}
    weight = sizes(lists) if lists else {}
    out = {}
    for table in found:
        out[table["RouteTableId"]] = sum(
            weight[r["DestinationPrefixListId"]] if r.get("DestinationPrefixListId") else 1
            for r in table.get("Routes", [])
            if r.get("GatewayId") != "local" and r.get("DestinationCidrBlock") not in mesh_cidrs)
    return out


def ingress_rules(ec2: Any, groups: Iterable[str]) -> dict[str, int]:
    """Inbound rules per security group that are not the mesh's."""
    out = {group: 0 for group in groups}
    if not out:
        return out
    for rule in _pages(ec2, "describe_security_group_rules", "SecurityGroupRules",
                       Filters=[{"Name": "group-id", "Values": sorted(out)}]):
        if not rule.get("IsEgress") and not (rule.get("Description") or "").startswith(MESH_RULE_PREFIX):
            out[rule["GroupId"]] = out.get(rule["GroupId"], 0) + 1
    return out


def other_attachments(ec2: Any, vpc_id: str, gateway: str | None) -> int:
    """The VPC's live attachments to gateways other than `gateway`."""
    return sum(1 for a in _pages(ec2, "describe_transit_gateway_vpc_attachments", "TransitGatewayVpcAttachments",
                                 Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])
               if a.get("State") not in GONE_ATTACHMENT_STATES and a.get("TransitGatewayId") != gateway)


def look(ec2: Any, share: MeshShare, sizes: Sizes) -> Found:
    member = share.member
    mesh_cidrs = set(share.limits.group_cidrs) if share.limits is not None else set()
    gateway = share.attachment.transit_gateway_id if share.attachment is not None else None
    return Found(routes=routes_in_tables(ec2, member.route_table_ids, mesh_cidrs, sizes),
                 rules=ingress_rules(ec2, member.security_group_ids),
                 other_attachments=other_attachments(ec2, member.vpc_id, gateway) if gateway else 0)


def problems(share: MeshShare, found: Found) -> list[str]:
    """Each quota the member's VPC would pass, with the numbers."""
    limits = share.limits
    if limits is None:
        return []
    out = []
    group = share.group
    for table, there in sorted(found.routes.items()):
        total = there + limits.mesh_routes
        if total > limits.routes_per_table:
            out.append(f"route table {table} would hold {total} routes: {there} already there + {limits.mesh_routes} "
                       f"from mesh group {group}; routesPerTable is {limits.routes_per_table}")
    for sg, there in sorted(found.rules.items()):
        total = there + limits.mesh_rules
        if total > limits.rules_per_security_group:
            out.append(f"security group {sg} would hold {total} inbound rules: {there} already there + "
                       f"{limits.mesh_rules} from mesh group {group}; rulesPerSecurityGroup is "
                       f"{limits.rules_per_security_group}")
    if share.attachment is not None and found.other_attachments + 1 > limits.transit_gateways_per_vpc:
        out.append(f"VPC {share.member.vpc_id} would have {found.other_attachments + 1} Transit Gateway attachments: "
                   f"{found.other_attachments} to other gateways + mesh group {group}'s; transitGatewaysPerVPC is "
                   f"{limits.transit_gateways_per_vpc}")
    return out


class MeshQuotaPreflight:
    """A reconcile guard (automation.service.clusters.Guard) for a member of a mesh group."""

    def __init__(self, sessions: AwsSessions):
        self.sessions = sessions

    def __call__(self, applied: StackInputs | None, desired: StackInputs) -> None:
        share = desired.mesh
        if share is None or share.limits is None:
            return
        ec2 = self.sessions.client(desired.cluster, "ec2", operation="mesh-quotas", cluster=desired.name,
                                   namespace=desired.namespace)

        def sizes(ids: Iterable[str]) -> Mapping[str, int]:
            return prefix_list_sizes(self.sessions, desired.cluster, ids, operation="mesh-quotas",
                                     cluster=desired.name, namespace=desired.namespace)

        try:
            found = look(ec2, share, sizes)
        except (ClientError, BotoCoreError) as exc:
            raise LookupFailed(f"counting what is already in VPC {share.member.vpc_id} of account "
                               f"{desired.cluster.account_id}: {exc}", reason="MeshQuotaLookupFailed") from None
        over = problems(share, found)
        if over:
            raise NeedsAttention(
                f"HubCluster {desired.key}: metadata.labels[hubwright.io/mesh]: " + "; ".join(over)
                + " (HubConfig spec.mesh, or accountQuotas for this account: raise the AWS quota and the setting, "
                  "or remove what is already there)", reason="MeshLimitExceeded")
