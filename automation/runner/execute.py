"""Executing a run the runner holds, on one of the workers of its "runner-run" controller (`execute(key)`):

    check (checks.refusal) ─► recover (a takeover, a hand-back) ─► engine ─► result (Secret, then status)

A run whose stack another runner claimed just before is handed back (`_second_of_stack`); a run still going at
its deadline is cancelled (`_deadline_timer`); a cancelled run this runner stopped for itself (drain, the other
run's deadline with --workers > 1) is handed back, Pending, for the next runner; nothing is written to a run
once forfeit (automation/runner/lease.py).
"""
from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta
from typing import Any, Callable, Mapping

from automation.adapters import logs
from automation.adapters.engine import Engine, EngineError, RunCancelled, RunResult, StackLocked
from automation.adapters.history import HistoryStore, put_run_detail
from automation.adapters.kube.stackruns import StackRunClient
from automation.kit.objects import Obj
from automation.kit.queue import Outcome
from automation.runner.jobs import CANCELLED, Job, Jobs, Raw, RunnerMetrics, RunStore, Settings, renew_every
from automation.runner.lease import Lease
from stacks import status as reasons
from stacks.disclosure import known_to, redact
from stacks.inputs import StackInputs, inputs_from_config
from stacks.runs import claims
from stacks.runs.checks import refusal
from stacks.runs.model import (INPUTS_KEY, REFUSED, DetailRef, StackRunSpec, StackRunStatus, result_payload, spec_of,
                               summary)
from stacks.status import RunProgress
from stacks.times import parse_rfc3339, rfc3339_seconds

LOG = logging.getLogger("hubwright.runner")
OUTCOMES = {"Succeeded": "succeeded", "Drifted": "failed", "Cancelled": "cancelled", "Refused": "refused",
            "HandedBack": "handed back", "Lost": "lost"}


