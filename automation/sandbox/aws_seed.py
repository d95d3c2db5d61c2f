"""What the sandbox puts in its fake AWS, one account and region at a time, each step idempotent.

automation.sandbox.aws decides what a fleet needs (`seed_fleet`); this module makes it in moto through boto3, the
way an installer and an administrator would have left it:

- a cluster's network (`seed_cluster`): its VPC tagged kubernetes.io/cluster/<infraID>=owned with the declared
  CIDR blocks, private subnets (tagged with HubConfig spec.discovery.privateSubnetTag) in two zones or more, its
  route tables associated with them, its node security groups (tagged as spec.discovery.nodeSecurityGroups
  finds them), and for PrivateLink the internal network load balancer `<infraID>-int` in those subnets;
- the hub's (`seed_hub`): the endpoint VPC inventory with its subnets in their zones, the associated VPCs;
- the roles (`seed_roles`): the hub role, the role map's roles and the controller's, with docs/iam.md's trust.

A declared ID (vpc-0c1, rtb-01, sg-0n1, subnet-0a1) is made with that ID: the sandbox's moto takes the tag
`_custom_id_` on create (automation.sandbox.aws starts it so) and drops the tag. Whatever is there already, by
that ID or by its tag or name, is left as it is and counted as found: seeding twice creates nothing new.
"""
from __future__ import annotations

import ipaddress
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import boto3
import botocore.session
from botocore.exceptions import ClientError

from stacks.inputs import StackInputs
from stacks.model.cluster import Cluster
from stacks.model.hub import HubConfig
from stacks.model.fields import partition_of
from stacks.names import INSTALLER_CLUSTER_TAG_PREFIX

CUSTOM_ID_TAG = "_custom_id_"  # moto's own name for "make it with this ID" (moto.utilities.id_generator)
SETUP_ACCOUNT = "123456789012"  # moto's default account: plain credentials land there (the seeder's own)
CONTROLLER_ROLE = "hubwright-controller"  # the service's own identity in the hub account (docs/iam.md)
SEED_SESSION = "hubwright-sandbox-seed"
MANAGED = {"hubwright.io/sandbox": "seeded"}  # on everything seeded, so a person can tell it from what they made
KINDS = ("role", "VPC", "subnet", "route table", "security group", "load balancer")


class SeedError(RuntimeError):
    """The fake AWS did not do what seeding asked (a moto not started by the sandbox ignores declared IDs)."""


@dataclass
class Place:
    """One account and region (region "" for IAM, which is global): what seeding made there and found there."""

    account_id: str
    region: str
    created: Counter = field(default_factory=Counter)
    found: Counter = field(default_factory=Counter)
    clusters: list[str] = field(default_factory=list)

    def count(self, kind: str, created: bool) -> None:
        (self.created if created else self.found)[kind] += 1

    def line(self) -> str:
        where = f"{self.account_id} {self.region or 'IAM'}"
        made = _counts(self.created) or "nothing new"
        there = f"; already there: {_counts(self.found)}" if self.found else ""
        whose = f" (for {', '.join(self.clusters)})" if self.clusters else ""
        return f"{where}: created {made}{there}{whose}"


def _counts(counter: Counter) -> str:
    return ", ".join(f"{counter[k]} {k}{'s' if counter[k] != 1 else ''}" for k in KINDS if counter[k])


def role_arn(account_id: str, region: str, name: str = CONTROLLER_ROLE) -> str:
    return f"arn:{partition_of(region)}:iam::{account_id}:role/{name}"


class Seeder:
    """boto3 clients in any account of the fake AWS, through AssumeRole from moto's default account (the role's
    account is where the assumed credentials land), and the Places seeded so far."""

    def __init__(self, endpoint_url: str):
        self.endpoint_url = endpoint_url
        self.places: dict[tuple[str, str], Place] = {}
        self._credentials: dict[str, dict] = {}
        self._clients: dict[tuple, Any] = {}
        self._core = botocore.session.Session()  # one for every client: the service models are parsed once

    def place(self, account_id: str, region: str) -> Place:
        return self.places.setdefault((account_id, region), Place(account_id, region))

    def client(self, role: str, region: str, service: str) -> Any:
        """A client as `role` (an IAM role ARN: its account is where it acts) in `region`."""
        key = (role, region, service)
        if key not in self._clients:
            if role not in self._credentials:
                sts = self._core.create_client("sts", region_name=region, endpoint_url=self.endpoint_url,
                                               **PLAIN_CREDENTIALS)
                self._credentials[role] = sts.assume_role(RoleArn=role, RoleSessionName=SEED_SESSION)["Credentials"]
            creds = self._credentials[role]
            self._clients[key] = self._core.create_client(
                service, region_name=region, endpoint_url=self.endpoint_url, aws_access_key_id=creds["AccessKeyId"],
                aws_secret_access_key=creds["SecretAccessKey"], aws_session_token=creds["SessionToken"])
        return self._clients[key]


