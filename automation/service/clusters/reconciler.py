"""Reconcile one cluster key: `reconcile(key) -> Outcome`, level-triggered, safe to call any number of times.

It never trusts the event that queued the key, only the current state:

    cached Cluster ──► desired StackInputs (DesiredView: published by the mapper, never resolved here)
         │                    │ digest()
         ▼                    ▼
    stacks.status.applied(status.inputsHash, status.lastUpdate, digest)?  ── yes ──► nothing to run
         │ no                                                                       (drift check when due)
         ▼
    finalizer · recover a killed run · refuse a move · new install? · engine.up · status + Events

Deletion (clusters/delete.py): the finalizer `hubwright.io/stack` holds a deleted Cluster until
`engine.destroy` succeeded; a failed destroy keeps it, says why, and retries. Drift: clusters/drift.py.
What the status says in each case: clusters/status.py. Every engine run: automation/service/runs.py.
Errors, wherever they are raised on a path, go through `fail`, which applies the one rule
(automation/service/outcomes.py) to the Cluster's status:
  InvalidSpec          Stalled, no engine run, until an input changes
  NeedsAttention       Stalled, no engine run, looked at again every --stalled-recheck
  StackLocked          requeued after --lock-retry, not counted as a failure
  Failure (transient)  Reconciling, retried with backoff
The annotation hubwright.io/reconcile-request (any new value) runs an `up` with refresh now;
hubwright.io/drift-check-request (any new value) a drift check now (clusters/drift.py), or, when an up has to run
anyway, makes it an up with refresh, which reads the cloud back and corrects drift.
Everything it does to the API server goes through a ClusterClient (clusters/client.py: the controller kit's port,
finalizer helper and status writer).
"""
from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable

from automation.adapters.engine import EngineError, Engine
from automation.adapters.kube.informer import Raw, object_key
from automation.kit.objects import ApiError, Obj
from stacks.conditions import conditions, with_drift, with_warning
from stacks.times import rfc3339_seconds
from automation.service.cache import Cache
from automation.service.clusters import delete, drift, retain
from automation.service.clusters.client import PROGRESS_EVERY, ClusterClient, ProgressReport
from automation.service.clusters.context import Audit, Guard, ReconcileOptions
from automation.service.clusters.status import (annotation, check_handled, check_requested, generation_of, ready,
                                                ready_status, refused_status, registered_status, requested,
                                                run_mark, running_status, stack_of, succeeded, with_placement)
from automation.service.outcomes import Operation, judge
from automation.kit.queue import Outcome
from automation.service.runs import Metrics, Runs, summary
from automation.service.snapshot import DesiredView
from stacks.network.merge import Pending
from stacks import status as reasons
from stacks.disclosure import known_to
from stacks.errors import Failure, InvalidSpec
from stacks.inputs import StackInputs
from stacks.names import DRIFT_CHECK_REQUEST_ANNOTATION, RECONCILE_REQUEST_ANNOTATION
from stacks.runs.cause import Cause, up_cause
from stacks.status import ClaimsStatus, ClusterStatus, LastUpdate, MeshJoin, Recovery, SharedIngressStatus, applied
from stacks.accounts import REGION_OVERRIDDEN
from stacks.keys import UNKNOWN_KEYS
from stacks.tenancy import ACCOUNT_SHARED

WARNINGS = (ACCOUNT_SHARED, REGION_OVERRIDDEN, UNKNOWN_KEYS)  # the Warning conditions beside kstatus's three

LOG = logging.getLogger("hubwright.reconcile")
STUCK_LOCK_RETRIES = 3  # StackLocked this many times in a row: ask the engine to recover a stale lock


def up_to_date(status: ClusterStatus, digest: str) -> bool:
    return applied(status.inputs_hash, status.last_update, digest)


