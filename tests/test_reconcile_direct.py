"""The clusters' reconciler called directly: `reconcile(key) -> Outcome`, no service, no queue, no HTTP.

A Reconciler over doubles.clusters.FakeClusters (the production ClusterClient over an in-memory API server,
its changes handed to a real Cache as a watch would), a StaticDesired (what the mapper would publish) and the
recording engine. Each test states the Outcome, what ran on the engine, what the Cluster's status says and
which Events it got. tests/test_reconcile.py keeps the cases that need the threaded service end to end.
"""
from __future__ import annotations

import logging
from typing import Any

import pytest

from automation.adapters.engine import PolicyViolation
from automation.kit.finalizers import FinalizerConflict
from stacks.times import parse_seconds
from automation.service.cache import Cache
from automation.service.clusters import ReconcileOptions, Reconciler
from automation.kit.queue import Outcome, WorkQueue, Workers
from automation.adapters.backoff import Backoff
from doubles.engine import RecordingEngine
from doubles.clusters import FakeClusters, StaticDesired
from stacks.errors import InvalidSpec, NeedsAttention
from stacks.inputs import StackInputs
from stacks.model.cluster import Cluster
from stacks.model.loading import parse
from stacks.network.merge import NOT_DISCOVERED, Pending
from stacks.names import DRIFT_CHECK_REQUEST_ANNOTATION, FINALIZER, RECONCILE_REQUEST_ANNOTATION
from stacks.status import ClusterStatus
from doubles.factories import cluster_doc, resolve_one

KEY = "acme/prod-1"
STACK = "acme.prod-1"
START = 1_767_000_000.0  # the reconciler's clock: a test moves it


def inputs_of(doc: dict) -> StackInputs:
    """The inputs the mapper would publish for the Cluster document (its namespace owning its account)."""
    parsed = parse(doc)
    assert isinstance(parsed, Cluster)
    return resolve_one(parsed)


class Metrics:
    def __init__(self) -> None:
        self.runs: list[tuple[str, str]] = []
        self.failed: list[tuple[str, str]] = []
        self.refusals: list[str] = []

    def observe_run(self, operation: str, result: str, seconds: float) -> None:
        self.runs.append((operation, result))

    def run_failed(self, operation: str, reason: str) -> None:
        self.failed.append((operation, reason))

    def refused(self, reason: str) -> None:
        self.refusals.append(reason)


class World:
    """One reconciler and what it sees, all in this thread."""

    def __init__(self, engine: RecordingEngine | None = None, **options: Any):
        self.now = START
        self.kube = FakeClusters()
        self.cache = Cache(hub_name="default", role_map_name="role-map", role_map_namespace="hubwright-system",
                           parse_role_map=lambda raw: {})
        self.kube.watch(self.cache.apply)  # what an informer would deliver
        self.desired = StaticDesired()
        self.engine = engine or RecordingEngine()
        self.metrics = Metrics()
        options.setdefault("drift_interval", 0)
        self.reconciler = Reconciler(desired=self.desired, cache=self.cache, engine=self.engine, kube=self.kube,
                                     options=ReconcileOptions(**options), metrics=self.metrics,
                                     clock=lambda: self.now)

    def add(self, name: str = "prod-1", **spec: Any) -> str:
        doc = cluster_doc(name, **spec)
        self.kube.create(doc)
        key = f"acme/{name}"
        self.desired.wanted[key] = inputs_of(doc)
        return key

    def edit(self, key: str, patch: dict) -> None:
        """A spec edit: the API server's new generation, and the inputs the mapper would publish for it."""
        live = self.kube.patch(key, patch)
        self.desired.wanted[key] = inputs_of({k: live[k] for k in ("apiVersion", "kind", "metadata", "spec")})

    def reconcile(self, key: str = KEY) -> Outcome:
        return self.reconciler.reconcile(key)

    def status(self, key: str = KEY) -> ClusterStatus:
        obj = self.kube.get(key)
        assert obj is not None, f"{key} is gone"
        return ClusterStatus.model_validate(obj.get("status") or {})

    def condition(self, type_: str, key: str = KEY) -> tuple[str, str]:
        cond = self.status(key).condition(type_)
        assert cond is not None, f"{key} has no {type_} condition"
        return cond.status, cond.reason

    def reasons(self, key: str = KEY) -> list[str]:
        return [reason for _, reason in self.kube.events_of(key)]

    def close(self) -> None:
        self.reconciler.close()


