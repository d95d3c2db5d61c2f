"""Issue #14, against the real `pulumi` CLI (file:// backend in a temp dir, a dynamic-resource program, no cloud):

- drift: PulumiEngine.preview refreshes before it diffs, so a change made in the "cloud" behind Pulumi's back
  is found, named in RunResult.drifted, and nothing is written (no state, no history entry); an up with
  refresh puts it back;
- applied(): the inputs of the last successful up from the stack's state (tag + output), however many failed
  updates came after it; the history window the old code read gives up after that many of them.

The "cloud" is a directory of files (doubles.pulumi_programs.FileCloudProvider): the test edits a file, the
provider's read() sees it. Tests that take `pulumi_cli` skip, saying why, when the CLI or the dynamic provider
plugin is missing (scripts/tools.sh builds them); the others need no CLI.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from pulumi import automation as auto

from automation.adapters.engine import EngineError, RunResult
from automation.adapters.engine.pool import WorkerPool, _result
from automation.adapters.engine.pulumi_engine import APPLIED_TAG, PulumiEngine
from automation.adapters.engine.run_output import DRIFT_LIMIT, ChangedResources, applied_output
from automation.adapters.engine.worker import _plain
from components.program import INPUTS_OUTPUT
from doubles.engine import RecordingEngine
from doubles.pulumi_programs import (
    CLOUDY,
    change_cloud,
    cloud_value,
    cloudy,
    engine_settings,
    human_stack,
    make_inputs,
)

DYNAMIC = "pulumi-python:dynamic:Resource"


@pytest.fixture
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("pulumi-home")


WINDOW = 3  # the legacy history reader's window in test_applied_survives_more_failed_updates_...


def cloudy_engine(tmp: Path, home: Path, **options) -> PulumiEngine:
    return PulumiEngine(engine_settings(tmp / "state", home=home),
                        program_factory=functools.partial(cloudy, cloud=str(tmp / "cloud"), **options))


def state_values(stack: auto.Stack) -> dict[str, str]:
    """What the stack's state (the checkpoint) says each CloudThing holds."""
    return {r["urn"].rsplit("::", 1)[1]: r["outputs"]["value"]
            for r in stack.export_stack().deployment["resources"] if r["type"] == DYNAMIC}


# --------------------------------------------------------------------------- (A) drift


def test_preview_refreshes_names_the_drift_writes_nothing_and_an_up_with_refresh_corrects_it(pulumi_cli, tmp_path, home):
    engine = cloudy_engine(tmp_path, home, count=3)
    cloud = tmp_path / "cloud"
    inputs = make_inputs()
    assert engine.up(inputs, message="create").changes == {"create": 4}
    clean = engine.preview(inputs)
    assert clean.ok and clean.drifted == [] and clean.message == "no changes"

    # Behind Pulumi's back: one value changed in the cloud, one resource deleted there.
    change_cloud(cloud, "prod-1-thing-0", "changed-in-the-console")
    (cloud / "prod-1-thing-2").unlink()

    by_hand = human_stack(engine, inputs.stack, tmp_path)
    # The bug: a preview without refresh diffs the program against the state only, and sees nothing.
    blind = by_hand.preview(color="never", program=lambda: cloudy(inputs, cloud=str(cloud), count=3))
    assert {str(getattr(k, "value", k)): v for k, v in blind.change_summary.items()} == {"same": 4}
    history = len(by_hand.history(page_size=100))
    state_before = state_values(by_hand)

    found = engine.preview(inputs)
    assert not found.ok
    assert found.drifted == [f"prod-1-thing-0 ({DYNAMIC})", f"prod-1-thing-2 ({DYNAMIC})"]
    assert found.changes.get("update") == 1 and found.changes.get("create") == 1
    assert found.message.startswith("changes expected: create 1, update 1: prod-1-thing-0")
    # Nothing written: no history entry, the state still says what the last up wrote, the cloud untouched.
    assert len(by_hand.history(page_size=100)) == history
    assert state_values(by_hand) == state_before == {f"prod-1-thing-{i}": "v1" for i in range(3)}
    assert cloud_value(cloud, "prod-1-thing-0") == "changed-in-the-console" and not (cloud / "prod-1-thing-2").exists()

    # A plain up diffs against the state too: it leaves the drift where it is.
    assert engine.up(inputs, message="plain up").changes == {"same": 4}
    assert cloud_value(cloud, "prod-1-thing-0") == "changed-in-the-console"
    assert not engine.preview(inputs).ok

    # An up with refresh reads the cloud first and puts it back.
    fixed = engine.up(inputs, message="correct the drift", refresh=True)
    assert fixed.changes.get("update") == 1 and fixed.changes.get("create") == 1
    assert cloud_value(cloud, "prod-1-thing-0") == "v1" and cloud_value(cloud, "prod-1-thing-2") == "v1"
    after = engine.preview(inputs)
    assert after.ok and after.drifted == []


