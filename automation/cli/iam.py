"""Least-privilege IAM for hubwright, generated from what the code uses.

Three identities are involved:

  controller  the service's own identity (e.g. its IRSA role); it only assumes roles.
  hub role    HubConfig spec.credentials.roleARN, in the hub account: endpoints, security
              groups, private zones (and, without a hub role, the controller does this itself).
  cluster role one per cluster account (the role map): the endpoint service on the NLB, and
              the mesh's peerings, routes and security group rules.

Every Pulumi resource type and invoke the components use, and every direct
lookup (automation.adapters.aws.lookups, which declares its own), maps to the IAM actions
it calls. tests/test_iam.py runs the stack program over the examples and fails
when a component registers a type or invokes a function this table does not
cover, or covers it on the wrong side; the moto tests run the lookups with
exactly these policies under IAM enforcement.

    python -m automation iam --principal arn:aws:iam::111111111111:role/hubwright-controller \\
        [--hub examples/hub.yaml] [--role-map configmap.yaml] [--markdown]
    python -m automation iam --cloudformation DIR   # the hub and cluster roles as templates (iam_templates)
    python -m automation iam --markdown --scoped    # the table of the opt-in scoped templates (stacks.iam_scope)
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Literal, Mapping

import yaml

from automation.adapters.aws import lookups
from automation.adapters.files.inputs import load_hub
from automation.cli.iam_templates import write_templates
from stacks import iam_scope
from stacks.rolemap import from_configmap

Side = Literal["hub", "cluster"]
BOTH: frozenset[Side] = frozenset({"hub", "cluster"})
HUB: frozenset[Side] = frozenset({"hub"})
CLUSTER: frozenset[Side] = frozenset({"cluster"})

VERSION = "2012-10-17"


@dataclass(frozen=True)
class Grant:
    sides: frozenset[Side]
    actions: tuple[str, ...]
    why: str


_TAGS_EC2 = ("ec2:CreateTags", "ec2:DeleteTags")  # default tags on every resource, set at create time

# Pulumi resource types (as the engine registers them) → actions for create, read, update and delete.
RESOURCES: dict[str, Grant] = {
    "pulumi:providers:aws": Grant(BOTH, ("sts:GetCallerIdentity",), "the provider checks allowedAccountIds"),
    "aws:ec2/vpcEndpointService:VpcEndpointService": Grant(CLUSTER, (
        "ec2:CreateVpcEndpointServiceConfiguration", "ec2:DescribeVpcEndpointServiceConfigurations",
        "ec2:ModifyVpcEndpointServiceConfiguration", "ec2:DeleteVpcEndpointServiceConfigurations",
        "ec2:DescribeVpcEndpointServicePermissions", "ec2:ModifyVpcEndpointServicePermissions", *_TAGS_EC2,
    ), "endpoint service on the cluster's NLB, allowing only the hub principal"),
    "aws:ec2/vpcEndpoint:VpcEndpoint": Grant(HUB, (
        "ec2:CreateVpcEndpoint", "ec2:DescribeVpcEndpoints", "ec2:ModifyVpcEndpoint", "ec2:DeleteVpcEndpoints",
        "ec2:DescribePrefixLists", *_TAGS_EC2,
    ), "interface endpoint in the placed hub VPC"),
    "aws:ec2/securityGroup:SecurityGroup": Grant(BOTH, (
        "ec2:CreateSecurityGroup", "ec2:DescribeSecurityGroups", "ec2:DeleteSecurityGroup",
        "ec2:RevokeSecurityGroupEgress", "ec2:AuthorizeSecurityGroupEgress",
        "ec2:RevokeSecurityGroupIngress", "ec2:AuthorizeSecurityGroupIngress",
        "ec2:DescribeNetworkInterfaces", *_TAGS_EC2,
    ), "the endpoint's group (hub); a mesh member's dedicated group (cluster). The default egress rule is "
       "revoked; lingering ENIs are checked on delete"),
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": Grant(BOTH, (
        "ec2:AuthorizeSecurityGroupIngress", "ec2:DescribeSecurityGroupRules", "ec2:ModifySecurityGroupRules",
        "ec2:RevokeSecurityGroupIngress", *_TAGS_EC2,
    ), "API port from each hub VPC (hub); mesh traffic from peer CIDRs (cluster)"),
    "aws:ec2/vpcPeeringConnection:VpcPeeringConnection": Grant(CLUSTER, (
        "ec2:CreateVpcPeeringConnection", "ec2:DescribeVpcPeeringConnections", "ec2:DeleteVpcPeeringConnection",
        *_TAGS_EC2,
    ), "mesh: the peering, requested by the pair's owner"),
    "aws:ec2/vpcPeeringConnectionAccepter:VpcPeeringConnectionAccepter": Grant(CLUSTER, (
        "ec2:AcceptVpcPeeringConnection", "ec2:DescribeVpcPeeringConnections", *_TAGS_EC2,
    ), "mesh: acceptance in the peer's account (removing it leaves the peering to the requester)"),
    "aws:ec2/route:Route": Grant(CLUSTER, (
        "ec2:CreateRoute", "ec2:DescribeRouteTables", "ec2:ReplaceRoute", "ec2:DeleteRoute",
    ), "mesh: a route to the peer's CIDR in each route table of both members"),
    "aws:route53/zone:Zone": Grant(HUB, (
        "route53:CreateHostedZone", "route53:GetHostedZone", "route53:UpdateHostedZoneComment",
        "route53:DeleteHostedZone", "route53:GetChange", "route53:ListTagsForResource",
        "route53:ChangeTagsForResource", "route53:ListResourceRecordSets", "route53:ChangeResourceRecordSets",
        "ec2:DescribeVpcs",
    ), "private zone for the API host (force-destroy empties it; a private zone needs ec2:DescribeVpcs)"),
    "aws:route53/record:Record": Grant(HUB, (
        "route53:ChangeResourceRecordSets", "route53:ListResourceRecordSets", "route53:GetChange",
        "route53:GetHostedZone",
    ), "the API host's record"),
    "aws:route53/zoneAssociation:ZoneAssociation": Grant(HUB, (
        "route53:AssociateVPCWithHostedZone", "route53:DisassociateVPCFromHostedZone",
        "route53:ListHostedZonesByVPC", "route53:GetHostedZone", "route53:GetChange", "ec2:DescribeVpcs",
    ), "the zone in each other hub VPC"),
}

# Pulumi invokes (lookups inside the stack program).
INVOKES: dict[str, Grant] = {
    "aws:lb/getLoadBalancer:getLoadBalancer": Grant(CLUSTER, (
        "elasticloadbalancing:DescribeLoadBalancers", "elasticloadbalancing:DescribeLoadBalancerAttributes",
        "elasticloadbalancing:DescribeTags",
    ), "the installer's NLB {infraID}-int"),
    "aws:index/getCallerIdentity:getCallerIdentity": Grant(HUB, ("sts:GetCallerIdentity",),
                                                          "the hub principal, when not configured"),
    "aws:iam/getSessionContext:getSessionContext": Grant(HUB, ("iam:GetRole",),
                                                        "the role (with path) behind the hub's session"),
    "aws:ec2/getVpcEndpointService:getVpcEndpointService": Grant(HUB, ("ec2:DescribeVpcEndpointServices",),
                                                                "AZs the service supports, seen from the hub"),
    "aws:ec2/getVpc:getVpc": Grant(HUB, ("ec2:DescribeVpcs", "ec2:DescribeVpcAttribute", "ec2:DescribeRouteTables"),
                                   "CIDR of an associated VPC given without one"),
    "aws:ec2/getNetworkInterface:getNetworkInterface": Grant(HUB, ("ec2:DescribeNetworkInterfaces",),
                                                            "endpoint IPs for A records (dnsRecordType ARecord)"),
    "aws:ec2/getSecurityGroup:getSecurityGroup": Grant(CLUSTER, ("ec2:DescribeSecurityGroups",),
                                                      "mesh: a peer's dedicated group, by name"),
}

# Types that make no AWS call: hubwright's own components (and the stack itself).
NO_AWS_PREFIXES = ("hubwright:", "pulumi:pulumi:")


def needs_no_aws(type_: str) -> bool:
    return type_.startswith(NO_AWS_PREFIXES)


def _lookup_grants() -> dict[str, Grant]:
    return {f"lookup {name}": Grant(frozenset({need.side}), need.actions, "direct call of the service")
            for name, need in sorted(lookups.all_lookups().items())}


def grants() -> dict[str, Grant]:
    """Everything hubwright does in AWS: resource types, invokes and the service's direct lookups."""
    return {**RESOURCES, **INVOKES, **_lookup_grants()}