@pytest.fixture
def world():
    w = World()
    yield w
    w.close()


def up_then_ready(w: World, key: str = KEY) -> None:
    assert not w.reconcile(key).failed
    assert w.condition("Ready", key) == ("True", "Succeeded")


# --------------------------------------------------------------------------- the up path

def test_a_new_cluster_is_applied_once_and_reported(world):
    world.add()
    outcome = world.reconcile()
    assert outcome == Outcome.done(None)  # drift checks are off: nothing to come back for
    assert [(c.operation, c.stack) for c in world.engine.calls] == [("up", STACK)]
    obj = world.kube.get(KEY)
    status = world.status()
    assert FINALIZER in obj["metadata"]["finalizers"]
    assert status.observed_generation == obj["metadata"]["generation"] == 1
    assert status.inputs_hash == world.engine.stacks[STACK].digest()
    assert status.last_update.operation == "up" and status.last_update.result == "Succeeded"
    assert status.outputs.endpoint_vpc == "vpc-0hub1" and status.outputs.endpoint.startswith("vpce-")
    assert (status.account, status.region) == ("222222222222", "us-east-1")
    assert {c.type: c.status for c in status.conditions} == {"Ready": "True", "Reconciling": "False",
                                                             "Stalled": "False"}
    assert world.reasons() == ["UpdateStarted", "UpdateSucceeded"]
    # The Running mark went first, written now; the report of the finished run later (off the worker's path).
    assert [(w.status.last_update.result, w.later) for w in world.kube.writes] == [("Running", False),
                                                                                   ("Succeeded", True)]
    assert world.metrics.runs == [("up", "succeeded")]

    assert world.reconcile() == Outcome.done(None)  # level-triggered: nothing changed, nothing runs
    assert world.engine.count() == 1 and len(world.kube.writes) == 2


def test_a_running_cluster_in_an_account_two_namespaces_own_keeps_running_with_a_warning_and_its_claims_recorded(
        world):
    """issue #45: refusing never destroys. A cluster whose stack exists keeps running when its account becomes one two
    namespaces own (unlisted): the AccountShared Warning condition says so, with no run; it goes once listed. What
    admission granted is recorded in status.claims."""
    world.add()
    world.desired.claims[KEY] = {"vpcID": "vpc-0c1", "apiHost": "api.prod-1.example.com", "account": "222222222222"}
    up_then_ready(world)
    assert world.status().claims.model_dump(by_alias=True, exclude_none=True) == world.desired.claims[KEY]
    world.desired.shared[KEY] = "account 222222222222 is owned by namespaces acme, globex ..."
    assert world.reconciler.triage(KEY, world.kube.get(KEY), world.desired.wanted[KEY]) == 0
    world.reconcile()
    assert world.engine.count("up") == 1
    assert world.condition("AccountShared") == ("True", "AccountShared") and world.condition("Ready")[0] == "True"
    del world.desired.shared[KEY]
    world.reconcile()
    assert world.status().condition("AccountShared") is None and world.engine.count("up") == 1


def test_an_edit_that_changes_nothing_costs_no_run_but_is_observed(world):
    world.add()
    up_then_ready(world)
    world.edit(KEY, {"spec": {"network": {"routeTableIDs": ["rtb-09"]}}})  # matters to a mesh member only
    assert world.reconcile() == Outcome.done(None)
    assert world.engine.count("up") == 1
    assert world.status().observed_generation == 2


