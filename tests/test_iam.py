"""The least-privilege policies cover exactly what the code does in AWS."""
from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest

from automation.cli import iam
from automation.cli import main as cli_main
from automation.adapters.aws import lookups
from automation.adapters.files.inputs import load_fleet
from automation.adapters.engine.plan import plan_stack
from automation.adapters.engine.standins import StandIns
from stacks.errors import InvalidSpec
from stacks.resolve import resolve_fleet
from doubles.factories import HUB_ACCOUNT, cluster, fleet, hub, resolve_one
from tests.test_mesh import group, hub as mesh_hub

ROOT = Path(__file__).resolve().parent.parent
ACTION = re.compile(r"\b(?:ec2|elasticloadbalancing|route53|sts|iam):[A-Z][A-Za-z]+\b")


class RecordingStandIns(StandIns):
    """The plan's stand-ins, remembering every invoke and the provider it went through."""

    def __init__(self):
        super().__init__()
        self.invoked: list[tuple[str, str | None]] = []

    def call(self, args):
        self.invoked.append((args.token, self.location(args.provider)[0]))
        return super().call(args)


def _variants():
    """Every example fleet, plus the code paths they do not take: discovered principal, A records,
    VPC CIDR lookup, dedicated mesh security groups."""
    out = []
    for hub_path in sorted((ROOT / "examples").glob("**/hub.yaml")):
        out.extend(resolve_fleet(load_fleet(str(hub_path), str(hub_path.parent / "clusters"))).values())
    ambient = hub(credentials={}, privateLink={"dnsRecordType": "ARecord"},
                  associatedVPCs=[{"region": "us-east-1", "vpcID": "vpc-0mgmt"}])
    out.append(resolve_one(cluster(), ambient))
    dedicated = mesh_hub(mesh={"groups": {"core": {"securityGroup": "dedicated"}}})
    out.extend(resolve_fleet(fleet(dedicated, tuple(group(3)))).values())
    assert not [v for v in out if isinstance(v, InvalidSpec)]
    return out


@pytest.fixture(scope="module")
def used():
    """(kind, type or token) → the set of sides it was used on, over every variant."""
    seen: dict[tuple[str, str], set[str]] = {}
    for inputs in _variants():
        standins = RecordingStandIns()
        plan = plan_stack(inputs, standins)
        side = lambda account: "hub" if account == inputs.hub.account_id else "cluster"  # noqa: E731
        for resource in plan.resources:
            if not iam.needs_no_aws(resource.type):
                seen.setdefault(("resource", resource.type), set()).add(side(resource.account))
        for token, account in standins.invoked:
            seen.setdefault(("invoke", token), set()).add(side(account))
    return seen


def test_every_resource_type_and_invoke_the_components_use_is_covered_on_its_side(used):
    tables = {"resource": iam.RESOURCES, "invoke": iam.INVOKES}
    missing = [f"{kind} {name}" for kind, name in used if name not in tables[kind]]
    assert not missing, f"automation/cli/iam.py has no IAM actions for: {missing}"
    wrong = [f"{kind} {name} used on {sorted(sides)}, granted on {sorted(tables[kind][name].sides)}"
             for (kind, name), sides in used.items() if not sides <= tables[kind][name].sides]
    assert not wrong, wrong


def test_the_table_grants_nothing_the_components_do_not_use(used):
    unused = [name for name in iam.RESOURCES if ("resource", name) not in used] + \
             [name for name in iam.INVOKES if ("invoke", name) not in used]
    assert not unused, f"automation/cli/iam.py grants actions for what no stack uses: {unused}"
    # ...and on no side it is not used on.
    broad = [name for (kind, name), sides in used.items()
             if ({"resource": iam.RESOURCES, "invoke": iam.INVOKES}[kind][name].sides - sides)]
    assert not broad, broad


