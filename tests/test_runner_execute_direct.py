"""A claimed run executed, renewed and let go, called directly (tests/test_runner_direct.py's World: the runner
over doubles.objects.FakeObjects, its reconciles called in this thread): the phases a run ends in and what its
status and Secret say; the lease (renewals, progress, the watchdog, a run taken over); hand-backs (a drain, the
other run's deadline with two workers, the later of two claims on one stack); deadlines."""
from __future__ import annotations

import json
import time
from datetime import datetime, timezone

from automation.adapters.engine import PolicyViolation
from automation.kit.queue import Outcome
from automation.runner.jobs import renew_every
from automation.runner.runner import MAX_WAKE
from doubles.engine import RecordingEngine
from stacks.status import RunProgress
from tests.test_runner_direct import TTL, LiveEngine, World, inputs, wait_until


class LateEngine(LiveEngine):
    """Its first cancel() stops nothing: what the engine sees of a cancel that lands after the runner's last check
    and before the engine has started the run (CI, 2026-11-30: the run stayed Running past its deadline)."""

    def cancel(self, grace: float) -> None:
        if not self.cancels:
            self.cancels.append(grace)
            return
        super().cancel(grace)


def test_phases_locked_once_drift_policy_destroy_recover_and_refresh(caplog):
    """The contract's phase rules, one run each: a lock is recovered and the run tried once more; a preview that
    finds drift is Drifted (the names go into the Secret); a policy refusal is Failed with its reason; a destroy
    and a recover succeed; an up with refresh asks the engine for one."""
    engine = LiveEngine()
    engine.lock("runs-a.locked", times=1)
    engine.drifted.add("runs-a.drift")
    engine.fail("up", "runs-a.policy", message="rule no-public-endpoint", error=PolicyViolation)
    w = World(engine)
    locked = w.create("up", inputs("locked"))
    drift = w.create("preview", inputs("drift"))
    policy = w.create("up", inputs("policy"))
    gone = w.create("destroy", cluster="gone", stack="runs-a.gone")
    refreshed = w.create("up", inputs("refreshed"), refresh=True)
    recovered = w.create("recover", cluster="recovered", stack="runs-a.recovered")
    caplog.set_level("INFO", logger="hubwright.run")
    w.drive()
    assert {k: w.status(k).phase for k in (locked, drift, policy, gone, refreshed, recovered)} == {
        locked: "Succeeded", drift: "Drifted", policy: "Failed", gone: "Succeeded", refreshed: "Succeeded",
        recovered: "Succeeded"}
    assert [c.operation for c in engine.runs(stack="runs-a.locked")] == ["up", "recover", "up"]
    assert len(engine.recovered) == 2 and all(set(live or {"-": ""}) <= {w.identity}  # its own claim only
                                              for live in engine.recovered)
    assert engine.runs("up", "runs-a.refreshed")[0].refresh is True
    assert [c.operation for c in engine.runs(stack="runs-a.recovered")] == ["recover"]
    lines = {r.fields["run"]: r.fields for r in caplog.records if r.name == "hubwright.run"}  # one line per run
    assert lines[drift]["result"] == "drifted" and lines[drift]["runner"] == w.identity
    assert lines[policy]["reason"] == "PolicyViolation" and lines[locked]["phase"] == "Succeeded"
    assert (w.status(drift).drifted, w.status(drift).summary) == (1, "1 to update")
    assert w.result(drift)["drifted"] == ["runs-a.drift (test:Drifted)"]
    assert w.status(policy).reason == "PolicyViolation" and "no-public-endpoint" in w.status(policy).message
    metrics = w.runner.metrics.exposition().decode()
    assert 'hubwright_runner_runs_total{operation="preview",phase="Drifted"} 1.0' in metrics
    assert 'hubwright_runner_runs_total{operation="up",phase="Failed"} 1.0' in metrics
    assert "hubwright_runner_busy 0.0" in metrics


