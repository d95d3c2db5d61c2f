"""RunnerEngine: the service's Engine with `--executor runners` (docs/service.md, "Runners").

    Reconciler ──► RunnerEngine.up ──► StackRunClient.create (Secret, then HubStackRun) ──► runner pods claim it
                        ▲                                                                          │
                        └──── the HubStackRun informer (one per kind, the Pipeline's Manager) ◄────┘ status

Each `up`, `destroy`, `preview` and `recover` is a HubStackRun beside its cluster (a transit stack's in the
service's namespace), its inputs in a Secret of the service's namespace. The calling thread waits on the run's
status as the informer delivers it (never polling), then maps the finished run back to what the local engine
returns (RunResult, or EngineError / StackLocked / PolicyViolation / RunCancelled), so everything above the
engine is unchanged. `applied` stays a local read (a small WorkerPool).

- **One unfinished run per stack.** Before it creates a run, the engine looks at the stack's runs: an unfinished
  one of the same operation and inputs is adopted (a new leader waits on the runs the old one left in flight
  instead of starting new ones); another unfinished one is waited out first. A `recover` (a new leader finding
  its predecessor's Running mark) creates nothing while a run of the stack is in flight: that run's lock is live,
  and its runner recovers the stack if it takes the run over.
- **Nobody took it.** A run still Pending (or whose runner's claim lapsed) at its deadline is marked Cancelled by
  the service, with a status write at the version it read: a runner's claim and this write cannot both win.
- **cancel(grace)**: the runs go on on the runners; the waiting threads raise RunCancelled at once (the next
  leader adopts the runs).
- **Retention**: a finished run's Secret goes once its result is read; the stack's finished runs beyond
  --keep-runs go (with a Secret left behind); once the informer synced, run Secrets whose run is gone are deleted
  too. A run's diff and log are never here: the runner stores them in the history store, the run keeps their
  reference (status.detail), and the service records the run there (automation/service/history.py).
"""
from __future__ import annotations

import json
import logging
import threading
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping

from automation.adapters.engine import Engine
from automation.adapters.engine.protocol import (EngineError, OnProgress, PolicyViolation, RunCancelled, RunLimits,
                                                 RunResult, StackLocked)
from automation.adapters.kube.calls import API_ERRORS, error_text
from automation.adapters.kube.informer import Raw, object_key
from automation.adapters.kube.stackruns import Api, StackRunClient, stackrun_source_of
from automation.kit.objects import Obj
from automation.kit.runtime import Manager
from automation.service.runs import current
from stacks import status as reasons
from stacks.inputs import StackProgramInputs
from stacks.runs.admission import refusal_hint
from stacks.runs.checks import refusal
from stacks.runs.claims import expired, expiry, view
from stacks.runs.history import beyond
from stacks.runs.model import (FINISHED, REFUSED, RESULT_KEY, Operation, StackRunSpec, StackRunStatus, documents, run_name,
                               secret_name, spec_of, status_of)
from stacks.transit import is_transit_stack
from stacks.times import rfc3339_seconds, parse_rfc3339

LOG = logging.getLogger("hubwright.executor")

REASONS: dict[str, type[EngineError]] = {StackLocked.reason: StackLocked, PolicyViolation.reason: PolicyViolation,
                                         RunCancelled.reason: RunCancelled}
WAIT_CAP_S = 30.0  # the longest a waiting thread sleeps without an event (it re-reads the store then)


