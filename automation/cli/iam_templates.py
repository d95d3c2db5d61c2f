"""The IAM roles as CloudFormation templates: the documents `iam` prints, for an account factory or a StackSet.

Two templates, of the identity policies `iam` builds from its grants (automation.cli.iam, which writes them):

  hubwright-cluster-role.json  the role in every cluster account. StackSet-ready: one template, its parameters
                               the hub account and the controller's role there (what the role trusts), so one
                               StackSet deploys it to all of a fleet's accounts;
  hubwright-hub-role.json      the hub role (HubConfig spec.credentials.roleARN), in the hub account;

and beside each its opt-in variant scoped by resource (hubwright-*-role-scoped.json: the same actions, those on what
hubwright creates conditioned on its tag; stacks.iam_scope), with the same parameters.

Each role gets exactly `iam`'s identity policy inline, and `iam`'s trust policy: the controller only, and the
external ID when one is given (HubConfig spec.credentials.externalID). tests/test_iam_templates.py deploys both to
moto's CloudFormation (the cluster role as a StackSet over several accounts), reads the roles back and compares
them with `iam`'s documents, and lints both with cfn-lint.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal, Mapping

from stacks.names import MANAGED_BY, MANAGED_BY_TAG

FORMAT = "2010-09-09"
Role = Literal["cluster", "hub"]
TEMPLATES: dict[Role, tuple[str, str, str]] = {
    # role: (file, default role name, where it is)
    "cluster": ("hubwright-cluster-role.json", "hubwright-cluster",
                "in each cluster account (a StackSet over the fleet's accounts)"),
    "hub": ("hubwright-hub-role.json", "hubwright-hub", "in the hub account (HubConfig spec.credentials.roleARN)"),
}
SCOPED: dict[Role, str] = {  # role: file of its variant scoped by resource (stacks.iam_scope)
    "cluster": "hubwright-cluster-role-scoped.json",
    "hub": "hubwright-hub-role-scoped.json",
}
MAX_SESSION = (3600, 43200)  # IAM's bounds of a role's MaxSessionDuration, in seconds


def _parameters(role_name: str) -> dict[str, Any]:
    return {
        "HubAccountId": {"Type": "String", "AllowedPattern": r"^\d{12}$",
                         "Description": "The hub account: where hubwright's controller runs"},
        "ControllerRoleName": {"Type": "String", "Default": "hubwright-controller",
                               "AllowedPattern": r"^[\w+=,.@/-]{1,512}$",
                               "Description": "The controller's role in the hub account (its IRSA role), with its "
                                              "path if it has one: the only principal that may assume this role"},
        "ExternalId": {"Type": "String", "Default": "", "AllowedPattern": r"^[\w+=,.@:/-]{0,1224}$",
                       "Description": "HubConfig spec.credentials.externalID; empty: none is required"},
        "RoleName": {"Type": "String", "Default": role_name, "AllowedPattern": r"^[\w+=,.@-]{1,64}$",
                     "Description": "This role's name (what the role map or HubConfig names)"},
        "MaxSessionDuration": {"Type": "Number", "Default": MAX_SESSION[0], "MinValue": MAX_SESSION[0],
                               "MaxValue": MAX_SESSION[1],
                               "Description": "At least HubConfig spec.credentials.sessionDurationSeconds"},
    }


def _trust(version: str) -> dict[str, Any]:
    """`iam`'s trust policy, with the principal and the external ID as parameters."""
    return {"Version": version, "Statement": [{
        "Sid": "HubwrightController", "Effect": "Allow",
        "Principal": {"AWS": {"Fn::Sub": "arn:${AWS::Partition}:iam::${HubAccountId}:role/${ControllerRoleName}"}},
        "Action": "sts:AssumeRole",
        "Condition": {"Fn::If": ["HasExternalId", {"StringEquals": {"sts:ExternalId": {"Ref": "ExternalId"}}},
                                 {"Ref": "AWS::NoValue"}]},
    }]}


def _substituted(value: Any) -> Any:
    """`value` with each string naming a pseudo parameter (stacks.iam_scope's ARNs: ${AWS::Partition}) in Fn::Sub."""
    if isinstance(value, str):
        return {"Fn::Sub": value} if "${AWS::" in value else value
    if isinstance(value, list):
        return [_substituted(item) for item in value]
    if isinstance(value, Mapping):
        return {key: _substituted(item) for key, item in value.items()}
    return value


def template(role: Role, policy: Mapping[str, Any], scoped: bool = False) -> dict[str, Any]:
    """The template of `role`, its identity policy `policy` (as `iam` prints it; `scoped`: the policy is the one
    scoped by resource, automation.cli.iam.scoped_policy)."""
    _, role_name, where = TEMPLATES[role]
    what = ("the policy `hubwright iam` prints, scoped by resource to what hubwright creates (opt-in: docs/iam.md)"
            if scoped else "the least-privilege policy `hubwright iam` prints")
    return {
        "AWSTemplateFormatVersion": FORMAT,
        "Description": f"hubwright's role {where}: {what}",
        "Parameters": _parameters(role_name),
        "Conditions": {"HasExternalId": {"Fn::Not": [{"Fn::Equals": [{"Ref": "ExternalId"}, ""]}]}},
        "Resources": {"Role": {"Type": "AWS::IAM::Role", "Properties": {
            "RoleName": {"Ref": "RoleName"},
            "Description": f"hubwright, {where}",
            "MaxSessionDuration": {"Ref": "MaxSessionDuration"},
            "AssumeRolePolicyDocument": _trust(policy["Version"]),
            "Policies": [{"PolicyName": role_name, "PolicyDocument": _substituted(policy)}],
            "Tags": [{"Key": MANAGED_BY_TAG, "Value": MANAGED_BY}],  # as on every resource hubwright makes
        }}},
        "Outputs": {"RoleArn": {"Description": "What the role map (cluster) or spec.credentials.roleARN (hub) "
                                               "names", "Value": {"Fn::GetAtt": ["Role", "Arn"]}}},
    }


def write_templates(folder: Path, policies: Mapping[Role, Mapping[str, Any]],
                    scoped: Mapping[Role, Mapping[str, Any]]) -> list[Path]:
    """Each role's template, and that of its `scoped` policy, into `folder` (made if missing); their paths.

    Always both: the release writes every IAM template into one folder, and which to deploy is the reader's choice."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, role, policy, is_scoped in ([(TEMPLATES[r][0], r, p, False) for r, p in policies.items()]
                                          + [(SCOPED[r], r, p, True) for r, p in scoped.items()]):
        path = folder / name
        path.write_text(json.dumps(template(role, policy, is_scoped), indent=2) + "\n")
        written.append(path)
    return written
