"""The direct AWS calls the service makes (outside Pulumi), each through automation.adapters.aws.sessions.

Each lookup declares, with `@needs`, which role it runs as ("hub" or "cluster")
and the IAM actions it calls; automation.cli.iam builds the least-privilege
policies from these declarations, and tests/test_aws_sessions.py runs every
lookup under moto's IAM enforcement with exactly those policies.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Literal

from botocore.exceptions import BotoCoreError, ClientError

from automation.adapters.aws.sessions import AwsError, AwsSessions, transient
from stacks.inputs import AwsTarget, StackInputs
from stacks.errors import NeedsAttention
from stacks.mesh.routes import FoundRoute
from stacks.mesh.share import HubVpc
from stacks.model.hub import EndpointVPC
from stacks.names import MANAGED_BY, MANAGED_BY_TAG

Side = Literal["hub", "cluster"]


@dataclass(frozen=True)
class Needs:
    side: Side
    actions: tuple[str, ...]


NEEDS: dict[str, Needs] = {}  # lookup name → what it needs; filled by @needs at import


def needs(side: Side, *actions: str) -> Callable:
    def register(fn: Callable) -> Callable:
        NEEDS[fn.__name__] = Needs(side, tuple(actions))
        return fn

    return register


class LookupFailed(AwsError):
    """A lookup found nothing yet, or AWS could not answer now (retried with backoff); `reason` becomes the
    cluster's condition reason."""

    reason = "LookupFailed"


class LookupRefused(LookupFailed, NeedsAttention):
    """AWS refused the lookup (denied, unknown input) or found something a person must fix: Stalled, looked at
    again every --stalled-recheck."""

    reason = "LookupRefused"


def _refused(exc: ClientError | BotoCoreError, what: str, target: AwsTarget) -> LookupFailed:
    """The lookup's failure in its class (automation.adapters.aws.sessions.transient decides)."""
    where = f"{what} in account {target.account_id} ({target.region}) failed"
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = error.get("Code", "?")
        message = f"{where}: {code}: {error.get('Message', exc)}"
        if transient(exc):
            return LookupFailed(message)
        reason = "AccessDenied" if code in ("AccessDenied", "AccessDeniedException", "UnauthorizedOperation") \
            else "LookupRefused"
        return LookupRefused(message, reason=reason)
    return LookupFailed(f"{where}: {exc}") if transient(exc) else LookupRefused(f"{where}: {exc}")


# --- the cluster's NLB -----------------------------------------------------------

@dataclass(frozen=True)
class LoadBalancer:
    arn: str
    name: str
    dns_name: str
    vpc_id: str
    scheme: str
    state: str


@needs("cluster", "elasticloadbalancing:DescribeLoadBalancers")
def find_nlb(sessions: AwsSessions, inputs: StackInputs, *, operation: str = "find-nlb") -> LoadBalancer:
    """The installer's internal NLB "{infraID}-int" in the cluster's account and region.

    Raises LookupFailed with reason LoadBalancerNotFound (retried), or LookupRefused (NotANetworkLoadBalancer)
    before any stack runs, instead of a failed `pulumi up` later.
    """
    link = inputs.private_link
    if link is None:
        raise ValueError(f"HubCluster {inputs.key} does not use PrivateLink; it has no NLB to find")
    target = inputs.cluster
    client = sessions.client(target, "elbv2", operation=operation, cluster=inputs.name, namespace=inputs.namespace)
    try:
        found = client.describe_load_balancers(Names=[link.nlb_name])["LoadBalancers"]
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "LoadBalancerNotFound":
            found = []
        else:
            raise _refused(exc, f"looking up load balancer {link.nlb_name}", target) from None
    except BotoCoreError as exc:
        raise _refused(exc, f"looking up load balancer {link.nlb_name}", target) from None
    if not found:
        raise LookupFailed(
            f"no load balancer {link.nlb_name} in account {target.account_id} ({target.region}); the installer "
            f"creates it as '<infraID>-int': check spec.infraID and the cluster's account and region",
            reason="LoadBalancerNotFound")
    lb = found[0]
    if lb.get("Type") != "network":
        raise LookupRefused(f"load balancer {link.nlb_name} in account {target.account_id} is a {lb.get('Type')} "
                            "load balancer; PrivateLink needs a network load balancer",
                            reason="NotANetworkLoadBalancer")
    return LoadBalancer(arn=lb["LoadBalancerArn"], name=lb["LoadBalancerName"], dns_name=lb.get("DNSName", ""),
                        vpc_id=lb.get("VpcId", ""), scheme=lb.get("Scheme", ""),
                        state=(lb.get("State") or {}).get("Code", ""))


# --- endpoints already in the inventory VPCs -------------------------------------------

# Interface and Gateway Load Balancer endpoints share the per-VPC quota; these states no longer hold a slot.
_COUNTED_TYPES = frozenset({"Interface", "GatewayLoadBalancer"})
_GONE = frozenset({"deleted", "failed", "rejected", "expired"})