class RunStore:
    """The informer's store of HubStackRuns, indexed by (namespace, stack); wakes the waiting threads on every
    change (`changed`, a Condition)."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.synced = threading.Event()
        self._objects: dict[str, Raw] = {}
        self._by_stack: dict[tuple[str, str], set[str]] = {}

    # -- the Store protocol (automation.adapters.kube.informer.Store)
    def get(self, key: str) -> Raw | None:
        with self.changed:
            return self._objects.get(key)

    def keys(self) -> list[str]:
        with self.changed:
            return list(self._objects)

    def apply(self, kind: str, raw: Raw) -> None:
        key = object_key(raw)
        with self.changed:
            old = self._objects.pop(key, None)
            if old is not None:
                self._by_stack.get(_stack_key(old), set()).discard(key)
            if kind != "DELETED":
                self._objects[key] = raw
                self._by_stack.setdefault(_stack_key(raw), set()).add(key)
            self.changed.notify_all()

    # -- reads
    def of_stack(self, namespace: str, stack: str) -> list[Raw]:
        """The runs of `stack` in `namespace`, oldest first."""
        with self.changed:
            found = [self._objects[k] for k in self._by_stack.get((namespace, stack), ()) if k in self._objects]
        return sorted(found, key=lambda raw: (_created(raw), object_key(raw)))

    def all(self) -> list[Raw]:
        with self.changed:
            return list(self._objects.values())


def _stack_key(raw: Raw) -> tuple[str, str]:
    obj = Obj(raw)
    return str(obj.namespace), str(obj.spec.get("stack"))


def _created(raw: Raw) -> str:
    return str(Obj(raw).creation_timestamp or "")


def lapsed(status: StackRunStatus, now: datetime) -> bool:
    """Unfinished, and no runner holds it now: still Pending, or its runner's claim expired."""
    return status.phase not in FINISHED and (status.phase == "Pending" or expired(status.claim, now))


def counts(runs: list[Raw], now: datetime) -> tuple[int, int]:
    """(pending, running): the runs waiting for a runner (Pending, or a lapsed claim), and those held by one."""
    pending = running = 0
    for raw in runs:
        status = status_of(raw)
        if lapsed(status, now):
            pending += 1
        elif status.phase == "Running":
            running += 1
    return pending, running


def result_of(raw: Raw, result: Mapping[str, Any]) -> RunResult:
    """A finished run as the local engine returns it (module docstring); raises for Failed, Cancelled, Refused.
    `result`: the run Secret's `result` (outputs and drifted resources)."""
    spec = spec_of(raw)
    operation: Operation = spec.operation if isinstance(spec, StackRunSpec) else "up"
    status = status_of(raw)
    name = f"{operation} {object_key(raw)}"
    message = status.message or status.summary
    run_id = str(Obj(raw).name)
    detail = status.detail.model_dump(mode="json") if status.detail is not None else None  # the runner stored it
    error: EngineError | None = None
    if status.phase == "Cancelled":
        error = RunCancelled(f"{name}: cancelled: {message}")
    elif status.phase == "Refused":
        error = EngineError(f"{name}: the runner refused it: {message}", reason=status.reason or REFUSED)
    elif status.phase == "Failed":
        reason = status.reason or (reasons.DESTROY_FAILED if operation == "destroy" else reasons.UPDATE_FAILED)
        error = REASONS.get(reason, EngineError)(message or f"{name} failed", reason=reason)
    if error is not None:
        error.run_id, error.detail = run_id, detail
        raise error
    return RunResult(operation, status.phase == "Succeeded", message=status.message,
                     outputs=dict(result.get("outputs") or {}), changes=dict(status.changes),
                     started=status.start_time or "", ended=status.end_time or "", permalink=status.permalink,
                     drifted=[str(d) for d in result.get("drifted") or []], run_id=run_id, detail=detail)


