"""Least privilege by resource: which mutating IAM action is narrowed to hubwright's own resources, and how.

The opt-in scoped role templates (automation.cli.iam_templates) and their table in docs/iam.md both come from SCOPES,
one row per mutating action the roles need (automation.cli.iam's grants; tests/test_iam_templates.py fails when an
action has no row, or a row no action). Only what hubwright creates is conditioned on the tag every one of its AWS
resources carries: MANAGED_BY_TAG=MANAGED_BY, the providers' default tags (stacks.resolve puts it in every stack's
tags, components.providers makes it each provider's default_tags). What the installer or a tenant owns (route tables,
node security groups, VPCs) is never conditioned: a tag condition there would deny the mesh.

Each scoped action is split in two statements: the condition binds only the resource type the row names (the group
being created or deleted, say), and the same action on every other type (the installer's VPC a group is made in) stays
unconditioned, so a condition never has to hold for a resource that is not ours. The facts about AWS this rests on
(which EC2 create calls tag on create, which types support aws:ResourceTag, that Route 53 hosted zones support
neither tag condition) were not tried against AWS: moto does not evaluate conditions (docs/iam.md says so).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Literal, Mapping

from stacks.names import MANAGED_BY, MANAGED_BY_TAG

Scoping = Literal["request-tag", "resource-tag", "tagging", "none"]
READ_VERBS = ("Describe", "Get", "List")  # an action named so changes nothing
ARN = "arn:${AWS::Partition}:ec2:*:*:"  # ${AWS::Partition}: CloudFormation's (the templates Fn::Sub it)
REQUEST_TAG = f"aws:RequestTag/{MANAGED_BY_TAG}"
RESOURCE_TAG = f"aws:ResourceTag/{MANAGED_BY_TAG}"
CREATE_ACTION = "ec2:CreateAction"  # the create call an implicit CreateTags (tag on create) is part of

_ROUTE53 = ("Route 53 offers no tag condition on hosted zones (aws:RequestTag, aws:ResourceTag), and a zone's ID is "
            "AWS's choice: no ARN pattern follows from the code")
_NODE_GROUPS = ("the mesh opens the installer's or tenant's node groups (`securityGroup: nodes`, the cluster's "
                "nodeSecurityGroupIDs) as well as hubwright's own; a tag condition would deny the mesh")
_ROUTES = "the installer's (or tenant's) route tables; a route has no tags"


@dataclass(frozen=True)
class Scope:
    """How one mutating action is narrowed. `arn_type`: the EC2 resource type the condition binds (None: any
    resource the call names); `tags_on_create`: the call passes TagSpecifications, so ec2:CreateTags runs as part of
    it (the CreateAction condition); `unconditioned_on`: (an EC2 resource type the action must reach without a
    condition, the action of the role that needs it), why in `why`."""

    action: str
    resource: str  # what the action is authorized on, in words
    owner: str  # whose that resource is: hubwright, the installer, the tenant
    scoping: Scoping
    why: str
    arn_type: str | None = None
    tags_on_create: bool = False
    unconditioned_on: tuple[str, str] | None = None


def _row(action: str, resource: str, owner: str, scoping: Scoping, why: str, **kw: Any) -> tuple[str, Scope]:
    return action, Scope(action, resource, owner, scoping, why, **kw)


SCOPES: dict[str, Scope] = dict((
    # Made by hubwright, tagged on create: the created resource must carry the tag in the request.
    _row("ec2:CreateSecurityGroup", "security group (in the installer's VPC, or the hub's)", "hubwright", "request-tag",
         "the endpoint's group (hub), a mesh member's dedicated group (cluster)", arn_type="security-group",
         tags_on_create=True),
    _row("ec2:CreateVpcEndpoint", "VPC endpoint (in the hub VPC)", "hubwright", "request-tag",
         "the cluster's interface endpoint", arn_type="vpc-endpoint", tags_on_create=True),
    _row("ec2:CreateVpcEndpointServiceConfiguration", "VPC endpoint service (on the installer's NLB)", "hubwright",
         "request-tag", "the cluster's endpoint service", arn_type="vpc-endpoint-service", tags_on_create=True),
    _row("ec2:CreateVpcPeeringConnection", "VPC peering connection (between installers' VPCs)", "hubwright",
         "request-tag", "the mesh pair's peering, made by the pair's owner", arn_type="vpc-peering-connection",
         tags_on_create=True),
    # Ours already: the resource must carry the tag.
    _row("ec2:DeleteSecurityGroup", "security group", "hubwright", "resource-tag", "only the groups hubwright made",
         arn_type="security-group"),
    _row("ec2:AuthorizeSecurityGroupEgress", "security group", "hubwright", "resource-tag",
         "egress is changed on hubwright's own groups only (the default rule of a new group)",
         arn_type="security-group"),
    _row("ec2:RevokeSecurityGroupEgress", "security group", "hubwright", "resource-tag",
         "egress is changed on hubwright's own groups only (the default rule of a new group)",
         arn_type="security-group"),
    _row("ec2:ModifyVpcEndpoint", "VPC endpoint", "hubwright", "resource-tag", "the endpoint hubwright made",
         arn_type="vpc-endpoint"),
    _row("ec2:DeleteVpcEndpoints", "VPC endpoint", "hubwright", "resource-tag", "the endpoint hubwright made",
         arn_type="vpc-endpoint"),
    _row("ec2:ModifyVpcEndpointServiceConfiguration", "VPC endpoint service", "hubwright", "resource-tag",
         "the service hubwright made", arn_type="vpc-endpoint-service"),
    _row("ec2:ModifyVpcEndpointServicePermissions", "VPC endpoint service", "hubwright", "resource-tag",
         "the service hubwright made (its allowed principal: the hub)", arn_type="vpc-endpoint-service"),
    _row("ec2:DeleteVpcEndpointServiceConfigurations", "VPC endpoint service", "hubwright", "resource-tag",
         "the service hubwright made", arn_type="vpc-endpoint-service"),
    _row("ec2:DeleteVpcPeeringConnection", "VPC peering connection", "hubwright", "resource-tag",
         "the peering the requester made; weak: the accepter's tagging is unconditioned on peerings (ec2:CreateTags)",
         arn_type="vpc-peering-connection"),
    _row("ec2:DeleteTags", "any resource hubwright made", "hubwright", "resource-tag",
         "default tags are removed from hubwright's resources only"),
    _row("ec2:CreateTags", "any resource hubwright makes", "hubwright", "tagging",
         "as part of a create call that tags on create, or on a resource that carries the tag; unconditioned on "
         "peerings: the accepter tags the peering in its own account, where the requester's tags are not seen "
         "(peering tags are per account; not tried against AWS), so the tag condition on peering deletes does not "
         "bind a holder of the role who tags first",
         unconditioned_on=("vpc-peering-connection", "ec2:AcceptVpcPeeringConnection")),
    # Not ours, or no condition to be had: unscoped, with the reason.
    _row("ec2:AcceptVpcPeeringConnection", "VPC peering connection, the installer's accepter VPC",
         "hubwright (requester) / the installer", "none",
         "in the accepter's account the peering carries no tag of ours until accepted, and the VPC is the "
         "installer's"),
    _row("ec2:AuthorizeSecurityGroupIngress", "security group", "the installer or the tenant (node groups), "
         "hubwright (its own groups)", "none", _NODE_GROUPS, tags_on_create=True),
    _row("ec2:RevokeSecurityGroupIngress", "security group", "the installer or the tenant (node groups), "
         "hubwright (its own groups)", "none", _NODE_GROUPS),
    _row("ec2:ModifySecurityGroupRules", "security group", "the installer or the tenant (node groups), "
         "hubwright (its own groups)", "none", _NODE_GROUPS),
    _row("ec2:CreateRoute", "route table", "the installer or the tenant", "none", _ROUTES),
    _row("ec2:ReplaceRoute", "route table", "the installer or the tenant", "none", _ROUTES),
    _row("ec2:DeleteRoute", "route table", "the installer or the tenant", "none", _ROUTES),
    _row("route53:CreateHostedZone", "hosted zone", "hubwright", "none",
         "no tag on create: the provider tags the zone afterwards (ChangeTagsForResource); " + _ROUTE53),
    *(_row(action, "hosted zone", "hubwright", "none", _ROUTE53) for action in (
        "route53:DeleteHostedZone", "route53:UpdateHostedZoneComment", "route53:ChangeTagsForResource",
        "route53:ChangeResourceRecordSets")),
    *(_row(action, "hosted zone, the hub's VPCs", "hubwright / the hub's owner", "none", _ROUTE53) for action in (
        "route53:AssociateVPCWithHostedZone", "route53:DisassociateVPCFromHostedZone")),
))

SCOPING_WORDS: dict[Scoping, str] = {
    "request-tag": f"yes: `aws:RequestTag/{MANAGED_BY_TAG}` = `{MANAGED_BY}` on create",
    "resource-tag": f"yes: `aws:ResourceTag/{MANAGED_BY_TAG}` = `{MANAGED_BY}`",
    "tagging": "yes: on create (EC2's `CreateAction` condition key), or on a resource that carries the tag",
    "none": "no",
}


def is_mutating(action: str) -> bool:
    return not action.partition(":")[2].startswith(READ_VERBS)


def scope_of(action: str) -> Scope:
    """The row of mutating `action`; a ValueError naming it when it has none (a new action needs a decision)."""
    scope = SCOPES.get(action)
    if scope is None:
        raise ValueError(f"stacks.iam_scope.SCOPES: mutating action {action} has no row: decide which resource it "
                         "is authorized on, whose that is, and whether it can be conditioned on our tag")
    return scope


def _sid(*words: str) -> str:
    return "Hubwright" + "".join(part[:1].upper() + part[1:] for word in words for part in word.split("-"))


def _statement(sid: str, actions: Iterable[str], condition: Mapping[str, Any] | None = None,
               resource: str = "*", not_resource: str | None = None) -> dict[str, Any]:
    statement: dict[str, Any] = {"Sid": sid, "Effect": "Allow", "Action": sorted(set(actions))}
    if not_resource is not None:
        statement["NotResource"] = not_resource
    else:
        statement["Resource"] = resource
    if condition:
        statement["Condition"] = dict(condition)
    return statement


def _bound(sid: str, actions: list[str], arn_type: str | None, condition: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The condition on `arn_type` (any type: None), and the actions unconditioned on every other type."""
    if arn_type is None:
        return [_statement(sid, actions, condition)]
    arn = f"{ARN}{arn_type}/*"
    return [_statement(sid, actions, condition, resource=arn), _statement(sid + "Elsewhere", actions, not_resource=arn)]


