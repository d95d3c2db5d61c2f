"""stacks.plandiff: a stack's plan against its baseline (add, remove, replace, update), the mesh summaries, the
counts, and the replace table against every AWS type the bundled examples' programs create."""
import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from stacks.plandiff.compare import (PropertyChange, ResourceChange, StackDiff, compare_mesh, compare_plans,
                                     compare_stack, summary)
from stacks.plandiff.replace import REPLACE_ON, REPLACE_WHEN, UnknownType, forces_replace

ROOT = Path(__file__).resolve().parent.parent
SG = "aws:ec2/securityGroup:SecurityGroup"
ROUTE = "aws:ec2/route:Route"
ZONE = "aws:route53/zone:Zone"
TGW = "aws:ec2transitgateway/transitGateway:TransitGateway"
PROVIDER = "pulumi:providers:aws"
EXAMPLES = [("examples/hub.yaml", "examples/clusters"), ("examples/mesh/hub.yaml", "examples/mesh/clusters"),
            ("examples/transit/hub.yaml", "examples/transit/clusters"),
            ("examples/capi/hub.yaml", "examples/capi/clusters")]


def res(name, type_=SG, inputs=None, *, account="222222222222", region="us-east-1", options=None,
        parent=None, dependencies=()):
    doc = {"urn": f"urn:pulumi:acme.prod-1::hubwright::{type_}::{name}", "type": type_, "name": name,
           "parent": parent, "dependencies": list(dependencies), "account": account, "region": region,
           "inputs": dict(inputs or {})}
    if options:
        doc["options"] = options
    return doc


def stack(*resources, name="acme.prod-1", outputs=None):
    return {"stack": name, "cluster": "acme/prod-1", "outputs": outputs or {}, "resources": list(resources)}


def only(diff: StackDiff) -> ResourceChange:
    assert len(diff.resources) == 1, diff
    return diff.resources[0]


SG_INPUTS = {"description": "hubwright", "tags": {"Name": "sg"}, "vpcId": "vpc-1"}


# ---- resources -------------------------------------------------------------------------------------------------


def test_an_input_the_provider_updates_in_place_is_an_update_with_its_old_and_new_value():
    diff = compare_stack(stack(res("sg", inputs=SG_INPUTS)),
                         stack(res("sg", inputs={**SG_INPUTS, "tags": {"Name": "sg", "team": "a"}})))
    assert diff.change == "changed"
    change = only(diff)
    assert (change.change, change.type) == ("update", SG)
    assert change.properties == {"tags": PropertyChange({"Name": "sg"}, {"Name": "sg", "team": "a"})}
    assert change.to_json() == {"urn": res("sg")["urn"], "type": SG, "change": "update", "properties": {
        "tags": {"old": {"Name": "sg"}, "new": {"Name": "sg", "team": "a"}}}}


def test_an_input_the_provider_replaces_on_makes_the_whole_resource_a_replace():
    diff = compare_stack(stack(res("sg", inputs=SG_INPUTS)),
                         stack(res("sg", inputs={**SG_INPUTS, "vpcId": "vpc-2", "tags": {"Name": "other"}})))
    change = only(diff)
    assert change.change == "replace"
    assert change.properties == {"tags": PropertyChange({"Name": "sg"}, {"Name": "other"}),
                                 "vpcId": PropertyChange("vpc-1", "vpc-2")}


def test_an_input_given_or_dropped_is_a_change_with_none_on_the_missing_side():
    diff = compare_stack(stack(res("r", ROUTE, {"routeTableId": "rtb-1", "vpcPeeringConnectionId": "pcx-1"})),
                         stack(res("r", ROUTE, {"routeTableId": "rtb-1", "transitGatewayId": "tgw-1"})))
    change = only(diff)
    assert change.change == "update"  # the route's target moves in place; only its table and destination replace
    assert change.properties == {"transitGatewayId": PropertyChange(None, "tgw-1"),
                                 "vpcPeeringConnectionId": PropertyChange("pcx-1", None)}


def test_a_nested_difference_reports_the_top_level_inputs_whole_values():
    old = {"vpcs": [{"vpcId": "vpc-1", "vpcRegion": "us-east-1"}], "name": "x.internal"}
    new = {"vpcs": [{"vpcId": "vpc-1", "vpcRegion": "eu-west-1"}], "name": "x.internal"}
    change = only(compare_stack(stack(res("z", ZONE, old)), stack(res("z", ZONE, new))))
    assert change.properties == {"vpcs": PropertyChange(old["vpcs"], new["vpcs"])}
    assert change.change == "update"


