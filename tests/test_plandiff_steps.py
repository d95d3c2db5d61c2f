"""stacks.plandiff.steps: the engine's steps of a run as the plan diff's StackDiff (what the run's history entry
shows): which steps count, one entry per URN, the properties of an update (named by the provider, else found),
drift, secrets masked, and the diff document the renderers read."""
from __future__ import annotations

from stacks.plandiff.render import render_diff
from stacks.plandiff.compare import PropertyChange, ResourceChange, StackDiff
from stacks.plandiff.steps import DYNAMIC_PROVIDER_KEY, SECRET_SIG, SECRET_SIG_VALUE, Step, shown, stack_diff
from stacks.runs.record import diff_document

STACK = "acme.prod-1"
SG = "aws:ec2/securityGroup:SecurityGroup"
DYNAMIC = "pulumi-python:dynamic:Resource"
ENVELOPE = {SECRET_SIG: SECRET_SIG_VALUE, "ciphertext": "[secret]"}  # a secret, as the engine's events send it


def urn(name: str, type_: str = SG) -> str:
    return f"urn:pulumi:{STACK}::hubwright::{type_}::{name}"


def step(op: str, name: str, old=None, new=None, *, type_: str = SG, diffs=None, detailed=None, outputs=None) -> Step:
    return Step(op, urn(name, type_), type_, old, new, diffs, detailed, outputs)


def only(diff: StackDiff) -> ResourceChange:
    assert len(diff.resources) == 1, diff
    return diff.resources[0]


def test_create_adds_every_new_input_and_delete_removes_every_old_one():
    diff = stack_diff(STACK, [step("create", "web", None, {"name": "web", "ingress": [{"port": 443}]}),
                              step("delete", "old", {"name": "old", "vpcId": "vpc-1"}, None)], operation="up")
    assert diff == StackDiff(STACK, "changed", (
        ResourceChange(urn("old"), SG, "remove", {"name": PropertyChange("old", None),
                                                  "vpcId": PropertyChange("vpc-1", None)}),
        ResourceChange(urn("web"), SG, "add", {"ingress": PropertyChange(None, [{"port": 443}]),
                                               "name": PropertyChange(None, "web")}),
    ))


def test_steps_that_change_nothing_the_root_stack_and_providers_are_skipped():
    skipped = [step(op, f"r-{op}", {"a": 1}, {"a": 2}) for op in
               ("same", "read", "refresh", "read-replacement", "discard", "discard-replaced", "import",
                "import-replacement", "remove-pending-replace")]
    skipped += [Step("create", f"urn:pulumi:{STACK}::hubwright::pulumi:pulumi:Stack::hubwright-{STACK}",
                     "pulumi:pulumi:Stack", None, {}),
                Step("update", f"urn:pulumi:{STACK}::hubwright::pulumi:providers:aws::default", "pulumi:providers:aws",
                     {"region": "us-east-1"}, {"region": "eu-west-1"})]
    assert stack_diff(STACK, skipped, operation="up") == StackDiff(STACK, "unchanged", ())
    assert stack_diff(STACK, [], operation="preview").change == "unchanged"


def test_an_update_shows_the_keys_the_provider_named_old_to_new():
    old = {"name": "web", "description": "a", "tags": {"Name": "web", "team": "x"}}
    new = {"name": "web", "description": "b", "tags": {"Name": "web", "team": "y"}}
    named = only(stack_diff(STACK, [step("update", "web", old, new, diffs=["tags"])], operation="up"))
    assert named == ResourceChange(urn("web"), SG, "update", {
        "tags": PropertyChange({"Name": "web", "team": "x"}, {"Name": "web", "team": "y"})})
    # Only property paths (detailed_diff): their top-level inputs, once each.
    paths = only(stack_diff(STACK, [step("update", "web", old, new, detailed=["tags.team", "tags[\"a.b\"]",
                                                                                "description"])], operation="up"))
    assert list(paths.properties) == ["description", "tags"]


