"""The IAM roles as CloudFormation templates (automation.cli.iam_templates, issue #48): written by
`iam --cloudformation DIR`, clean under cfn-lint, and deployed to moto's CloudFormation they make exactly the roles
`iam` prints: the cluster role as a StackSet over several accounts (what a fleet of 40 accounts uses), the hub role
as a stack; with and without an external ID. And the opt-in templates scoped by resource (stacks.iam_scope): what they
must not allow without our tag, what they must leave unconditioned (the installer's route tables and node groups),
that they drop no action, that the tag they name is the one every created resource carries, and that docs/iam.md's
table is theirs. moto evaluates no condition: these check the documents, not AWS's reading of them."""
from __future__ import annotations

import ast
import json
import re
from fnmatch import fnmatchcase
from pathlib import Path

import boto3
import pytest
from cfnlint.api import lint
from moto import mock_aws

from automation.adapters.engine.plan import plan_stack
from automation.cli import main
from automation.cli.iam import (actions, cluster_role_policy, grants, hub_role_policy, scoped_markdown_table,
                                scoped_policy, trust_policy)
from automation.cli.iam_templates import SCOPED, TEMPLATES
from doubles.factories import cluster, fleet, resolve_one
from stacks import iam_scope
from stacks.names import MANAGED_BY, MANAGED_BY_TAG
from stacks.resolve import resolve_fleet
from tests.test_mesh import group, hub as mesh_hub

HUB_ACCOUNT = "123456789012"  # moto's own account: where the StackSet and the hub stack are made
CLUSTER_ACCOUNTS = ["222222222222", "333333333333"]
REGION = "eu-west-1"
CONTROLLER = "platform/hubwright-controller"  # a role with a path
ROOT = Path(__file__).resolve().parent.parent
POLICIES = {"cluster": cluster_role_policy, "hub": hub_role_policy}


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("iam")
    assert main(["iam", "--cloudformation", str(folder)]) == 0
    return {**{role: (folder / file).read_text() for role, (file, _, _) in TEMPLATES.items()},
            **{f"{role}-scoped": (folder / file).read_text() for role, file in SCOPED.items()}}


def _arn(kind: str, account: str = CLUSTER_ACCOUNTS[0]) -> str:
    return f"arn:aws:ec2:{REGION}:{account}:{kind}"


def _in_aws(value):
    """A scoped policy as a stack makes it in partition aws (the template Fn::Subs ${AWS::Partition})."""
    return json.loads(json.dumps(value).replace("${AWS::Partition}", "aws"))


def _allowing(policy: dict, action: str, arn: str) -> list[dict]:
    """The statements of `policy` that allow `action` on `arn`, their conditions aside (IAM's wildcard matching)."""
    found = []
    for statement in _in_aws(policy)["Statement"]:
        listed = lambda key: [statement[key]] if isinstance(statement[key], str) else statement[key]  # noqa: E731
        if statement["Effect"] != "Allow" or not any(fnmatchcase(action, a) for a in listed("Action")):
            continue
        if "Resource" in statement and any(fnmatchcase(arn, r) for r in listed("Resource")):
            found.append(statement)
        elif "NotResource" in statement and not any(fnmatchcase(arn, r) for r in listed("NotResource")):
            found.append(statement)
    return found


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


def test_cfn_lint_passes_every_template_and_sees_a_broken_one(written):
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
    files: dict[str, str] = {**{role: file for role, (file, _, _) in TEMPLATES.items()},
                             **{f"{role}-scoped": file for role, file in SCOPED.items()}}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(files.values())
    for role, file in files.items():
        assert (tmp_path / file).read_text() == written[role]
        assert list(json.loads(written[role])["Resources"]) == ["Role"]
    for role in SCOPED:  # the same parameters: a StackSet switches template without changing its parameters
        assert json.loads(written[f"{role}-scoped"])["Parameters"] == json.loads(written[role])["Parameters"]


# --------------------------------------------------------------------------- scoped by resource (stacks.iam_scope)