def test_every_direct_lookup_declares_its_actions():
    takes_sessions = {name for name, fn in inspect.getmembers(lookups, inspect.isfunction)
                      if fn.__module__ == lookups.__name__ and "sessions" in inspect.signature(fn).parameters
                      and not name.startswith("_")}  # private helpers (_client, _route_tables) serve the lookups
    assert takes_sessions == set(lookups.all_lookups())
    assert takes_sessions == {"find_nlb", "foreign_endpoint_counts", "hub_vpc_cidrs", "vpc_cidrs", "routes_in",
                              "prefix_list_entries", "prefix_list_sizes",
                              "find_vpcs", "subnets_of", "route_tables_of", "security_groups_of", "find_load_balancer"}


def test_policies_split_actions_by_role():
    cluster_actions = set(iam.cluster_role_policy()["Statement"][0]["Action"])
    hub_actions = set(iam.hub_role_policy()["Statement"][0]["Action"])
    assert "ec2:CreateVpcEndpointServiceConfiguration" in cluster_actions - hub_actions
    assert "ec2:CreateVpcEndpoint" in hub_actions - cluster_actions
    assert "route53:CreateHostedZone" in hub_actions - cluster_actions
    assert "elasticloadbalancing:DescribeLoadBalancers" in cluster_actions - hub_actions
    assert not any(a.endswith(":*") or a == "*" for a in cluster_actions | hub_actions)
    assert "sts:AssumeRole" not in cluster_actions | hub_actions  # only the controller assumes roles


def test_trust_and_controller_policies():
    principal = f"arn:aws:iam::{HUB_ACCOUNT}:role/hubwright-controller"
    trust = iam.trust_policy(principal, "tenant-42")["Statement"][0]
    assert trust["Principal"] == {"AWS": principal} and trust["Action"] == "sts:AssumeRole"
    assert trust["Condition"] == {"StringEquals": {"sts:ExternalId": "tenant-42"}}
    assert "Condition" not in iam.trust_policy(principal)["Statement"][0]
    roles = ["arn:aws:iam::222222222222:role/hubwright", "arn:aws:iam::111111111111:role/hubwright-hub"]
    controller = iam.controller_policy(roles + roles[:1])["Statement"][0]
    assert controller["Action"] == ["sts:AssumeRole"] and controller["Resource"] == sorted(roles)
    with pytest.raises(ValueError):
        iam.controller_policy([])


def test_cli_prints_the_documents_for_a_hub(capsys):
    principal = f"arn:aws:iam::{HUB_ACCOUNT}:role/hubwright-controller"
    assert cli_main(["iam", "--principal", principal, "--hub", str(ROOT / "examples/hub.yaml")]) == 0
    docs = json.loads(capsys.readouterr().out)
    assert set(docs) == {"controller", "trust", "hub", "cluster"}
    assert docs["controller"]["Statement"][0]["Resource"] == [
        "arn:aws:iam::111111111111:role/hubwright-hub",
        "arn:aws:iam::222222222222:role/hubwright",
        "arn:aws:iam::333333333333:role/hubwright",
    ]
    assert docs["cluster"] == iam.cluster_role_policy()


def test_docs_list_exactly_the_generated_actions():
    text = (ROOT / "docs/iam.md").read_text(encoding="utf-8")
    documented = set(ACTION.findall(text))
    generated = set(iam.actions("hub")) | set(iam.actions("cluster")) | {"sts:AssumeRole", "sts:ExternalId"}
    assert documented - generated == set(), "docs/iam.md names actions the code does not use"
    assert generated - documented == set(), "docs/iam.md misses actions: run python -m automation iam --markdown"


def test_docs_show_the_generated_role_policies():
    blocks = re.findall(r"```json\n(.*?)\n```", (ROOT / "docs/iam.md").read_text(encoding="utf-8"), re.S)
    by_sid = {}
    for block in blocks:
        document = json.loads(re.sub(r'"<[^>]*>"', '"x"', block))
        by_sid[document["Statement"][0]["Sid"]] = document
    assert by_sid["HubwrightCluster"] == iam.cluster_role_policy()
    assert by_sid["HubwrightHub"] == iam.hub_role_policy()
