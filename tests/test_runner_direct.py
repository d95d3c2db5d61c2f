"""The runner (automation/runner/) called directly: its reconciles over doubles.objects.FakeObjects, no API server.

A Runner built on the object port has no informer: each change the fake makes is handed to `runner.seen` (what the
informer does), and the test calls the reconciles itself, in this thread: `reconcile_pick()` (one pass over every
claimable run), `execution.execute(key)` (one claimed run, start to end), `lease.renew(key)` and `lease.watch()`.
The runner's clocks are the wall clock plus what the test moved them (`World.advance`). Each test states what the
pass claimed, what ran on the engine (doubles.engine.RecordingEngine), what the run's status says, and when the
picker looks again; tests/test_runner_execute_direct.py does the same for a claimed run's execution and lease.
Two tests run the runner on its Manager's threads (the pick woken at a claim's expiry, a run end to end).
tests/test_runner.py keeps what only the real API server shows: the real watch under a race, a partitioned runner,
the runner process as deployed (bubblewrap, uid 65532, SIGKILL and SIGTERM), the real engine.
"""
from __future__ import annotations

import base64
import json
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping

import pytest

from automation.adapters.engine import RunResult
from automation.adapters.kube.stackruns import StackRunClient
from automation.kit.objects import HUBSTACKRUNS, SECRETS
from automation.kit.queue import Outcome
from automation.runner.runner import MAX_WAKE, Runner
from doubles.engine import RecordingEngine
from doubles.factories import cluster, resolve_one
from doubles.objects import FakeObjects
from doubles.runners import SERVICE_NAMESPACE, run_objects
from stacks.runs.model import RESULT_KEY, StackRunStatus, status_of
from doubles.service_env import wait_until
from stacks.times import parse_rfc3339, rfc3339_seconds

TTL, GRACE = 6, 1.0  # the claim's ttl (the watchdog kills at ttl - 2 s, a renewal every 2 s) and the cancel grace


class LiveEngine(RecordingEngine):
    """The engine double that also records the live runners each recover() was given."""

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        self.recovered: list[Mapping[str, str] | None] = []

    def recover(self, stack: str, *, live_runners: Mapping[str, str] | None = None) -> RunResult:
        self.recovered.append(None if live_runners is None else dict(live_runners))
        return super().recover(stack, live_runners=live_runners)


def inputs(name: str, namespace: str = "runs-a"):
    return resolve_one(cluster(name, namespace))