def test_an_update_without_named_keys_shows_every_top_level_input_that_differs():
    old = {"cloud": "/c", "name": "thing", "value": "v1", "fail": False, DYNAMIC_PROVIDER_KEY: ENVELOPE}
    new = {**old, "value": "v2", "added": 1}
    change = only(stack_diff(STACK, [step("update", "thing", old, new, type_=DYNAMIC)], operation="up"))
    assert change.properties == {"added": PropertyChange(None, 1), "value": PropertyChange("v1", "v2")}


def test_drift_shows_what_the_refresh_read_from_the_cloud_against_what_the_program_has():
    """A preview --refresh: the inputs on both sides are the program's, the old outputs hold the cloud's value."""
    inputs = {"name": "thing", "value": "v1"}
    drifted = step("update", "thing", inputs, dict(inputs), type_=DYNAMIC,
                   outputs={**inputs, "value": "changed-in-the-console", "id": "thing"})
    assert only(stack_diff(STACK, [drifted], operation="preview")).properties == {
        "value": PropertyChange("changed-in-the-console", "v1")}
    # A provider that names the key: the same old value (its input is unchanged, the cloud's is not).
    named = drifted._replace(diffs=["value"])
    assert only(stack_diff(STACK, [named], operation="preview")).properties == {
        "value": PropertyChange("changed-in-the-console", "v1")}


def test_secrets_are_masked_and_a_change_only_a_secret_explains_shows_the_secret_inputs():
    assert shown({"password": ENVELOPE, "list": ["[secret:abc]", 1], "plain": "x"}) == {
        "password": "[secret]", "list": ["[secret]", 1], "plain": "x"}
    added = only(stack_diff(STACK, [step("create", "db", None, {"password": ENVELOPE, "user": "admin",
                                                               DYNAMIC_PROVIDER_KEY: ENVELOPE})], operation="up"))
    assert added.properties == {"password": PropertyChange(None, "[secret]"), "user": PropertyChange(None, "admin")}
    hidden = step("update", "db", {"password": ENVELOPE, "user": "admin"}, {"password": ENVELOPE, "user": "admin"})
    assert only(stack_diff(STACK, [hidden], operation="up")).properties == {
        "password": PropertyChange("[secret]", "[secret]")}
    nothing = step("update", "db", {"user": "admin"}, {"user": "admin"})
    assert only(stack_diff(STACK, [nothing], operation="up")).properties == {}


def test_a_replace_is_one_entry_per_urn_whatever_steps_the_engine_sent():
    old, new = {"name": "a", "vpcId": "vpc-1"}, {"name": "a", "vpcId": "vpc-2"}
    for ops in (["replace", "create-replacement", "delete-replaced"],
                ["delete-replaced", "replace", "create-replacement"],  # delete before replace
                ["create-replacement"]):
        steps = [step(op, "sg", old, None if op == "delete-replaced" else new,
                      diffs=["vpcId"] if op == "replace" else None) for op in ops]
        assert stack_diff(STACK, steps, operation="up") == StackDiff(STACK, "changed", (
            ResourceChange(urn("sg"), SG, "replace", {"vpcId": PropertyChange("vpc-1", "vpc-2")}),))


def test_resources_are_sorted_by_urn_and_a_destroy_is_removed():
    steps = [step("delete", name, {"n": name}, None) for name in ("c", "a", "b")]
    diff = stack_diff(STACK, steps, operation="destroy")
    assert diff.change == "removed" and [r.urn for r in diff.resources] == [urn("a"), urn("b"), urn("c")]
    assert stack_diff(STACK, [], operation="destroy") == StackDiff(STACK, "removed", ())


def test_the_diff_reads_as_the_plan_diff_does():
    diff = stack_diff(STACK, [step("create", "web", None, {"name": "web"}),
                              step("update", "db", {"size": 1}, {"size": 2})], operation="up")
    doc = diff_document({"diff": diff.to_json()})
    assert doc["summary"]["resources"] == {"add": 1, "remove": 0, "replace": 0, "update": 1}
    text = render_diff(doc, color=False)
    assert "web" in text and "db" in text and "size" in text
