"""The direct AWS calls the service makes (outside Pulumi), each through automation.adapters.aws.sessions.

Each lookup declares, with `@needs`, which role it runs as ("hub" or "cluster")
and the IAM actions it calls; automation.cli.iam builds the least-privilege
policies from these declarations, and tests/test_aws_sessions.py runs every
lookup under moto's IAM enforcement with exactly those policies.
"""
from __future__ import annotations

import ipaddress
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Literal, Mapping

from botocore.exceptions import BotoCoreError, ClientError

from automation.adapters.aws.sessions import AwsError, AwsSessions, transient
from stacks.inputs import AwsTarget, StackInputs
from stacks.errors import NeedsAttention
from stacks.mesh.routes import FoundRoute, TableRoute, UnreadableList
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


# --- clients, and counting the calls they make --------------------------------------------------------

_TALLY = threading.local()  # this thread's open counting() blocks, innermost last


def _count_call(**_: Any) -> None:
    """botocore's before-call hook: one AWS API call (a page of a paginated one counts as one)."""
    for tally in getattr(_TALLY, "open", ()):
        tally[0] += 1


@contextmanager
def counting() -> Iterator[Callable[[], int]]:
    """The AWS API calls the lookups make in this thread inside the block (each page one call; AssumeRole is
    not one of them: AwsSessions counts those)."""
    tally = [0]
    stack = _TALLY.__dict__.setdefault("open", [])
    stack.append(tally)
    try:
        yield lambda: tally[0]
    finally:
        stack.remove(tally)


def _client(sessions: AwsSessions, target: AwsTarget, service: str, operation: str, cluster: str | None,
            namespace: str | None) -> Any:
    """sessions.client, its calls counted by counting()."""
    client = sessions.client(target, service, operation=operation, cluster=cluster, namespace=namespace)
    client.meta.events.register("before-call", _count_call, unique_id="hubwright-count-calls")
    return client


# --- a load balancer by name: the installer's NLB, or CAPA's ------------------------------------------------

@dataclass(frozen=True)
class LoadBalancer:
    arn: str
    name: str
    dns_name: str
    vpc_id: str
    scheme: str
    state: str
    type: str = ""  # "network", "application", "gateway" (elbv2 does not list classic ELBs)


@needs("cluster", "elasticloadbalancing:DescribeLoadBalancers")
def find_load_balancer(sessions: AwsSessions, target: AwsTarget, name: str, *, operation: str = "find-nlb",
                       cluster: str | None = None, namespace: str | None = None) -> LoadBalancer | None:
    """The load balancer `name` in the target's account and region, or None when there is none of that name."""
    client = _client(sessions, target, "elbv2", operation, cluster, namespace)
    try:
        found = client.describe_load_balancers(Names=[name])["LoadBalancers"]
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "LoadBalancerNotFound":
            return None
        raise _refused(exc, f"looking up load balancer {name}", target) from None
    except BotoCoreError as exc:
        raise _refused(exc, f"looking up load balancer {name}", target) from None
    if not found:
        return None
    lb = found[0]
    return LoadBalancer(arn=lb["LoadBalancerArn"], name=lb["LoadBalancerName"], dns_name=lb.get("DNSName", ""),
                        vpc_id=lb.get("VpcId", ""), scheme=lb.get("Scheme", ""),
                        state=(lb.get("State") or {}).get("Code", ""), type=lb.get("Type", ""))


@needs("cluster", "elasticloadbalancing:DescribeLoadBalancers")
def find_nlb(sessions: AwsSessions, inputs: StackInputs, *, operation: str = "find-nlb") -> LoadBalancer:
    """The installer's internal NLB "{infraID}-int" (or the one the cluster names) in the cluster's account and
    region.

    Raises LookupFailed with reason LoadBalancerNotFound (retried), or LookupRefused (NotANetworkLoadBalancer)
    before any stack runs, instead of a failed `pulumi up` later.
    """
    link = inputs.private_link
    if link is None:
        raise ValueError(f"HubCluster {inputs.key} does not use PrivateLink; it has no NLB to find")
    target = inputs.cluster
    lb = find_load_balancer(sessions, target, link.nlb_name, operation=operation, cluster=inputs.name,
                            namespace=inputs.namespace)
    if lb is None:
        raise LookupFailed(
            f"no load balancer {link.nlb_name} in account {target.account_id} ({target.region}); the installer "
            f"creates it as '<infraID>-int': check spec.infraID and the cluster's account and region",
            reason="LoadBalancerNotFound")
    if lb.type != "network":
        raise LookupRefused(f"load balancer {link.nlb_name} in account {target.account_id} is a {lb.type or None} "
                            "load balancer; PrivateLink needs a network load balancer",
                            reason="NotANetworkLoadBalancer")
    return lb


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
        client = _client(sessions, target, "ec2", operation, None, None)
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


