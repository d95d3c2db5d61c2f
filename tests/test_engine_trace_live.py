"""Issue #52: every engine run hands back what it did, for its history entry (protocol.Trace): its changes as the
plan diff's model has them (stacks.plandiff.steps, from the engine's step events) and the end of its log.

Against the real `pulumi` CLI (file:// backend in a temp dir, doubles.pulumi_programs' "cloud" of files, no cloud):
an up's adds and updates (a property's old → new), a preview's drift, a destroy's removes, the CLI's own output in
the log, and a failed up's error in its EngineError's trace, in this process and through the WorkerPool (the trace
crosses the process boundary, in a result and in an error). Tests that take `pulumi_cli` are live (tests/tiers.py);
the others (EngineTrace's parts, the JSON round trip, the recording double, the settings) need no CLI.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pulumi
import pytest
from pulumi import automation as auto

from automation.adapters.engine import EngineError, RunResult, Trace
from automation.adapters.engine.pool import WorkerPool, _result
from automation.adapters.engine.pulumi_engine import PulumiEngine
from automation.adapters.engine.settings import PulumiSettings
from automation.adapters.engine.trace import EngineTrace
from automation.adapters.engine.worker import _plain
from doubles.engine import TRACE_TYPE, RecordingEngine, trace_urn
from doubles.pulumi_programs import CLOUDY, CloudThing, change_cloud, cloudy, engine_settings, make_inputs
from stacks.plandiff.steps import SECRET_SIG, SECRET_SIG_VALUE
from stacks.runs.record import diff_document

DYNAMIC = "pulumi-python:dynamic:Resource"
STACK = "acme.prod-1"


def urn(name: str, type_: str = DYNAMIC) -> str:
    return f"urn:pulumi:{STACK}::hubwright::{type_}::{name}"


def by_change(trace: Trace | None, change: str) -> dict[str, dict]:
    """The trace's resources of one kind, by name: {name: properties}."""
    assert trace is not None and trace.diff is not None
    return {r["urn"].rsplit("::", 1)[1]: r["properties"] for r in trace.diff["resources"] if r["change"] == change}


class Program:
    """doubles.pulumi_programs.cloudy with options a test changes between runs; `boom`: the program raises."""

    def __init__(self, cloud: Path, **options):
        self.cloud, self.options, self.boom = cloud, options, False

    def __call__(self, inputs):
        if self.boom:
            raise RuntimeError("the program refused to run: boom")
        return cloudy(inputs, cloud=str(self.cloud), **self.options)


# --------------------------------------------------------------------------- the real CLI, in this process