class Execution:
    """Runs the jobs the picker claimed (module docstring). `seen`: the resourceVersion up to which this runner's
    watch has seen every write; `wake`: look for runs to claim again (a slot is free)."""

    def __init__(self, settings: Settings, *, jobs: Jobs, store: RunStore, runs: StackRunClient, engine: Engine,
                 lease: Lease, metrics: RunnerMetrics, seen: Callable[[], int], wake: Callable[[], None],
                 stopping: threading.Event, history: HistoryStore | None = None):
        self.settings, self.jobs, self.store, self.runs, self.engine = settings, jobs, store, runs, engine
        self.lease, self.metrics, self.seen, self.wake, self.stopping = lease, metrics, seen, wake, stopping
        self.history = history  # where the runs' details go (the service's records)

    def execute(self, key: str) -> Outcome:
        """The run held as `key`, start to end (once: a key added again while it runs finds it taken)."""
        job = self.jobs.get(key)
        if job is None or job.started:
            return Outcome.done()
        job.started = True
        self.run(job)
        return Outcome.done()

    def run(self, job: Job) -> None:
        monotonic, identity = self.settings.monotonic, self.settings.identity
        started = monotonic()
        key, raw = job.held.key, job.held.raw
        phase, out, reason, error = "Failed", None, "", ""
        try:
            phase, out, reason, error = self._run(job, raw)
        except Exception as exc:  # noqa: BLE001 - whatever happens, the run gets a result
            LOG.exception("%s: running %s failed", identity, key)
            phase, reason, error = "Failed", "Error", f"{type(exc).__name__}: {exc}"
        finally:
            recorded = self._finish(job, phase, out, reason, error)
            outcome = OUTCOMES.get(recorded, "locked" if reason == "StackLocked" else "failed")
            logs.log_run(job.operation, outcome, monotonic() - started,
                         changes=None if out is None else out.changes, drifted=[] if out is None else out.drifted,
                         reason=reason, error=error, stack=job.stack, cluster=str(Obj(raw).spec.get("cluster") or ""),
                         runner=identity, run=key, phase=recorded)
            self.metrics.runs.labels(job.operation, recorded).inc()
            self.jobs.pop(key)
            job.done.set()
            self.wake()

    def _run(self, job: Job, raw: Raw) -> tuple[str, RunResult | None, str, str]:
        """(phase, result, reason, message) of the run: refused, cancelled, or what the engine did."""
        key, identity = job.held.key, self.settings.identity
        if self._second_of_stack(job):
            job.cancelled_for = "second"
            return "Cancelled", None, CANCELLED, "another runner claimed a run of the same stack first"
        spec = spec_of(raw)
        if isinstance(spec, str):
            return "Refused", None, REFUSED, f"refused: the spec does not parse ({spec})"
        secret = self.runs.secret(spec.inputs_secret)
        why = refusal(key, Obj(raw).generation, spec, secret, service_namespace=self.settings.namespace)
        if why is not None:
            LOG.warning("%s: refused %s: %s", identity, key, why)
            return "Refused", None, REFUSED, f"refused: {why}"
        deadline = parse_rfc3339(spec.deadline)
        if deadline is not None and self.settings.clock() >= deadline:
            return "Cancelled", None, CANCELLED, f"not started: its deadline {spec.deadline} had passed"
        live = None
        if job.takeover_of is not None or job.handed_back:
            live = self._before_recover(job)
            if live is None:
                return "Cancelled", None, CANCELLED, "stopped before it started"
        if job.forfeit.is_set() or job.cancelled_for:
            return "Cancelled", None, CANCELLED, "stopped before it started"
        stamp = rfc3339_seconds(self.settings.clock())
        if not job.held.update(lambda status: status.model_copy(update={"start_time": stamp})):
            self.lease.forfeit(job, "the run was taken over or deleted before it started")
            return "Cancelled", None, CANCELLED, "stopped before it started"
        timer = self._deadline_timer(job, deadline)
        if job.cancelled_for:  # the deadline passed while the run started: the engine's cancel found nothing yet
            if timer is not None:
                timer.cancel()
            return "Cancelled", None, CANCELLED, self._cancelled_message(job, "stopped before it started")
        try:
            try:
                if live is not None:  # a takeover or a hand-back: what the last runner left behind goes first
                    self.engine.recover(spec.stack, live_runners=live)
                out = self._call(job, spec, secret or {})
            except StackLocked:
                if job.forfeit.is_set() or job.cancelled_for:
                    raise
                LOG.info("%s: %s is locked: recovering, then once more", identity, spec.stack)
                live = live if live is not None else self.live(spec.stack, self.settings.clock())
                self.engine.recover(spec.stack, live_runners=live)
                out = self._call(job, spec, secret or {})
        except RunCancelled as exc:
            job.trace = exc.trace
            return "Cancelled", None, CANCELLED, self._cancelled_message(job, str(exc))
        except EngineError as exc:
            job.trace = exc.trace
            return "Failed", None, exc.reason, str(exc)
        finally:
            if timer is not None:
                timer.cancel()
        if out.ok:
            return "Succeeded", out, "", out.message
        if spec.operation == "preview":
            return "Drifted", out, "", out.message
        reason = {"up": reasons.UPDATE_FAILED, "destroy": reasons.DESTROY_FAILED}.get(spec.operation,
                                                                                     reasons.UPDATE_FAILED)
        return "Failed", out, reason, out.message or f"{spec.operation} failed"

    def _second_of_stack(self, job: Job) -> bool:
        """Whether another runner claimed a run of this stack just before this one did (two runs of one stack
        claimed at once, each runner's cache not showing the other's yet). Once this runner's watch has seen its
        own claim it has seen every earlier write: the later claim of the two (the higher resourceVersion of the claim
        itself, as the watch first showed it: RunStore) yields, the earlier one sees a later one and runs. A run of
        one stack is never executed twice at once."""
        mine = job.claim_version
        monotonic = self.settings.monotonic
        deadline = monotonic() + max(2.0, renew_every(self.settings.claim_ttl))
        while self.seen() < mine and monotonic() < deadline:
            if job.forfeit.wait(0.02):
                return False
        now = self.settings.clock()
        seen = self.store.claims_seen()
        for run, _ in self.store.views().values():
            claim = run.status.claim
            since = seen.get(run.key)
            if run.key != job.held.key and run.stack == job.stack and not run.finished \
                    and run.status.phase == "Running" and claim is not None \
                    and claim.holder != self.settings.identity and not claims.expired(claim, now) \
                    and since is not None and since[:2] == (claim.holder, claim.acquire_time) and since[2] < mine:
                LOG.info("%s: %s: %s holds %s of the same stack since before this claim: handing it back",
                         self.settings.identity, job.held.key, claim.holder, run.key)
                return True
        return False

    def _call(self, job: Job, spec: StackRunSpec, secret: Mapping[str, Any]) -> RunResult:
        """The engine call; `secret`: the run's Secret as checked (its inputs are what the check verified)."""
        if spec.operation in ("up", "preview"):
            inputs = job.inputs = inputs_from_config((secret.get("data") or {})[INPUTS_KEY])
            if spec.operation == "preview":
                return self.engine.preview(inputs)

            def progress(done: int, planned: int) -> None:
                job.progress = RunProgress(done=done, planned=planned)
            return self.engine.up(inputs, message=spec.message, refresh=spec.refresh, on_progress=progress)
        if spec.operation == "destroy":
            return self.engine.destroy(spec.stack, message=spec.message)
        return self.engine.recover(spec.stack, live_runners=self.live(spec.stack, self.settings.clock()))

    def live(self, stack: str, now: datetime) -> dict[str, str]:
        return claims.live_holders((v for v, _ in self.store.views().values()), stack, now,
                                   grace=self.settings.cancel_grace)

    def _before_recover(self, job: Job) -> dict[str, str] | None:
        """The runners with a live claim on the stack, once the claim this runner took over has lapsed by the cancel
        grace (then its runner's lock is stale: locks.lock_is_stale); None when the run was lost meanwhile."""
        previous = job.takeover_of
        until = claims.expiry(previous) if previous is not None else None
        if until is not None:
            safe = until + timedelta(seconds=self.settings.cancel_grace)
            while (left := (safe - self.settings.clock()).total_seconds()) > 0:
                if job.forfeit.wait(min(left, 0.5)) or self.stopping.is_set() or job.cancelled_for:
                    return None
        return self.live(job.stack, self.settings.clock())

    def _deadline_timer(self, job: Job, deadline: datetime | None) -> threading.Timer | None:
        """Cancel the run when its deadline passes (the engine's own --run-timeout bounds it as well)."""
        if deadline is None:
            return None
        grace = self.settings.cancel_grace

        def passed() -> None:
            # Cancelled again while the run is not done: a cancel that came between the check before the engine
            # call and the engine starting its run found nothing to stop (the engine stops the runs in flight only).
            while not job.done.is_set():
                job.cancelled_for = job.cancelled_for or f"its deadline {rfc3339_seconds(deadline)} passed"
                self.lease.cancel(job, grace)
                if job.done.wait(grace + 1.0):
                    return
        timer = threading.Timer(max(0.0, (deadline - self.settings.clock()).total_seconds()), passed)
        timer.daemon = True
        timer.start()
        return timer

    def shown(self, job: Job, message: str) -> str:
        """The message as the run's status shows it. A run beside its cluster is read by the cluster's tenant: every
        ID its stack's inputs do not hold of its own side is redacted (stacks.disclosure; the inputs of an up or a
        preview, else the stack's as last applied, looked up only when the message has an ID). A run in the
        service's namespace (a transit stack's) keeps the whole text; so does this runner's log line."""
        if job.held.key.partition("/")[0] == self.settings.namespace:
            return message

        def known() -> frozenset[str]:
            inputs = job.inputs
            if inputs is None:
                try:
                    inputs = self.engine.applied(job.stack)
                except Exception as exc:  # noqa: BLE001 - then no ID is the tenant's: every one is redacted
                    LOG.info("%s: %s: no inputs to tell the tenant's IDs by (%s)", self.settings.identity,
                             job.held.key, exc)
            return known_to(inputs if isinstance(inputs, StackInputs) else None)
        return redact(message, known)

    def _detail(self, job: Job, out: RunResult | None) -> DetailRef | None:
        """The run's diff and log into the history store, under the run's name (the service records the run and
        reads the reference from its status); None without a store or a trace. A store that fails fails no run:
        said once, in this runner's log."""
        trace = out.trace if out is not None else job.trace
        if self.history is None or trace is None:
            return None
        try:
            return put_run_detail(self.history, job.stack, str(Obj(job.held.raw).name), trace.diff, trace.log,
                                  dropped=trace.dropped)
        except Exception as exc:  # noqa: BLE001 - the history is a record: it never fails the run
            LOG.warning("%s: %s: its diff and log not stored in %s: %s", self.settings.identity, job.held.key,
                        self.history.location, exc)
            return None

    def _cancelled_message(self, job: Job, error: str) -> str:
        if job.cancelled_for == "handback":
            return f"cancelled: runner {self.settings.identity} stopped ({error})"
        return f"cancelled: {job.cancelled_for}" if job.cancelled_for else error

    # ----------------------------------------------------------------- the result
    def _finish(self, job: Job, phase: str, out: RunResult | None, reason: str, message: str) -> str:
        """Write the result (the Secret, then the status), or hand the run back; nothing once forfeit. Returns the
        phase as recorded (HandedBack, Lost: not written as phases)."""
        if job.forfeit.is_set():
            return "Lost"
        identity = self.settings.identity
        stamp = rfc3339_seconds(self.settings.clock())
        if job.cancelled_for in ("handback", "second") and phase == "Cancelled":
            text = f"handed back by runner {identity}, which stopped before the run finished: another " \
                   "runner takes it over" if job.cancelled_for == "handback" else ""
            runner = identity if job.cancelled_for == "handback" else job.previous_runner
            try:
                if job.held.update(lambda status: status.model_copy(update={
                        "phase": "Pending", "claim": None, "message": text, "progress": None, "runner": runner})):
                    return "HandedBack"
            except Exception as exc:  # noqa: BLE001 - not handed back: its claim lapses, then it is taken over
                LOG.warning("%s: handing %s back failed: %s", identity, job.held.key, exc)
            return "Lost"
        spec = spec_of(job.held.raw)
        if out is not None and not isinstance(spec, str):
            try:
                self.runs.write_result(spec.inputs_secret, result_payload(out.outputs, list(out.drifted)))
            except Exception as exc:  # noqa: BLE001 - the status still says what happened
                LOG.warning("%s: writing the result of %s into its Secret failed: %s", identity, job.held.key, exc)
        changes = dict(out.changes) if out is not None else {}
        shown = self.shown(job, message)
        detail = self._detail(job, out)

        def change(status: StackRunStatus) -> StackRunStatus:
            return status.model_copy(update={
                "phase": phase, "reason": reason or None, "changes": changes,
                "summary": summary(changes) if out is not None else "", "message": shown[:32768],
                "drifted": len(out.drifted) if out is not None and phase == "Drifted" else 0,
                "permalink": out.permalink if out is not None else None, "end_time": stamp, "detail": detail,
                "progress": None, "runner": identity})  # the claim stays: who held it last, the takeovers
        for _ in range(3):
            try:
                return phase if job.held.update(change) else "Lost"
            except Exception as exc:  # noqa: BLE001 - the API is away: a few tries while the claim holds
                LOG.info("%s: writing the result of %s failed: %s", identity, job.held.key, exc)
                if job.forfeit.wait(1.0):
                    return "Lost"
        return "Lost"