@pytest.mark.parametrize("role, action, kind", [
    ("cluster", "ec2:DeleteSecurityGroup", "security-group/sg-0node"),
    ("hub", "ec2:DeleteSecurityGroup", "security-group/sg-0node"),
    ("cluster", "ec2:RevokeSecurityGroupEgress", "security-group/sg-0node"),
    ("cluster", "ec2:AuthorizeSecurityGroupEgress", "security-group/sg-0node"),
    ("hub", "ec2:DeleteVpcEndpoints", "vpc-endpoint/vpce-0other"),
    ("hub", "ec2:ModifyVpcEndpoint", "vpc-endpoint/vpce-0other"),
    ("cluster", "ec2:DeleteVpcEndpointServiceConfigurations", "vpc-endpoint-service/vpce-svc-0other"),
    ("cluster", "ec2:ModifyVpcEndpointServicePermissions", "vpc-endpoint-service/vpce-svc-0other"),
    ("cluster", "ec2:DeleteVpcPeeringConnection", "vpc-peering-connection/pcx-0other"),
    ("cluster", "ec2:DeleteTags", "route-table/rtb-0installer"),
])
def test_the_scoped_policy_acts_on_a_resource_of_someone_else_only_if_it_carries_our_tag(role, action, kind):
    """The attack: the role's holder deletes or rewires a group, endpoint, service or peering hubwright did not make.
    Every statement that reaches it asks for our tag on the resource."""
    allowing = _allowing(scoped_policy(role), action, _arn(kind))
    assert allowing, f"{action} on {kind} is not granted at all: hubwright could not manage its own"
    unconditioned = [s["Sid"] for s in allowing if "Condition" not in s]
    assert not unconditioned, f"{action} on {kind} without our tag, by {unconditioned}"
    for statement in allowing:
        assert statement["Condition"] == {"StringEquals": {f"aws:ResourceTag/{MANAGED_BY_TAG}": MANAGED_BY}}


def test_the_unscoped_policy_is_what_the_attack_test_refuses():
    """The control: the same check sees the unscoped policy let a node group be deleted without any tag."""
    allowing = _allowing(cluster_role_policy(), "ec2:DeleteSecurityGroup", _arn("security-group/sg-0node"))
    assert [s["Sid"] for s in allowing if "Condition" not in s] == ["HubwrightCluster"]


@pytest.mark.parametrize("role", ["cluster", "hub"])
def test_the_scoped_policy_fits_iam_s_inline_limit(role):
    """IAM counts a role's inline policies without whitespace, at most 10,240 characters."""
    assert len(json.dumps(_in_aws(scoped_policy(role)), separators=(",", ":"))) < 10240


@pytest.mark.parametrize("role", ["cluster", "hub"])
def test_ec2_create_tags_cannot_make_someone_elses_resource_ours(role):
    """Else the tag conditions bind nothing: tag the node group as hubwright's, then delete it."""
    creates = sorted(a.partition(":")[2] for a in actions(role) if a in iam_scope.SCOPES
                     and iam_scope.SCOPES[a].tags_on_create)  # the calls that tag what they create, and only that
    allowing = _allowing(scoped_policy(role), "ec2:CreateTags", _arn("security-group/sg-0node"))
    assert allowing
    for statement in allowing:
        assert statement.get("Condition") in ({"StringEquals": {f"aws:ResourceTag/{MANAGED_BY_TAG}": MANAGED_BY}},
                                              {"StringEquals": {"ec2:CreateAction": creates}}), statement["Sid"]


@pytest.mark.parametrize("role, action, kind", [
    ("cluster", "ec2:CreateSecurityGroup", "security-group/*"),
    ("hub", "ec2:CreateSecurityGroup", "security-group/*"),
    ("hub", "ec2:CreateVpcEndpoint", "vpc-endpoint/*"),
    ("cluster", "ec2:CreateVpcEndpointServiceConfiguration", "vpc-endpoint-service/*"),
    ("cluster", "ec2:CreateVpcPeeringConnection", "vpc-peering-connection/*"),
])
def test_a_create_carries_our_tag_on_what_it_creates_and_nothing_on_the_installers_vpc(role, action, kind):
    policy = scoped_policy(role)
    allowing = _allowing(policy, action, _arn(kind))
    assert allowing and all(s.get("Condition") == {"StringEquals": {f"aws:RequestTag/{MANAGED_BY_TAG}": MANAGED_BY}}
                            for s in allowing), allowing
    assert [s for s in _allowing(policy, action, _arn("vpc/vpc-0installer")) if "Condition" not in s], \
        f"{action}: the VPC it is made in is the installer's and carries no tag of ours"


@pytest.mark.parametrize("role, action, kind", [
    ("cluster", "ec2:CreateRoute", "route-table/rtb-0installer"),
    ("cluster", "ec2:ReplaceRoute", "route-table/rtb-0installer"),
    ("cluster", "ec2:DeleteRoute", "route-table/rtb-0installer"),
    ("cluster", "ec2:AuthorizeSecurityGroupIngress", "security-group/sg-0node"),
    ("cluster", "ec2:RevokeSecurityGroupIngress", "security-group/sg-0node"),
    ("cluster", "ec2:AcceptVpcPeeringConnection", "vpc-peering-connection/pcx-0requested"),
    ("hub", "route53:ChangeResourceRecordSets", "hostedzone/Z0"),
])
def test_what_the_installer_or_tenant_owns_is_not_conditioned(role, action, kind):
    """A tag condition here would deny the mesh: the route tables and node groups are not hubwright's."""
    arn = f"arn:aws:route53:::{kind}" if action.startswith("route53:") else _arn(kind)
    assert [s for s in _allowing(scoped_policy(role), action, arn) if "Condition" not in s], action


