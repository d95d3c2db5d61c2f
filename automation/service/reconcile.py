"""Reconcile one cluster key: level-triggered, safe to call any number of times.

It never trusts the event that queued the key, only the current state:

    cached Cluster ──► desired StackInputs (mapper.Desired: resolve_all over the cache)
         │                    │ digest()
         ▼                    ▼
    status.inputsHash  ==  digest  and the last up succeeded?  ── yes ──► nothing to run
         │ no                                                             (drift check when due)
         ▼
    finalizer · recover a killed run · refuse a move · new install? · engine.up · status + Events

Deletion: the finalizer `hubwright.io/stack` holds a deleted Cluster until
`engine.destroy` succeeded; a failed destroy keeps it, says why, and retries.
Errors, wherever they are raised on a path, become a condition and an Event by their class
(stacks.errors; `_report` is the one place that maps them):
  InvalidSpec          Stalled, no engine run, until an input changes
  NeedsAttention       Stalled, no engine run, looked at again every --stalled-recheck
  StackLocked          requeued after --lock-retry, not counted as a failure
  Failure (transient)  Reconciling, retried with backoff
The annotation hubwright.io/reconcile-request (any new value) runs an `up` with refresh now.
Drift: a jittered `preview` with refresh; DriftDetected names what changed; --drift-policy says
whether an `up` (with refresh) corrects it or the condition only reports it.
"""
from __future__ import annotations

import hashlib
import logging
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Literal, Protocol

from kubernetes import client
from kubernetes.client.rest import ApiException

from automation.adapters.kube.agent import revoke_agent
from automation.adapters.engine import Engine, EngineError, RunCancelled, RunResult, StackLocked
from automation.adapters.kube.status import (PROGRESS_EVERY, EventRecorder, ProgressReport, StatusWriter, conditions,
                                        outputs_from, parse_time, rfc3339, with_drift)
from automation.adapters.kube.informer import Raw, object_key
from automation.adapters.logs import FIELDS
from automation.service.cache import Cache
from automation.service.snapshot import DesiredView
from automation.service.queue import Outcome
from stacks import status as reasons
from stacks.errors import Failure, InvalidSpec, NeedsAttention
from stacks.inputs import StackInputs
from stacks.names import CLUSTERS, FINALIZER, GROUP, RECONCILE_REQUEST_ANNOTATION, VERSION, stack_name
from stacks.status import ClusterStatus, applied, LastUpdate, MeshJoin, Recovery, RunProgress, SharedIngressStatus

LOG = logging.getLogger("hubwright.reconcile")
RUN_LOG = logging.getLogger("hubwright.run")  # one line per engine run, and per refusal (automation/adapters/logs.py)
STUCK_LOCK_RETRIES = 3  # StackLocked this many times in a row: ask the engine to recover a stale lock

# A check before every up: raises InvalidSpec (refused until the input changes), NeedsAttention (refused, looked at
# again every --stalled-recheck) or a transient Failure (retried with backoff).
Guard = Callable[[StackInputs | None, StackInputs], None]
Audit = Callable[[StackInputs, str], Any]


class Metrics(Protocol):
    def observe_run(self, operation: str, result: str, seconds: float) -> None: ...

    def run_failed(self, operation: str, reason: str) -> None: ...

    def refused(self, reason: str) -> None: ...


@dataclass(frozen=True)
class ReconcileOptions:
    drift_interval: float = 3600.0  # seconds between drift checks of a stack; 0 turns them off
    drift_jitter: float = 0.25  # each stack's interval is stretched by up to this fraction (stable per stack)
    lock_retry: float = 15.0  # StackLocked: look again after about this long
    stalled_recheck: float = 600.0  # NeedsAttention: look again after this long (an input change: at once)
    drift_policy: Literal["correct", "report"] = "correct"  # on drift: an up with refresh, or the condition only


def stack_of(raw: Raw, status: ClusterStatus) -> str:
    """The cluster's stack name: as recorded, else as stacks.names.stack_name makes it."""
    meta = raw.get("metadata") or {}
    return status.stack or stack_name(meta.get("namespace"), str(meta.get("name")))


def _succeeded(result: RunResult, message: str, started: float, ended: float,
               progress: RunProgress | None = None) -> LastUpdate:
    """status.lastUpdate of a run that succeeded."""
    return LastUpdate(operation=result.operation, result="Succeeded", message=message, start_time=rfc3339(started),
                      end_time=rfc3339(ended), permalink=result.permalink, changes=result.changes, progress=progress)