def test_each_run_returns_its_diff_and_the_end_of_its_log(pulumi_cli, tmp_path):
    cloud = tmp_path / "cloud"
    program = Program(cloud, count=2, value="v1")
    engine = PulumiEngine(engine_settings(tmp_path / "state", home=tmp_path / "home"), program_factory=program)
    inputs = make_inputs()

    created = engine.up(inputs, message="create")
    adds = by_change(created.trace, "add")
    # The CLI's summary counts the root stack (pulumi:pulumi:Stack), which the diff leaves out, as the plan does.
    assert len(adds) == created.changes["create"] - 1 == 2
    assert created.trace.diff["stack"] == STACK and created.trace.diff["change"] == "changed"
    assert adds["prod-1-thing-0"] == {"cloud": {"old": None, "new": str(cloud)}, "fail": {"old": None, "new": False},
                                      "name": {"old": None, "new": "prod-1-thing-0"},
                                      "value": {"old": None, "new": "v1"}}  # the provider's pickle is no property
    assert "Resources:" in created.trace.log and "+ 3 created" in created.trace.log
    assert "prod-1-thing-1" in created.trace.log

    program.options["value"] = "v2"
    updated = engine.up(inputs, message="change the value")
    assert by_change(updated.trace, "update") == {
        f"prod-1-thing-{i}": {"value": {"old": "v1", "new": "v2"}} for i in range(2)}
    assert len(updated.trace.diff["resources"]) == updated.changes["update"] == 2

    same = engine.up(inputs, message="nothing to do")
    assert same.trace.diff == {"stack": STACK, "change": "unchanged", "resources": []}

    change_cloud(cloud, "prod-1-thing-0", "changed-in-the-console")
    drift = engine.preview(inputs)
    assert not drift.ok and drift.drifted == [f"prod-1-thing-0 ({DYNAMIC})"]
    # The refresh read the cloud's value; the program would put its own back.
    assert by_change(drift.trace, "update") == {"prod-1-thing-0": {"value": {"old": "changed-in-the-console",
                                                                             "new": "v2"}}}
    assert "Resources:" in drift.trace.log and "1 to update" in drift.trace.log

    recovered = engine.recover(inputs.stack)
    assert recovered.trace is not None and recovered.trace.diff["change"] == "unchanged"  # a refresh changes nothing
    assert "Refreshing (acme.prod-1)" in recovered.trace.log and "Resources:" in recovered.trace.log

    gone = engine.destroy(inputs.stack, message="destroy")
    removes = by_change(gone.trace, "remove")
    assert gone.trace.diff["change"] == "removed" and len(removes) == gone.changes["delete"] - 1 == 2
    assert removes["prod-1-thing-1"]["value"] == {"old": "v2", "new": None}
    assert "Resources:" in gone.trace.log and "3 deleted" in gone.trace.log
    doc = diff_document({"diff": gone.trace.diff})  # what `history` renders
    assert doc["summary"]["resources"]["remove"] == 2


def test_a_failed_up_carries_its_trace_with_the_cli_s_error(pulumi_cli, tmp_path):
    cloud = tmp_path / "cloud"
    program = Program(cloud, count=1)
    settings = dataclasses.replace(engine_settings(tmp_path / "state", home=tmp_path / "home"), log_bytes=1024)
    engine = PulumiEngine(settings, program_factory=program)
    inputs = make_inputs()
    assert len(engine.up(inputs, message="create").trace.log.encode()) <= 1024  # only the end of the log is kept

    program.boom = True
    with pytest.raises(EngineError) as failed:
        engine.up(inputs, message="a program that raises")
    trace = failed.value.trace
    assert trace is not None and "the program refused to run: boom" in trace.log
    # Within 1 KiB, the log still ends with why (the outputs, which the CLI prints after its diagnostics, are left
    # out of every run's output: suppress_outputs).
    assert len(trace.log.encode()) <= 1024 and trace.log.rstrip().endswith("the program refused to run: boom")
    assert trace.diff is not None and trace.diff["resources"] == []  # the program registered nothing

    program.boom, program.options["fail"] = False, True
    with pytest.raises(EngineError) as refused:
        engine.up(inputs, message="a create the cloud refuses")
    trace = refused.value.trace
    assert "the cloud refused the create" in trace.log
    assert list(by_change(trace, "add")) == ["prod-1-refused"]  # the step the engine started, which failed


def test_a_secret_input_shows_masked(pulumi_cli, tmp_path):
    engine = PulumiEngine(engine_settings(tmp_path / "state", home=tmp_path / "home"),
                          program_factory=lambda inputs: secret_program(inputs, tmp_path / "cloud", "hush-1"))
    inputs = make_inputs()
    created = engine.up(inputs, message="create")
    assert by_change(created.trace, "add")["prod-1-secret"]["value"] == {"old": None, "new": "[secret]"}
    assert "hush-1" not in json.dumps(created.trace.diff) and "hush-1" not in created.trace.log
    engine = PulumiEngine(engine.settings,
                          program_factory=lambda inputs: secret_program(inputs, tmp_path / "cloud", "hush-2"))
    changed = engine.up(inputs, message="a new secret")
    # The engine sends a secret masked on both sides: only the secret can be what changed.
    assert by_change(changed.trace, "update") == {"prod-1-secret": {"value": {"old": "[secret]", "new": "[secret]"}}}
    assert "hush" not in json.dumps(changed.trace.diff) and "hush" not in changed.trace.log