def scoped_statements(actions: Iterable[str]) -> list[dict[str, Any]]:
    """One role's policy statements, scoped by resource: its `actions` (automation.cli.iam.actions of the role)."""
    wanted = sorted(set(actions))
    reads = [a for a in wanted if not is_mutating(a)]
    scopes = [scope_of(a) for a in wanted if is_mutating(a)]
    statements = [_statement("HubwrightRead", reads)] if reads else []
    unscoped = [s.action for s in scopes if s.scoping == "none"]
    if unscoped:
        statements.append(_statement("HubwrightUnscoped", unscoped))
    for scoping, key, condition in (("request-tag", "TagOnCreate", {"StringEquals": {REQUEST_TAG: MANAGED_BY}}),
                                    ("resource-tag", "Ours", {"StringEquals": {RESOURCE_TAG: MANAGED_BY}})):
        types = sorted({s.arn_type or "" for s in scopes if s.scoping == scoping})
        for arn_type in types:
            group = [s.action for s in scopes if s.scoping == scoping and (s.arn_type or "") == arn_type]
            statements += _bound(_sid(key, arn_type or "any"), group, arn_type or None, condition)
    for scope in (s for s in scopes if s.scoping == "tagging"):
        creates = sorted(s.action.partition(":")[2] for s in scopes if s.tags_on_create)
        if creates:
            statements.append(_statement("HubwrightTagOnCreate", [scope.action],
                                         {"StringEquals": {CREATE_ACTION: creates}}))
        statements.append(_statement("HubwrightRetagOurs", [scope.action],
                                     {"StringEquals": {RESOURCE_TAG: MANAGED_BY}}))
        if scope.unconditioned_on and scope.unconditioned_on[1] in wanted:
            arn_type = scope.unconditioned_on[0]
            statements.append(_statement(_sid("tag", arn_type), [scope.action],
                                         resource=f"{ARN}{arn_type}/*"))
    return statements


def markdown(roles: Mapping[str, str]) -> str:
    """The table of docs/iam.md's scoped section: every row, with the roles (`roles`: action → roles) using it."""
    lines = ["| Action | Role | Authorized on | Owner | Scoped | Why |", "|---|---|---|---|---|---|"]
    for action, scope in sorted(SCOPES.items()):
        lines.append(f"| `{action}` | {roles.get(action, '')} | {scope.resource} | {scope.owner} | "
                     f"{SCOPING_WORDS[scope.scoping]} | {scope.why} |")
    return "\n".join(lines) + "\n"