@needs("hub", "ec2:DescribeVpcEndpoints")
def foreign_endpoint_counts(sessions: AwsSessions, hub: AwsTarget, inventory: Iterable[EndpointVPC], *,
                            operation: str = "count-endpoints") -> dict[str, int]:
    """VPC ID → live interface endpoints there that hubwright did not make (no managed-by tag of ours), for
    every inventory VPC: what placement must leave room for. One paged call per region, in the hub account."""
    by_region: dict[str, list[str]] = {}
    for vpc in inventory:
        by_region.setdefault(vpc.region, []).append(vpc.vpc_id)
    counts: dict[str, int] = {}
    for region, vpc_ids in sorted(by_region.items()):
        target = hub.in_region(region)
        client = sessions.client(target, "ec2", operation=operation)
        counts.update({vpc_id: 0 for vpc_id in vpc_ids})
        try:
            for page in client.get_paginator("describe_vpc_endpoints").paginate(
                Filters=[{"Name": "vpc-id", "Values": sorted(set(vpc_ids))}]
            ):
                for endpoint in page.get("VpcEndpoints", []):
                    ours = any(tag.get("Key") == MANAGED_BY_TAG and tag.get("Value") == MANAGED_BY
                               for tag in endpoint.get("Tags") or [])
                    if endpoint.get("VpcEndpointType") in _COUNTED_TYPES and not ours \
                            and str(endpoint.get("State", "")).lower() not in _GONE:
                        counts[endpoint["VpcId"]] = counts.get(endpoint["VpcId"], 0) + 1
        except (ClientError, BotoCoreError) as exc:
            raise _refused(exc, f"counting VPC endpoints of {', '.join(vpc_ids)}", target) from None
    return counts


# --- a mesh member's VPC, the hub's VPCs and the route tables a pair writes into ------------------------

_ROUTE_TARGETS = ("GatewayId", "TransitGatewayId", "VpcPeeringConnectionId", "NatGatewayId", "NetworkInterfaceId",
                  "InstanceId", "LocalGatewayId", "CarrierGatewayId", "EgressOnlyInternetGatewayId", "CoreNetworkArn")


def _blocks(vpc: dict) -> tuple[str, ...]:
    """A VPC's associated IPv4 CIDR blocks (the primary and every secondary; none being added or removed)."""
    blocks = {a["CidrBlock"] for a in vpc.get("CidrBlockAssociationSet") or []
              if (a.get("CidrBlockState") or {}).get("State") == "associated"}
    return tuple(sorted(blocks or {vpc["CidrBlock"]}))


@needs("cluster", "ec2:DescribeVpcs")
def vpc_cidrs(sessions: AwsSessions, target: AwsTarget, vpc_id: str, *, operation: str = "vpc-cidrs",
              cluster: str | None = None, namespace: str | None = None) -> tuple[str, ...] | None:
    """The CIDR blocks VPC `vpc_id` has in the target's account and region, or None when it has no such VPC."""
    client = sessions.client(target, "ec2", operation=operation, cluster=cluster, namespace=namespace)
    try:
        found = client.describe_vpcs(Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])["Vpcs"]
    except (ClientError, BotoCoreError) as exc:
        raise _refused(exc, f"looking up VPC {vpc_id}", target) from None
    return _blocks(found[0]) if found else None


@needs("hub", "ec2:DescribeVpcs")
def hub_vpc_cidrs(sessions: AwsSessions, hub: AwsTarget, vpcs: Iterable[HubVpc], *,
                  operation: str = "hub-vpc-cidrs") -> dict[str, tuple[str, ...]]:
    """VPC ID -> the CIDR blocks the hub account says each of its VPCs has (secondary ones included, and the
    ones of an associated VPC declared without a CIDR). One call per region."""
    by_region: dict[str, set[str]] = {}
    for vpc in vpcs:
        by_region.setdefault(vpc.region, set()).add(vpc.vpc_id)
    out: dict[str, tuple[str, ...]] = {}
    for region, vpc_ids in sorted(by_region.items()):
        target = hub.in_region(region)
        client = sessions.client(target, "ec2", operation=operation)
        try:
            for page in client.get_paginator("describe_vpcs").paginate(
                    Filters=[{"Name": "vpc-id", "Values": sorted(vpc_ids)}]):
                out.update({vpc["VpcId"]: _blocks(vpc) for vpc in page.get("Vpcs", [])})
        except (ClientError, BotoCoreError) as exc:
            raise _refused(exc, f"looking up the CIDR blocks of {', '.join(sorted(vpc_ids))}", target) from None
    return out


@needs("cluster", "ec2:DescribeRouteTables")
def routes_in(sessions: AwsSessions, target: AwsTarget, tables: Iterable[str], *, operation: str = "route-tables",
              cluster: str | None = None, namespace: str | None = None) -> dict[str, tuple[FoundRoute, ...]]:
    """Route table -> its IPv4 routes (destination and target), for the tables that exist in the target's
    account and region."""
    wanted = sorted(set(tables))
    if not wanted:
        return {}
    client = sessions.client(target, "ec2", operation=operation, cluster=cluster, namespace=namespace)
    out: dict[str, tuple[FoundRoute, ...]] = {}
    try:
        for page in client.get_paginator("describe_route_tables").paginate(
                Filters=[{"Name": "route-table-id", "Values": wanted}]):
            for table in page.get("RouteTables", []):
                out[table["RouteTableId"]] = tuple(
                    FoundRoute(cidr=r["DestinationCidrBlock"],
                               target=next((r[k] for k in _ROUTE_TARGETS if r.get(k)), "?"))
                    for r in table.get("Routes", []) if r.get("DestinationCidrBlock"))
    except (ClientError, BotoCoreError) as exc:
        raise _refused(exc, f"reading route tables {', '.join(wanted)}", target) from None
    return out


def all_lookups() -> dict[str, Needs]:
    """Every direct call the service makes, with its side and IAM actions."""
    return dict(NEEDS)