def secret_program(inputs, cloud: Path, value: str):
    """One CloudThing whose value is a secret."""
    cloud.mkdir(parents=True, exist_ok=True)
    CloudThing(f"{inputs.name}-secret", cloud=str(cloud), value=pulumi.Output.secret(value))
    return {"cluster": inputs.key}


# --------------------------------------------------------------------------- through the worker pool


def test_the_trace_crosses_the_worker_pool_in_results_and_in_errors(pulumi_cli, tmp_path):
    cloud = tmp_path / "cloud"
    pool = WorkerPool(engine_settings(tmp_path / "state", home=tmp_path / "home"), program=CLOUDY,
                      program_options={"cloud": str(cloud), "count": 2}, size=1)
    failing = WorkerPool(engine_settings(tmp_path / "state", home=tmp_path / "home"), program=CLOUDY,
                         program_options={"cloud": str(cloud), "count": 2, "fail": True}, size=1)
    try:
        inputs = make_inputs()
        created = pool.up(inputs, message="create")
        assert isinstance(created.trace, Trace)
        assert sorted(by_change(created.trace, "add")) == ["prod-1-thing-0", "prod-1-thing-1"]
        assert "Resources:" in created.trace.log
        change_cloud(cloud, "prod-1-thing-1", "changed")
        assert list(by_change(pool.preview(inputs).trace, "update")) == ["prod-1-thing-1"]

        with pytest.raises(EngineError) as refused:
            failing.up(inputs, message="a create the cloud refuses")
        trace = refused.value.trace
        assert isinstance(trace, Trace) and "the cloud refused the create" in trace.log
        assert list(by_change(trace, "add")) == ["prod-1-refused"]

        gone = pool.destroy(inputs.stack, message="destroy")
        assert gone.trace.diff["change"] == "removed"
        # The refused create left nothing in the state: nothing of it to remove.
        assert sorted(by_change(gone.trace, "remove")) == ["prod-1-thing-0", "prod-1-thing-1"]
    finally:
        pool.close()
        failing.close()


# --------------------------------------------------------------------------- no CLI


def pre(op: str, name: str, old=None, new=None, *, type_: str = DYNAMIC, outputs=None, diffs=None):
    def state(inputs):
        return None if inputs is None else SimpleNamespace(inputs=inputs, outputs=outputs or {})

    meta = SimpleNamespace(op=auto.OpType(op), urn=urn(name, type_), type=type_, old=state(old), new=state(new),
                           diffs=diffs, detailed_diff=None)
    return SimpleNamespace(resource_pre_event=SimpleNamespace(metadata=meta))


def test_engine_trace_collects_steps_fans_events_out_and_keeps_the_end_of_the_log():
    trace = EngineTrace(log_bytes=64)
    assert trace.trace("up", STACK) == Trace(diff=None, log="")  # no step: no diff
    seen: list = []

    class Broken:
        def on_event(self, event):
            raise RuntimeError("a consumer's bug")

    class Seen:
        def on_event(self, event):
            seen.append(event)

    callbacks = trace.streams(Broken(), None, Seen())
    secret = {SECRET_SIG: SECRET_SIG_VALUE, "ciphertext": "[secret]"}
    events = [pre("same", "kept", {"v": 1}, {"v": 1}), pre("create", "new", None, {"v": 1, "key": secret}),
              pre("update", "changed", {"v": 1}, {"v": 2}), SimpleNamespace(resource_pre_event=None)]
    for event in events:
        callbacks["on_event"](event)
    assert seen == events  # the broken consumer kept the event from nobody
    for n in range(20):
        callbacks["on_output"](f"\x1b[1mline {n:02}\x1b[0m")
    callbacks["on_error"]("error: the end")
    done = trace.trace("up", STACK)
    assert done.diff == {"stack": STACK, "change": "changed", "resources": [
        {"urn": urn("changed"), "type": DYNAMIC, "change": "update", "properties": {"v": {"old": 1, "new": 2}}},
        {"urn": urn("new"), "type": DYNAMIC, "change": "add",
         "properties": {"key": {"old": None, "new": "[secret]"}, "v": {"old": None, "new": 1}}},
    ]}
    assert done.log == "line 14\nline 15\nline 16\nline 17\nline 18\nline 19\nerror: the end\n"  # whole lines, no escapes
    assert done.dropped == 14 * len("line 00\n")  # what came before the tail, counted for the history's detail
    trace.on_output("x" * 1000)  # one line longer than the whole tail: its end
    assert trace.log() == "x" * 63 + "\n"
    assert trace.trace("up", STACK).dropped == len(done.log) + done.dropped + 1000 - 63