@dataclass(frozen=True)
class Vpc:
    vpc_id: str
    cidrs: tuple[str, ...]  # every associated IPv4 block, the primary first
    tags: Mapping[str, str] = field(default_factory=dict)


def _tags(raw: dict) -> dict[str, str]:
    return {t["Key"]: t.get("Value", "") for t in raw.get("Tags") or [] if "Key" in t}


def _blocks(vpc: dict) -> tuple[str, ...]:
    """A VPC's associated IPv4 CIDR blocks (the primary first, then every secondary; none being added or
    removed)."""
    blocks = {a["CidrBlock"] for a in vpc.get("CidrBlockAssociationSet") or []
              if (a.get("CidrBlockState") or {}).get("State") == "associated"}
    primary = vpc["CidrBlock"]
    return (primary, *sorted(blocks - {primary})) if primary in blocks or not blocks else tuple(sorted(blocks))


@needs("cluster", "ec2:DescribeVpcs")
def find_vpcs(sessions: AwsSessions, target: AwsTarget, *, vpc_ids: Iterable[str] = (),
              tag: tuple[str, tuple[str, ...]] | None = None, operation: str = "vpc-cidrs",
              cluster: str | None = None, namespace: str | None = None) -> tuple[Vpc, ...]:
    """The VPCs in the target's account and region among `vpc_ids` and/or carrying tag key `tag[0]` with one of
    the values `tag[1]`, each with its associated CIDR blocks and tags, by VPC ID: the one VPC lookup (the mesh
    pre-flight, the hub's VPCs and discovery all read VPCs through it)."""
    ids = sorted(set(vpc_ids))
    filters = ([{"Name": "vpc-id", "Values": ids}] if ids else []) + \
        ([{"Name": f"tag:{tag[0]}", "Values": list(tag[1])}] if tag else [])
    if not filters:
        raise ValueError("find_vpcs needs VPC IDs or a tag: it never lists every VPC of an account")
    what = f"VPC {', '.join(ids)}" if ids else f"the VPC tagged {tag[0] if tag else ''}"
    client = _client(sessions, target, "ec2", operation, cluster, namespace)
    found: list[Vpc] = []
    try:
        for page in client.get_paginator("describe_vpcs").paginate(Filters=filters):
            found += [Vpc(vpc_id=v["VpcId"], cidrs=_blocks(v), tags=_tags(v)) for v in page.get("Vpcs", [])]
    except (ClientError, BotoCoreError) as exc:
        raise _refused(exc, f"looking up {what}", target) from None
    return tuple(sorted(found, key=lambda v: v.vpc_id))


@needs("cluster", "ec2:DescribeVpcs")
def vpc_cidrs(sessions: AwsSessions, target: AwsTarget, vpc_id: str, *, operation: str = "vpc-cidrs",
              cluster: str | None = None, namespace: str | None = None) -> tuple[str, ...] | None:
    """The CIDR blocks VPC `vpc_id` has in the target's account and region, or None when it has no such VPC."""
    found = find_vpcs(sessions, target, vpc_ids=[vpc_id], operation=operation, cluster=cluster, namespace=namespace)
    return found[0].cidrs if found else None


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
        out.update({vpc.vpc_id: vpc.cidrs for vpc in find_vpcs(sessions, hub.in_region(region), vpc_ids=vpc_ids,
                                                               operation=operation)})
    return out


def _route_tables(sessions: AwsSessions, target: AwsTarget, filters: list[dict], what: str, operation: str,
                  cluster: str | None, namespace: str | None) -> list[dict]:
    """DescribeRouteTables with `filters`, every page."""
    client = _client(sessions, target, "ec2", operation, cluster, namespace)
    try:
        return [table for page in client.get_paginator("describe_route_tables").paginate(Filters=filters)
                for table in page.get("RouteTables", [])]
    except (ClientError, BotoCoreError) as exc:
        raise _refused(exc, f"reading {what}", target) from None