@pytest.mark.parametrize("role", ["cluster", "hub"])
def test_scoping_narrows_and_drops_no_action(role):
    granted = {a for s in scoped_policy(role)["Statement"] for a in s["Action"]}
    assert granted == set(POLICIES[role]()["Statement"][0]["Action"])
    assert [s for s in scoped_policy(role)["Statement"] if s["Sid"] == "HubwrightRead"][0]["Resource"] == "*"
    sids = [s["Sid"] for s in scoped_policy(role)["Statement"]]
    assert len(sids) == len(set(sids)) and all(re.fullmatch("[A-Za-z0-9]+", sid) for sid in sids)


def test_every_mutating_action_has_a_row_and_every_row_an_action():
    mutating = {a for grant in grants().values() for a in grant.actions if iam_scope.is_mutating(a)}
    missing = sorted(mutating - set(iam_scope.SCOPES))
    assert not missing, f"stacks/iam_scope.py SCOPES has no row for: {missing}"
    assert sorted(set(iam_scope.SCOPES) - mutating) == [], "rows of actions no role is granted"
    with pytest.raises(ValueError, match="ec2:CreateTransitGatewayRoute has no row"):
        iam_scope.scoped_statements(["ec2:DescribeVpcs", "ec2:CreateTransitGatewayRoute"])
    for scope in iam_scope.SCOPES.values():  # a tag on create binds the type being created, never "any"
        assert scope.scoping != "request-tag" or scope.arn_type, scope.action


def test_the_tag_the_conditions_name_is_on_every_resource_hubwright_creates():
    """The providers' default tags: an AWS resource of a stack without it would be denied by its own role."""
    variants = [resolve_one(cluster(privateLink={"enabled": True})),
                *resolve_fleet(fleet(mesh_hub(mesh={"groups": {"core": {"securityGroup": "dedicated"}}}),
                                     tuple(group(2)))).values()]
    created = {"aws:ec2/securityGroup:SecurityGroup", "aws:ec2/vpcEndpoint:VpcEndpoint",
               "aws:ec2/vpcEndpointService:VpcEndpointService", "aws:ec2/vpcPeeringConnection:VpcPeeringConnection",
               "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"}
    seen = set()
    for inputs in variants:
        assert inputs.tags[MANAGED_BY_TAG] == MANAGED_BY, inputs.stack
        plan = plan_stack(inputs)
        default_tags = {r.urn: json.loads(r.inputs["defaultTags"])["tags"] for r in plan.resources
                        if r.type == "pulumi:providers:aws"}
        for resource in plan.resources:
            if resource.type in created:
                seen.add(resource.type)
                assert default_tags[resource.provider or ""].get(MANAGED_BY_TAG) == MANAGED_BY, resource.urn
    assert seen == created


def test_docs_iam_md_shows_the_scoped_table_the_rows_render():
    text = (ROOT / "docs/iam.md").read_text(encoding="utf-8")
    section = text.split("\n## Least privilege by resource", 1)[1].split("\n## ", 1)[0]
    table = "".join(line + "\n" for line in section.splitlines() if line.startswith("|"))
    assert table == scoped_markdown_table(), "docs/iam.md: run python -m automation iam --markdown --scoped"


@pytest.mark.parametrize("role", ["cluster", "hub"])
def test_the_scoped_template_makes_the_role_with_exactly_the_scoped_policy(written, role):
    with mock_aws():
        cloudformation = boto3.client("cloudformation", region_name=REGION)
        body, name = written[f"{role}-scoped"], f"hubwright-{role}-scoped"
        parameters = _parameters(HubAccountId=HUB_ACCOUNT, RoleName=name)
        if role == "cluster":  # as the fleet deploys it: a StackSet
            cloudformation.create_stack_set(StackSetName=name, TemplateBody=body,
                                            Capabilities=["CAPABILITY_NAMED_IAM"], Parameters=parameters)
            cloudformation.create_stack_instances(StackSetName=name, Accounts=CLUSTER_ACCOUNTS[:1], Regions=[REGION])
            iam = _iam_in(CLUSTER_ACCOUNTS[0])
        else:
            cloudformation.create_stack(StackName=name, TemplateBody=body, Capabilities=["CAPABILITY_NAMED_IAM"],
                                        Parameters=parameters)
            iam = boto3.client("iam", region_name=REGION)
        trust, inline, _ = _role(iam, name)
        assert inline == _in_aws(scoped_policy(role))
        assert trust == trust_policy(f"arn:aws:iam::{HUB_ACCOUNT}:role/hubwright-controller")