def test_an_edit_that_changes_the_inputs_runs_up_again_saying_why(world):
    world.add()
    up_then_ready(world)
    world.edit(KEY, {"spec": {"apiURL": "https://api.blue.example.com:6443"}})
    world.reconcile()
    assert world.engine.count("up") == 2
    assert world.engine.runs("up")[1].inputs.private_link.api_host == "api.blue.example.com"
    assert world.engine.runs("up")[1].message.startswith("inputs changed (generation 2)")
    assert world.status().inputs_hash == world.engine.stacks[STACK].digest()


def test_a_new_install_removes_the_old_private_link_first(world):
    world.add()
    up_then_ready(world)
    world.edit(KEY, {"spec": {"infraID": "prod-1-new42"}})
    world.reconcile()
    first, second = world.engine.runs("up")[1:]
    assert first.inputs.private_link is None and "new install (infraID prod-1-x7k2p -> prod-1-new42)" in first.message
    assert second.inputs.private_link.infra_id == "prod-1-new42"
    assert "NewInstall" in world.reasons()


def test_a_registered_only_cluster_is_ready_with_no_stack(world):
    world.add()
    world.desired.wanted.pop(KEY)
    world.desired.registered.add(KEY)
    raw = world.cache.get(KEY)
    assert world.reconciler.triage(KEY, raw, None) == 0  # its status does not say so yet
    assert world.reconcile() == Outcome.done()
    assert world.engine.calls == [] and world.condition("Ready") == ("True", "Registered")
    assert world.status().account is None
    assert world.reconciler.triage(KEY, world.cache.get(KEY), None) is None  # healed: nothing to do


def test_a_cluster_not_resolved_yet_is_left_to_the_mapper(world):
    world.add()
    world.desired.wanted.pop(KEY)
    assert world.reconcile() == Outcome.done()
    assert world.engine.calls == [] and world.kube.writes == []


def test_triage_says_when_a_cluster_seen_for_the_first_time_needs_a_reconcile(world):
    world.add()
    desired = world.desired.wanted[KEY]
    assert world.reconciler.triage(KEY, world.cache.get(KEY), desired) == 0  # never applied
    up_then_ready(world)
    assert world.reconciler.triage(KEY, world.cache.get(KEY), desired) is None  # applied, drift checks off
    world.reconciler.options = ReconcileOptions(drift_interval=100, drift_jitter=0)
    assert world.reconciler.triage(KEY, world.cache.get(KEY), desired) == pytest.approx(100, abs=1)


# --------------------------------------------------------------------------- refusals and failures

def test_invalid_input_stalls_with_the_reason_and_never_runs(world):
    world.add()
    refusal = InvalidSpec.one(f"HubCluster {KEY}", "spec.accountID", "account 222222222222 has no role",
                              condition="AccountNotMapped")
    world.desired.wanted[KEY] = refusal
    outcome = world.reconcile()
    assert outcome.stalled == "AccountNotMapped" and outcome.requeue_after is None and not outcome.failed
    assert world.engine.calls == []
    assert world.condition("Stalled") == ("True", "AccountNotMapped")
    assert world.condition("Ready") == ("False", "AccountNotMapped")
    assert FINALIZER not in (world.kube.get(KEY)["metadata"].get("finalizers") or [])
    assert world.kube.events_of(KEY) == [("Warning", "AccountNotMapped")]
    assert world.metrics.refusals == ["AccountNotMapped"]

    world.reconcile()  # the same refusal again: no second Event, no second count, no write
    assert len(world.kube.events) == 1 and world.metrics.refusals == ["AccountNotMapped"]
    assert len(world.kube.writes) == 1

    world.desired.wanted[KEY] = inputs_of(cluster_doc())  # the input changes: it runs
    up_then_ready(world)
    assert world.engine.count("up") == 1


def test_a_refusal_by_a_guard_runs_nothing(world):
    world.add()

    def refuse(applied, desired):
        raise InvalidSpec.one(f"HubCluster {desired.key}", "spec.region", "moving a stack is refused",
                              condition="MoveRefused")
    world.reconciler.guards = (refuse,)
    outcome = world.reconcile()
    assert outcome.stalled == "MoveRefused" and world.engine.calls == []
    assert world.condition("Stalled") == ("True", "MoveRefused")