@needs("cluster", "ec2:DescribeRouteTables", "ec2:GetManagedPrefixListEntries")
def routes_in(sessions: AwsSessions, target: AwsTarget, tables: Iterable[str], *, operation: str = "route-tables",
              cluster: str | None = None, namespace: str | None = None) -> dict[str, tuple[TableRoute, ...]]:
    """Route table -> its IPv4 routes (destination and target), for the tables that exist in the target's
    account and region. A route to a managed prefix list is a route to each IPv4 entry of the list
    (prefix_list_entries), with the route's target; a list that cannot be read is an UnreadableList, never left out."""
    wanted = sorted(set(tables))
    if not wanted:
        return {}
    found = _route_tables(sessions, target, [{"Name": "route-table-id", "Values": wanted}],
                          f"route tables {', '.join(wanted)}", operation, cluster, namespace)
    lists = {r["DestinationPrefixListId"] for table in found for r in table.get("Routes", [])
             if r.get("DestinationPrefixListId")}
    entries = prefix_list_entries(sessions, target, lists, operation=operation, cluster=cluster,
                                  namespace=namespace) if lists else {}
    return {table["RouteTableId"]: tuple(found_route for r in table.get("Routes", [])
                                         for found_route in _table_routes(r, entries)) for table in found}


def _table_routes(route: dict, entries: Mapping[str, PrefixListEntries]) -> Iterator[TableRoute]:
    """One route of DescribeRouteTables as the hijack check reads it (an IPv6 route is none)."""
    target = next((route[k] for k in _ROUTE_TARGETS if route.get(k)), "?")
    if route.get("DestinationCidrBlock"):
        yield FoundRoute(cidr=route["DestinationCidrBlock"], target=target)
    elif route.get("DestinationPrefixListId"):
        listed = entries[route["DestinationPrefixListId"]]
        if listed.unreadable:
            yield UnreadableList(prefix_list=listed.prefix_list_id, target=target, why=listed.unreadable)
        yield from (FoundRoute(cidr=cidr, target=target, prefix_list=listed.prefix_list_id) for cidr in listed.cidrs)


# --- managed prefix lists a route table routes to: their entries (the hijack check) and sizes (the quota) --------

@dataclass(frozen=True)
class PrefixListEntries:
    prefix_list_id: str
    cidrs: tuple[str, ...]  # its IPv4 entries (an IPv6 list has none)
    unreadable: str = ""  # why AWS would not give them; then cidrs is empty and the list is never skipped


@needs("cluster", "ec2:GetManagedPrefixListEntries")
def prefix_list_entries(sessions: AwsSessions, target: AwsTarget, ids: Iterable[str], *,
                        operation: str = "route-tables", cluster: str | None = None,
                        namespace: str | None = None) -> dict[str, PrefixListEntries]:
    """Managed prefix list ID -> its IPv4 entries, read in the target's account and region with the list's ID: a
    list of that account, one another account shares with it through RAM (a consumer may read a shared list's
    entries) or an AWS-managed one (the S3 and DynamoDB lists a gateway endpoint routes to: anyone may read them).

    A list AWS will not read (unknown, no longer shared) comes back `unreadable` with AWS's answer; a denied read
    raises LookupRefused (AccessDenied: the role lacks the action), a throttled or failed one LookupFailed (retried).
    """
    client = _client(sessions, target, "ec2", operation, cluster, namespace)
    out: dict[str, PrefixListEntries] = {}
    for prefix_list in sorted(set(ids)):
        try:
            cidrs = [entry["Cidr"] for page in client.get_paginator("get_managed_prefix_list_entries").paginate(
                PrefixListId=prefix_list) for entry in page.get("Entries", [])]
        except (ClientError, BotoCoreError) as exc:
            error = _refused(exc, f"reading the entries of prefix list {prefix_list}", target)
            if not isinstance(error, LookupRefused) or error.reason == "AccessDenied":
                raise error from None
            out[prefix_list] = PrefixListEntries(prefix_list, (), unreadable=str(error))
            continue
        out[prefix_list] = PrefixListEntries(prefix_list, tuple(
            cidr for cidr in cidrs if ipaddress.ip_network(cidr, strict=False).version == 4))
    return out