def test_the_worker_pool_carries_drifted_and_up_with_refresh(pulumi_cli, tmp_path):
    cloud = tmp_path / "cloud"
    pool = WorkerPool(engine_settings(tmp_path / "state", home=tmp_path / "home"), program=CLOUDY,
                      program_options={"cloud": str(cloud)}, size=1)
    try:
        inputs = make_inputs()
        pool.up(inputs, message="create")
        change_cloud(cloud, "prod-1-thing-0", "changed")
        found = pool.preview(inputs)
        assert not found.ok and found.drifted == [f"prod-1-thing-0 ({DYNAMIC})"]
        assert pool.up(inputs, message="correct", refresh=True).changes.get("update") == 1
        assert cloud_value(cloud, "prod-1-thing-0") == "v1"
    finally:
        pool.close()


def test_drifted_is_sorted_one_entry_per_resource_and_capped():
    def pre(op: str, name: str, type_: str = DYNAMIC):
        meta = SimpleNamespace(op=auto.OpType(op), type=type_, urn=f"urn:pulumi:s::hubwright::{type_}::{name}")
        return SimpleNamespace(resource_pre_event=SimpleNamespace(metadata=meta))

    changed = ChangedResources()
    for event in [pre("refresh", "b"), pre("same", "a"), pre("read", "r"), pre("update", "b"),
                  pre("replace", "c"), pre("create-replacement", "c"), pre("delete-replaced", "c"),
                  pre("update", "hubwright-s", "pulumi:pulumi:Stack"), SimpleNamespace(resource_pre_event=None)]:
        changed.on_event(event)
    assert changed.names() == [f"b ({DYNAMIC})", f"c ({DYNAMIC})"]

    many = ChangedResources()
    for i in range(DRIFT_LIMIT + 7):
        many.on_event(pre("delete", f"r{i:03}"))
    names = many.names()
    assert len(names) == DRIFT_LIMIT + 1 and names[-1] == "... and 7 more"
    assert names[:DRIFT_LIMIT] == sorted(names[:DRIFT_LIMIT]) and names[0] == f"r000 ({DYNAMIC})"


def test_drifted_crosses_the_worker_protocol():
    """pool._result(worker._plain(result)) through JSON, as a reply travels: every field, drifted included."""
    sent = RunResult("preview", False, "changes expected: update 1", changes={"update": 1}, drifted=["a (t)"])
    assert _result(json.loads(json.dumps(_plain(sent)))) == sent


def test_the_recording_engine_names_a_drifted_stack():
    engine = RecordingEngine()
    inputs = make_inputs()
    engine.up(inputs, message="create")
    assert engine.preview(inputs).drifted == []
    engine.drifted.add(inputs.stack)
    result = engine.preview(inputs)
    assert not result.ok and result.drifted == [f"{inputs.stack} (test:Drifted)"]
    engine.up(inputs, message="correct", refresh=True)
    assert engine.runs("up")[-1].refresh and engine.preview(inputs).ok


# --------------------------------------------------------------------------- (B) applied


def test_applied_survives_more_failed_updates_than_the_old_history_window(pulumi_cli, tmp_path, home):
    engine = cloudy_engine(tmp_path, home)
    inputs = make_inputs()
    engine.up(inputs, message="the one success")
    by_hand = human_stack(engine, inputs.stack, tmp_path)
    assert by_hand.list_tags()[APPLIED_TAG] == inputs.digest()
    assert engine.applied(inputs.stack) == inputs
    # A tag naming a digest with no output (a crash between an up and its tag, an update by hand since): the
    # legacy history walk, whose newest entry is the success.
    by_hand.set_tag(APPLIED_TAG, "0" * 32)
    assert engine.applied(inputs.stack) == inputs
    by_hand.set_tag(APPLIED_TAG, inputs.digest())

    # A failed up whose program ran to its end (a create failed): Pulumi keeps the old stack outputs only where
    # the failed run registered none, so the plain outputs now describe the failed inputs.
    failed = inputs.model_copy(update={"tenant": "never-applied"})
    with pytest.raises(EngineError, match="the cloud refused the create"):
        cloudy_engine(tmp_path, home, fail=True).up(failed, message="fails on a create")
    outputs = by_hand.outputs()
    assert outputs[INPUTS_OUTPUT].value == failed.to_config() and outputs["inputsDigest"].value == failed.digest()
    assert outputs[applied_output(failed.digest())].value == failed.to_config()
    assert outputs[applied_output(inputs.digest())].value == inputs.to_config()  # the success's own key is kept
    assert by_hand.list_tags()[APPLIED_TAG] == inputs.digest()  # no tag for a failed up
    assert engine.applied(inputs.stack) == inputs

    # Then more failed updates than the old code's window: a program that raises, the cheapest failing `up` (it
    # registers no output, so every output stays). The window is the legacy reader's argument, WINDOW here, not
    # its HISTORY_WINDOW: the same overrun in 4 failed runs instead of 51 (test_applied_inputs.py pins the paging).
    def raises() -> None:
        raise RuntimeError("a failing retry")

    for _ in range(WINDOW + 1):
        with pytest.raises(auto.errors.CommandError):
            by_hand.up(program=raises, color="never", message="hubwright: failing retry")
    history = by_hand.history(page_size=100, show_secrets=False)
    assert [h.result for h in history] == ["failed"] * (WINDOW + 2) + ["succeeded"]

    assert engine.applied(inputs.stack) == inputs
    assert engine._applied_from_history(by_hand, window=WINDOW + 3) == inputs  # the success still in the window
    assert engine._applied_from_history(by_hand, window=WINDOW) is None  # the old code past it: "nothing applied"