def test_true_and_1_differ_though_python_calls_them_equal():
    change = only(compare_stack(stack(res("z", ZONE, {"forceDestroy": 1})),
                                stack(res("z", ZONE, {"forceDestroy": True}))))
    assert change.properties == {"forceDestroy": PropertyChange(1, True)}


def test_resources_only_in_one_plan_are_added_or_removed_with_every_input():
    kept = res("kept", inputs=SG_INPUTS)
    gone = res("gone", ROUTE, {"routeTableId": "rtb-1", "destinationCidrBlock": "10.0.0.0/16"})
    came = res("came", ROUTE, {"routeTableId": "rtb-2", "destinationCidrBlock": "10.1.0.0/16"})
    diff = compare_stack(stack(kept, gone), stack(came, kept))
    assert diff.change == "changed"
    assert [(r.urn, r.change) for r in diff.resources] == [(came["urn"], "add"), (gone["urn"], "remove")]
    added, removed = diff.resources
    assert added.properties == {"destinationCidrBlock": PropertyChange(None, "10.1.0.0/16"),
                                "routeTableId": PropertyChange(None, "rtb-2")}
    assert removed.properties == {"destinationCidrBlock": PropertyChange("10.0.0.0/16", None),
                                  "routeTableId": PropertyChange("rtb-1", None)}


def test_resources_come_sorted_by_urn():
    names = ["c", "a", "b"]
    diff = compare_stack(stack(), stack(*[res(n) for n in names]))
    assert [r.urn for r in diff.resources] == sorted(res(n)["urn"] for n in names)


@pytest.mark.parametrize("field, value", [("account", "333333333333"), ("region", "eu-west-1")])
def test_a_resource_moved_to_another_account_or_region_is_replaced(field, value):
    old, new = res("sg", inputs=SG_INPUTS), res("sg", inputs=SG_INPUTS)
    new[field] = value
    change = only(compare_stack(stack(old), stack(new)))
    assert change.change == "replace"
    assert change.properties == {field: PropertyChange(old[field], value)}


def test_parent_dependencies_and_outputs_alone_change_nothing():
    old = stack(res("sg", inputs=SG_INPUTS, parent="urn:a", dependencies=["urn:x"]), outputs={"a": 1})
    new = stack(res("sg", inputs=SG_INPUTS, parent="urn:b", dependencies=["urn:y", "urn:z"]), outputs={"a": 2})
    new["planKey"] = "abc"
    assert compare_stack(old, new) == StackDiff("acme.prod-1", "unchanged", ())


def test_an_input_in_ignore_changes_is_no_change_but_another_still_is():
    old = res("z", ZONE, {"name": "x.internal", "vpcs": [{"vpcId": "vpc-1"}], "comment": "a"})
    new = res("z", ZONE, {"name": "x.internal", "vpcs": [{"vpcId": "vpc-2"}], "comment": "a"},
              options={"ignoreChanges": ["vpcs"]})
    assert compare_stack(stack(old), stack(new)).change == "unchanged"
    new["inputs"]["comment"] = "b"
    change = only(compare_stack(stack(old), stack(new)))
    assert change.properties == {"comment": PropertyChange("a", "b")}


def test_ignore_changes_on_a_nested_path_does_not_hide_the_rest_of_the_input():
    old = res("sg", inputs=SG_INPUTS)
    new = res("sg", inputs={**SG_INPUTS, "tags": {"Name": "sg", "team": "b"}}, options={"ignoreChanges": ["tags.Name"]})
    assert only(compare_stack(stack(old), stack(new))).properties == {
        "tags": PropertyChange({"Name": "sg"}, {"Name": "sg", "team": "b"})}


def test_ignore_changes_is_read_from_the_new_resource_not_the_baseline():
    old = res("sg", inputs=SG_INPUTS, options={"ignoreChanges": ["tags"]})
    new = res("sg", inputs={**SG_INPUTS, "tags": {}})
    assert only(compare_stack(stack(old), stack(new))).change == "update"