def _jitter(key: str) -> float:
    """A stable number in [0, 1) per key, so restarts do not move a stack's drift schedule."""
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) / 0x100000000


def up_to_date(status: ClusterStatus, digest: str) -> bool:
    return applied(status.inputs_hash, status.last_update, digest)


class Reconciler:
    def __init__(self, *, desired: DesiredView, cache: Cache, engine: Engine, api_client: client.ApiClient,
                 status: StatusWriter | None = None, events: EventRecorder | None = None,
                 options: ReconcileOptions = ReconcileOptions(), guards: Iterable[Guard] = (),
                 audit: Audit | None = None, metrics: Metrics | None = None,
                 clock: Callable[[], float] = time.time):
        self.desired = desired
        self.cache = cache
        self.engine = engine
        self.status = status or StatusWriter(api_client)
        self.events = events or EventRecorder(api_client)
        self.options = options
        self.guards = tuple(guards)
        self.audit = audit
        self.metrics = metrics
        self.clock = clock
        self.progress_every = PROGRESS_EVERY
        self._api_client = api_client
        self._custom = client.CustomObjectsApi(api_client)
        self._side_pool: ThreadPoolExecutor | None = None
        self._side_lock = threading.Lock()
        self._released: set[str] = set()  # destroyed and let go by us: no orphan check when they vanish
        self._locked_streak: dict[str, int] = {}  # stack -> StackLocked answers in a row
        self._halt_lock = threading.Lock()
        self._halted = False  # halt(): no engine run starts any more
        self._active = 0  # engine calls in progress

    def _side(self) -> ThreadPoolExecutor:
        """A few threads for API writes that can go alongside another one."""
        with self._side_lock:
            if self._side_pool is None:
                self._side_pool = ThreadPoolExecutor(4, thread_name_prefix="reconcile-side")
            return self._side_pool

    def close(self) -> None:
        """Wait for the writes still in flight (status reports, side writes)."""
        with self._side_lock:
            pool, self._side_pool = self._side_pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        self.status.close()

    # ------------------------------------------------------------------ entry points

    def __call__(self, key: str) -> Outcome:
        raw = self.cache.get(key)
        if raw is None:
            return self._gone(key)
        status = self.status.current(key, raw)
        deleting = bool((raw.get("metadata") or {}).get("deletionTimestamp"))
        try:
            if deleting:
                return self._delete(key, raw, status)
            desired = self.desired.inputs(key)
            if desired is None and self.desired.registered_only(key):  # no stack: its status only
                return self._registered(raw, status)
            if desired is None:  # not resolved yet (the cache moved on): the mapper queues it again
                return Outcome.done()
            if isinstance(desired, InvalidSpec):
                return self._invalid(raw, status, desired)
            return self._apply(key, raw, status, desired)
        except Failure as exc:  # raised outside a run's own handling (applied(), a lookup): reported all the same
            current = self.status.current(key, raw)
            return self._report(raw, current, "destroy" if deleting else "up", exc, self.clock())

    def triage(self, key: str, raw: Raw, desired: StackInputs | InvalidSpec | None) -> float | None:
        """For a cluster seen for the first time: seconds until it needs a reconcile (0: now; None: never)."""
        meta = raw.get("metadata") or {}
        status = self.status.current(key, raw)
        if meta.get("deletionTimestamp"):
            return 0 if FINALIZER in (meta.get("finalizers") or []) else None
        if desired is None:
            if self.desired.registered_only(key):  # a status left by a refusal, or by an older spec: heal it
                return 0 if self._registered_status(status, meta.get("generation")) != status else None
            return None
        if status.observed_generation != meta.get("generation") or _requested(raw, status) is not None:
            return 0
        if self._mesh_join(key, status) != status.mesh_join or self._routed(key, status) != status.shared_ingress:
            return 0
        if isinstance(desired, InvalidSpec):  # a status left by an older service or input: recomputed
            return None if self._refused_status(raw, status, desired) == status else 0
        if not up_to_date(status, desired.digest()) or _ready(status) != "True":
            return 0
        return self._drift_due_in(key, status)

    # ------------------------------------------------------------------ paths

    def _apply(self, key: str, raw: Raw, status: ClusterStatus, desired: StackInputs) -> Outcome:
        generation = (raw.get("metadata") or {}).get("generation")
        digest = desired.digest()
        requested = _requested(raw, status)
        if requested is not None:
            return self._run_up(key, raw, status, desired, refresh=True,
                                why=f"reconcile requested ({RECONCILE_REQUEST_ANNOTATION}={requested}): up with refresh")
        if up_to_date(status, digest):
            if status.observed_generation != generation or _ready(status) != "True" \
                    or self._mesh_join(key, status) != status.mesh_join \
                    or self._routed(key, status) != status.shared_ingress:
                self._write(raw, status, self._ready_status(status, generation, desired, status.last_update))
            due = self._drift_due_in(key, status)
            if due is not None and due <= 0:
                return self._drift_check(key, raw, self.status.current(key, raw), desired)
            return Outcome.done(due)
        return self._run_up(key, raw, status, desired, why=self._why(status, digest, generation))

    def _run_up(self, key: str, raw: Raw, status: ClusterStatus, desired: StackInputs, *, why: str,
                refresh: bool = False) -> Outcome:
        generation = (raw.get("metadata") or {}).get("generation")
        status = self._recover_if_killed(raw, status, desired.stack)
        if status is None:
            return Outcome.retry()
        request = _annotation(raw)
        if request is not None and request != status.last_handled_reconcile_request:  # handled, whatever happens
            status = status.model_copy(update={"last_handled_reconcile_request": request})
        try:
            applied = self.engine.applied(desired.stack)
            for guard in self.guards:
                guard(applied, desired)
        except InvalidSpec as exc:
            return self._invalid(raw, status, exc)
        except Failure as exc:  # a preflight that may pass later (the installer's NLB not there yet), or a lookup
            return self._report(raw, self._placed(key, status), "up", exc, self.clock(),
                                note="preflight, nothing ran: ")

        started = self.clock()
        running = status.model_copy(update={
            "observed_generation": generation, "stack": desired.stack, "mesh_join": self._mesh_join(key, status),
            "shared_ingress": self._routed(key, status),
            "account": desired.cluster.account_id, "region": desired.cluster.region,
            "last_update": LastUpdate(operation="up", result="Running", message=why, start_time=rfc3339(started)),
            "conditions": conditions("progressing", reasons.PROGRESSING, why, generation=generation,
                                     previous=status.conditions, now=rfc3339(started)),
        })
        # Both land before the engine starts: the finalizer (so a delete cannot skip the destroy) and the
        # Running mark (so a killed run is recognised); written side by side, one round trip.
        finalizer = None
        if FINALIZER not in ((raw.get("metadata") or {}).get("finalizers") or []):
            finalizer = self._side().submit(self._ensure_finalizer, raw)
        wrote = self._write(raw, status, running)
        if (finalizer is not None and not finalizer.result()) or not wrote:
            return Outcome.done()  # the Cluster is gone
        self.events.event(raw, "Normal", "UpdateStarted", why)
        if self.audit is not None:
            self.audit(desired, "up")
        progress = ProgressReport(self.status, raw, running, every=self.progress_every)
        try:
            old_link = applied.private_link if applied is not None else None
            if old_link is not None and desired.private_link is not None \
                    and old_link.infra_id != desired.private_link.infra_id:
                note = (f"new install (infraID {old_link.infra_id} -> {desired.private_link.infra_id}): "
                        "removing the old install's PrivateLink first")
                self.events.event(raw, "Normal", "NewInstall", note)
                self.run_engine("up", lambda: self.engine.up(desired.model_copy(update={"private_link": None}),
                                                         message=f"{why}; {note}"), stack=desired.stack, cluster=key)
            result = self.run_engine("up", lambda: self.engine.up(desired, message=why, refresh=refresh,
                                                                  on_progress=progress),
                                     stack=desired.stack, cluster=key)
        except StackLocked as exc:
            return self._locked(raw, running, status, str(exc))
        except Failure as exc:  # over the last progress written (the Failed lastUpdate drops it)
            return self._report(raw, progress.status, "up", exc, started)
        ended = self.clock()
        running = progress.status
        done = self._ready_status(running, generation, desired, _succeeded(
            result, f"{why}: {result.message}".rstrip(": "), started, ended, progress.latest), outputs=result.outputs,
            checked=ended)
        if refresh and (drift := done.condition(reasons.DRIFT_CONDITION)) is not None and drift.status == "True":
            done = done.model_copy(update={"conditions": with_drift(
                done.conditions, False, reasons.DRIFT_CORRECTED, f"corrected by the update at {rfc3339(ended)}",
                generation=generation, now=rfc3339(ended))})
        self.status.write_later(raw, done, previous=running)
        self._locked_streak.pop(desired.stack, None)
        self.events.event(raw, "Normal", "UpdateSucceeded", f"{why}: {_summary(result)}")
        return Outcome.done(self._drift_due_in(key, done))

    def _delete(self, key: str, raw: Raw, status: ClusterStatus) -> Outcome:
        meta = raw.get("metadata") or {}
        if FINALIZER not in (meta.get("finalizers") or []):
            return Outcome.done()  # not ours (never applied, or already destroyed)
        stack = stack_of(raw, status)
        status = self._recover_if_killed(raw, status, stack)
        if status is None:
            return Outcome.retry()
        why = "the Cluster was deleted: destroying its stack"
        started = self.clock()
        generation = meta.get("generation")
        running = status.model_copy(update={
            "last_update": LastUpdate(operation="destroy", result="Running", message=why,
                                      start_time=rfc3339(started)),
            "conditions": conditions("progressing", reasons.DESTROYING, why, generation=generation,
                                     previous=status.conditions, now=rfc3339(started)),
        })
        if not self._write(raw, status, running):
            return Outcome.done()
        self.events.event(raw, "Normal", "DestroyStarted", why)
        try:
            if self.audit is not None:
                applied = self.engine.applied(stack)
                if applied is not None:
                    self.audit(applied, "destroy")
            result = self.run_engine("destroy", lambda: self.engine.destroy(stack, message=why), stack=stack,
                                     cluster=key)
        except StackLocked as exc:
            return self._locked(raw, running, status, str(exc))
        except Failure as exc:
            return self._report(raw, running, "destroy", exc, started)
        finished = running.model_copy(update={
            "inputs_hash": None, "outputs": None,
            "last_update": _succeeded(result, result.message or why, started, self.clock())})
        self._write(raw, running, finished)
        self.events.event(raw, "Normal", "DestroySucceeded", f"stack {stack} destroyed; releasing the Cluster")
        if self._remove_finalizer(raw):
            self.status.forget(key)
            self._released.add(key)
        return Outcome.done()

    def _gone(self, key: str) -> Outcome:
        """The Cluster left the cache: its facts agent loses its hub identity (so its tokens), and when our
        finalizer was removed by hand, a stack that still has resources is reported."""
        self.status.forget(key)
        namespace, _, name = key.partition("/")
        try:
            revoke_agent(self._api_client, namespace, name)
        except Exception as exc:  # noqa: BLE001 - the API server may be away: try again
            LOG.warning("%s: could not revoke the facts agent's identity (%s); retrying", key, exc)
            return Outcome.retry()
        if key in self._released:  # we destroyed its stack and let it go
            self._released.discard(key)
            return Outcome.done()
        stack = stack_name(namespace, name)
        try:
            applied = self.engine.applied(stack)
        except Exception:  # noqa: BLE001 - best effort: the object is gone either way
            applied = None
        if applied is not None:
            LOG.warning("Cluster %s is gone but stack %s still has resources: its finalizer %s was removed "
                        "by hand. Destroy the stack yourself (pulumi destroy -s %s) or re-create the Cluster "
                        "and delete it.", key, stack, FINALIZER, stack)
        return Outcome.done()

    def _invalid(self, raw: Raw, status: ClusterStatus, exc: InvalidSpec) -> Outcome:
        new = self._refused_status(raw, status, exc)
        if new == status:
            return Outcome.done()
        stalled = status.condition("Stalled")
        told = stalled is not None and stalled.status == "True" and stalled.reason == exc.reason \
            and stalled.message == str(exc)
        if self._write(raw, status, new) and not told:  # an Event (and a run line) per new refusal, not per rewrite
            self.events.event(raw, "Warning", exc.reason, str(exc))
            self._refused(raw, "up", exc.reason, str(exc))
        return Outcome.done()

    def _refused_status(self, raw: Raw, status: ClusterStatus, exc: InvalidSpec) -> ClusterStatus:
        """What a refused cluster's status says, every field recomputed from the input (equal to `status` when it
        says so already: the transition times of conditions that did not flip are kept)."""
        generation = (raw.get("metadata") or {}).get("generation")
        key = object_key(raw)
        return self._placed(key, status).model_copy(update={  # account and region: facts of the input
            "observed_generation": generation, "mesh_join": self._mesh_join(key, status),
            "last_handled_reconcile_request": _annotation(raw) or status.last_handled_reconcile_request,
            "shared_ingress": self._routed(key, status),
            "conditions": conditions("stalled", exc.reason, str(exc), generation=generation,
                                     previous=status.conditions, now=rfc3339(self.clock()))})

    def _placed(self, key: str, status: ClusterStatus) -> ClusterStatus:
        """`status` with the account and region the cluster's input gives (mapper.Desired.placed_in), where known."""
        account, region = self.desired.placed_in(key)
        return status.model_copy(update={"account": account or status.account, "region": region or status.region})

    def _registered(self, raw: Raw, status: ClusterStatus) -> Outcome:
        """A registered-only cluster (no AWS part): no stack, so Ready with nothing to run; whatever refusal it
        carried (its HubConfig gone, then back) is recomputed away, and observedGeneration follows the spec."""
        new = self._registered_status(status, (raw.get("metadata") or {}).get("generation"))
        if new != status:
            self._write(raw, status, new)
        return Outcome.done()

    def _registered_status(self, status: ClusterStatus, generation: int | None) -> ClusterStatus:
        """What a registered-only cluster's status says (equal to `status` when it says so already: the
        transition times of conditions that did not flip are kept)."""
        return status.model_copy(update={
            "observed_generation": generation, "account": None, "region": None,
            "conditions": conditions("ready", reasons.REGISTERED, "registered only (no accountID, infraID, apiURL "
                                     "or network): no stack to run", generation=generation,
                                     previous=status.conditions, now=rfc3339(self.clock()))})

    # ------------------------------------------------------------------ drift

    def _drift_due_in(self, key: str, status: ClusterStatus) -> float | None:
        if self.options.drift_interval <= 0:
            return None
        last = parse_time(status.last_drift_check) or parse_time(
            status.last_update.end_time if status.last_update else None)
        if last is None:
            return 0
        interval = self.options.drift_interval * (1 + self.options.drift_jitter * _jitter(key))
        return max(0.0, last + interval - self.clock())

    def _drift_check(self, key: str, raw: Raw, status: ClusterStatus, desired: StackInputs) -> Outcome:
        """`preview` with refresh (no update, no history entry): DriftDetected says what the cloud changed; with
        --drift-policy correct an `up` with refresh puts it back, with report the condition only tells."""
        try:
            result = self.run_engine("preview", lambda: self.engine.preview(desired), stack=desired.stack,
                                     cluster=key)
        except StackLocked:
            return Outcome.done(self.options.lock_retry)
        except EngineError as exc:
            self.events.event(raw, "Warning", "DriftCheckFailed", str(exc))
            checked = status.model_copy(update={"last_drift_check": rfc3339(self.clock())})
            self._write(raw, status, checked)
            return Outcome.done(self._drift_due_in(key, checked))
        now = self.clock()
        generation = (raw.get("metadata") or {}).get("generation")
        before = status.condition(reasons.DRIFT_CONDITION)
        if result.ok:
            update: dict[str, Any] = {"last_drift_check": rfc3339(now)}
            if before is None or before.status != "False":
                update["conditions"] = with_drift(status.conditions, False, reasons.NO_DRIFT,
                                                  f"the cloud matched the stack at {rfc3339(now)}",
                                                  generation=generation, now=rfc3339(now))
            checked = status.model_copy(update=update)
            self._write(raw, status, checked)
            return Outcome.done(self._drift_due_in(key, checked))
        what = ", ".join(result.drifted) or _changes(result.changes) or result.message or "changes expected"
        found = f"{len(result.drifted) or 'some'} resource(s) differ from the cloud: {what}"
        correct = self.options.drift_policy == "correct"
        checked = status.model_copy(update={"last_drift_check": rfc3339(now), "conditions": with_drift(
            status.conditions, True, reasons.DRIFT_DETECTED,
            found + ("; correcting it (--drift-policy correct)" if correct else
                     f"; not corrected (--drift-policy report): annotate {RECONCILE_REQUEST_ANNOTATION} to correct it"),
            generation=generation, now=rfc3339(now))})
        self.events.event(raw, "Warning", reasons.DRIFT_DETECTED, found)
        self._write(raw, status, checked)
        if not correct:
            return Outcome.done(self._drift_due_in(key, checked))
        return self._run_up(key, raw, checked, desired, why=f"correcting drift ({found})", refresh=True)

    # ------------------------------------------------------------------ helpers

    def _why(self, status: ClusterStatus, digest: str, generation: int | None) -> str:
        last = status.last_update
        if status.inputs_hash is None:
            return "first update of the stack" if last is None else f"retrying: {last.message}"[:512]
        if status.inputs_hash != digest:
            spec = f"generation {generation}" if generation != status.observed_generation else "the fleet"
            return f"inputs changed ({spec}): {status.inputs_hash[:8]} -> {digest[:8]}"
        if last is not None and last.result == "Failed":
            return f"retrying after a failed {last.operation}"
        if last is not None and last.result == "Running":
            return "re-running an update that did not finish"
        return "bringing the stack up to date"

    def _recover_if_killed(self, raw: Raw, status: ClusterStatus, stack: str) -> ClusterStatus | None:
        """Clean up what a killed run left, and say so on the cluster.

        A Running last update that nobody runs any more is a killed run of ours. A lock that outlives
        a few lock retries may be one too (left before the Running mark existed, or by a killed CLI):
        engine.recover removes only a stale lock of this service, never a live one.
        """
        last = status.last_update
        stuck = self._locked_streak.get(stack, 0) >= STUCK_LOCK_RETRIES
        if not stuck and (last is None or last.result != "Running"):
            return status
        try:
            result = self.run_engine("recover", lambda: self.engine.recover(stack), stack=stack,
                                     cluster=object_key(raw))
        except EngineError as exc:
            LOG.warning("%s: recovering the stack failed: %s", stack, exc)
            self.events.event(raw, "Warning", "RecoveryFailed", str(exc))
            return None
        self._locked_streak.pop(stack, None)
        if last is not None and last.result == "Running":
            note = (f"the {last.operation} started {last.start_time or '?'} did not finish (service restarted "
                    f"or killed); recovered: {result.message or 'ok'}")
            last = last.model_copy(update={"result": "Failed", "message": f"{last.message}; did not finish",
                                           "end_time": rfc3339(self.clock())})
        else:
            note = f"the stack stayed locked through {STUCK_LOCK_RETRIES} retries; recovered: {result.message or 'ok'}"
        recovered = status.model_copy(update={
            "last_recovery": Recovery(time=rfc3339(self.clock()), message=note), "last_update": last})
        self._write(raw, status, recovered)
        self.events.event(raw, "Warning", "Recovered", note)
        return recovered

    def _locked(self, raw: Raw, running: ClusterStatus, before: ClusterStatus, message: str) -> Outcome:
        generation = (raw.get("metadata") or {}).get("generation")
        stack = stack_of(raw, running)
        self._locked_streak[stack] = self._locked_streak.get(stack, 0) + 1
        blocked = running.model_copy(update={
            "last_update": before.last_update,  # nothing ran
            "conditions": conditions("progressing", reasons.STACK_LOCKED,
                                     f"another update holds the stack; trying again shortly ({message})",
                                     generation=generation, previous=running.conditions,
                                     now=rfc3339(self.clock()))})
        self.status.write_later(raw, blocked, previous=running)
        self.events.event(raw, "Normal", reasons.STACK_LOCKED, message)
        return Outcome.done(self.options.lock_retry * random.uniform(0.5, 1.5))

    def _report(self, raw: Raw, running: ClusterStatus, operation: str, exc: Failure, started: float, *,
                note: str = "") -> Outcome:
        """The one place an error's class (stacks.errors) becomes a condition, an Event and what comes next:
        NeedsAttention stalls (looked at again every --stalled-recheck), StackLocked waits, any other Failure
        retries with backoff. The failed operation is recorded, so the next pass runs it again."""
        if isinstance(exc, StackLocked):
            return self._locked(raw, running, running, str(exc))
        generation = (raw.get("metadata") or {}).get("generation")
        now = self.clock()
        stalled = isinstance(exc, NeedsAttention)
        message = f"{note}{exc}"
        # A run's failure says which run: an engine error without a reason of its own is UpdateFailed/DestroyFailed.
        reason = reasons.DESTROY_FAILED if operation == "destroy" and exc.reason == reasons.UPDATE_FAILED else exc.reason
        then = (f"needs attention; looked at again in {self.options.stalled_recheck:g}s, or at once when an input "
                f"changes or {RECONCILE_REQUEST_ANNOTATION} is set") if stalled else "retrying with backoff"
        failed = running.model_copy(update={
            "last_update": LastUpdate(operation=operation, result="Failed", message=message[:4096],
                                      start_time=rfc3339(started), end_time=rfc3339(now)),
            "conditions": conditions("stalled" if stalled else "retrying", reason, f"{message[:2048]} ({then})",
                                     generation=generation, previous=running.conditions, now=rfc3339(now))})
        LOG.warning("%s: %s failed (%s): %s; %s", object_key(raw), operation, reason, message[:2048], then)
        if stalled:
            self._refused(raw, operation, reason, message)
        self.status.write_later(raw, failed, previous=running)
        self.events.event(raw, "Warning", reason, message)
        return Outcome.done(self.options.stalled_recheck) if stalled else Outcome.retry()

    def _mesh_join(self, key: str, status: ClusterStatus) -> MeshJoin | None:
        """The mesh join stamp the cluster should carry (written once; stacks.mesh orders members by it)."""
        current = status.mesh_join.model_dump() if status.mesh_join else None
        wanted = self.desired.mesh_join(key, current)
        return MeshJoin.model_validate(wanted) if wanted else None

    def _routed(self, key: str, status: ClusterStatus) -> SharedIngressStatus | None:
        """status.sharedIngress: the shared-ingress ID the cluster is routed on, recorded for good (stacks.ingress
        routes it on this ID from then on, whatever the default or the hub's prefixes become)."""
        current = status.shared_ingress.cluster_id if status.shared_ingress else None
        routed = self.desired.routed_id(key, current)
        return SharedIngressStatus(cluster_id=routed) if routed else None

    def _ready_status(self, status: ClusterStatus, generation: int | None, desired: StackInputs,
                      last: LastUpdate | None, *, outputs: dict[str, Any] | None = None,
                      checked: float | None = None) -> ClusterStatus:
        now = rfc3339(self.clock())
        update: dict[str, Any] = {
            "observed_generation": generation, "stack": desired.stack, "inputs_hash": desired.digest(),
            "mesh_join": self._mesh_join(desired.key, status), "shared_ingress": self._routed(desired.key, status),
            "account": desired.cluster.account_id, "region": desired.cluster.region, "last_update": last,
            "conditions": conditions("ready", reasons.SUCCEEDED, f"stack {desired.stack} is up to date",
                                     generation=generation, previous=status.conditions, now=now)}
        if outputs is not None:
            update["outputs"] = outputs_from(outputs)
        if checked is not None:
            update["last_drift_check"] = rfc3339(checked)
        return status.model_copy(update=update)

    def halt(self) -> None:
        """No engine run starts after this returns; `active()` counts the ones that had (Pipeline cancels them)."""
        with self._halt_lock:
            self._halted = True

    def active(self) -> int:
        """Engine calls in progress: started, or about to reach the engine."""
        with self._halt_lock:
            return self._active

    def run_engine(self, operation: str, call: Callable[[], RunResult], *, stack: str = "",
                   cluster: str = "") -> RunResult:
        """Every engine run goes through here (the transit stacks' too): the halt check, the run metrics, the
        failures by reason, and the run's one log line (`hubwright.run`: cluster, stack, operation, result,
        duration, changes, reason; automation/adapters/logs.py)."""
        started = time.monotonic()
        result, reason, out, error = "error", "Error", None, ""
        try:
            with self._halt_lock:
                if self._halted:
                    raise RunCancelled(f"{operation}: not started, the service stopped leading or is stopping")
                self._active += 1
            try:
                out = call()
            finally:
                with self._halt_lock:
                    self._active -= 1
            result, reason = ("succeeded", "") if out.ok else ("failed", "")
            if operation in ("up", "destroy") and not out.ok:
                raise EngineError(out.message or f"{operation} failed",
                                  reason=reasons.DESTROY_FAILED if operation == "destroy" else reasons.UPDATE_FAILED)
            return out
        except StackLocked as exc:
            result, reason, error = "locked", reasons.STACK_LOCKED, str(exc)
            raise
        except Failure as exc:
            result, reason, error = ("failed" if isinstance(exc, EngineError) else "error"), exc.reason, str(exc)
            raise
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            seconds = time.monotonic() - started
            if self.metrics is not None:
                self.metrics.observe_run(operation, result, seconds)
                if result in ("failed", "error") and reason:
                    self.metrics.run_failed(operation, reason)
            _log_run(operation, result, seconds, out, reason=reason, error=error, stack=stack, cluster=cluster)

    def _refused(self, raw: Raw, operation: str, reason: str, message: str) -> None:
        """A cluster refused (Stalled: InvalidSpec, NeedsAttention): counted by reason, and its run log line."""
        if self.metrics is not None:
            self.metrics.refused(reason)
        meta = raw.get("metadata") or {}
        stack = self.status.current(object_key(raw), raw).stack or stack_name(meta.get("namespace"),
                                                                             str(meta.get("name")))
        RUN_LOG.warning("%s %s: %s refused (%s)", object_key(raw), stack, operation, reason, extra={FIELDS: {
            "cluster": object_key(raw), "stack": stack, "operation": operation, "result": "refused",
            "duration": 0.0, "reason": reason, "error": message[:2048]}})

    def _write(self, raw: Raw, before: ClusterStatus, after: ClusterStatus) -> bool:
        try:
            return self.status.write(raw, after, previous=before)
        except ApiException as exc:
            LOG.warning("%s: status not written (%s %s)", object_key(raw), exc.status, exc.reason)
            raise

    # -- finalizer: read the live object, change the list, write it back with its resourceVersion
    def _ensure_finalizer(self, raw: Raw) -> bool:
        if FINALIZER in ((raw.get("metadata") or {}).get("finalizers") or []):
            return True
        return self._edit_finalizers(raw, lambda names: names if FINALIZER in names else [*names, FINALIZER])

    def _remove_finalizer(self, raw: Raw) -> bool:
        return self._edit_finalizers(raw, lambda names: [n for n in names if n != FINALIZER])

    def _edit_finalizers(self, raw: Raw, change: Callable[[list[str]], list[str]]) -> bool:
        """Change the list and write it back with the resourceVersion it was read at (409: read again)."""
        meta = raw["metadata"]
        live = raw  # the cached copy first: usually current, and a conflict costs one read
        for _ in range(5):
            try:
                names = list((live.get("metadata") or {}).get("finalizers") or [])
                wanted = change(names)
                if wanted == names:
                    return True
                self._custom.patch_namespaced_custom_object(
                    GROUP, VERSION, meta["namespace"], CLUSTERS, meta["name"],
                    {"metadata": {"finalizers": wanted or None,
                                  "resourceVersion": live["metadata"].get("resourceVersion")}})
                return True
            except ApiException as exc:
                if exc.status == 404:
                    return False
                if exc.status != 409:
                    raise
            try:
                live = self._custom.get_namespaced_custom_object(GROUP, VERSION, meta["namespace"], CLUSTERS,
                                                                 meta["name"])
            except ApiException as exc:
                if exc.status == 404:
                    return False
                raise
        raise EngineError(f"could not update the finalizers of {object_key(raw)}: conflicts")