def test_a_preflight_that_may_pass_later_is_retried_and_says_nothing_ran(world):
    world.add()

    def not_yet(applied, desired):
        raise NeedsAttention("the installer's NLB is not there yet", reason="NLBNotFound")
    world.reconciler.guards = (not_yet,)
    outcome = world.reconcile()
    assert outcome == Outcome.stall("NLBNotFound", world.reconciler.options.stalled_recheck)
    assert world.engine.calls == []
    assert world.status().last_update.message.startswith("preflight, nothing ran: ")
    assert world.metrics.refusals == ["NLBNotFound"]


def test_a_failed_update_is_retried_with_backoff_until_it_succeeds(world):
    world.add()
    world.engine.fail("up", STACK, message="boom")
    assert world.reconcile() == Outcome.retry()
    assert world.condition("Ready") == ("False", "UpdateFailed")
    assert world.condition("Reconciling") == ("True", "UpdateFailed")
    last = world.status().last_update
    assert (last.operation, last.result, last.message) == ("up", "Failed", "boom")
    assert ("Warning", "UpdateFailed") in world.kube.events_of(KEY)
    assert world.metrics.failed == [("up", "UpdateFailed")] and world.metrics.refusals == []

    up_then_ready(world)
    assert world.engine.runs("up")[1].message.startswith("retrying")


def test_a_retry_shows_the_last_failure_until_a_run_succeeds_and_its_event_does_not_repeat_it(world):
    """The trial: while up failed and retried, `kubectl get hwc` showed Progressing during each retry (the
    failure was visible only between runs), and every UpdateStarted Event repeated the previous error."""
    world.add()
    world.engine.fail("up", STACK, message="AccessDenied: not authorized to perform ec2:CreateVpcEndpointService")
    assert world.reconcile() == Outcome.retry()
    during: list = []
    up = world.engine.up

    def watched_up(desired, **kwargs):
        during.append(world.kube.status(KEY, world.kube.get(KEY)))
        return up(desired, **kwargs)

    world.engine.up = watched_up
    up_then_ready(world)
    [running] = during
    ready, reconciling = running.condition("Ready"), running.condition("Reconciling")
    assert (ready.status, ready.reason, reconciling.status) == ("Unknown", "UpdateFailed", "True")
    assert "the last attempt failed: AccessDenied: not authorized" in ready.message
    started = [e.message for e in world.kube.events if e.key == KEY and e.reason == "UpdateStarted"]
    assert len(started) == 2 and "AccessDenied" not in started[1], started
    assert world.status().condition("Ready").reason == "Succeeded"  # a success ends it


def test_a_policy_violation_stalls_the_cluster_naming_the_rule_and_is_not_retried(world):
    world.add()
    world.engine.fail("up", STACK, message="mandatory rule no-public-endpoints", error=PolicyViolation,
                      reason="PolicyViolation")
    outcome = world.reconcile()
    assert outcome == Outcome.stall("PolicyViolation", world.reconciler.options.stalled_recheck)
    status, reason = world.condition("Stalled")
    assert (status, reason) == ("True", "PolicyViolation")
    assert "no-public-endpoints" in world.status().condition("Stalled").message
    assert world.metrics.refusals == ["PolicyViolation"]


def test_a_locked_stack_is_requeued_not_failed(world):
    world.add()
    world.engine.lock(STACK)
    outcome = world.reconcile()
    lock_retry = world.reconciler.options.lock_retry
    assert not outcome.failed and outcome.stalled is None
    assert 0.5 * lock_retry <= outcome.requeue_after <= 1.5 * lock_retry
    assert world.condition("Reconciling") == ("True", "StackLocked")
    assert world.status().last_update is None  # nothing ran: the last update is the one before
    assert ("Normal", "StackLocked") in world.kube.events_of(KEY)
    up_then_ready(world)