class World:
    """One runner over an in-memory API server (shared with other Worlds: `kube=`), in this thread."""

    def __init__(self, engine: RecordingEngine | None = None, *, kube: FakeObjects | None = None, workers: int = 1,
                 identity: str = "hubwright-runner-t0-0", grace: float = GRACE, not_ready: str | None = None):
        self.kube = kube if kube is not None else FakeObjects()
        self.engine = engine if engine is not None else RecordingEngine()
        self.ahead = 0.0  # seconds the runner's clocks run ahead of the wall clock
        self.runner = Runner(self.kube, self.engine, namespace=SERVICE_NAMESPACE, identity=identity, claim_ttl=TTL,
                             workers=workers, cancel_grace=grace, not_ready=not_ready,
                             clock=lambda: datetime.now(timezone.utc) + timedelta(seconds=self.ahead),
                             monotonic=lambda: time.monotonic() + self.ahead)
        for raw in self.kube.objects_of(HUBSTACKRUNS).values():  # what the informer's list would hand over
            self.runner.seen("ADDED", raw)
        self.kube.watch(HUBSTACKRUNS, self.runner.seen)

    @property
    def identity(self) -> str:
        return self.runner.identity

    def advance(self, seconds: float) -> None:
        self.ahead += seconds

    # -- runs, as the service makes them
    def create(self, operation: str, stack_inputs: Any = None, *, namespace: str | None = None,
               stack: str | None = None, cluster: str | None = None, secret: bool = True, **kw: Any) -> str:
        namespace = namespace or getattr(stack_inputs, "namespace", None) or "runs-a"
        stack = stack or stack_inputs.stack
        cluster = cluster if cluster is not None else getattr(stack_inputs, "name", None)
        run, body = run_objects(operation, namespace=namespace, stack=stack, cluster=cluster, inputs=stack_inputs,
                                **kw)
        if secret:
            self.kube.create(SECRETS, body, SERVICE_NAMESPACE)
        created = self.kube.create(HUBSTACKRUNS, run, namespace)
        return f"{namespace}/{created['metadata']['name']}"

    def raw(self, key: str) -> dict:
        found = StackRunClient(self.kube, SERVICE_NAMESPACE).get(key)
        assert found is not None, key
        return found

    def status(self, key: str) -> StackRunStatus:
        return status_of(self.raw(key))

    def doc(self, key: str) -> dict:
        return self.raw(key).get("status") or {}

    def result(self, key: str) -> dict:
        secret = self.kube.get(SECRETS, self.raw(key)["spec"]["inputsSecret"], SERVICE_NAMESPACE) or {}
        return json.loads(base64.b64decode(secret["data"][RESULT_KEY]))

    def hold(self, key: str, holder: str, *, renewed: datetime, ttl: int = TTL) -> None:
        """Another runner's claim on the run (Running), renewed at `renewed`."""
        stamp = rfc3339_seconds(renewed)
        self.kube.patch_status(HUBSTACKRUNS, key.partition("/")[2], {
            "phase": "Running", "runner": holder, "claim": {"holder": holder, "acquireTime": stamp,
                                                            "renewTime": stamp, "ttlSeconds": ttl, "takeovers": 0}},
            key.partition("/")[0])

    # -- the reconciles
    def pick(self) -> Outcome:
        return self.runner.reconcile_pick()

    def held(self) -> list[str]:
        return sorted(job.held.key for job in self.runner.jobs())

    def execute(self, key: str) -> None:
        assert self.runner.execution.execute(key) == Outcome.done()

    def execute_in_thread(self, key: str) -> threading.Thread:
        thread = threading.Thread(target=self.execute, args=(key,), daemon=True)
        thread.start()
        return thread

    def drive(self, passes: int = 50) -> None:
        """Pick, and execute what was claimed, until a pass claims nothing."""
        for _ in range(passes):
            self.pick()
            if not self.runner.jobs():
                return
            for job in self.runner.jobs():
                self.execute(job.held.key)
        raise AssertionError("still claiming")


def test_a_pass_claims_a_pending_run_at_the_version_it_read_and_looks_again_at_most_max_wake_later():
    w = World()
    key = w.create("up", inputs("one"))
    version = w.raw(key)["metadata"]["resourceVersion"]
    assert w.pick() == Outcome.done(MAX_WAKE)
    assert w.held() == [key] and w.runner.picks == 1
    status = w.status(key)
    assert (status.phase, status.runner, status.observed_generation) == ("Running", w.identity, 1)
    assert status.claim is not None and status.claim.holder == w.identity and status.claim.ttl_seconds == TTL
    assert status.claim.acquire_time == status.claim.renew_time and status.claim.takeovers == 0
    [claim] = w.kube.status_writes
    assert claim.resource_version == version  # a write at the version the pass read: of two runners, one wins
    assert w.engine.calls == []  # a worker runs it (`execute`), not the pass
    w.execute(key)
    assert w.status(key).phase == "Succeeded" and [(c.operation, c.stack) for c in w.engine.calls] == [
        ("up", "runs-a.one")]
    assert w.runner.jobs() == []


def test_of_two_runners_that_read_the_same_run_one_claim_wins_and_the_other_is_a_conflict():
    a = World(identity="hubwright-runner-t0-0")
    b = World(kube=a.kube, identity="hubwright-runner-t0-1")
    key = a.create("up", inputs("race"))
    seen_by_b = b.runner._views()  # b read the run before a's claim reached it
    a.pick()
    b.runner.picker.pick(seen_by_b)
    assert a.kube.conflicts == 1 and a.held() == [key] and b.held() == []
    assert a.status(key).claim.holder == a.identity  # type: ignore[union-attr]


def test_fair_between_namespaces_one_run_of_b_starts_among_the_first_two():
    """One runner, one slot: six runs of runs-a, then one of runs-b; runs-b's goes second (runs-a was served)."""
    w = World()
    many = [w.create("up", inputs(f"many-{i}"), name=f"many-{i}-up") for i in range(6)]
    one = w.create("up", inputs("one", "runs-b"))
    order = []
    for _ in range(7):
        w.pick()
        [key] = w.held()
        order.append(key)
        w.execute(key)
    assert order[:2] == [many[0], one] and sorted(order) == sorted([*many, one])