class RunnerEngine:
    """Engine (automation.adapters.engine) over HubStackRuns and a pool of runners (module docstring)."""

    def __init__(self, api: Api, *, local: Engine, namespace: str,
                 limits: RunLimits = RunLimits(), keep_runs: int = 10):
        self.runs = StackRunClient(api, namespace)  # the object port (KubeObjects over an ApiClient)
        self.api, self.local, self.namespace = api, local, namespace
        self.identity = "unattached"  # the replica whose term watches the runs (spec.requestedBy): attach()
        self.limits, self.keep_runs = limits, keep_runs
        self.store = RunStore()  # the term's (attach() makes a fresh one)
        self._lock = threading.Lock()
        self._epoch = 0  # cancel() moves it: every wait that began before returns RunCancelled
        self.created = 0  # runs this engine created (adopted ones are not counted)
        self.adopted = 0

    # ----------------------------------------------------------------- the runtime
    def attach(self, manager: Manager, *, identity: str) -> RunStore:
        """Watch HubStackRuns with `manager` (a leader term's: one informer per kind); `identity`: the replica
        (spec.requestedBy). Calls wait until it synced; then the run Secrets whose run is gone are deleted."""
        store = RunStore()
        with self._lock:
            old, self.store, self.identity = self.store, store, identity
        with old.changed:
            old.changed.notify_all()
        source = stackrun_source_of(self.api)
        if source is not None:  # over an object port (direct tests), the test hands the changes to store.apply
            manager.source(source, store)
        manager.on_synced(lambda: self._synced(store))
        return store

    def _synced(self, store: RunStore) -> bool:
        live = {secret_name(*object_key(raw).split("/", 1)) for raw in store.all()}
        try:
            for name in self.runs.orphan_secrets(live):
                LOG.info("deleting run Secret %s/%s: its run is gone", self.namespace, name)
                self.runs.delete_secret(name)
        except API_ERRORS as exc:
            LOG.warning("could not sweep the Secrets of deleted runs: %s", error_text(exc))
        with store.changed:
            store.synced.set()
            store.changed.notify_all()
        return True

    def counts(self) -> tuple[int, int]:
        """(pending, running) now: the gauges hubwright_stackruns_pending / _running."""
        return counts(self.store.all(), datetime.now(timezone.utc))

    # ----------------------------------------------------------------- the Engine protocol
    def up(self, inputs: StackProgramInputs, *, message: str, refresh: bool = False,
           on_progress: OnProgress | None = None) -> RunResult:
        return self._run("up", inputs.stack, inputs=inputs, message=message, refresh=refresh,
                         on_progress=on_progress)

    def destroy(self, stack: str, *, message: str) -> RunResult:
        return self._run("destroy", stack, message=message)

    def preview(self, inputs: StackProgramInputs) -> RunResult:
        return self._run("preview", inputs.stack, inputs=inputs, message="drift check")

    def recover(self, stack: str, *, live_runners: Mapping[str, str] | None = None) -> RunResult:
        # The runner that executes it knows the live claims itself (stacks.runs.claims.live_holders).
        return self._run("recover", stack, message="recover a killed run")

    def applied(self, stack: str) -> StackProgramInputs | None:
        return self.local.applied(stack)

    def forget(self, stack: str) -> str:
        """No run: the service reaches the state backend itself (as `applied` does)."""
        return self.local.forget(stack)

    def cancel(self, grace: float) -> None:
        """The waiting threads raise RunCancelled now; the runs go on on the runners (a next leader adopts them).
        The local pool only reads (`applied`): nothing of it to stop (the serve command closes it)."""
        with self._lock:
            self._epoch += 1
            store = self.store
        with store.changed:
            store.changed.notify_all()

    # ----------------------------------------------------------------- runs
    def where(self, stack: str) -> tuple[str, str | None]:
        """The namespace a stack's runs live in, and its cluster: `<namespace>.<cluster>`, or a transit stack's
        (in the service's namespace, no cluster)."""
        if is_transit_stack(stack):
            return self.namespace, None
        namespace, _, cluster = stack.partition(".")
        return namespace, cluster

    def _run(self, operation: Operation, stack: str, *, inputs: StackProgramInputs | None = None, message: str,
             refresh: bool = False, on_progress: OnProgress | None = None) -> RunResult:
        with self._lock:
            epoch, store = self._epoch, self.store
        what = f"{operation} {stack}"
        self._wait_synced(store, epoch, what)
        namespace, cluster = self.where(stack)
        digest = inputs.digest() if inputs is not None else None
        key = None
        try:
            while key is None:
                unfinished = [raw for raw in store.of_stack(namespace, stack)
                              if status_of(raw).phase not in FINISHED and self._genuine(raw, what)]
                same = next((raw for raw in unfinished if _same(raw, operation, digest, refresh)), None)
                if same is not None:
                    key = object_key(same)
                    self.adopted += 1
                    LOG.info("%s: adopting run %s, in flight since %s", what, key, _created(same))
                    raw = self._wait(store, key, same, epoch, what, on_progress)
                elif unfinished and operation == "recover":
                    return self._in_flight(unfinished[0])
                elif unfinished:
                    LOG.info("%s: waiting for run %s of the stack to finish first", what, object_key(unfinished[0]))
                    self._wait(store, object_key(unfinished[0]), unfinished[0], epoch, what)
                else:
                    created = self._create(operation, stack, namespace, cluster, inputs, message, refresh)
                    key = object_key(created)
                    raw = self._wait(store, key, created, epoch, what, on_progress)
            result = self._result(raw)
            self._consumed(raw)
            return result_of(raw, result)
        except API_ERRORS as exc:  # the API server's own words (an admission policy's refusal), and what to do
            said = error_text(exc)
            raise EngineError(f"{what}: a call for its HubStackRun failed: {said}{refusal_hint(said)}") from exc
        finally:
            if key is not None:
                self._retain(store, namespace, stack)

    def _genuine(self, raw: Raw, what: str) -> bool:
        """Whether a run is one this service made (stacks.runs.checks.refusal: never edited, and its Secret, in
        the service's namespace, names it): only such a run is adopted or waited for. Another (forged where the
        admission policy is missing) is left to the runners, which refuse it; its status never becomes a result."""
        spec = spec_of(raw)
        why = spec if isinstance(spec, str) else refusal(
            object_key(raw), Obj(raw).generation, spec, self.runs.secret(spec.inputs_secret),
            service_namespace=self.namespace)
        if why is not None:
            LOG.warning("%s: ignoring run %s, not one of the service's: %s", what, object_key(raw), why)
        return why is None

    @staticmethod
    def _in_flight(raw: Raw) -> RunResult:
        """recover while a run of the stack is in flight (a new leader finds its predecessor's Running mark): the
        lock is that run's, live; the runner that holds the run (or takes it over) recovers the stack itself. The
        caller's next up adopts the run instead of starting another."""
        status = status_of(raw)
        holder = status.claim.holder if status.claim is not None else "no runner yet"
        return RunResult("recover", True, message=f"run {object_key(raw)} of the stack is in flight ({status.phase}, "
                         f"{holder}): its runner recovers the stack; nothing to recover here")

    def _wait_synced(self, store: RunStore, epoch: int, what: str) -> None:
        with store.changed:
            while not store.synced.is_set():
                if self._epoch != epoch or store is not self.store:
                    raise RunCancelled(f"{what}: not started, the service stopped leading or is stopping")
                store.changed.wait(WAIT_CAP_S)

    def _create(self, operation: Operation, stack: str, namespace: str, cluster: str | None,
                inputs: StackProgramInputs | None, message: str, refresh: bool) -> Raw:
        now = datetime.now(timezone.utc)
        begun = current()  # the gate's run: the HubStackRun is named as its history entry, and says its cause
        ours = begun is not None and begun.stack == stack and begun.operation == operation
        name = begun.id if begun is not None and ours else run_name(stack, operation, now, uuid.uuid4().hex[:8])
        key = f"{namespace}/{name}"
        run, body = documents(operation=operation, namespace=namespace, name=name, stack=stack, cluster=cluster,
                              cause=begun.cause if begun is not None and ours else None,
                              inputs_config=inputs.to_config() if inputs is not None else None,
                              digest=inputs.digest() if inputs is not None else None, message=message,
                              refresh=refresh, deadline=now + timedelta(seconds=self.limits.timeout),
                              requested_by=self.identity, service_namespace=self.namespace)
        created = self.runs.create(run, body)
        self.created += 1
        LOG.info("%s: created run %s", f"{operation} {stack}", key)
        return created

    def _wait(self, store: RunStore, key: str, raw: Raw, epoch: int, what: str,
              on_progress: OnProgress | None = None) -> Raw:
        """Until run `key` finished (its last version); `raw`: the version known before the informer has one.
        A run nobody holds at its deadline is marked Cancelled here."""
        seen, progress = False, None
        while True:
            with store.changed:
                while True:
                    if self._epoch != epoch or store is not self.store:
                        raise RunCancelled(f"{what}: the service stopped waiting (it stopped leading or is "
                                           f"stopping); run {key} goes on, the next leader adopts it")
                    current = store.get(key)
                    if current is None and seen:
                        raise EngineError(f"{what}: run {key} was deleted before it finished")
                    if current is not None:
                        seen, raw = True, current
                    status = status_of(raw)
                    if status.phase in FINISHED:
                        return raw
                    now = datetime.now(timezone.utc)
                    due = _abandon_at(raw, status)
                    if (status.progress is not None and status.progress != progress and on_progress is not None) \
                            or (due is not None and now >= due):
                        break
                    store.changed.wait(min(WAIT_CAP_S, max(0.05, (due - now).total_seconds())) if due else WAIT_CAP_S)
            if status.progress is not None and status.progress != progress and on_progress is not None:
                progress = status.progress
                try:
                    on_progress(progress.done, progress.planned)
                except Exception:  # noqa: BLE001 - progress is a report: it never fails the run
                    LOG.exception("%s: reporting progress failed", what)
            if due is not None and now >= due:
                self._abandon(store, raw, status, what)

    def _abandon(self, store: RunStore, raw: Raw, status: StackRunStatus, what: str) -> None:
        """Mark a run no runner holds past its deadline Cancelled, at the version read (a claim written meanwhile
        wins: then this write fails and the wait goes on)."""
        deadline = Obj(raw).spec.get("deadline")
        held = f"its runner {status.claim.holder}'s claim lapsed" if status.claim else "no runner took it"
        message = f"{held} by its deadline {deadline}: are the runners up (`python -m automation runner`)?"
        done = status.model_copy(update={"phase": "Cancelled", "reason": RunCancelled.reason, "message": message,
                                         "end_time": rfc3339_seconds(datetime.now(timezone.utc)), "progress": None})
        written = self.runs.replace_status(raw, done)
        if written is not None:
            LOG.warning("%s: run %s cancelled: %s", what, object_key(raw), message)
            store.apply("MODIFIED", written)  # what the informer delivers next (then a replay it drops)

    def _result(self, raw: Raw) -> dict[str, Any]:
        """The run Secret's `result` (outputs, drifted): {} when there is none."""
        phase = status_of(raw).phase
        if phase not in ("Succeeded", "Drifted"):
            return {}
        namespace, _, name = object_key(raw).partition("/")
        secret = self.runs.secret(secret_name(namespace, name))
        text = ((secret or {}).get("data") or {}).get(RESULT_KEY)
        try:
            payload = json.loads(text) if text else {}
        except json.JSONDecodeError:
            LOG.warning("run %s: its Secret's result does not parse", object_key(raw))
            payload = {}
        return payload if isinstance(payload, dict) else {}

    def _consumed(self, raw: Raw) -> None:
        """A finished run's Secret, once its result is read: nothing reads it again (a runner takes no finished run,
        a next leader adopts unfinished ones only), so it goes now, not with the run (--keep-runs): the runs a stack
        keeps hold no inputs in etcd (bench/history_etcd.py). One that stays (the API away) goes with its run."""
        namespace, _, name = object_key(raw).partition("/")
        try:
            self.runs.delete_secret(secret_name(namespace, name))
        except API_ERRORS as exc:
            LOG.info("run %s: its Secret stays until the run goes: %s", object_key(raw), error_text(exc))

    def _retain(self, store: RunStore, namespace: str, stack: str) -> None:
        """Delete the stack's finished runs beyond --keep-runs, each with its Secret."""
        for old in beyond([view(raw) for raw in store.of_stack(namespace, stack)], self.keep_runs):
            ns, _, name = old.key.partition("/")
            try:
                self.runs.delete(old.key, secret_name(ns, name))
            except API_ERRORS as exc:
                LOG.warning("could not delete the old run %s: %s", old.key, error_text(exc))


def _same(raw: Raw, operation: str, digest: str | None, refresh: bool) -> bool:
    """Whether an unfinished run does what this call asks: the same operation on the same inputs."""
    spec = Obj(raw).spec
    return spec.get("operation") == operation and spec.get("inputsDigest") == digest \
        and bool(spec.get("refresh")) == refresh


def _abandon_at(raw: Raw, status: StackRunStatus) -> datetime | None:
    """When the service gives a run up: at its deadline while no runner holds it (Pending, or a lapsed claim:
    the later of the deadline and the claim's expiry). None: its deadline does not parse (a runner refuses it)."""
    deadline = parse_rfc3339(Obj(raw).spec.get("deadline"))
    if deadline is None:
        return None
    if status.phase == "Running" and status.claim is not None:
        until = expiry(status.claim)
        return max(deadline, until) if until is not None else deadline
    return deadline