@pytest.mark.parametrize("paths", [["tags"], ["tags.Name"], ["*"]])
def test_replace_on_changes_turns_an_update_into_a_replace(paths):
    old = res("sg", inputs=SG_INPUTS)
    new = res("sg", inputs={**SG_INPUTS, "tags": {"Name": "other"}}, options={"replaceOnChanges": paths})
    assert only(compare_stack(stack(old), stack(new))).change == "replace"


def test_replace_on_changes_of_another_input_leaves_an_update():
    old = res("sg", inputs=SG_INPUTS)
    new = res("sg", inputs={**SG_INPUTS, "tags": {"Name": "other"}},
              options={"replaceOnChanges": ["ingress"], "deleteBeforeReplace": True})
    assert only(compare_stack(stack(old), stack(new))).change == "update"


def test_a_provider_moved_to_another_region_is_replaced_and_a_new_default_tag_is_an_update():
    inputs = {"allowedAccountIds": '["222222222222"]', "region": "us-east-1", "defaultTags": '{"tags": {}}'}
    old = res("aws-222222222222-us-east-1", PROVIDER, inputs)
    tagged = res("aws-222222222222-us-east-1", PROVIDER, {**inputs, "defaultTags": '{"tags": {"a": "b"}}'})
    assert only(compare_stack(stack(old), stack(tagged))).change == "update"
    moved = res("aws-222222222222-us-east-1", PROVIDER, {**inputs, "region": "eu-west-1"}, region="eu-west-1")
    change = only(compare_stack(stack(old), stack(moved)))
    assert change.change == "replace"
    assert set(change.properties) == {"region"}  # the input and the location, under one name
    assert change.properties["region"] == PropertyChange("us-east-1", "eu-west-1")


def test_a_transit_gateways_default_route_table_replaces_from_disable_to_enable_only():
    base = {"amazonSideAsn": 64600, "defaultRouteTableAssociation": "disable", "dnsSupport": "enable"}
    old = res("tgw", TGW, base)

    def kind(**inputs):
        return only(compare_stack(stack(old), stack(res("tgw", TGW, {**base, **inputs})))).change

    assert kind(defaultRouteTableAssociation="enable") == "replace"
    assert kind(amazonSideAsn=64700) == "update"  # ModifyTransitGateway takes it since the provider's v4.36
    assert kind(multicastSupport="enable") == "replace"
    enabled = res("tgw", TGW, {**base, "defaultRouteTableAssociation": "enable"})
    assert only(compare_stack(stack(enabled), stack(old))).change == "update"


# ---- secrets ---------------------------------------------------------------------------------------------------


def test_a_changed_secret_is_a_change_shown_only_as_secret():
    old = res("sg", inputs={**SG_INPUTS, "description": "[secret 1a2b3c4d5e6f]",
                            "tags": {"Name": "sg", "token": "[secret 0000aaaa]"}})
    new = res("sg", inputs={**SG_INPUTS, "description": "[secret 9f8e7d6c5b4a]",
                            "tags": {"Name": "sg2", "token": "[secret 1111bbbb]"}})
    change = only(compare_stack(stack(old), stack(new)))
    assert change.change == "replace"  # a security group's description is ForceNew, secret or not
    assert change.properties == {
        "description": PropertyChange("[secret]", "[secret]"),
        "tags": PropertyChange({"Name": "sg", "token": "[secret]"}, {"Name": "sg2", "token": "[secret]"})}
    text = json.dumps(change.to_json())
    for digest in ("1a2b3c4d5e6f", "9f8e7d6c5b4a", "0000aaaa", "1111bbbb"):
        assert digest not in text


def test_the_same_secret_is_no_change_and_an_added_or_removed_ones_value_is_masked():
    secret = {**SG_INPUTS, "description": "[secret 1a2b3c4d5e6f]", "tags": {"k": ["x", "[secret 77]"]}}
    assert compare_stack(stack(res("sg", inputs=secret)), stack(res("sg", inputs=secret))).change == "unchanged"
    for diff in (compare_stack(stack(res("sg", inputs=secret)), stack()),
                 compare_stack(None, stack(res("sg", inputs=secret)))):
        text = json.dumps(diff.to_json())
        assert "1a2b3c4d5e6f" not in text and "77" not in text
        assert text.count('"[secret]"') == 2


# ---- stacks ----------------------------------------------------------------------------------------------------