# Plain fake credentials: moto puts their calls in its default account.
PLAIN_CREDENTIALS = {"aws_access_key_id": "sandbox", "aws_secret_access_key": "sandbox"}


def base_session(region: str) -> boto3.Session:
    """A session with the plain fake credentials."""
    return boto3.Session(region_name=region, **PLAIN_CREDENTIALS)


# --- one resource each, made unless it is there ------------------------------------------------------------

def _tags(tags: dict[str, str], kind: str, custom_id: str | None = None) -> list[dict]:
    every = {**MANAGED, **tags, **({CUSTOM_ID_TAG: custom_id} if custom_id else {})}
    return [{"ResourceType": kind, "Tags": [{"Key": k, "Value": v} for k, v in every.items()]}]


def _made(kind: str, wanted: str | None, made: str) -> str:
    if wanted and made != wanted:
        raise SeedError(f"asked for {kind} {wanted}, the fake AWS made {made}: it ignores declared IDs; start it "
                        "with automation.sandbox.aws.start_moto")
    return made


def _one(pages: Iterable[dict], key: str) -> dict | None:
    return next((item for page in pages for item in page.get(key, [])), None)


def ensure_vpc(ec2: Any, place: Place, *, vpc_id: str | None, cidrs: tuple[str, ...], tags: dict[str, str]) -> str:
    """The VPC `vpc_id` (or, without one, the VPC carrying the first of `tags`) with every block of `cidrs`."""
    key, value = next(iter(tags.items()))
    filters = [{"Name": "vpc-id", "Values": [vpc_id]}] if vpc_id else [{"Name": f"tag:{key}", "Values": [value]}]
    found = _one(ec2.get_paginator("describe_vpcs").paginate(Filters=filters), "Vpcs")
    place.count("VPC", found is None)
    if found is None:
        made = ec2.create_vpc(CidrBlock=cidrs[0], TagSpecifications=_tags(tags, "vpc", vpc_id))["Vpc"]
        found = {"VpcId": _made("VPC", vpc_id, made["VpcId"]), "CidrBlockAssociationSet": made.get(
            "CidrBlockAssociationSet", [])}
    have = {a["CidrBlock"] for a in found.get("CidrBlockAssociationSet") or []}
    for block in cidrs:  # a block declared since the last seeding too
        if block not in have:
            ec2.associate_vpc_cidr_block(VpcId=found["VpcId"], CidrBlock=block)
    return str(found["VpcId"])


def ensure_subnet(ec2: Any, place: Place, vpc_id: str, *, subnet_id: str | None, cidr: str, zone: str,
                  tags: dict[str, str]) -> str:
    """The subnet `subnet_id` (or, without one, the VPC's subnet of `cidr`)."""
    filters = [{"Name": "subnet-id", "Values": [subnet_id]}] if subnet_id else \
        [{"Name": "vpc-id", "Values": [vpc_id]}, {"Name": "cidr-block", "Values": [cidr]}]
    found = _one(ec2.get_paginator("describe_subnets").paginate(Filters=filters), "Subnets")
    place.count("subnet", found is None)
    if found is not None:
        return str(found["SubnetId"])
    made = ec2.create_subnet(VpcId=vpc_id, CidrBlock=cidr, AvailabilityZone=zone,
                             TagSpecifications=_tags(tags, "subnet", subnet_id))["Subnet"]["SubnetId"]
    return _made("subnet", subnet_id, made)


def ensure_route_table(ec2: Any, place: Place, vpc_id: str, *, table_id: str | None, name: str,
                       subnets: Iterable[str]) -> str:
    """The route table `table_id` (or the VPC's table named `name`), explicitly associated with each of
    `subnets` that has no explicit association yet."""
    filters = [{"Name": "route-table-id", "Values": [table_id]}] if table_id else \
        [{"Name": "vpc-id", "Values": [vpc_id]}, {"Name": "tag:Name", "Values": [name]}]
    found = _one(ec2.get_paginator("describe_route_tables").paginate(Filters=filters), "RouteTables")
    place.count("route table", found is None)
    table = str(found["RouteTableId"]) if found is not None else _made("route table", table_id, ec2.create_route_table(
        VpcId=vpc_id, TagSpecifications=_tags({"Name": name}, "route-table", table_id))["RouteTable"]["RouteTableId"])
    associated = {a.get("SubnetId") for page in ec2.get_paginator("describe_route_tables").paginate(
        Filters=[{"Name": "vpc-id", "Values": [vpc_id]}]) for t in page.get("RouteTables", [])
        for a in t.get("Associations") or []}
    for subnet in subnets:
        if subnet not in associated:
            ec2.associate_route_table(RouteTableId=table, SubnetId=subnet)
    return table