def test_the_result_goes_into_the_runs_secret_and_the_status_says_what_changed():
    """While the run goes, the lease writes the engine's progress into its status; at its end, the outputs go into
    its Secret and the status says what changed (and no more: a tenant reads the run)."""
    w = World(RecordingEngine(progress=3, run_seconds=0.6))
    key = w.create("up", inputs("result"))
    w.pick()
    running = w.execute_in_thread(key)
    seen_progress = []
    while running.is_alive():
        w.advance(1.0)  # the lease writes progress at most once a second
        w.runner.lease.renew(key)
        if progress := w.doc(key).get("progress"):
            seen_progress.append(progress)
        time.sleep(0.05)
    assert seen_progress and seen_progress[-1]["planned"] == 3
    status = w.doc(key)
    assert status["summary"] == "no changes" and status["changes"] == {"same": 1}
    assert status["startTime"] <= status["endTime"] and "progress" not in status
    result = w.result(key)
    assert result["outputs"]["cluster"] == "runs-a/result" and result["drifted"] == []
    assert "outputs" not in status and "cluster" not in json.dumps(status)  # tenants read the run, not the outputs
    metrics = w.runner.metrics.exposition().decode()
    assert 'hubwright_runner_runs_total{operation="up",phase="Succeeded"} 1.0' in metrics


def test_the_lease_renews_the_claim_every_third_of_the_ttl_and_writes_progress_at_most_once_a_second():
    w = World()
    key = w.create("up", inputs("lease"))
    w.pick()
    [job] = w.runner.jobs()
    lease = w.runner.lease
    assert (lease.every, lease.tick) == (renew_every(TTL), 0.5) == (2.0, 0.5)
    writes = len(w.kube.status_writes)
    assert lease.renew(key) == Outcome.done(0.5) and len(w.kube.status_writes) == writes  # not due: nothing
    w.advance(2.0)
    lease.renew(key)
    assert w.kube.status_writes[-1].status == {"claim": {"renewTime": w.status(key).claim.renew_time}}  # type: ignore[union-attr]
    assert w.kube.status_writes[-1].resource_version is not None
    job.progress = RunProgress(done=1, planned=3)
    lease.renew(key)
    assert w.doc(key)["progress"] == {"done": 1, "planned": 3}
    job.progress = RunProgress(done=2, planned=3)
    writes = len(w.kube.status_writes)
    lease.renew(key)
    assert len(w.kube.status_writes) == writes  # the last progress was written less than a second ago
    w.advance(1.0)
    lease.renew(key)
    assert w.doc(key)["progress"] == {"done": 2, "planned": 3}
    w.execute(key)
    assert lease.renew(key) == Outcome.done() and "progress" not in w.doc(key)  # done: the key is let go


def test_the_watchdog_kills_a_run_whose_claim_could_not_be_renewed_before_it_lapses_and_writes_nothing_more():
    w = World()
    key = w.create("up", inputs("stalled"))
    w.pick()
    [job] = w.runner.jobs()
    w.advance(TTL - 2.0 - 0.1)
    w.runner.lease.watch()
    assert not job.forfeit.is_set() and w.engine.cancels == []
    w.advance(0.1)  # ttl - margin since the last write that renewed it
    w.runner.lease.watch()
    assert job.forfeit.is_set() and w.engine.cancels == [0] and "could not be renewed" in job.cancelled_for
    writes = len(w.kube.status_writes)
    w.execute(key)
    assert len(w.kube.status_writes) == writes and w.engine.calls == []  # nothing more: another runner takes it
    assert w.status(key).phase == "Running"
    assert 'hubwright_runner_runs_total{operation="up",phase="Lost"} 1.0' in w.runner.metrics.exposition().decode()


def test_a_renewal_that_finds_the_run_taken_over_stops_the_run():
    w = World()
    key = w.create("up", inputs("taken"))
    w.pick()
    [job] = w.runner.jobs()
    w.hold(key, "hubwright-runner-t9-9", renewed=datetime.now(timezone.utc))  # written since: a takeover
    w.advance(2.0)
    assert w.runner.lease.renew(key) == Outcome.done()
    assert job.forfeit.is_set() and w.engine.cancels == [0] and job.held.lost
    assert w.status(key).claim.holder == "hubwright-runner-t9-9"  # type: ignore[union-attr]