def _annotation(raw: Raw) -> str | None:
    """The value of the reconcile-request annotation, if any."""
    value = ((raw.get("metadata") or {}).get("annotations") or {}).get(RECONCILE_REQUEST_ANNOTATION)
    return str(value)[:256] if value else None


def _requested(raw: Raw, status: ClusterStatus) -> str | None:
    """A reconcile request not yet handled: its value, else None."""
    value = _annotation(raw)
    return value if value is not None and value != status.last_handled_reconcile_request else None


def _ready(status: ClusterStatus) -> str | None:
    cond = status.condition("Ready")
    return cond.status if cond else None


def _changes(changes: dict[str, int]) -> str:
    return ", ".join(f"{n} to {op}" for op, n in sorted(changes.items()) if op != "same" and n)


def _summary(result: RunResult) -> str:
    return _changes(result.changes) or result.message or "no changes"


def _log_run(operation: str, result: str, seconds: float, out: RunResult | None, *, reason: str, error: str,
             stack: str, cluster: str) -> None:
    """The run's one log line: INFO when it did what it should (a preview that found drift says `drifted`),
    WARNING when it failed."""
    if operation == "preview" and result == "failed":
        result = "drifted"  # the check ran; the cloud differs
    fields: dict[str, Any] = {"cluster": cluster or None, "stack": stack, "operation": operation, "result": result,
                              "duration": round(seconds, 3)}
    if out is not None:
        fields["changes"] = dict(out.changes)
        if out.drifted:
            fields["drifted"] = list(out.drifted)
    if result in ("failed", "error", "locked"):
        fields["reason"] = reason
        fields["error"] = error[:2048]
    level = logging.WARNING if result in ("failed", "error") else logging.INFO
    RUN_LOG.log(level, "%s %s: %s %s in %.1fs%s", cluster or "-", stack or "-", operation, result, seconds,
                f" ({reason})" if fields.get("reason") else "", extra={FIELDS: fields})