class Reconciler:
    """The clusters' controller (automation/service/clusters/context.py's Context, for delete.py and drift.py)."""

    def __init__(self, *, desired: DesiredView, cache: Cache, engine: Engine, kube: ClusterClient,
                 options: ReconcileOptions = ReconcileOptions(), guards: Iterable[Guard] = (),
                 audit: Audit | None = None, metrics: Metrics | None = None, runs: Runs | None = None,
                 clock: Callable[[], float] = time.time):
        """`runs`: the service's one gate for engine runs, shared with the transit stacks (a new one over `metrics`
        when not given)."""
        self.desired = desired
        self.cache = cache
        self.engine = engine
        self.kube = kube
        self.options = options
        self.guards = tuple(guards)
        self.audit = audit
        self.runs = runs if runs is not None else Runs(metrics)
        self.clock = clock
        self.progress_every = PROGRESS_EVERY
        self.released: set[str] = set()  # destroyed and let go by us: no orphan check when they vanish
        self._side_pool: ThreadPoolExecutor | None = None
        self._side_lock = threading.Lock()
        self._locked_streak: dict[str, int] = {}  # stack -> StackLocked answers in a row

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
        self.kube.close()

    # ------------------------------------------------------------------ entry points

    def reconcile(self, key: str) -> Outcome:
        raw = self.cache.get(key)
        if raw is None:
            return delete.gone(self, key)
        status = self.kube.status(key, raw)
        deleting = Obj(raw).deleting
        try:
            if deleting:
                return self.deleted(key, raw, status)
            desired = self.desired.inputs(key)
            if desired is None and self.desired.registered_only(key):  # no stack: its status only
                return self._registered(raw, status)
            if desired is None:  # not resolved yet (the cache moved on): the mapper queues it again
                return Outcome.done()
            if isinstance(desired, InvalidSpec):
                return self.fail(raw, status, "up", desired, self.clock())
            return self._apply(key, raw, status, desired)
        except Failure as exc:  # raised outside a run's own handling (applied(), a lookup): reported all the same
            current = self.kube.status(key, raw)
            return self.fail(raw, current, "destroy" if deleting else "up", exc, self.clock())

    __call__ = reconcile

    def deleted(self, key: str, raw: Raw, status: ClusterStatus) -> Outcome:
        """A deleted Cluster: its stack destroyed (delete.py) or retained (retain.py), as its deletion policy says
        (stacks.retention), then it goes. A policy that cannot be carried out now (Retain not allowed, no valid
        HubConfig) holds it, Stalled, keeping its stack, until the spec or the HubConfig changes."""
        if not delete.has_finalizer(raw):
            return Outcome.done()  # not ours (never applied, or already destroyed)
        policy = self.desired.deletion_policy(key, Obj(raw).spec)
        if isinstance(policy, InvalidSpec):
            return self.fail(raw, status, "destroy", policy, self.clock())
        recovered = self.recover_if_killed(raw, status, stack_of(raw, status))  # what a killed run left, first
        if recovered is None:
            return Outcome.retry()
        if policy == "Retain":
            return retain.retain(self, key, raw, recovered)
        return delete.destroy(self, key, raw, recovered)

    def triage(self, key: str, raw: Raw, desired: StackInputs | InvalidSpec | None) -> float | None:
        """For a cluster seen for the first time: seconds until it needs a reconcile (0: now; None: never)."""
        obj = Obj(raw)
        status = self.kube.status(key, raw)
        if obj.deleting:
            return 0 if delete.has_finalizer(raw) else None
        if desired is None:
            if self.desired.registered_only(key):  # a status left by a refusal, or by an older spec: heal it
                return 0 if registered_status(status, obj.generation, now=self.clock()) != status else None
            return None
        if status.observed_generation != obj.generation or requested(raw, status) is not None \
                or check_requested(raw, status) is not None:
            return 0
        if self._records_moved(key, status):
            return 0
        if isinstance(desired, InvalidSpec):  # a status left by an older service or input: recomputed
            return None if self._refused_status(raw, status, desired) == status else 0
        if not up_to_date(status, desired.digest()) or ready(status) != "True":
            return 0
        return drift.due_in(self.options, key, status, self.clock())

    # ------------------------------------------------------------------ paths

    def _apply(self, key: str, raw: Raw, status: ClusterStatus, desired: StackInputs) -> Outcome:
        generation = generation_of(raw)
        digest = desired.digest()
        request = requested(raw, status)
        if request is not None:
            return self.run_up(key, raw, status, desired, refresh=True, cause=Cause.of(
                "Request", f"reconcile requested ({RECONCILE_REQUEST_ANNOTATION}={request}): up with refresh",
                generation))
        check = check_requested(raw, status)
        if up_to_date(status, digest):
            if status.observed_generation != generation or ready(status) != "True" \
                    or self._records_moved(key, status):
                self.write(raw, status, self._ready_status(status, generation, desired, status.last_update))
            if check is not None:  # asked for by a person: now, whenever the periodic one is due
                return drift.check(self, key, raw, self.kube.status(key, raw), desired, cause=Cause.of(
                    "DriftCheck", f"drift check requested ({DRIFT_CHECK_REQUEST_ANNOTATION}={check})", generation))
            due = drift.due_in(self.options, key, status, self.clock())
            if due is not None and due <= 0:
                return drift.check(self, key, raw, self.kube.status(key, raw), desired)
            return Outcome.done(due)
        # An up runs anyway: a drift-check request makes it an up with refresh (the cloud read back, drift corrected).
        return self.run_up(key, raw, status, desired, refresh=check is not None)

    def run_up(self, key: str, raw: Raw, status: ClusterStatus, desired: StackInputs, *,
               cause: Cause | None = None, refresh: bool = False) -> Outcome:
        """An up of `desired`; `cause`: why (None: stacks.runs.cause.up_cause decides, from the status as found and
        the inputs the stack last applied)."""
        generation = generation_of(raw)
        as_found = status
        recovered = self.recover_if_killed(raw, status, desired.stack)
        if recovered is None:
            return Outcome.retry()
        status = recovered
        request = annotation(raw)
        if request is not None and request != status.last_handled_reconcile_request:  # handled, whatever happens
            status = status.model_copy(update={"last_handled_reconcile_request": request})
        if refresh:  # an up with refresh reads the cloud back as a drift check would: that request is handled too
            status = check_handled(raw, status)
        try:
            applied = self.engine.applied(desired.stack)
            was = applied if isinstance(applied, StackInputs) else None  # a cluster's stack holds a cluster's inputs
            cause = cause or up_cause(as_found, was, desired, generation)
            for guard in self.guards:
                guard(was, desired)
        except InvalidSpec as exc:
            return self.fail(raw, status, "up", exc, self.clock())
        except Failure as exc:  # a preflight that may pass later (the installer's NLB not there yet), or a lookup
            return self.fail(raw, self._placed(key, status), "up", exc, self.clock(), note="preflight, nothing ran: ")

        why = cause.message
        started = self.clock()
        running = running_status(status, generation, desired, cause, mesh_join=self._mesh_join(key, status),
                                 routed=self._routed(key, status), started=started, claims=self._claims(key, status))
        # The stack's first run waits for two writes, side by side (one round trip): the finalizer (so a delete
        # cannot skip the destroy) and the Running mark, which records status.stack (the stack exists: it keeps
        # its place under the namespace's caps). Later runs have both already: their Running mark goes in the
        # background and the engine starts at once (6.5 / 18.7 ms p50 / p99 off each edit's run, issue 33). A newer
        # write supersedes it, and the writer patches against what the server holds, so the result never loses
        # it. If the service dies within those milliseconds, the killed run is found by its stale lock instead
        # (recover_if_killed after STUCK_LOCK_RETRIES), not by the mark.
        if delete.has_finalizer(raw) and status.stack:
            self.kube.write_later(raw, running, previous=status)
        else:
            finalizer = None if delete.has_finalizer(raw) else self._side().submit(delete.ensure_finalizer, self, raw)
            wrote = self.write(raw, status, running)
            if (finalizer is not None and not finalizer.result()) or not wrote:
                return Outcome.done()  # the Cluster is gone
        self.kube.event(raw, "Normal", "UpdateStarted", why)
        if self.audit is not None:
            self.audit(desired, "up")
        progress = ProgressReport(self.kube, raw, running, every=self.progress_every)
        try:
            old_link = was.private_link if was is not None else None
            if old_link is not None and desired.private_link is not None \
                    and old_link.infra_id != desired.private_link.infra_id:
                note = (f"new install (infraID {old_link.infra_id} -> {desired.private_link.infra_id}): "
                        "removing the old install's PrivateLink first")
                self.kube.event(raw, "Normal", "NewInstall", note)
                self.runs.run("up", lambda: self.engine.up(desired.model_copy(update={"private_link": None}),
                                                             message=f"{why}; {note}"), stack=desired.stack,
                                cluster=key, shown_to=known_to(desired),
                                cause=Cause.of(cause.kind, f"{why}; {note}", cause.generation))
            result = self.runs.run("up", lambda: self.engine.up(desired, message=why, refresh=refresh,
                                                                  on_progress=progress),
                                     stack=desired.stack, cluster=key, shown_to=known_to(desired), cause=cause,
                                     refresh=refresh)
        except Failure as exc:  # over the last progress written (the Failed lastUpdate drops it); StackLocked too
            return self.fail(raw, progress.status, "up", exc, started, before=status)
        ended = self.clock()
        running = progress.status
        done = self._ready_status(running, generation, desired, succeeded(
            result, f"{why}: {result.message}".rstrip(": "), started, ended, progress.latest, cause=cause),
            outputs=result.outputs,
            checked=ended)
        if refresh and (found := done.condition(reasons.DRIFT_CONDITION)) is not None and found.status == "True":
            done = done.model_copy(update={"conditions": with_drift(
                done.conditions, False, reasons.DRIFT_CORRECTED, f"corrected by the update at {rfc3339_seconds(ended)}",
                generation=generation, now=rfc3339_seconds(ended))})
        self.kube.write_later(raw, done, previous=running)
        self._tell_warnings(raw, running, done)
        self._locked_streak.pop(desired.stack, None)
        self.kube.event(raw, "Normal", "UpdateSucceeded", f"{why}: {summary(result)}")
        retain.adopted(self, key, raw)
        return Outcome.done(drift.due_in(self.options, key, done, self.clock()))

    def _registered(self, raw: Raw, status: ClusterStatus) -> Outcome:
        """A registered-only cluster (no AWS part): no stack, so Ready with nothing to run; whatever refusal it
        carried (its HubConfig gone, then back) is recomputed away, and observedGeneration follows the spec."""
        new = registered_status(status, generation_of(raw), now=self.clock())
        if new != status:
            self.write(raw, status, new)
        return Outcome.done()

    def recover_if_killed(self, raw: Raw, status: ClusterStatus, stack: str) -> ClusterStatus | None:
        """Clean up what a killed run left, and say so on the cluster (None: recovery failed, retry).

        A Running last update that nobody runs any more is a killed run of ours. A lock that outlives
        a few lock retries may be one too (left before the Running mark existed, or by a killed CLI):
        engine.recover removes only a stale lock of this service, never a live one.
        """
        last = status.last_update
        stuck = self._locked_streak.get(stack, 0) >= STUCK_LOCK_RETRIES
        if not stuck and (last is None or last.result != "Running"):
            return status
        cause = Cause.of("Leader", f"recovering the {last.operation} started {last.start_time or '?'}, which did not "
                                   "finish" if last is not None and last.result == "Running" else
                         f"recovering the stack, locked through {STUCK_LOCK_RETRIES} retries", generation_of(raw))
        try:
            result = self.runs.run("recover", lambda: self.engine.recover(stack), stack=stack,
                                     cluster=object_key(raw), shown_to=self.known(object_key(raw), stack), cause=cause)
        except EngineError as exc:
            LOG.warning("%s: recovering the stack failed: %s", stack, exc)
            self.kube.event(raw, "Warning", "RecoveryFailed", str(exc))
            return None
        self._locked_streak.pop(stack, None)
        if last is not None and last.result == "Running":
            note = (f"the {last.operation} started {last.start_time or '?'} did not finish (service restarted "
                    f"or killed); recovered: {result.message or 'ok'}")
            last = last.model_copy(update={"result": "Failed", "message": f"{last.message}; did not finish",
                                           "end_time": rfc3339_seconds(self.clock())})
        else:
            note = f"the stack stayed locked through {STUCK_LOCK_RETRIES} retries; recovered: {result.message or 'ok'}"
        recovered = status.model_copy(update={
            "last_recovery": Recovery(time=rfc3339_seconds(self.clock()), message=note), "last_update": last})
        self.write(raw, status, recovered)
        self.kube.event(raw, "Warning", "Recovered", note)
        return recovered

    def known(self, key: str, stack: str) -> Callable[[], frozenset[str]]:
        """The IDs the cluster's tenant may read in the text of a run given no inputs (recover, destroy): those of
        its inputs as desired now, else as last applied (stacks.disclosure.known_to); looked up only when asked."""
        def ask() -> frozenset[str]:
            desired = self.desired.inputs(key)
            if isinstance(desired, StackInputs):
                return known_to(desired)
            try:
                applied = self.engine.applied(stack)
            except Exception as exc:  # noqa: BLE001 - then no ID is the tenant's: every one is redacted
                LOG.info("%s: no inputs to tell the tenant's IDs by (%s): redacting every ID", key, exc)
                applied = None
            return known_to(applied if isinstance(applied, StackInputs) else None)
        return ask

    # ------------------------------------------------------------------ errors

    def fail(self, raw: Raw, status: ClusterStatus, operation: Operation, exc: InvalidSpec | Failure, started: float, *,
             before: ClusterStatus | None = None, note: str = "") -> Outcome:
        """The one place an error reaches a Cluster: the verdict of automation/service/outcomes.py (the condition,
        the Event, the refusal line, what comes next) applied to its status. `status` is the status the error
        found (a run's Running mark); `before`, the one before the run (a locked stack ran nothing: its lastUpdate
        stays)."""
        verdict = judge(exc, operation=operation, stalled_recheck=self.options.stalled_recheck,
                        lock_retry=self.options.lock_retry, note=note)
        key, generation, now = object_key(raw), generation_of(raw), self.clock()
        if isinstance(exc, InvalidSpec):  # the whole status recomputed from the input, written now
            new = self._refused_status(raw, status, exc)
            if new == status:
                return verdict.outcome
            stalled = status.condition("Stalled")
            told = stalled is not None and stalled.status == "True" and stalled.reason == exc.reason \
                and stalled.message == str(exc)
            # An Event (and a run line) per new refusal, not per rewrite. Waiting for discovery is no refusal: its
            # condition says so, and the discovery controller tells its own outcome (one Event per fact).
            if self.write(raw, status, new) and not told and not isinstance(exc, Pending):
                self.kube.event(raw, verdict.event_type, verdict.reason, verdict.event)
                self._refused(raw, operation, verdict.reason, verdict.event)
            return verdict.outcome
        if verdict.reason == reasons.STACK_LOCKED:  # nothing ran: the last update stays the one before
            stack = stack_of(raw, status)
            self._locked_streak[stack] = self._locked_streak.get(stack, 0) + 1
            last = (before or status).last_update
        else:
            marked = status.last_update  # the Running mark says what caused the run; the error, which run it was
            last = run_mark(operation, "Failed", verdict.event[:4096], started, now,
                            cause=marked.cause if marked is not None and marked.result == "Running" else None,
                            run=getattr(exc, "run_id", None))
            LOG.warning("%s: %s failed (%s): %s", key, operation, verdict.reason, verdict.condition)
            if verdict.refused:
                self._refused(raw, operation, verdict.reason, verdict.event)
        failed = status.model_copy(update={"last_update": last, "conditions": conditions(
            verdict.state, verdict.reason, verdict.condition, generation=generation, previous=status.conditions,
            now=rfc3339_seconds(now))})
        self.kube.write_later(raw, failed, previous=status)
        self.kube.event(raw, verdict.event_type, verdict.reason, verdict.event)
        return verdict.outcome

    def _refused(self, raw: Raw, operation: Operation, reason: str, message: str) -> None:
        key = object_key(raw)
        self.runs.refused(key, stack_of(raw, self.kube.status(key, raw)), operation, reason, message)

    # ------------------------------------------------------------------ what the status carries

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
        return SharedIngressStatus.model_validate({"clusterID": routed}) if routed else None

    def _claims(self, key: str, status: ClusterStatus) -> ClaimsStatus | None:
        """status.claims: what admission granted the cluster (stacks.claims), recorded so that it keeps them."""
        current = status.claims.model_dump(by_alias=True, exclude_none=True) if status.claims else None
        wanted = self.desired.claims_of(key, current)
        return ClaimsStatus.model_validate(wanted) if wanted else None

    def _records_moved(self, key: str, status: ClusterStatus) -> bool:
        """Whether a record the service keeps in the status (join stamp, routed ID, claims, the AccountShared
        warning) is not written yet."""
        return self._mesh_join(key, status) != status.mesh_join or self._routed(key, status) != status.shared_ingress \
            or self._claims(key, status) != status.claims or self._warned(key, status) != status

    def _warned(self, key: str, status: ClusterStatus) -> ClusterStatus:
        """`status` with the Warning conditions the cluster calls for: AccountShared (its account is one two
        namespaces own unlisted), RegionOverridden (regionPrecedence Legacy overrides its spec.region) and
        UnknownKeys (labels or annotations under hubwright.io/ that nothing reads: a typo, ignored)."""
        conditions = status.conditions
        said = {ACCOUNT_SHARED: self.desired.account_shared, REGION_OVERRIDDEN: self.desired.region_overridden,
                UNKNOWN_KEYS: self.desired.unknown_keys}
        for type_ in WARNINGS:
            warning = said[type_](key)
            if warning is not None or status.condition(type_) is not None:
                conditions = with_warning(conditions, type_, warning, generation=status.observed_generation,
                                          now=rfc3339_seconds(self.clock()))
        return status if conditions == status.conditions else status.model_copy(update={"conditions": conditions})

    def _placed(self, key: str, status: ClusterStatus) -> ClusterStatus:
        return with_placement(status, self.desired.placed_in(key))

    def _refused_status(self, raw: Raw, status: ClusterStatus, exc: InvalidSpec) -> ClusterStatus:
        key = object_key(raw)
        return self._warned(key, refused_status(raw, status, exc, placed=self.desired.placed_in(key),
                                                mesh_join=self._mesh_join(key, status),
                                                routed=self._routed(key, status), now=self.clock(),
                                                claims=self._claims(key, status)))

    def _ready_status(self, status: ClusterStatus, generation: int | None, desired: StackInputs,
                      last: LastUpdate | None, *, outputs: dict[str, Any] | None = None,
                      checked: float | None = None) -> ClusterStatus:
        return self._warned(desired.key, ready_status(
            status, generation, desired, last, mesh_join=self._mesh_join(desired.key, status),
            routed=self._routed(desired.key, status), now=self.clock(), outputs=outputs, checked=checked,
            claims=self._claims(desired.key, status)))

    def write(self, raw: Raw, before: ClusterStatus, after: ClusterStatus) -> bool:
        """Patch the status now (False: the Cluster is gone). A Warning condition that appears or changes its
        message with this write gets one Event saying it: one per fact, not one per write."""
        try:
            written = self.kube.write(raw, after, previous=before)
        except ApiError as exc:
            LOG.warning("%s: status not written (%s)", object_key(raw), exc)
            raise
        if written:
            self._tell_warnings(raw, before, after)
        return written

    def _tell_warnings(self, raw: Raw, before: ClusterStatus, after: ClusterStatus) -> None:
        """One Warning Event per Warning condition (WARNINGS) that `after` adds or words anew: an Event per fact,
        never one per status write."""
        for type_ in WARNINGS:
            now, was = after.condition(type_), before.condition(type_)
            if now is not None and (was is None or was.message != now.message):
                self.kube.event(raw, "Warning", type_, now.message or type_)