def actions(side: Side) -> list[str]:
    return sorted({a for grant in grants().values() if side in grant.sides for a in grant.actions})


def _policy(sid: str, actions_: Iterable[str], resource: str | list[str] = "*") -> dict:
    return {"Version": VERSION, "Statement": [
        {"Sid": sid, "Effect": "Allow", "Action": sorted(set(actions_)), "Resource": resource},
    ]}


def cluster_role_policy() -> dict:
    """Identity policy of the role hubwright assumes in each cluster account."""
    return _policy("HubwrightCluster", actions("cluster"))


def hub_role_policy() -> dict:
    """Identity policy of the hub role (or of the controller itself when the hub has no role)."""
    return _policy("HubwrightHub", actions("hub"))


def scoped_policy(side: Side) -> dict:
    """The role's identity policy scoped by resource (stacks.iam_scope): the same actions, those on what hubwright
    creates conditioned on its tag. ARNs name ${AWS::Partition}: it is written only into a template."""
    return {"Version": VERSION, "Statement": iam_scope.scoped_statements(actions(side))}


def scoped_markdown_table() -> str:
    """stacks.iam_scope's table, for docs/iam.md, with the roles that use each action."""
    used = {side: set(actions(side)) for side in ("cluster", "hub")}
    return iam_scope.markdown({action: " + ".join(side for side in used if action in used[side])
                               for action in iam_scope.SCOPES})