def ensure_security_group(ec2: Any, place: Place, vpc_id: str, *, group_id: str | None, name: str,
                          tags: dict[str, str]) -> str:
    """The security group `group_id` (or the VPC's group named `name`)."""
    filters = [{"Name": "group-id", "Values": [group_id]}] if group_id else \
        [{"Name": "vpc-id", "Values": [vpc_id]}, {"Name": "group-name", "Values": [name]}]
    found = _one(ec2.get_paginator("describe_security_groups").paginate(Filters=filters), "SecurityGroups")
    place.count("security group", found is None)
    if found is not None:
        return str(found["GroupId"])
    made = ec2.create_security_group(GroupName=name, Description=f"{name} (hubwright sandbox)", VpcId=vpc_id,
                                     TagSpecifications=_tags(tags, "security-group", group_id))["GroupId"]
    return _made("security group", group_id, made)


def ensure_nlb(elbv2: Any, place: Place, name: str, subnets: list[str]) -> str:
    """The internal network load balancer `name` in `subnets`, as an installer leaves it."""
    try:
        found = elbv2.describe_load_balancers(Names=[name])["LoadBalancers"]
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "LoadBalancerNotFound":
            raise
        found = []
    place.count("load balancer", not found)
    if found:
        return str(found[0]["LoadBalancerArn"])
    made = elbv2.create_load_balancer(Name=name, Subnets=subnets, Scheme="internal", Type="network",
                                      Tags=[{"Key": k, "Value": v} for k, v in MANAGED.items()])
    return str(made["LoadBalancers"][0]["LoadBalancerArn"])


def trust_policy(principal: str, external_id: str | None = None) -> dict:
    """docs/iam.md's trust policy: only the controller may assume the role (with the external ID when set)."""
    statement: dict = {"Sid": "HubwrightController", "Effect": "Allow", "Principal": {"AWS": principal},
                       "Action": "sts:AssumeRole"}
    if external_id:
        statement["Condition"] = {"StringEquals": {"sts:ExternalId": external_id}}
    return {"Version": "2012-10-17", "Statement": [statement]}


def ensure_role(iam: Any, place: Place, arn: str, trust: dict) -> None:
    """The IAM role `arn` (its path and name) with `trust`, in the account the client acts in."""
    path, _, name = arn.split(":", 5)[5].removeprefix("role").rpartition("/")
    try:
        iam.get_role(RoleName=name)
        place.count("role", False)
        return
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "NoSuchEntity":
            raise
    iam.create_role(RoleName=name, Path=f"{path}/", AssumeRolePolicyDocument=json.dumps(trust),
                    MaxSessionDuration=43200, Tags=[{"Key": k, "Value": v} for k, v in MANAGED.items()])
    place.count("role", True)


# --- a layout: blocks, zones ----------------------------------------------------------------------------------

def spare_cidrs(used: Iterable[str]) -> Iterator[str]:
    """/16 blocks in 10.0.0.0/8 that overlap none of `used`, from 10.200.0.0/16 on (for a VPC declared without
    a CIDR)."""
    taken = [ipaddress.ip_network(c, strict=False) for c in used]
    for second in [*range(200, 256), *range(0, 200)]:
        block = ipaddress.ip_network(f"10.{second}.0.0/16")
        if not any(block.overlaps(t) for t in taken):
            yield str(block)


def subnet_blocks(cidr: str) -> Iterator[str]:
    """The blocks a VPC's subnets are cut from, in order: /24s of a /16 ... /20, /28s of the smallest VPCs."""
    network = ipaddress.ip_network(cidr, strict=False)
    yield from (str(block) for block in network.subnets(new_prefix=min(28, max(24, network.prefixlen + 1))))


def zones(ec2: Any, wanted: int) -> list[str]:
    """`wanted` availability zones of the client's region (cycling when it has fewer)."""
    names = sorted(z["ZoneName"] for z in ec2.describe_availability_zones()["AvailabilityZones"])
    return [names[i % len(names)] for i in range(wanted)]


# --- a cluster, the hub, the roles ------------------------------------------------------------------------------

def node_tag(hub: HubConfig, infra_id: str) -> tuple[str, str]:
    """The tag discovery takes a node security group by: the hub's first that names the infra ID, else its first."""
    matches = hub.spec.discovery.node_security_groups
    chosen = next((m for m in matches if "{infraID}" in m.value), matches[0] if matches else None)
    if chosen is None:
        return "Name", f"{infra_id}-node"
    return chosen.key, chosen.value.replace("{infraID}", infra_id)