def test_a_run_killed_mid_update_is_recovered_before_the_retry(world):
    world.add()
    world.engine.kill_mid_run(STACK)
    world.kube.write(world.cache.get(KEY), ClusterStatus.model_validate({"lastUpdate": {
        "operation": "up", "result": "Running", "message": "first update", "startTime": "2026-01-01T00:00:00Z"}}),
        previous=ClusterStatus())
    world.kube.forget(KEY)  # a new process: it knows only what the API server says
    up_then_ready(world)
    assert [c.operation for c in world.engine.calls] == ["recover", "up"]
    status = world.status()
    assert "did not finish" in status.last_recovery.message
    assert "Recovered" in world.reasons()


def test_a_lock_that_outlives_a_few_retries_is_handed_to_recovery(world):
    world.add()
    world.engine.lock(STACK, times=3)
    for _ in range(3):
        assert not world.reconcile().failed
    up_then_ready(world)
    assert [c.operation for c in world.engine.calls][-2:] == ["recover", "up"]
    assert "stayed locked through 3 retries" in world.status().last_recovery.message


def test_an_engine_error_outside_a_run_becomes_a_condition_not_a_traceback(world):
    world.add()

    def broken(stack):
        raise NeedsAttention("the backend refused: AccessDenied", reason="AccessDenied")
    world.engine.applied = broken  # read before every up
    outcome = world.reconcile()
    assert outcome.stalled == "AccessDenied"
    assert world.condition("Stalled") == ("True", "AccessDenied")


# --------------------------------------------------------------------------- requests and drift

def test_a_reconcile_request_runs_up_with_refresh_once_per_value(world):
    world.add()
    up_then_ready(world)
    world.kube.patch(KEY, {"metadata": {"annotations": {RECONCILE_REQUEST_ANNOTATION: "one"}}})
    world.reconcile()
    world.reconcile()
    assert [(c.operation, c.refresh) for c in world.engine.calls] == [("up", False), ("up", True)]
    assert world.status().last_handled_reconcile_request == "one"


def test_a_reconcile_request_on_an_invalid_cluster_is_recorded_and_runs_nothing(world):
    world.add()
    world.desired.wanted[KEY] = InvalidSpec.one(f"HubCluster {KEY}", "spec.region", "no such region")
    world.kube.patch(KEY, {"metadata": {"annotations": {RECONCILE_REQUEST_ANNOTATION: "please"}}})
    assert world.reconcile().stalled == "InvalidSpec"
    assert world.engine.calls == [] and world.status().last_handled_reconcile_request == "please"


def _causes(world: World, monkeypatch) -> list[tuple[str, Any]]:
    """(operation, cause) of every run the reconciler starts from now on, through its gate (automation/service/runs.py)."""
    seen: list[tuple[str, Any]] = []
    gate = world.reconciler.runs.run

    def recording(operation, call, **kwargs):
        seen.append((operation, kwargs.get("cause")))
        return gate(operation, call, **kwargs)
    monkeypatch.setattr(world.reconciler.runs, "run", recording)
    return seen


def _ask_for_a_drift_check(world: World, value: str) -> None:
    world.kube.patch(KEY, {"metadata": {"annotations": {DRIFT_CHECK_REQUEST_ANNOTATION: value}}})


