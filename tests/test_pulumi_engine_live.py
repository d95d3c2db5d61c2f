"""PulumiEngine against the real `pulumi` CLI and a file:// backend in a temp dir.

The live tests need `pulumi` and `pulumi-resource-pulumi-python` (built into
.tools/bin by scripts/tools.sh, or on PATH) and skip, saying so, without them.
The stack program is a dynamic resource (doubles/pulumi_programs.py), so no
provider plugin and no cloud account are involved. The lock-policy tests at the
bottom need no CLI.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from pulumi import automation as auto

from automation.adapters.engine import proctree
from automation.adapters.engine import EngineError, RunCancelled, StackLocked
from automation.adapters.engine.locks import LockOwner, lock_is_stale, parse_lock_owners
from automation.adapters.engine.pulumi_engine import APPLIED_TAG, CONFIG_KEY, PulumiEngine
from automation.adapters.engine.run_output import readable_error
from stacks.inputs import StackInputs
from doubles.pulumi_programs import ROOT, engine_settings, human_stack, make_inputs, sleepy_program
from doubles.service_env import wait_until

@pytest.fixture
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("pulumi-home")


def engine_at(state: Path, home: Path, *, backend: str | None = None, sleep: float = 0.0, marker: str = "",
              hold: str = "") -> PulumiEngine:
    return PulumiEngine(engine_settings(state, backend_url=backend, home=home),
                        program_factory=sleepy_program(sleep, marker, hold))


def lock_files(backend_dir: Path, stack: str) -> list[Path]:
    return sorted((backend_dir / ".pulumi" / "locks" / "organization" / "hubwright" / stack).glob("*.json"))


def wait_for(path: Path, timeout: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"helper exited early ({proc.returncode}): {proc.stdout.read() if proc.stdout else ''}")
        assert time.monotonic() < deadline, f"{path} did not appear within {timeout}s"
        time.sleep(0.1)


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


# --------------------------------------------------------------------------- live


@pytest.mark.live
def test_lifecycle_config_tags_history_applied_destroy(pulumi_cli, tmp_path, home):
    engine = engine_at(tmp_path / "state", home)
    inputs = make_inputs()
    assert engine.applied(inputs.stack) is None

    first = engine.up(inputs, message="cluster acme/prod-1 created")
    assert first.ok and first.changes == {"create": 2}
    assert first.outputs == {"cluster": "acme/prod-1", "inputsDigest": inputs.digest(), "thing": "prod-1-thing-id"}
    assert first.permalink is None  # the file backend has no console
    assert first.started <= first.ended

    # The backend is file://<state dir>; the stack's config lives in its own workspace directory.
    assert (tmp_path / "state" / ".pulumi" / "stacks" / "hubwright" / "acme.prod-1.json").is_file()
    settings_file = engine.workspace_dir(inputs.stack) / "Pulumi.acme.prod-1.yaml"
    assert StackInputs.from_config(auto_config(settings_file)) == inputs

    human = human_stack(engine, inputs.stack, tmp_path)
    assert human.list_tags() | inputs.describe() == human.list_tags()  # every tag set
    history = human.history()
    assert [(h.kind, h.result) for h in history] == [("update", "succeeded")]
    assert history[0].message == "hubwright: cluster acme/prod-1 created"
    assert human.list_tags()[APPLIED_TAG] == inputs.digest()  # applied() reads it (tests/test_engine_drift_live.py)
    assert engine.applied(inputs.stack) == inputs

    noop = engine.up(inputs, message="periodic resync")
    assert noop.changes == {"same": 2}
    assert engine.preview(inputs).ok
    drift = engine.preview(inputs.model_copy(update={"name": "prod-2"}))
    assert not drift.ok and drift.changes.get("create") == 1
    dynamic = "pulumi-python:dynamic:Resource"
    assert drift.drifted == [f"prod-1-thing ({dynamic})", f"prod-2-thing ({dynamic})"]  # deleted, created

    # A failed update keeps `applied` at the last good inputs.
    broken = inputs.model_copy(update={"tenant": "other"})
    failing = PulumiEngine(engine.settings, program_factory=lambda _: 1 / 0)
    with pytest.raises(EngineError) as failed:
        failing.up(broken, message="this one fails")
    assert failed.value.reason == "UpdateFailed" and "ZeroDivisionError" in str(failed.value)
    assert len(str(failed.value)) <= 700
    assert engine.applied(inputs.stack) == inputs

    gone = engine.destroy(inputs.stack, message="cluster deleted")
    assert gone.ok and gone.changes == {"delete": 2}
    assert engine.applied(inputs.stack) is None
    assert not engine.workspace_dir(inputs.stack).exists()
    again = engine.destroy(inputs.stack, message="cluster deleted")
    assert again.ok and "nothing to destroy" in again.message
    with pytest.raises(auto.StackNotFoundError):
        human_stack(engine, inputs.stack, tmp_path)


def auto_config(settings_file: Path) -> str:
    import yaml

    return yaml.safe_load(settings_file.read_text())["config"][CONFIG_KEY]


@pytest.mark.live
def test_killed_update_leaves_lock_and_pending_create_that_recover_clears(pulumi_cli, tmp_path, home):
    state = tmp_path / "state"
    marker = tmp_path / "create-started"
    inputs = make_inputs()
    helper = subprocess.Popen(
        [sys.executable, "-m", "doubles.pulumi_programs", "up", "--state", str(state), "--home", str(home),
         "--stack", inputs.stack, "--sleep", "120", "--marker", str(marker)],
        cwd=ROOT, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        wait_for(marker, 60, helper)
        doomed = [helper.pid, *descendants(helper.pid)]  # the CLI and the provider, as a container kill would
        cli_pids = [p for p in doomed if Path(f"/proc/{p}/comm").read_text().strip() == "pulumi"]
    finally:
        for pid in locals().get("doomed", [helper.pid]):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        helper.wait(10)

    locks = lock_files(state, inputs.stack)
    assert len(locks) == 1
    owner = json.loads(locks[0].read_text())
    assert owner["hostname"] == socket.gethostname() and owner["pid"] in cli_pids

    engine = engine_at(state, home)
    pending = human_stack(engine, inputs.stack, tmp_path).export_stack().deployment["pending_operations"]
    assert [(op["type"], op["resource"]["urn"].rsplit("::", 1)[1]) for op in pending] == [("creating", "prod-1-thing")]

    with pytest.raises(StackLocked) as locked:
        engine.up(inputs, message="retry after the crash")
    assert f"pid {owner['pid']}" in str(locked.value)

    recovered = engine.recover(inputs.stack)
    assert recovered.ok and recovered.operation == "recover"
    assert "removed the stale lock" in recovered.message and f"pid {owner['pid']}" in recovered.message
    assert "cleared 1 pending operation(s): creating urn:pulumi:acme.prod-1::hubwright::" in recovered.message
    assert lock_files(state, inputs.stack) == []
    assert not human_stack(engine, inputs.stack, tmp_path).export_stack().deployment.get("pending_operations")

    after = engine.up(inputs, message="retry after recovery")
    assert after.ok and after.changes.get("create") == 1
    assert "nothing to recover" in engine.recover(inputs.stack).message


@pytest.mark.live
def test_concurrent_updates_of_one_stack_give_stack_locked(pulumi_cli, tmp_path, home):
    backend = f"file://{tmp_path / 'shared'}"
    (tmp_path / "shared").mkdir()
    marker, hold = tmp_path / "create-started", tmp_path / "hold"
    hold.touch()  # replica a's create lasts until the checks below are done (removed in `finally`), however slow
    inputs = make_inputs()
    first = engine_at(tmp_path / "replica-a", home, backend=backend, sleep=300, marker=str(marker), hold=str(hold))
    second = engine_at(tmp_path / "replica-b", home, backend=backend, sleep=300, marker=str(marker), hold=str(hold))

    results: dict = {}
    runner = threading.Thread(target=lambda: results.update(a=first.up(inputs, message="replica a")))
    runner.start()
    try:
        wait_for(marker, 60)
        with pytest.raises(StackLocked) as in_process:  # same engine: refused before the CLI runs
            first.up(inputs, message="duplicate in this process")
        assert "another operation of this service" in str(in_process.value)
        with pytest.raises(StackLocked) as other:  # another replica: the backend's lock
            second.up(inputs, message="replica b")
        assert f"{socket.gethostname()} (pid" in str(other.value)
        with pytest.raises(StackLocked) as live:  # a live lock is never removed
            second.recover(inputs.stack)
        assert "a live pulumi process on this host" in str(live.value)
    finally:
        hold.unlink()
        runner.join(120)
    assert results["a"].ok and results["a"].changes == {"create": 2}
    assert lock_files(tmp_path / "shared", inputs.stack) == []
    assert second.up(inputs, message="replica b, later").changes == {"same": 2}


# --------------------------------------------------------------------------- no CLI needed

LOCKED = """ code: 255
 stdout:
 stderr: error: the stack is currently locked by 2 lock(s). Either wait for the other process(es) to end or delete the lock file with `pulumi cancel`.
  file:///s/.pulumi/locks/organization/hubwright/acme.prod-1/a.json?no_tmp_dir=true: created by root@hubwright-5d9-abcde (pid 41) at 2026-11-22T15:03:21Z
  s3://b/.pulumi/locks/organization/hubwright/acme.prod-1/b.json: created by alice@laptop (pid 9) at 2026-11-22T15:04:00Z
