"""Discovery: a cluster's network read from its own account, as the FoundNetwork its status.network holds.

Asked a NetworkQuery (stacks.network.query: the cluster's admitted account, region and role, and its VPC ID or
infra ID), AwsDiscovery reads, in that account and region only, through that account's role:

- the VPC: by ID, or the one tagged kubernetes.io/cluster/<infraID> = owned or shared (DescribeVpcs), with every
  associated CIDR block (the lookup the mesh pre-flight uses too: automation.adapters.aws.lookups.find_vpcs);
- its subnets with their zones, each private when it carries HubConfig spec.discovery.privateSubnetTag with a
  value other than "0" or "false" (DescribeSubnets);
- its route tables, and which one each subnet uses: its explicit association, else the VPC's main table
  (DescribeRouteTables);
- its security groups, the node groups being those with one of HubConfig spec.discovery.nodeSecurityGroups'
  tags (DescribeSecurityGroups);
- the API server's load balancer by name, when the cluster asks for PrivateLink (DescribeLoadBalancers): none of
  that name is not an error here, the merge decides.

Every call is a lookup of automation.adapters.aws.lookups, so the cluster role's generated policy (docs/iam.md)
allows exactly them. Which tables and groups the stack takes, and whether what a cluster declares agrees with what
was found, are decided in stacks.network.merge, not here.

Failures: LookupFailed (retried: no such VPC yet, VpcNotFound, AWS or STS unavailable) and LookupRefused (a person
must act: access denied, the account's role refused with the session's reason, e.g. AssumeRoleFailed or
NoCredentials, two VPCs carrying the installer's tag, VpcAmbiguous); discover() raises no other error of AWS's.

Cost: five calls per cluster (four without PrivateLink), each one page for a VPC of ordinary size (the paginators
follow NextToken past it); bench/discovery.py measures them against moto.

The offline plan uses automation.adapters.aws.discovery_standin instead (deterministic, no AWS).
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable, Mapping, Protocol

from automation.adapters.aws import audit, lookups
from automation.adapters.aws.lookups import LookupFailed, LookupRefused
from automation.adapters.aws.sessions import AccountAccessDenied, AwsError, AwsSessions
from stacks.network.found import FoundLoadBalancer, FoundNetwork, FoundSubnet
from stacks.network.query import NetworkQuery

INSTALLER_TAG_VALUES = ("owned", "shared")  # what OpenShift installers and CAPA write on a cluster's VPC
NOT_SET = frozenset({"0", "false"})  # a private-subnet tag with one of these values (any case) says "not private"


class NetworkLookup(Protocol):
    """Reads one cluster's network. Raises LookupFailed (retried) or LookupRefused (a person must act), nothing else
    of AWS's."""

    def discover(self, query: NetworkQuery, *, now: str) -> FoundNetwork: ...