def test_a_drift_check_request_runs_a_preview_now_once_per_value(world, monkeypatch):
    """Periodic drift checks are off (drift_interval 0): the request alone runs one, a preview with refresh, not an
    up; the same value again runs nothing."""
    world.add()
    up_then_ready(world)
    causes = _causes(world, monkeypatch)
    assert world.reconciler.triage(KEY, world.cache.get(KEY), world.desired.wanted[KEY]) is None  # nothing to do
    _ask_for_a_drift_check(world, "one")
    assert world.reconciler.triage(KEY, world.cache.get(KEY), world.desired.wanted[KEY]) == 0  # now
    assert world.reconcile() == Outcome.done(None)
    assert [(c.operation, c.refresh) for c in world.engine.calls] == [("up", False), ("preview", False)]
    [(operation, cause)] = causes
    assert operation == "preview" and cause.kind == "DriftCheck"
    assert cause.message == f"drift check requested ({DRIFT_CHECK_REQUEST_ANNOTATION}=one)"
    status = world.status()
    assert status.last_handled_drift_check_request == "one" and status.last_handled_reconcile_request is None
    assert parse_seconds(status.last_drift_check) == pytest.approx(world.now, abs=1)
    assert world.condition("DriftDetected") == ("False", "NoDrift")
    assert world.condition("Ready") == ("True", "Succeeded")

    world.now += 5
    world.kube.patch(KEY, {"metadata": {"labels": {"team": "blue"}}})  # another edit, the same request
    assert world.reconciler.triage(KEY, world.cache.get(KEY), world.desired.wanted[KEY]) is None
    assert world.reconcile() == Outcome.done(None)
    assert world.engine.count("preview") == 1 and world.engine.count("up") == 1 and len(causes) == 1

    long = "x" * 300  # recorded as its first 256 characters, as the reconcile request is
    _ask_for_a_drift_check(world, long)
    world.reconcile()
    world.reconcile()
    assert world.engine.count("preview") == 2 and world.engine.count("up") == 1
    assert world.status().last_handled_drift_check_request == long[:256]


@pytest.mark.parametrize("policy", ["correct", "report"])
def test_a_drift_check_request_that_finds_drift_applies_the_drift_policy_and_is_recorded(policy, monkeypatch):
    w = World(drift_policy=policy)
    try:
        w.add()
        up_then_ready(w)
        causes = _causes(w, monkeypatch)
        w.engine.drifted.add(STACK)
        _ask_for_a_drift_check(w, "drifted?")
        w.reconcile()
        ops = [(c.operation, c.refresh) for c in w.engine.calls]
        if policy == "correct":
            assert ops == [("up", False), ("preview", False), ("up", True)]
            assert [cause.kind for _, cause in causes] == ["DriftCheck", "Drift"]
            assert w.condition("DriftDetected") == ("False", "DriftCorrected")
        else:
            assert ops == [("up", False), ("preview", False)]
            assert w.condition("DriftDetected") == ("True", "DriftDetected")
        assert w.status().last_handled_drift_check_request == "drifted?"
        w.reconcile()
        assert len(w.engine.calls) == len(ops)  # handled: nothing more runs
    finally:
        w.close()


def test_a_failed_drift_check_handles_the_request_a_locked_stack_keeps_it_for_the_retry(world):
    world.add()
    up_then_ready(world)
    world.engine.lock(STACK)
    _ask_for_a_drift_check(world, "1")
    assert world.reconcile() == Outcome.done(world.reconciler.options.lock_retry)  # nothing ran: looked at again
    assert world.status().last_handled_drift_check_request is None
    world.engine.fail("preview", STACK, message="the backend did not answer")
    assert world.reconcile() == Outcome.done(None)
    assert ("Warning", "DriftCheckFailed") in world.kube.events_of(KEY)
    assert world.status().last_handled_drift_check_request == "1"  # a check ran: handled, whatever it found
    world.reconcile()
    assert [c.operation for c in world.engine.calls] == ["up", "preview", "preview"]


def test_a_drift_check_request_on_a_cluster_that_needs_an_up_makes_it_an_up_with_refresh(world):
    """The up runs anyway (a spec edit): with refresh it reads the cloud back and corrects drift, so it handles the
    request; no preview runs besides."""
    world.add()
    up_then_ready(world)
    world.edit(KEY, {"spec": {"apiURL": "https://api.edited.prod-1.example.com:6443"}})
    _ask_for_a_drift_check(world, "with-the-edit")
    world.reconcile()
    world.reconcile()
    assert [(c.operation, c.refresh) for c in world.engine.calls] == [("up", False), ("up", True)]
    assert world.status().last_handled_drift_check_request == "with-the-edit"
    assert world.status().last_update.cause == "Spec"