def test_a_failed_call_s_output_joins_the_log_once():
    trace = EngineTrace(log_bytes=4096)
    for line in ("Updating (acme.prod-1):", "error: update failed"):
        trace.on_output(line)
    streamed = "\n code: 255\n stdout: Updating (acme.prod-1):\nerror: update failed\n stderr: error: update failed\n"
    trace.add_error(streamed)  # a call that streamed: nothing new
    assert trace.log() == "Updating (acme.prod-1):\nerror: update failed\n"
    trace.add_error("\n code: 255\n stdout: \n stderr: error: [409] Conflict: the stack is locked\n")
    assert trace.log().endswith("error: update failed\nerror: [409] Conflict: the stack is locked\n")


def test_the_trace_crosses_the_worker_protocol():
    """pool._result(worker._plain(result)) through JSON, as a reply travels."""
    sent = RunResult("up", True, "updated: update 1", changes={"update": 1},
                     trace=Trace(diff={"stack": STACK, "change": "changed", "resources": []}, log="Resources:\n"))
    assert _result(json.loads(json.dumps(_plain(sent)))) == sent
    assert _result(json.loads(json.dumps(_plain(RunResult("recover", True))))).trace is None


def test_the_recording_engine_hands_back_a_trace_for_every_run():
    engine = RecordingEngine()
    inputs, changed = make_inputs(), make_inputs(team="a")
    first = engine.up(inputs, message="create")
    assert first.trace.diff == {"stack": STACK, "change": "changed", "resources": [
        {"urn": trace_urn(STACK), "type": TRACE_TYPE, "change": "add",
         "properties": {"inputsDigest": {"old": None, "new": inputs.digest()}}}]}
    assert first.trace.log.startswith(f"up {STACK}: ")
    assert engine.up(inputs, message="again").trace.diff["resources"] == []
    assert by_change(engine.preview(changed).trace, "update")[STACK] == {
        "inputsDigest": {"old": inputs.digest(), "new": changed.digest()}}
    assert by_change(engine.up(changed, message="change").trace, "update")[STACK] == {
        "inputsDigest": {"old": inputs.digest(), "new": changed.digest()}}
    engine.drifted.add(STACK)
    assert "drift" in by_change(engine.preview(changed).trace, "update")[STACK]
    assert engine.recover(STACK).trace.diff["change"] == "unchanged"
    engine.fail("up", STACK, message="simulated failure")
    with pytest.raises(EngineError) as failed:
        engine.up(changed, message="fails")
    assert failed.value.trace is not None and "simulated failure" in failed.value.trace.log
    gone = engine.destroy(STACK, message="destroy")
    assert gone.trace.diff["change"] == "removed" and list(by_change(gone.trace, "remove")) == [STACK]


def test_the_log_size_is_an_option_and_crosses_to_the_workers():
    settings = PulumiSettings.from_options({"history_log_kib": 8})
    assert settings.log_bytes == 8 * 1024
    assert PulumiSettings.from_options({}).log_bytes == PulumiSettings().log_bytes == 64 * 1024
    assert PulumiSettings.from_json(json.loads(json.dumps(settings.to_json()))) == settings