@needs("cluster", "ec2:DescribeManagedPrefixLists")
def prefix_list_sizes(sessions: AwsSessions, target: AwsTarget, ids: Iterable[str], *,
                      operation: str = "mesh-quotas", cluster: str | None = None,
                      namespace: str | None = None) -> dict[str, int]:
    """Managed prefix list ID -> the routes a route to it counts as against routes per route table: its MaxEntries
    (AWS counts a referenced list at its maximum size, however many entries it holds), or 1 for an AWS-managed list,
    which has no MaxEntries (the weight AWS documents for the S3 and DynamoDB lists gateway endpoints route to).
    Described in the target's account and region (a list shared with it through RAM included); a list AWS does not
    describe raises LookupRefused naming it."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    client = _client(sessions, target, "ec2", operation, cluster, namespace)
    try:
        described = {pl["PrefixListId"]: pl for page in client.get_paginator("describe_managed_prefix_lists").paginate(
            PrefixListIds=wanted) for pl in page.get("PrefixLists", [])}
    except (ClientError, BotoCoreError) as exc:
        raise _refused(exc, f"describing prefix lists {', '.join(wanted)}", target) from None
    missing = [pl for pl in wanted if pl not in described]
    if missing:
        raise LookupRefused(f"prefix list {', '.join(missing)} in account {target.account_id} ({target.region}): AWS "
                            "does not describe it, so the routes to it cannot be counted against routesPerTable")
    return {pl: int(described[pl].get("MaxEntries") or 1) for pl in wanted}


@dataclass(frozen=True)
class RouteTable:
    route_table_id: str
    main: bool  # the VPC's main table: the subnets without an explicit association use it
    subnet_ids: tuple[str, ...]  # explicitly associated


@needs("cluster", "ec2:DescribeRouteTables")
def route_tables_of(sessions: AwsSessions, target: AwsTarget, vpc_id: str, *, operation: str = "discover",
                    cluster: str | None = None, namespace: str | None = None) -> tuple[RouteTable, ...]:
    """Every route table of VPC `vpc_id`, with its explicit subnet associations, by ID."""
    found = _route_tables(sessions, target, [{"Name": "vpc-id", "Values": [vpc_id]}], f"the route tables of {vpc_id}",
                          operation, cluster, namespace)
    return tuple(sorted((RouteTable(
        route_table_id=table["RouteTableId"],
        main=any(a.get("Main") for a in table.get("Associations") or []),
        subnet_ids=tuple(sorted(a["SubnetId"] for a in table.get("Associations") or [] if a.get("SubnetId"))))
        for table in found), key=lambda t: t.route_table_id))


@dataclass(frozen=True)
class Subnet:
    subnet_id: str
    availability_zone: str
    tags: Mapping[str, str] = field(default_factory=dict)


@needs("cluster", "ec2:DescribeSubnets")
def subnets_of(sessions: AwsSessions, target: AwsTarget, vpc_id: str, *, operation: str = "discover",
               cluster: str | None = None, namespace: str | None = None) -> tuple[Subnet, ...]:
    """Every subnet of VPC `vpc_id`, with its zone and tags, by ID."""
    client = _client(sessions, target, "ec2", operation, cluster, namespace)
    try:
        found = [Subnet(subnet_id=s["SubnetId"], availability_zone=s.get("AvailabilityZone", ""), tags=_tags(s))
                 for page in client.get_paginator("describe_subnets").paginate(
                     Filters=[{"Name": "vpc-id", "Values": [vpc_id]}]) for s in page.get("Subnets", [])]
    except (ClientError, BotoCoreError) as exc:
        raise _refused(exc, f"reading the subnets of {vpc_id}", target) from None
    return tuple(sorted(found, key=lambda s: s.subnet_id))


@dataclass(frozen=True)
class SecurityGroup:
    group_id: str
    name: str
    tags: Mapping[str, str] = field(default_factory=dict)


@needs("cluster", "ec2:DescribeSecurityGroups")
def security_groups_of(sessions: AwsSessions, target: AwsTarget, vpc_id: str, *, operation: str = "discover",
                       cluster: str | None = None, namespace: str | None = None) -> tuple[SecurityGroup, ...]:
    """Every security group of VPC `vpc_id`, with its name and tags, by ID."""
    client = _client(sessions, target, "ec2", operation, cluster, namespace)
    try:
        found = [SecurityGroup(group_id=g["GroupId"], name=g.get("GroupName", ""), tags=_tags(g))
                 for page in client.get_paginator("describe_security_groups").paginate(
                     Filters=[{"Name": "vpc-id", "Values": [vpc_id]}]) for g in page.get("SecurityGroups", [])]
    except (ClientError, BotoCoreError) as exc:
        raise _refused(exc, f"reading the security groups of {vpc_id}", target) from None
    return tuple(sorted(found, key=lambda g: g.group_id))


def all_lookups() -> dict[str, Needs]:
    """Every direct call the service makes, with its side and IAM actions."""
    return dict(NEEDS)