def test_a_reconcile_request_handles_a_drift_check_request_given_with_it(world):
    world.add()
    up_then_ready(world)
    world.kube.patch(KEY, {"metadata": {"annotations": {RECONCILE_REQUEST_ANNOTATION: "r",
                                                        DRIFT_CHECK_REQUEST_ANNOTATION: "d"}}})
    world.reconcile()
    world.reconcile()
    assert [(c.operation, c.refresh) for c in world.engine.calls] == [("up", False), ("up", True)]
    status = world.status()
    assert (status.last_handled_reconcile_request, status.last_handled_drift_check_request) == ("r", "d")


def test_a_drift_check_request_on_an_invalid_cluster_is_recorded_and_runs_nothing(world):
    world.add()
    world.desired.wanted[KEY] = InvalidSpec.one(f"HubCluster {KEY}", "spec.region", "no such region")
    _ask_for_a_drift_check(world, "please")
    assert world.reconcile().stalled == "InvalidSpec"
    assert world.engine.calls == [] and world.status().last_handled_drift_check_request == "please"


@pytest.mark.parametrize("policy", ["correct", "report"])
def test_drift_found_by_the_periodic_check_is_corrected_or_reported(policy):
    w = World(drift_interval=60, drift_jitter=0, drift_policy=policy)
    try:
        w.add()
        assert w.reconcile().requeue_after == pytest.approx(60, abs=1)
        w.engine.drifted.add(STACK)
        w.now += 61
        w.reconcile()
        ops = [(c.operation, c.refresh) for c in w.engine.calls]
        if policy == "correct":
            assert ops == [("up", False), ("preview", False), ("up", True)]
            assert w.condition("DriftDetected") == ("False", "DriftCorrected")
        else:
            assert ops == [("up", False), ("preview", False)]
            assert w.condition("DriftDetected") == ("True", "DriftDetected")
            assert w.condition("Ready") == ("True", "Succeeded")
        assert "DriftDetected" in w.reasons()
        assert parse_seconds(w.status().last_drift_check) == pytest.approx(w.now, abs=1)
    finally:
        w.close()


# --------------------------------------------------------------------------- delete

def test_delete_destroys_the_stack_before_releasing_the_cluster(world):
    world.add()
    up_then_ready(world)
    world.kube.delete(KEY)
    assert world.kube.get(KEY)["metadata"]["deletionTimestamp"]  # held by our finalizer
    assert world.reconciler.triage(KEY, world.cache.get(KEY), None) == 0
    assert world.reconcile() == Outcome.done()
    assert [c.operation for c in world.engine.calls] == ["up", "destroy"]
    assert world.kube.get(KEY) is None and world.cache.get(KEY) is None  # released
    assert world.reasons()[-2:] == ["DestroyStarted", "DestroySucceeded"]

    assert world.reconcile() == Outcome.done()  # gone from the cache: its facts agent loses its identity
    assert world.kube.revoked == [KEY]


def test_waiting_for_discovery_is_a_condition_not_an_event(world):
    """The issue: a NetworkNotDiscovered Event arrived in the same second as NetworkDiscovered. Waiting is not a
    fact of its own: the condition says Reconciling, and the discovery controller tells its own outcome once."""
    key = world.add()
    world.desired.wanted[key] = Pending(key, "spec.network", "waiting for discovery to read the VPC of infraID x")
    world.reconcile()
    assert world.condition("Reconciling") == ("True", NOT_DISCOVERED)
    assert world.reasons() == []


def _destroyed(world: World) -> list[str]:
    return [e.message for e in world.kube.events if e.key == KEY and e.reason == "DestroySucceeded"]


def test_the_destroy_event_says_what_happened_to_the_cluster_after_it_happened(world):
    """The issue: "DestroySucceeded ... releasing the Cluster" was sent before the finalizer was edited, so it was
    false when the edit failed, and when another finalizer still held the Cluster. Now it is sent after the edit
    and says what became of the Cluster."""
    world.add()
    up_then_ready(world)
    world.kube.patch(KEY, {"metadata": {"finalizers": [*world.kube.get(KEY)["metadata"]["finalizers"],
                                                       "example.com/backup"]}})
    world.kube.delete(KEY)
    assert world.reconcile() == Outcome.done()
    assert world.kube.get(KEY)["metadata"]["finalizers"] == ["example.com/backup"]  # still held, not by us
    assert _destroyed(world) == [f"stack {STACK} destroyed; our finalizer removed; the Cluster waits for its "
                                 "other finalizers: example.com/backup"]