def test_a_new_stack_adds_every_resource_and_a_removed_one_removes_them():
    plan = stack(res("sg", inputs=SG_INPUTS), res("r", ROUTE, {"routeTableId": "rtb-1"}))
    new = compare_stack(None, plan)
    assert (new.stack, new.change, [r.change for r in new.resources]) == ("acme.prod-1", "new", ["add", "add"])
    removed = compare_stack(plan, None)
    assert (removed.change, [r.change for r in removed.resources]) == ("removed", ["remove", "remove"])
    assert removed.to_json()["resources"][0]["properties"]["routeTableId"] == {"old": "rtb-1", "new": None}


def test_an_unchanged_stack_has_no_resources_in_its_json():
    plan = stack(res("sg", inputs=SG_INPUTS))
    diff = compare_stack(plan, copy.deepcopy(plan))
    assert diff.to_json() == {"stack": "acme.prod-1", "change": "unchanged", "resources": []}


def test_two_different_stacks_or_none_at_all_are_refused():
    with pytest.raises(ValueError):
        compare_stack(None, None)
    with pytest.raises(ValueError):
        compare_stack(stack(name="a.b"), stack(name="a.c"))


def test_a_component_needs_no_table_entry():
    old = res("mesh", "hubwright:mesh:Mesh", {}, account=None, region=None)
    assert compare_stack(stack(old), stack(copy.deepcopy(old))).change == "unchanged"
    assert forces_replace("hubwright:mesh:Mesh", "anything") is False


# ---- the replace table -----------------------------------------------------------------------------------------


def test_a_type_missing_from_the_table_is_an_error_naming_it_not_an_update():
    with pytest.raises(UnknownType) as raised:
        forces_replace("aws:ec2/vpc:Vpc", "cidrBlock")
    assert raised.value.type == "aws:ec2/vpc:Vpc"
    assert "aws:ec2/vpc:Vpc" in str(raised.value) and "REPLACE_ON" in str(raised.value)
    assert isinstance(raised.value, KeyError)
    old = res("vpc", "aws:ec2/vpc:Vpc", {"cidrBlock": "10.0.0.0/16"})
    new = res("vpc", "aws:ec2/vpc:Vpc", {"cidrBlock": "10.1.0.0/16"})
    with pytest.raises(UnknownType):
        compare_stack(stack(old), stack(new))
    assert compare_stack(stack(old), stack(copy.deepcopy(old))).change == "unchanged"  # nothing to decide


def test_forces_replace_follows_the_table():
    assert forces_replace(SG, "vpcId") and forces_replace(SG, "description")
    assert not forces_replace(SG, "tags")
    assert not forces_replace("aws:ec2/vpcEndpointService:VpcEndpointService", "allowedPrincipals")
    assert forces_replace(PROVIDER, "allowedAccountIds") and not forces_replace(PROVIDER, "defaultTags")
    assert forces_replace(TGW, "defaultRouteTablePropagation")  # no values given: the cautious answer
    assert not forces_replace(TGW, "defaultRouteTablePropagation", "enable", "disable")
    assert forces_replace(TGW, "defaultRouteTablePropagation", "disable", None)  # not given: "enable"
    assert forces_replace("aws:ram/resourceShare:ResourceShare", "region")  # any AWS resource's own region
    assert set(REPLACE_WHEN) <= set(REPLACE_ON)


def components_constructors() -> set[str]:
    """`aws.<module>.<Resource>(` in components/: every AWS resource class a program can construct."""
    found = set()
    for path in (ROOT / "components").glob("*.py"):
        found |= set(re.findall(r"\baws\.([a-z0-9_]+)\.([A-Z]\w*)\(", path.read_text()))
    return {f"{module}.{name}" for module, name in found if not name.endswith("Args")}


def test_every_resource_class_in_components_has_a_table_entry():
    # aws.<module>.<Class> is the type aws:<module>/<class with a lower-case first letter>:<Class>
    types = {f"aws:{m}/{c[0].lower() + c[1:]}:{c}" for m, c in (t.split(".") for t in components_constructors())}
    assert len(types) >= 20
    assert types <= set(REPLACE_ON), sorted(types - set(REPLACE_ON))