def controller_policy(role_arns: Iterable[str]) -> dict:
    """The controller's own policy: assume the hub role and the mapped cluster roles, nothing else."""
    roles = sorted(set(role_arns))
    if not roles:
        raise ValueError("no role to assume: give the hub role and/or the role map")
    return _policy("HubwrightAssume", ["sts:AssumeRole"], roles)


def trust_policy(principal_arn: str, external_id: str | None = None) -> dict:
    """Trust policy of the hub role and of every cluster role: only the controller may assume them."""
    statement: dict = {"Sid": "HubwrightController", "Effect": "Allow", "Principal": {"AWS": principal_arn},
                       "Action": "sts:AssumeRole"}
    if external_id:
        statement["Condition"] = {"StringEquals": {"sts:ExternalId": external_id}}
    return {"Version": VERSION, "Statement": [statement]}


def documents(principal_arn: str, role_arns: Iterable[str], external_id: str | None = None) -> dict[str, dict]:
    return {
        "controller": controller_policy(role_arns),
        "trust": trust_policy(principal_arn, external_id),
        "hub": hub_role_policy(),
        "cluster": cluster_role_policy(),
    }


def markdown_table() -> str:
    """What needs which action, for docs/iam.md."""
    lines = ["| Used for | Role | Actions |", "|---|---|---|"]
    for name, grant in grants().items():
        side = " + ".join(sorted(grant.sides))
        lines.append(f"| `{name}`: {grant.why} | {side} | {', '.join(f'`{a}`' for a in sorted(grant.actions))} |")
    return "\n".join(lines) + "\n"


def _role_arns(hub_path: str | None, role_map_path: str | None) -> tuple[list[str], str | None]:
    roles: dict[str, str] = {}
    external_id = None
    hub_role = None
    if hub_path:
        hub = load_hub(hub_path)
        roles.update(hub.spec.role_account_map)
        hub_role = hub.spec.credentials.role_arn
        external_id = hub.spec.credentials.external_id
    if role_map_path:
        with open(role_map_path, encoding="utf-8") as fh:
            parsed = from_configmap(yaml.safe_load(fh))
        if parsed.errors:
            raise ValueError("\n".join(str(e) for e in parsed.errors))
        roles.update(parsed.entries)
    return sorted(set(roles.values()) | ({hub_role} if hub_role else set())), external_id


def add_iam_command(subparsers: argparse._SubParsersAction) -> None:
    """Register `iam` on the CLI's subparsers."""
    parser = subparsers.add_parser("iam", help="print the least-privilege IAM policies (docs/iam.md)",
                                   description=__doc__.split("\n\n")[0])
    parser.add_argument("--principal", help="the controller's IAM role ARN (what the roles trust)")
    parser.add_argument("--hub", help="the HubConfig YAML: hub role, external ID, role map")
    parser.add_argument("--role-map", help="the role-map ConfigMap YAML")
    parser.add_argument("--markdown", action="store_true", help="print the action table instead")
    parser.add_argument("--scoped", action="store_true",
                        help="with --markdown: the table of the templates scoped by resource (docs/iam.md)")
    parser.add_argument("--cloudformation", metavar="DIR",
                        help="write the hub and cluster roles as CloudFormation templates into DIR instead, each "
                             "also scoped by resource (the cluster role's are StackSet-ready: docs/iam.md)")
    parser.set_defaults(func=iam_command, parser=parser)


def iam_command(args: argparse.Namespace) -> int:
    if args.scoped and not args.markdown:
        args.parser.error("--scoped goes with --markdown (--cloudformation DIR writes the scoped templates anyway)")
    if args.markdown:
        sys.stdout.write(scoped_markdown_table() if args.scoped else markdown_table())
        return 0
    if args.cloudformation:
        for path in write_templates(Path(args.cloudformation),
                                    {"cluster": cluster_role_policy(), "hub": hub_role_policy()},
                                    {"cluster": scoped_policy("cluster"), "hub": scoped_policy("hub")}):
            print(path)
        return 0
    if not args.principal:
        args.parser.error("--principal is required (or --markdown, or --cloudformation DIR)")
    roles, external_id = _role_arns(args.hub, args.role_map)
    docs: Mapping[str, dict] = documents(args.principal, roles, external_id) if roles else {
        "trust": trust_policy(args.principal, external_id), "hub": hub_role_policy(),
        "cluster": cluster_role_policy()}
    json.dump(docs, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0