def test_no_destroy_event_claims_a_release_that_failed(world, monkeypatch):
    world.add()
    up_then_ready(world)
    world.kube.delete(KEY)

    def conflict(raw, change):
        raise FinalizerConflict("could not update the finalizers of acme/prod-1: 5 conflicts")

    monkeypatch.setattr(world.kube, "edit_finalizers", conflict)
    assert world.reconcile().failed
    assert _destroyed(world) == []  # the stack is gone, the Cluster is not released: nothing says it is
    monkeypatch.undo()
    world.reconcile()
    assert _destroyed(world) == [f"stack {STACK} destroyed; the Cluster released"]


def test_a_failed_destroy_keeps_the_finalizer_reports_and_retries(world):
    world.add()
    up_then_ready(world)
    world.kube.delete(KEY)
    world.engine.fail("destroy", STACK, message="a dependency is still there")
    assert world.reconcile() == Outcome.retry()
    assert FINALIZER in world.kube.get(KEY)["metadata"]["finalizers"]
    assert world.condition("Ready") == ("False", "DestroyFailed")
    assert ("Warning", "DestroyFailed") in world.kube.events_of(KEY)
    assert world.reconcile() == Outcome.done()
    assert world.kube.get(KEY) is None


def test_a_deleted_cluster_that_never_ran_is_not_ours_to_hold(world):
    world.add()
    world.kube.delete(KEY)  # no finalizer: gone at once
    assert world.reconcile() == Outcome.done()
    assert world.engine.calls == [] and world.kube.revoked == [KEY]


def test_a_finalizer_removed_by_hand_leaves_a_stack_that_is_reported(world, caplog):
    world.add()
    up_then_ready(world)
    world.kube.patch(KEY, {"metadata": {"finalizers": None}})
    world.kube.delete(KEY)
    with caplog.at_level(logging.WARNING, logger="hubwright.reconcile"):
        assert world.reconcile() == Outcome.done()
    assert world.engine.count("destroy") == 0
    assert any("still has resources" in r.getMessage() and STACK in r.getMessage() for r in caplog.records)


def test_a_revocation_that_fails_is_retried(world):
    world.kube.revoke_errors.append(ConnectionError("the API server is away"))
    assert world.reconcile() == Outcome.retry()
    assert world.reconcile() == Outcome.done()
    assert world.kube.revoked == [KEY]


def test_a_stale_cached_copy_costs_one_conflict_then_the_finalizer_lands(world):
    world.add()
    # Someone else writes the Cluster after the cache saw it: the cached resourceVersion is stale.
    stale = world.cache.get(KEY)
    world.kube.patch(KEY, {"metadata": {"labels": {"team": "blue"}}})
    world.cache.apply("MODIFIED", stale)  # the watch has not delivered the label yet
    up_then_ready(world)
    assert world.kube.conflicts >= 1
    assert FINALIZER in world.kube.get(KEY)["metadata"]["finalizers"]
    assert world.kube.get(KEY)["metadata"]["labels"] == {"team": "blue"}  # kept: written over the live copy


# --------------------------------------------------------------------------- the queue and a stalled outcome

def test_the_queue_treats_a_stalled_outcome_like_done_after():
    queue = WorkQueue(Backoff(1, 10))
    workers = Workers(queue, lambda key: Outcome.done(), 1)
    workers.apply("acme/a", Outcome.stall("AccessDenied", 30))
    workers.apply("acme/b", Outcome.stall("InvalidSpec"))
    assert queue.failures("acme/a") == 0 and queue.scheduled == 1
    assert queue.next_due() == pytest.approx(30, abs=1)