@pytest.fixture(scope="module")
def example_plans():
    plans = []
    for hub, clusters in EXAMPLES:
        done = subprocess.run([sys.executable, "-m", "automation", "plan", "--hub", hub, "--clusters", clusters,
                               "--format", "json", "--jobs", "1"], cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        plans.append(json.loads(done.stdout))
    return plans


def test_every_aws_type_in_the_bundled_examples_plans_has_a_table_entry(example_plans):
    types = {r["type"] for plan in example_plans for s in plan["stacks"] for r in s["resources"]
             if r["type"].startswith(("aws:", "pulumi:providers:"))}
    assert {SG, ROUTE, TGW, PROVIDER} <= types  # the examples reach the PrivateLink, peering and transit programs
    assert types <= set(REPLACE_ON), sorted(types - set(REPLACE_ON))


def test_a_bundled_plan_against_itself_is_unchanged_and_a_moved_cidr_replaces_its_routes(example_plans):
    for plan in example_plans:
        doc = compare_plans(plan, copy.deepcopy(plan))
        assert {s["change"] for s in doc["stacks"]} == {"unchanged"}
        assert all(group["change"] == "unchanged" for group in doc["mesh"].values())
    transit = next(p for p in example_plans if any(s["stack"].startswith("_tgw_") for s in p["stacks"]))
    moved = copy.deepcopy(transit)
    routes = [r for s in moved["stacks"] for r in s["resources"] if r["type"] == ROUTE]
    assert routes
    for route in routes:
        route["inputs"]["destinationCidrBlock"] = "10.250.0.0/16"
    doc = compare_plans(transit, moved)
    kinds = [r["change"] for s in doc["stacks"] for r in s["resources"]]
    assert kinds == ["replace"] * len(routes)
    assert doc["summary"]["resources"]["replace"] == len(routes)


# ---- the mesh and the counts -----------------------------------------------------------------------------------


def test_mesh_groups_compared_field_by_field_and_sorted():
    old = {"web": {"members": 3, "state": "peering"}, "core": {"members": 4, "state": "peering"},
           "gone": {"members": 2, "state": "peering"}}
    new = {"web": {"members": 3, "state": "peering"}, "core": {"members": 5, "state": "peering", "note": "n"},
           "added": {"members": 2, "state": "transitGateway"}}
    mesh = compare_mesh(old, new)
    assert list(mesh) == ["added", "core", "gone", "web"]
    assert mesh["web"] == {"change": "unchanged"}
    assert mesh["core"] == {"change": "changed", "members": {"old": 4, "new": 5}, "note": {"old": None, "new": "n"}}
    assert mesh["added"] == {"change": "new", "members": {"old": None, "new": 2},
                             "state": {"old": None, "new": "transitGateway"}}
    assert mesh["gone"]["change"] == "removed" and mesh["gone"]["members"] == {"old": 2, "new": None}


def test_summary_counts_stacks_by_change_and_resources_by_kind():
    plan = stack(res("a", inputs=SG_INPUTS), res("b", inputs=SG_INPUTS))
    changed = stack(res("a", inputs={**SG_INPUTS, "vpcId": "vpc-9"}), res("b", inputs={**SG_INPUTS, "tags": {}}),
                    res("c", inputs=SG_INPUTS))
    diffs = [compare_stack(plan, changed), compare_stack(None, plan), compare_stack(plan, None),
             compare_stack(plan, plan), compare_stack(plan, copy.deepcopy(plan))]
    assert summary(diffs) == {"stacks": {"unchanged": 2, "new": 1, "removed": 1, "changed": 1},
                              "resources": {"add": 3, "remove": 2, "replace": 1, "update": 1}}
    assert summary([]) == {"stacks": {"unchanged": 0, "new": 0, "removed": 0, "changed": 0},
                           "resources": {"add": 0, "remove": 0, "replace": 0, "update": 0}}


def test_compare_plans_pairs_stacks_by_name_new_order_first_then_the_gone():
    a, b, c = stack(name="t.a"), stack(res("x"), name="t.b"), stack(name="t.c")
    doc = compare_plans({"stacks": [a, b], "mesh": {}}, {"stacks": [c, a], "mesh": {"g": {"members": 1}}})
    assert [(s["stack"], s["change"]) for s in doc["stacks"]] == [("t.c", "new"), ("t.a", "unchanged"),
                                                                  ("t.b", "removed")]
    assert doc["mesh"] == {"g": {"change": "new", "members": {"old": None, "new": 1}}}
    assert doc["summary"]["stacks"] == {"unchanged": 1, "new": 1, "removed": 1, "changed": 0}
