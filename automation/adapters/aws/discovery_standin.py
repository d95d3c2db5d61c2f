"""The offline plan's discovery: a NetworkLookup that reads no cloud, deterministic.

It "finds" exactly what a cluster declares (so a plan folder whose clusters declare their whole network plans as it
did before discovery existed), and makes up the rest from a hash of the cluster's account, region and infra ID: the
same cluster always finds the same network, and two clusters never find the same IDs.

What it makes up, when the cluster does not declare it: a VPC vpc-<hash>; a /16 CIDR in 10.0.0.0/8; three zones
<region>a/b/c, each with one private subnet (tagged as HubConfig spec.discovery.privateSubnetTag) and one public
one; a route table per private subnet and the VPC's main table (the public subnets use it); one node security group
(matching the HubConfig's node tags) and the VPC's default group; and the load balancer the query names, a network
one, internal. Declared route tables are found as the tables of private subnets (as many as needed), the first one
the main table; declared transit subnets are found as private subnets.
"""
from __future__ import annotations

import hashlib
from typing import Mapping

from stacks.model.cluster import Network
from stacks.network.found import FoundLoadBalancer, FoundNetwork, FoundSubnet
from stacks.network.query import NetworkQuery

ZONES = ("a", "b", "c")


class StandInDiscovery:
    """NetworkLookup for the offline plan: `declared` is each cluster's spec.network, by cluster key."""

    def __init__(self, declared: Mapping[str, Network | None]):
        self.declared = dict(declared)

    def discover(self, query: NetworkQuery, *, now: str) -> FoundNetwork:
        net = self.declared.get(query.key) or Network()
        target = query.target
        seed = f"{target.account_id}/{target.region}/{query.infra_id}"

        def made(prefix: str, *parts: object) -> str:
            digest = hashlib.sha256("/".join((seed, prefix, *map(str, parts))).encode()).hexdigest()
            return f"{prefix}-{digest[:17]}"

        vpc_id = net.vpc_id or query.vpc_id or made("vpc")
        cidr = net.cidr or f"10.{int(made('cidr')[5:7], 16)}.0.0/16"
        zones = tuple(f"{target.region}{z}" for z in ZONES)

        private = [(s.subnet_id, s.availability_zone) for s in net.transit_subnets] or \
            [(made("subnet", "private", z), z) for z in zones]
        declared_tables = list(net.route_table_ids)
        while len(private) < len(declared_tables):  # every declared table is some private subnet's
            zone = zones[len(private) % len(zones)]
            private.append((made("subnet", "private", len(private), zone), zone))
        if declared_tables:
            tables, main = declared_tables, declared_tables[0]
            private_tables = [declared_tables[i % len(declared_tables)] for i in range(len(private))]
        else:
            private_tables = [made("rtb", subnet) for subnet, _ in private]
            main = made("rtb", "main")
            tables = [*private_tables, main]
        subnets = [FoundSubnet(subnet_id=subnet, availability_zone=zone, route_table_id=table, private=True)
                   for (subnet, zone), table in zip(private, private_tables)]
        subnets += [FoundSubnet(subnet_id=made("subnet", "public", z), availability_zone=z, route_table_id=main)
                    for z in zones]

        nodes = list(net.node_security_group_ids) or [made("sg", "node")]
        balancer = None
        if query.load_balancer_name:
            name = query.load_balancer_name
            balancer = FoundLoadBalancer(
                name=name, type="network", scheme="internal", vpc_id=vpc_id,
                arn=f"arn:aws:elasticloadbalancing:{target.region}:{target.account_id}:loadbalancer/net/{name}/"
                    f"{made('lb')[3:19]}")
        return FoundNetwork(
            account_id=target.account_id, region=target.region, vpc_id=vpc_id,
            cidrs=tuple(dict.fromkeys([cidr, *net.secondary_cidrs])), subnets=tuple(subnets),
            route_table_ids=tuple(dict.fromkeys(tables)), security_group_ids=(*nodes, made("sg", "default")),
            node_security_group_ids=tuple(nodes), load_balancer=balancer, observed_at=now)