"""


def test_lock_owners_parsed_from_the_cli_error():
    owners = parse_lock_owners(LOCKED)
    assert [(o.user, o.host, o.pid) for o in owners] == [("root", "hubwright-5d9-abcde", 41), ("alice", "laptop", 9)]
    assert owners[0].path.endswith("/a.json") and owners[0].created == datetime(2026, 11, 22, 15, 3, 21, tzinfo=timezone.utc)


def test_lock_policy_removes_only_stale_locks_of_this_service():
    created = datetime(2026, 11, 22, 15, 0, tzinfo=timezone.utc)
    mine = LockOwner("p", "root", "pod-a", 41, created)
    dead = lambda pid: False  # noqa: E731
    alive = lambda pid: True  # noqa: E731
    kw = dict(own_hosts=r"pod-[a-z]", stale_after_s=300, now=created + timedelta(seconds=60))
    assert lock_is_stale(mine, hostname="pod-a", alive=dead, **kw)[0]
    assert not lock_is_stale(mine, hostname="pod-a", alive=alive, **kw)[0]
    # Another replica's lock: only once older than the limit; a stranger's: never.
    assert not lock_is_stale(mine, hostname="pod-b", alive=dead, **kw)[0]
    assert lock_is_stale(mine, hostname="pod-b", alive=dead, **{**kw, "now": created + timedelta(minutes=6)})[0]
    stranger = LockOwner("p", "alice", "laptop", 9, created)
    stale, why = lock_is_stale(stranger, hostname="pod-a", alive=dead, **{**kw, "now": created + timedelta(days=9)})
    assert not stale and "not this service" in why


def test_readable_error_keeps_the_error_lines_only():
    stdout, _, stderr = LOCKED.partition(" stderr: ")
    err = auto.errors.ConcurrentUpdateError(auto.CommandResult(stdout="", stderr=stderr, code=255))
    text = readable_error(err)
    assert text.startswith("error: the stack is currently locked by 2 lock(s)")
    assert "alice@laptop (pid 9)" in text and "no_tmp_dir" not in text and "code: 255" not in text


def test_cancel_in_process_stops_the_cli_and_its_plugin(pulumi_cli, tmp_path, home):
    """PulumiEngine.cancel (the in-process engine; the service's pool cancels worker processes instead):
    SIGINT to its `pulumi` CLI, the tree killed after the grace; the run raises RunCancelled."""
    marker = tmp_path / "provider.pid"
    engine = engine_at(tmp_path / "state", home, sleep=600, marker=str(marker))
    failure: list[BaseException] = []

    def up() -> None:
        try:
            engine.up(make_inputs(), message="live test: cancelled in process")
        except BaseException as err:  # noqa: BLE001 - asserted below
            failure.append(err)

    thread = threading.Thread(target=up)
    thread.start()
    provider = int(wait_until(lambda: marker.exists() and marker.read_text(), 60, what="the provider to start"))
    engine.cancel(1.0)
    thread.join(30)
    assert not thread.is_alive()
    assert isinstance(failure[0], RunCancelled), failure
    wait_until(lambda: not proctree.alive(provider), 10, what="the provider to die")


def test_a_failed_update_is_one_error_not_a_grpc_traceback(pulumi_cli, tmp_path, home, caplog):
    """The trial: each failed run wrote about 38 lines of `grpc._server` traceback (the Automation API's language
    server, calling back an engine that had already exited), 528 of 877 lines in one log. The run's error is the
    EngineError, with the provider's reason; the language server's aftermath says nothing."""
    import functools
    import logging
    from doubles.pulumi_programs import cloudy
    engine = PulumiEngine(engine_settings(tmp_path / "state", home=home),
                          program_factory=functools.partial(cloudy, cloud=str(tmp_path / "cloud"), fail=True))
    caplog.set_level(logging.DEBUG)
    # The language server's aftermath comes from its own thread once the CLI is gone, after up() returned: by the
    # end of a second run (seconds), the first one's has been logged.
    said = []
    for attempt in range(2):
        with pytest.raises(EngineError, match="the cloud refused the create") as raised:
            engine.up(make_inputs(), message=f"a create the cloud refuses, attempt {attempt + 1}")
        said.append(str(raised.value))
    # The same failure reads the same (the service says a failure once, by its message), in the user's words.
    assert said[0] == said[1] and "Exception calling application" not in said[0], said
    assert said[0] == "up acme.prod-1: error: prod-1-refused: the cloud refused the create (fail=True)", said
    noise = [r for r in caplog.records if r.name.startswith("grpc")]
    assert noise == [], [r.getMessage()[:200] for r in noise]


@pytest.mark.parametrize("aftermath", ["error: update failed", "error: failed to run policy: context canceled",
                                       "error: failed to run remediation: context canceled", "error: context canceled"])
def test_the_clis_aftermath_of_a_failure_is_left_out_whichever_comes_and_wherever(aftermath):
    """Seen on the real CLI (the test above, in CI): which closing line comes, and on which stream, varies with timing;
    the failure must read the same to be said once."""
    cause = "error: prod-1-refused: the cloud refused the create (fail=True)"
    for stdout, stderr in ((aftermath, cause), (cause, aftermath), ("", f"{aftermath}\n{cause}")):
        err = auto.errors.CommandError(auto.CommandResult(stdout=stdout, stderr=stderr, code=255))
        assert readable_error(err) == cause
    alone = auto.errors.CommandError(auto.CommandResult(stdout="", stderr=aftermath, code=255))
    assert readable_error(alone) == aftermath  # nothing else said: the aftermath is all there is