def test_a_draining_runner_hands_back_a_run_longer_than_its_grace_and_the_next_recovers_it_first():
    """A drain gives the run its grace, then cancels it and hands it back (Pending, no claim, `runner` naming the
    drained runner): no takeover, and the next runner recovers the stack first, knowing the drained one holds no
    live claim."""
    a_engine, b_engine = LiveEngine(run_seconds=60), LiveEngine()
    a = World(a_engine, identity="hubwright-runner-t0-0")
    key = a.create("up", inputs("drain"))
    a.pick()
    running = a.execute_in_thread(key)
    wait_until(lambda: a_engine.count("up") == 1, 10, what="A runs it")
    started = time.monotonic()
    assert a.runner.drain(0.5) is True  # nothing left in A's hands
    assert 0.4 <= time.monotonic() - started < 10
    running.join(10)
    assert a_engine.runs("up")[0].ok is False and a_engine.cancels == [0]
    status = a.status(key)
    assert (status.phase, status.claim, status.runner) == ("Pending", None, a.identity)
    assert "handed back" in status.message
    assert a.pick().requeue_after == MAX_WAKE and a.held() == []  # draining: it claims nothing more
    b = World(b_engine, kube=a.kube, identity="hubwright-runner-t0-1")
    b.pick()
    assert b.status(key).claim.takeovers == 0  # type: ignore[union-attr]  # given up, not lost
    b.execute(key)
    assert [c.operation for c in b_engine.calls] == ["recover", "up"]  # A's lock (if any) is recovered first
    assert b_engine.recovered[0] is not None and a.identity not in b_engine.recovered[0]
    status = b.status(key)
    assert (status.phase, status.runner, status.claim.takeovers) == ("Succeeded", b.identity, 0)  # type: ignore[union-attr]


def test_a_deadline_passed_mid_run_cancels_it_and_a_cancel_that_found_no_run_yet_is_sent_again():
    engine = LateEngine()
    engine.gate("runs-a.late")  # never opened: only its deadline ends it
    w = World(engine, grace=0.2)
    late = w.create("up", inputs("late"), timeout=2)
    w.pick()
    w.execute(late)
    assert len(engine.cancels) == 2, "cancelled once more after the grace"
    status = w.status(late)
    assert (status.phase, status.reason) == ("Cancelled", "RunCancelled") and "deadline" in status.message
    assert 'hubwright_runner_runs_total{operation="up",phase="Cancelled"} 1.0' in \
        w.runner.metrics.exposition().decode()


def test_with_two_workers_a_deadline_cancels_one_run_and_hands_the_other_back():
    """engine.cancel stops every run of the runner's engine: the run whose deadline passed is Cancelled, the
    other one is handed back (not failed) and runs again."""
    engine = RecordingEngine()
    engine.gate("runs-a.late")  # never opened
    other_gate = engine.gate("runs-a.bystander")
    w = World(engine, workers=2)
    late = w.create("up", inputs("late"), timeout=2)
    bystander = w.create("up", inputs("bystander"))
    w.pick()
    threads = [w.execute_in_thread(late), w.execute_in_thread(bystander)]
    for thread in threads:
        thread.join(20)
    assert w.status(late).phase == "Cancelled" and "deadline" in w.status(late).message
    assert (w.status(bystander).phase, w.status(bystander).runner) == ("Pending", w.identity)
    other_gate.set()
    w.drive()
    assert [c.operation for c in engine.runs(stack="runs-a.bystander")] == ["up", "recover", "up"]
    assert w.status(bystander).phase == "Succeeded" and w.status(bystander).claim.takeovers == 0  # type: ignore[union-attr]


def test_of_two_claims_on_one_stack_made_at_once_the_later_hands_its_run_back_and_the_earlier_runs():
    """Two runners whose stores did not show each other's claim yet claim two runs of one stack: the later claim
    (its resourceVersion, as the watch first showed it) yields, so a stack never runs twice at once."""
    a = World(identity="hubwright-runner-t0-0")
    b = World(kube=a.kube, identity="hubwright-runner-t0-1")
    first = a.create("up", inputs("twin"), name="twin-up-1")
    second = a.create("up", inputs("twin"), name="twin-up-2")
    seen_by_b = b.runner._views()
    a.pick()
    b.runner.picker.pick(seen_by_b)  # its claim of `first` conflicts; it takes `second`
    assert a.held() == [first] and b.held() == [second]
    b.execute(second)
    status = b.status(second)
    assert (status.phase, status.claim, status.runner, status.message) == ("Pending", None, None, "")
    a.execute(first)
    assert a.status(first).phase == "Succeeded"
    assert [(c.operation, c.stack) for c in a.engine.calls] == [("up", "runs-a.twin")] and b.engine.calls == []