def seed_cluster(seeder: Seeder, hub: HubConfig, cluster: Cluster, inputs: StackInputs, cidr: str) -> None:
    """The cluster's network in its admitted account and region, as its installer would have left it; `cidr`:
    its primary block when it declares none."""
    target, part = inputs.cluster, cluster.spec.aws
    network, infra = part.network, part.infra_id
    place = seeder.place(target.account_id, target.region)
    place.clusters.append(cluster.key)
    role = target.role_arn or role_arn(target.account_id, target.region)
    ec2 = seeder.client(role, target.region, "ec2")
    blocks = (network.cidr or cidr, *network.secondary_cidrs)
    vpc = ensure_vpc(ec2, place, vpc_id=network.vpc_id, cidrs=tuple(dict.fromkeys(blocks)),
                     tags={f"{INSTALLER_CLUSTER_TAG_PREFIX}{infra}": "owned", "Name": f"{infra}-vpc"})
    private = {hub.spec.discovery.private_subnet_tag: "1"}
    declared = [(s.subnet_id, s.availability_zone) for s in network.transit_subnets]
    tables: list[str | None] = list(network.route_table_ids) or [None]
    wanted = max(2, len(tables))
    extra = [z for z in zones(ec2, wanted + len(declared)) if z not in {zone for _, zone in declared}]
    layout = declared + [(None, zone) for zone in extra[:max(0, wanted - len(declared))]]
    cut = subnet_blocks(blocks[0])
    subnets = []
    for subnet_id, zone in layout:
        block = next(cut)
        subnets.append(ensure_subnet(ec2, place, vpc, subnet_id=subnet_id, cidr=block, zone=zone,
                                     tags={**private, "Name": f"{infra}-private-{zone}"}))
    for i, table in enumerate(tables):
        ensure_route_table(ec2, place, vpc, table_id=table, name=f"{infra}-private-{i}",
                           subnets=subnets[i::len(tables)])
    key, value = node_tag(hub, infra)
    for i, group in enumerate(network.node_security_group_ids or [None]):
        name = f"{infra}-node" + (f"-{i}" if i else "")
        ensure_security_group(ec2, place, vpc, group_id=group, name=name, tags={"Name": name, key: value})
    if inputs.private_link is not None:
        by_zone: dict[str, str] = {}
        for (_, zone), subnet in zip(layout, subnets):
            by_zone.setdefault(zone, subnet)  # a load balancer takes one subnet per zone
        ensure_nlb(seeder.client(role, target.region, "elbv2"), place, inputs.private_link.nlb_name,
                   list(by_zone.values()))


def seed_hub(seeder: Seeder, hub: HubConfig, spare: Iterator[str]) -> None:
    """The hub account's VPCs the HubConfig names: the endpoint VPC inventory with its subnets in their zones, and
    the associated VPCs (a spare block for one declared without a CIDR)."""
    account = hub.spec.account_id
    for vpc in hub.spec.endpoint_vpc_inventory:
        place = seeder.place(account, vpc.region)
        ec2 = seeder.client(hub.spec.credentials.role_arn or role_arn(account, vpc.region), vpc.region, "ec2")
        made = ensure_vpc(ec2, place, vpc_id=vpc.vpc_id, cidrs=(vpc.cidr,), tags={"Name": f"hub endpoints {vpc.vpc_id}"})
        for subnet, block in zip(vpc.subnets, subnet_blocks(vpc.cidr)):
            ensure_subnet(ec2, place, made, subnet_id=subnet.subnet_id, cidr=block, zone=subnet.availability_zone,
                          tags={"Name": f"hub endpoints {subnet.availability_zone}"})
    for associated in hub.spec.associated_vpcs:
        place = seeder.place(account, associated.region)
        ec2 = seeder.client(hub.spec.credentials.role_arn or role_arn(account, associated.region),
                            associated.region, "ec2")
        ensure_vpc(ec2, place, vpc_id=associated.vpc_id, cidrs=(associated.cidr or next(spare),),
                   tags={"Name": f"hub associated {associated.vpc_id}"})


def seed_roles(seeder: Seeder, hub: HubConfig, roles: Iterable[str]) -> None:
    """The controller (the service's identity, in the hub account) and every role it assumes, trusting it."""
    region = hub.spec.region
    controller = role_arn(hub.spec.account_id, region)
    setup = f"arn:{partition_of(region)}:iam::{SETUP_ACCOUNT}:root"  # the sandbox stands in for IRSA's provider
    for arn, trust in ((controller, trust_policy(setup)),
                       *((r, trust_policy(controller, hub.spec.credentials.external_id)) for r in sorted(set(roles)))):
        # As the role itself: moto's AssumeRole needs no role to be there, and lands in the role's account.
        ensure_role(seeder.client(arn, region, "iam"), seeder.place(arn.split(":")[4], ""), arn, trust)
