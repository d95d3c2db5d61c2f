"""The IAM roles as CloudFormation templates (automation.cli.iam_templates, issue #48): written by
`iam --cloudformation DIR`, clean under cfn-lint, and deployed to moto's CloudFormation they make exactly the roles
`iam` prints: the cluster role as a StackSet over several accounts (what a fleet of 40 accounts uses), the hub role
as a stack; with and without an external ID."""
from __future__ import annotations

import ast
import json

import boto3
import pytest
from cfnlint.api import lint
from moto import mock_aws

from automation.cli import main
from automation.cli.iam import cluster_role_policy, hub_role_policy, trust_policy
from automation.cli.iam_templates import TEMPLATES

HUB_ACCOUNT = "123456789012"  # moto's own account: where the StackSet and the hub stack are made
CLUSTER_ACCOUNTS = ["222222222222", "333333333333"]
REGION = "eu-west-1"
CONTROLLER = "platform/hubwright-controller"  # a role with a path


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("iam")
    assert main(["iam", "--cloudformation", str(folder)]) == 0
    return {role: (folder / file).read_text() for role, (file, _, _) in TEMPLATES.items()}


def _iam_in(account: str):
    sts = boto3.client("sts", region_name=REGION)
    creds = sts.assume_role(RoleArn=f"arn:aws:iam::{account}:role/admin", RoleSessionName="test")["Credentials"]
    return boto3.client("iam", region_name=REGION, aws_access_key_id=creds["AccessKeyId"],
                        aws_secret_access_key=creds["SecretAccessKey"], aws_session_token=creds["SessionToken"])


def _parameters(**values: str) -> list[dict[str, str]]:
    return [{"ParameterKey": key, "ParameterValue": value} for key, value in values.items()]


def _role(iam, name: str) -> tuple[dict, dict, int]:
    """(trust policy, the one inline policy, max session) of role `name`, as IAM holds them."""
    role = iam.get_role(RoleName=name)["Role"]
    (policy_name,) = iam.list_role_policies(RoleName=name)["PolicyNames"]
    inline = iam.get_role_policy(RoleName=name, PolicyName=policy_name)["PolicyDocument"]
    if isinstance(inline, str):  # moto keeps a CloudFormation role's inline policy as Python's repr of it
        inline = ast.literal_eval(inline)
    return role["AssumeRolePolicyDocument"], inline, role["MaxSessionDuration"]


def test_cfn_lint_passes_both_templates_and_sees_a_broken_one(written):
    for role, text in written.items():
        assert [str(match) for match in lint(text)] == [], role
    broken = json.loads(written["cluster"])
    broken["Outputs"]["RoleArn"]["Value"] = {"Fn::GetAtt": ["Role", "Nonsense"]}
    assert lint(json.dumps(broken)), "cfn-lint found nothing wrong with an output of an attribute IAM roles lack"


@pytest.mark.parametrize("external_id", ["", "hub-7f3a"], ids=["no-external-id", "external-id"])
def test_the_cluster_template_as_a_stackset_makes_in_every_account_the_role_iam_prints(written, external_id):
    principal = f"arn:aws:iam::{HUB_ACCOUNT}:role/{CONTROLLER}"
    with mock_aws():
        cloudformation = boto3.client("cloudformation", region_name=REGION)
        cloudformation.create_stack_set(StackSetName="hubwright-cluster-role", TemplateBody=written["cluster"],
                                        Capabilities=["CAPABILITY_NAMED_IAM"], Parameters=_parameters(
                                            HubAccountId=HUB_ACCOUNT, ControllerRoleName=CONTROLLER,
                                            ExternalId=external_id, MaxSessionDuration="7200"))
        cloudformation.create_stack_instances(StackSetName="hubwright-cluster-role", Accounts=CLUSTER_ACCOUNTS,
                                              Regions=[REGION])
        instances = cloudformation.list_stack_instances(StackSetName="hubwright-cluster-role")["Summaries"]
        assert sorted(i["Account"] for i in instances if i["Status"] == "CURRENT") == CLUSTER_ACCOUNTS
        for account in CLUSTER_ACCOUNTS:
            trust, inline, session = _role(_iam_in(account), "hubwright-cluster")
            assert trust == trust_policy(principal, external_id or None), account
            assert inline == cluster_role_policy(), account
            assert session == 7200
        assert "hubwright-cluster" not in [r["RoleName"] for r in _iam_in("444444444444").list_roles()["Roles"]]


def test_the_hub_template_makes_the_hub_role_iam_prints_and_outputs_its_arn(written):
    with mock_aws():
        cloudformation = boto3.client("cloudformation", region_name=REGION)
        cloudformation.create_stack(StackName="hubwright-hub-role", TemplateBody=written["hub"],
                                    Capabilities=["CAPABILITY_NAMED_IAM"],
                                    Parameters=_parameters(HubAccountId=HUB_ACCOUNT, RoleName="hw-hub"))
        (stack,) = cloudformation.describe_stacks(StackName="hubwright-hub-role")["Stacks"]
        outputs = {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}
        assert outputs["RoleArn"] == f"arn:aws:iam::{HUB_ACCOUNT}:role/hw-hub"
        trust, inline, session = _role(boto3.client("iam", region_name=REGION), "hw-hub")
        assert trust == trust_policy(f"arn:aws:iam::{HUB_ACCOUNT}:role/hubwright-controller")
        assert inline == hub_role_policy() and session == 3600


def test_the_templates_are_what_the_command_writes_and_name_nothing_else(written, tmp_path):
    assert main(["iam", "--cloudformation", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(file for file, _, _ in TEMPLATES.values())
    for role, (file, _, _) in TEMPLATES.items():
        assert (tmp_path / file).read_text() == written[role]
        assert list(json.loads(written[role])["Resources"]) == ["Role"]