class AwsDiscovery:
    """NetworkLookup against AWS, in each query's target only; thread-safe. `calls` counts the AWS API calls
    (each page one; AssumeRole not included: AwsSessions.assume_role_calls) over `discoveries` discover()s."""

    def __init__(self, sessions: AwsSessions):
        self.sessions = sessions
        self._lock = threading.Lock()
        self.calls = 0
        self.discoveries = 0

    def discover(self, query: NetworkQuery, *, now: str) -> FoundNetwork:
        namespace, _, name = query.key.partition("/")
        where = {"operation": "discover", "cluster": name, "namespace": namespace}
        target = query.target
        with lookups.counting() as calls, audit.once():
            try:
                vpc = self._vpc(query, where)
                subnets = lookups.subnets_of(self.sessions, target, vpc.vpc_id, **where)
                tables = lookups.route_tables_of(self.sessions, target, vpc.vpc_id, **where)
                groups = lookups.security_groups_of(self.sessions, target, vpc.vpc_id, **where)
                balancer = lookups.find_load_balancer(self.sessions, target, query.load_balancer_name, **where) \
                    if query.load_balancer_name else None
            except LookupFailed:
                raise
            except AccountAccessDenied as exc:  # the account's role: a person must act, as for a stack
                raise LookupRefused(f"reading the network: {exc}", reason=exc.reason) from None
            except AwsError as exc:  # AssumeRole unavailable for now: retried
                raise LookupFailed(f"reading the network: {exc}", reason=exc.reason) from None
            finally:
                with self._lock:
                    self.calls += calls()
                    self.discoveries += 1
        return found_network(query, vpc, subnets, tables, groups, balancer, now=now)

    def _vpc(self, query: NetworkQuery, where: dict) -> lookups.Vpc:
        target = query.target
        account = f"account {target.account_id} ({target.region})"
        if query.vpc_id:
            found = lookups.find_vpcs(self.sessions, target, vpc_ids=[query.vpc_id], **where)
            if not found:
                raise LookupFailed(f"no VPC {query.vpc_id} in {account}, the cluster's "
                                   "account: check spec.network.vpcID", reason="VpcNotFound")
            return found[0]
        tag = query.installer_tag
        found = lookups.find_vpcs(self.sessions, target, tag=(tag, INSTALLER_TAG_VALUES), **where)
        if not found:
            raise LookupFailed(f"no VPC tagged {tag} (owned or shared) in {account}, the "
                               "cluster's account: check spec.infraID, or declare spec.network.vpcID",
                               reason="VpcNotFound")
        if len(found) > 1:
            raise LookupRefused(f"{len(found)} VPCs are tagged {tag} in {account}: "
                                f"{', '.join(v.vpc_id for v in found)}; declare spec.network.vpcID to say which "
                                "one is the cluster's", reason="VpcAmbiguous")
        return found[0]


def found_network(query: NetworkQuery, vpc: lookups.Vpc, subnets: Iterable[lookups.Subnet],
                  tables: Iterable[lookups.RouteTable], groups: Iterable[lookups.SecurityGroup],
                  balancer: lookups.LoadBalancer | None, *, now: str) -> FoundNetwork:
    """What the calls read, as status.network holds it."""
    tables = tuple(tables)
    main = next((t.route_table_id for t in tables if t.main), None)
    table_of = {subnet: t.route_table_id for t in tables for subnet in t.subnet_ids}
    wanted = set(query.node_security_groups)
    groups = tuple(groups)
    return FoundNetwork(
        account_id=query.target.account_id, region=query.target.region, vpc_id=vpc.vpc_id, cidrs=vpc.cidrs,
        subnets=tuple(FoundSubnet(subnet_id=s.subnet_id, availability_zone=s.availability_zone,
                                  route_table_id=table_of.get(s.subnet_id, main),
                                  private=_tagged(s.tags, query.private_subnet_tag))
                      for s in subnets),
        route_table_ids=tuple(t.route_table_id for t in tables),
        security_group_ids=tuple(g.group_id for g in groups),
        node_security_group_ids=tuple(g.group_id for g in groups if wanted & set(g.tags.items())),
        load_balancer=None if balancer is None else FoundLoadBalancer(
            name=balancer.name, arn=balancer.arn, type=balancer.type, scheme=balancer.scheme, vpc_id=balancer.vpc_id),
        observed_at=now)


def _tagged(tags: Mapping[str, str], key: str) -> bool:
    return key in tags and tags[key].strip().lower() not in NOT_SET


def discover_all(lookup: NetworkLookup, queries: Iterable[NetworkQuery], *, now: str,
                 workers: int = 1) -> dict[str, FoundNetwork | AwsError]:
    """Cluster key -> its network, or why it could not be read (LookupFailed or LookupRefused; any AwsError of
    another NetworkLookup), in the order of `queries`; `workers` discoveries side by side."""
    queries = list(queries)

    def one(query: NetworkQuery) -> FoundNetwork | AwsError:
        try:
            return lookup.discover(query, now=now)
        except AwsError as exc:
            return exc

    if workers <= 1 or len(queries) <= 1:
        return {q.key: one(q) for q in queries}
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="discover") as pool:
        return dict(zip((q.key for q in queries), pool.map(one, queries)))