def test_one_run_per_stack_the_next_run_of_a_stack_waits_for_the_one_in_flight():
    w = World(workers=3)
    first = w.create("up", inputs("twin"), name="twin-up-1")
    second = w.create("up", inputs("twin"), name="twin-up-2")
    other = w.create("up", inputs("other"))
    held_elsewhere = w.create("up", inputs("elsewhere"), name="elsewhere-up-1")
    waiting = w.create("up", inputs("elsewhere"), name="elsewhere-up-2")
    w.hold(held_elsewhere, "hubwright-runner-t9-9", renewed=datetime.now(timezone.utc))
    w.pick()
    assert w.held() == sorted([first, other])  # a slot is free, yet `second` waits, and so does `waiting`
    w.execute(first)
    w.pick()
    assert second in w.held() and waiting not in w.held()
    assert w.status(waiting).phase == "Pending"


def test_a_runner_holds_at_most_its_workers_runs_and_claims_the_next_once_one_ends():
    w = World(workers=2)
    keys = [w.create("up", inputs(f"slot-{i}"), name=f"slot-{i}-up") for i in range(3)]
    w.pick()
    assert w.held() == keys[:2] and w.status(keys[2]).phase == "Pending"
    w.pick()
    assert w.held() == keys[:2] and w.runner.picks == 2  # no slot free: it looked, and left the third alone
    w.execute(keys[0])
    w.pick()
    assert w.held() == [keys[1], keys[2]]


def test_a_claim_that_lapses_is_looked_at_again_at_its_expiry_then_taken_over_and_recovered_first():
    engine = LiveEngine()
    w = World(engine)
    key = w.create("up", inputs("lapsed"))
    renewed = datetime.now(timezone.utc).replace(microsecond=0)
    w.hold(key, "hubwright-runner-t9-9", renewed=renewed)
    outcome = w.pick()
    expires_in = (renewed + timedelta(seconds=TTL) - datetime.now(timezone.utc)).total_seconds()
    assert outcome.requeue_after is not None and 0 <= outcome.requeue_after - expires_in < 0.1  # its expiry
    assert w.held() == [] and w.status(key).claim.holder == "hubwright-runner-t9-9"  # type: ignore[union-attr]
    w.advance(TTL)  # the holder did not renew: the claim lapsed
    w.pick()
    assert w.held() == [key]
    claim = w.status(key).claim
    assert claim is not None and (claim.holder, claim.takeovers) == (w.identity, 1)
    w.advance(GRACE)  # its lock is stale once the lapsed claim is older than the cancel grace
    w.execute(key)
    assert [c.operation for c in engine.calls] == ["recover", "up"]
    assert engine.recovered[0] is not None and "hubwright-runner-t9-9" not in engine.recovered[0]
    assert w.status(key).phase == "Succeeded" and w.status(key).claim.takeovers == 1  # type: ignore[union-attr]


def test_on_the_manager_a_claim_that_lapses_wakes_the_picker_at_its_expiry_without_any_change():
    w = World(grace=0.1)
    key = w.create("up", inputs("expiry"))
    renewed = datetime.now(timezone.utc) - timedelta(seconds=TTL - 2)  # it lapses in 1 to 2 s
    w.hold(key, "hubwright-runner-t9-9", renewed=renewed)
    expiry = parse_rfc3339(rfc3339_seconds(renewed)) + timedelta(seconds=TTL)  # type: ignore[operator]
    w.runner.start()
    try:
        wait_until(lambda: w.runner.manager.started.is_set(), 10, what="the runner started")
        time.sleep(max(0.0, (expiry - datetime.now(timezone.utc)).total_seconds() - 0.3))
        assert w.runner.picks == 1 and w.held() == []  # one pass at the start, none since: it waits, it polls not
        wait_until(lambda: w.status(key).phase == "Succeeded", 10, what="taken over and run")
    finally:
        w.runner.stop(timeout=5)
    acquired = parse_rfc3339(w.status(key).claim.acquire_time)  # type: ignore[union-attr]
    assert acquired is not None and timedelta(0) <= acquired - expiry <= timedelta(seconds=1)


def test_a_forged_or_edited_run_is_refused_and_never_reaches_the_engine():
    """Runs a tenant could make without the admission policy: each ends Refused (reason RunRefused, the message
    says why) and the engine never hears of its stack; the legit run runs once."""
    w = World()
    legit = w.create("up", inputs("legit"))
    no_secret = w.create("up", inputs("nosecret"), secret=False)
    run, _ = run_objects("up", namespace="runs-a", stack="runs-a.legit", cluster="legit", inputs=inputs("legit"))
    run["spec"]["inputsSecret"] = w.raw(legit)["spec"]["inputsSecret"]  # another run's Secret
    borrowed = "runs-a/" + w.kube.create(HUBSTACKRUNS, run, "runs-a")["metadata"]["name"]
    run, secret = run_objects("up", namespace="runs-a", stack="runs-a.digest", cluster="digest",
                              inputs=inputs("digest"))
    run["spec"]["inputsDigest"] = "0" * 64  # not the digest the service recorded
    w.kube.create(SECRETS, secret, SERVICE_NAMESPACE)
    wrong_digest = "runs-a/" + w.kube.create(HUBSTACKRUNS, run, "runs-a")["metadata"]["name"]
    foreign = w.create("up", inputs("victim"), namespace="runs-evil", stack="runs-a.victim", cluster="victim")
    edited = w.create("up", inputs("edited"))
    w.kube.patch(HUBSTACKRUNS, edited.partition("/")[2], {"spec": {"message": "edited by a tenant"}}, "runs-a")
    late = w.create("up", inputs("late"), timeout=-5)
    w.drive()
    refused = {key: w.status(key) for key in (no_secret, borrowed, wrong_digest, foreign, edited)}
    assert {s.phase for s in refused.values()} == {"Refused"} and {s.reason for s in refused.values()} == {
        "RunRefused"}
    assert "does not exist" in refused[no_secret].message
    assert f"not {borrowed}" in refused[borrowed].message
    assert "not the digest the service recorded" in refused[wrong_digest].message
    assert "is not the stack of cluster runs-evil/victim" in refused[foreign].message
    assert "generation 2" in refused[edited].message
    assert (w.status(late).phase, w.status(late).reason) == ("Cancelled", "RunCancelled")
    assert "deadline" in w.status(late).message
    assert w.status(legit).phase == "Succeeded"
    assert [(c.operation, c.stack, c.message) for c in w.engine.calls] == [("up", "runs-a.legit", "test")]


def test_a_runner_without_what_it_needs_to_run_claims_nothing():
    w = World(not_ready="the AWS provider plugin pulumi-resource-aws is missing")
    w.create("up", inputs("plugin"))
    assert w.pick() == Outcome.done(MAX_WAKE) and w.held() == []


def test_a_runner_whose_name_its_peers_would_not_recognise_does_not_start():
    with pytest.raises(ValueError, match="does not match --runner-hosts"):
        Runner(FakeObjects(), RecordingEngine(), namespace=SERVICE_NAMESPACE, identity="laptop",
               runner_hosts="hubwright-runner-[a-z0-9]+-[a-z0-9]+")


def test_on_the_manager_a_run_is_claimed_run_and_reported_and_the_probes_say_so():
    w = World()
    gate = w.engine.gate("runs-a.threads")
    assert w.runner.ready() == (False, {"synced": False, "draining": False})
    w.runner.start()
    try:
        wait_until(lambda: w.runner.ready()[0], 10, what="ready")
        key = w.create("up", inputs("threads"))
        wait_until(lambda: w.engine.count("up"), 10, what="claimed and started")
        assert w.runner.healthy() == (True, {"dead": [], "runs": [key]})
        gate.set()
        wait_until(lambda: w.status(key).phase == "Succeeded", 10, what="run")
        wait_until(lambda: not w.runner.jobs(), 10, what="let go")
        names = {t.name for t in threading.enumerate()}
        assert {"runner-pick-0", "runner-run-0", "runner-renew-0", "runner-renew-1", "runner-watchdog"} <= names
    finally:
        w.runner.stop(timeout=5)
    assert w.runner.ready() == (False, {"synced": True, "draining": True})
