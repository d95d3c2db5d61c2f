"""The runner: claims HubStackRuns, executes them through an Engine, writes what happened (docs/service.md,
"Runners"; the rules are stacks/runs/).

    informer (every HubStackRun) ──► wake ──► pick: claimable runs, fair between namespaces, while a slot is free
                                                 │ claim: status Running + claim, at the run's resourceVersion
                                                 ▼ (409: another runner won; move on)
    one thread per run: check (checks.refusal) ─► recover (a takeover) ─► engine ─► result (Secret, then status)
    one renewal thread per run: renews the claim every `renew_every`, writes progress (at most 1/s)
    the watchdog: a run whose claim could not be renewed for ttl - margin is killed (engine.cancel(0)) before
                  the claim lapses, and nothing more is written to it (automation/adapters/kube/leader.py's rule)

The Manager of automation/kit/runtime.py is not used: the runner is a sibling layer of the service (it may not
import it), and it has one informer and no work queue; the Informer (automation.adapters.kube.informer) is used
directly, with a DictStore whose handler wakes the picker.

`drain(grace)` (SIGTERM): no more claims; the runs in flight get `grace` to finish, then they are cancelled and
handed back (Pending, no claim, `runner` still names this one, so the next runner recovers the stack's lock first).
"""
from __future__ import annotations

import logging
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Mapping

from kubernetes import client
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from automation.adapters import logs
from automation.adapters.engine import Engine, EngineError, RunCancelled, RunResult, StackLocked
from automation.adapters.kube.informer import DictStore, Informer, Raw
from automation.adapters.kube.stackruns import Held, StackRunClient, key_of, stackrun_source
from stacks import status as reasons
from stacks.disclosure import known_to, redact
from stacks.inputs import StackInputs, StackProgramInputs, inputs_from_config
from stacks.runs import claims, order
from stacks.runs.checks import refusal
from stacks.runs.model import (FINISHED, INPUTS_KEY, REFUSED, StackRunSpec, StackRunStatus, result_payload, spec_of,
                               status_of, summary)
from stacks.status import RunProgress
from stacks.times import rfc3339_seconds, parse_rfc3339

LOG = logging.getLogger("hubwright.runner")

MIN_MARGIN = 2.0  # seconds before its claim lapses by which a runner that could not renew has killed its run
WATCHDOG_TICK = 0.05  # how late after its deadline the watchdog may notice it
PROGRESS_EVERY = 1.0  # seconds between two progress writes of one run
MAX_WAKE = 10.0  # the picker looks at least this often (claims that lapse are also woken for exactly)
CANCELLED = "RunCancelled"
Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def margin(ttl: float) -> float:
    """How long before its claim lapses a runner that could not renew has killed its run: 2 s, or 20 % of the
    ttl when that is more."""
    return max(MIN_MARGIN, 0.2 * ttl)


def renew_every(ttl: float) -> float:
    """A renewal every third of the ttl, and at least two within the time the watchdog allows."""
    return min(ttl / 3, (ttl - margin(ttl)) / 2)


class RunnerMetrics:
    """hubwright_runner_runs_total{operation,phase} and hubwright_runner_busy, in a registry of the runner's own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.runs = Counter("hubwright_runner_runs", "Runs this runner finished, by operation and phase "
                            "(Succeeded, Drifted, Failed, Cancelled, Refused, HandedBack, Lost).",
                            ["operation", "phase"], registry=self.registry)
        self.busy = Gauge("hubwright_runner_busy", "Runs this runner holds now.", registry=self.registry)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


@dataclass
class Job:
    """One run this runner holds."""

    held: Held
    stack: str
    operation: str
    takeover_of: claims.Claim | None  # the lapsed claim this runner took the run from (None: no takeover)
    handed_back: bool  # a runner ran it before and handed it back (drain): recover first
    previous_runner: str | None  # status.runner before this claim
    last_sent: float  # monotonic: when the last write that renewed the claim was sent
    claim_version: int  # the resourceVersion the claim was written at
    forfeit: threading.Event = field(default_factory=threading.Event)  # lost or not renewed: write nothing more
    done: threading.Event = field(default_factory=threading.Event)
    cancelled_for: str = ""  # why this runner cancelled it (drain, deadline): the result says so
    progress: RunProgress | None = None
    progress_written: RunProgress | None = None
    inputs: StackProgramInputs | None = None  # the inputs the engine was given (up, preview)


class Runner:
    def __init__(self, api_client: client.ApiClient, engine: Engine, *, namespace: str, identity: str | None = None,
                 claim_ttl: float = 30.0, workers: int = 1, cancel_grace: float = 60.0,
                 runner_hosts: str | None = None, clock: Clock = utc_now,
                 monotonic: Callable[[], float] = time.monotonic, metrics: RunnerMetrics | None = None,
                 not_ready: str | None = None):
        if claim_ttl < 3:
            raise ValueError(f"--claim-ttl must be >= 3 seconds (got {claim_ttl})")
        # Why this runner can run nothing (automation.adapters.engine.plugins: the image has no AWS plugin), or
        # None: then it claims no run (another runner, or none, takes it) and /readyz says why.
        self.not_ready = not_ready
        if workers < 1:
            raise ValueError(f"--workers must be >= 1 (got {workers})")
        self.engine = engine
        self.namespace = namespace
        self.identity = identity or socket.gethostname()
        if runner_hosts and not re.fullmatch(runner_hosts, self.identity):
            raise ValueError(f"--identity {self.identity!r} does not match --runner-hosts {runner_hosts!r}: the "
                             "stack locks this runner writes would never be recovered by another runner")
        # Whole seconds, as the claim records it (rounded down: the watchdog never counts on more than is written).
        self.claim_ttl, self.workers, self.cancel_grace = float(int(claim_ttl)), workers, cancel_grace
        self.runner_hosts = runner_hosts
        self.clock, self.monotonic = clock, monotonic
        self.metrics = metrics or RunnerMetrics()
        self.runs = StackRunClient(api_client, namespace)
        self.informer = Informer(stackrun_source(api_client), DictStore(self._seen))
        # run key -> (holder, acquireTime, the resourceVersion at which this runner's watch first saw that claim):
        # the claim's own version, which later writes to the run (its start, renewals) do not move.
        self._claims_seen: dict[str, tuple[str, str, int]] = {}
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._draining = threading.Event()
        self._served: dict[str, float] = {}  # namespace -> when this runner last started one of its runs
        self.picks = 0  # how many times it has looked at every run (a test's "it looked, and left it alone")
        self._threads: list[threading.Thread] = []
        self.metrics.busy.set_function(lambda: len(self.jobs()))

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> None:
        self.informer.start()
        for target, name in ((self._pick_loop, "runner-pick"), (self._watchdog, "runner-watchdog")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def wake(self) -> None:
        self._wake.set()

    def _seen(self, kind: str, raw: Raw) -> None:
        """Every change of a run, in the API server's order: note when each claim first showed; wake the picker."""
        key = key_of(raw)
        claim = status_of(raw).claim
        with self._lock:
            if kind == "DELETED" or claim is None:
                self._claims_seen.pop(key, None)
            else:
                known = self._claims_seen.get(key)
                if known is None or known[:2] != (claim.holder, claim.acquire_time):
                    self._claims_seen[key] = (claim.holder, claim.acquire_time, _version(raw))
        self.wake()

    def jobs(self) -> list[Job]:
        with self._lock:
            return list(self._jobs.values())

    def healthy(self) -> tuple[bool, dict]:
        dead = [t.name for t in self._threads if not t.is_alive()]
        if not self.informer.alive():
            dead.append(self.informer.thread_name)
        return not dead, {"dead": dead, "runs": [job.held.key for job in self.jobs()]}

    def ready(self) -> tuple[bool, dict]:
        if self.not_ready is not None:
            return False, {"problem": self.not_ready}
        synced = self.informer.synced.is_set()
        return synced and not self._draining.is_set(), {"synced": synced, "draining": self._draining.is_set()}

    def drain(self, grace: float) -> bool:
        """Stop claiming; the runs in flight get `grace` seconds to finish, then they are cancelled and handed back
        (Pending, no claim) for another runner. True when nothing is left in hand."""
        self._draining.set()
        deadline = self.monotonic() + grace
        for job in self.jobs():
            job.done.wait(max(0.0, deadline - self.monotonic()))
        left = [job for job in self.jobs() if not job.done.is_set()]
        if left:
            LOG.warning("%s: draining: %d run(s) still in flight after %.0fs (%s): cancelling and handing them "
                        "back", self.identity, len(left), grace, ", ".join(j.held.key for j in left))
            for job in left:
                job.cancelled_for = "handback"
            self.engine.cancel(0)
            for job in left:
                job.done.wait(30)
        return not [job for job in self.jobs() if not job.done.is_set()]

    def stop(self, timeout: float = 10.0) -> None:
        """Stop picking and watching (drain first to hand the runs in flight back; what is still running is
        cancelled here)."""
        self._draining.set()
        self._stop.set()
        self._wake.set()
        if self.jobs():
            for job in self.jobs():
                job.cancelled_for = job.cancelled_for or "handback"
            self.engine.cancel(0)
        for job in self.jobs():
            job.done.wait(timeout)
        self.informer.stop(timeout)
        for thread in self._threads:
            thread.join(timeout)

    # ----------------------------------------------------------------- picking and claiming
    def _views(self) -> dict[str, tuple[claims.RunView, Raw]]:
        """The unfinished runs (every reader here skips finished ones: picking, a second claim of a stack, the live
        holders), so each wake parses only those, not the --keep-runs history of every stack."""
        found: dict[str, tuple[claims.RunView, Raw]] = {}
        for key in self.informer.store.keys():
            raw = self.informer.store.get(key)
            if raw is None or (raw.get("status") or {}).get("phase") in FINISHED:
                continue
            found[key] = (claims.view(raw), raw)
        return found

    def _pick_loop(self) -> None:
        if not self._wait_synced():
            return
        while not self._stop.is_set():
            self._wake.clear()
            wait = MAX_WAKE
            try:
                wait = self.pick()
            except Exception:  # noqa: BLE001 - an API error must not end the loop: look again soon
                LOG.exception("%s: picking runs failed", self.identity)
                wait = 1.0
            self._wake.wait(max(0.05, wait))

    def _wait_synced(self) -> bool:
        while not self.informer.synced.wait(0.2):
            if self._stop.is_set():
                return False
        return True

    def pick(self) -> float:
        """Claim what may be claimed while a slot is free; returns the seconds until a claim seen here lapses (the
        next time to look without being woken)."""
        if self.not_ready is not None:
            return MAX_WAKE  # a run claimed here would only fail: leave it to a runner that can run it
        now = self.clock()
        views = self._views()
        grouped = claims.by_stack(v for v, _ in views.values())
        with self._lock:
            mine = set(self._jobs)
            busy_stacks = {job.stack for job in self._jobs.values()}
        next_look = MAX_WAKE
        candidates = []
        for key, (run, _) in views.items():
            if key in mine or run.finished:
                continue
            ok, _why = claims.claimable(run, grouped.get(run.stack, []), now)
            if ok:
                candidates.append(run)
            elif run.status.claim is not None and (until := claims.expiry(run.status.claim)) is not None:
                next_look = min(next_look, max(0.05, (until - now).total_seconds() + 0.05))
        for run in order.fair(candidates, self._served):
            if self._draining.is_set() or len(mine) >= self.workers:
                break
            if run.stack in busy_stacks:
                continue
            job = self._claim(run, views[run.key][1])
            if job is None:
                continue
            mine.add(run.key)
            busy_stacks.add(run.stack)
            self._served[run.namespace] = self.monotonic()
        self.picks += 1
        return next_look

    def _claim(self, run: claims.RunView, raw: Raw) -> Job | None:
        now = self.clock()
        meta = raw.get("metadata") or {}
        previous = run.status.claim
        took = claims.claimed(run, self.identity, now, int(self.claim_ttl))
        held = self.runs.hold(raw, self.identity)
        sent = self.monotonic()
        if not held.update(lambda status: status.model_copy(update={
                "phase": "Running", "runner": self.identity, "claim": took, "message": "",
                "observed_generation": meta.get("generation")})):
            LOG.debug("%s: %s was claimed by another runner first", self.identity, run.key)
            return None
        spec = raw.get("spec") or {}
        job = Job(held=held, stack=run.stack, operation=str(spec.get("operation") or "?"),
                  takeover_of=previous if run.status.phase == "Running" and previous is not None else None,
                  handed_back=run.status.runner is not None, previous_runner=run.status.runner, last_sent=sent,
                  claim_version=_version(held.raw))
        LOG.info("%s: claimed %s (%s %s%s)", self.identity, run.key, job.operation, run.stack,
                 f", taken over from {previous.holder}" if job.takeover_of is not None and previous else "")
        with self._lock:
            self._jobs[run.key] = job
        for target, name in ((self._execute, "run"), (self._renew, "renew")):
            threading.Thread(target=target, args=(job,), name=f"runner-{name}-{run.key}", daemon=True).start()
        return job

    # ----------------------------------------------------------------- the lease
    def _renew(self, job: Job) -> None:
        """Renew the claim every renew_every(ttl); write progress at most every PROGRESS_EVERY seconds."""
        every = renew_every(self.claim_ttl)
        last_renewal = self.monotonic()
        last_progress = float("-inf")
        while not job.done.wait(min(PROGRESS_EVERY, every) / 2):
            if job.forfeit.is_set():
                return
            now = self.monotonic()
            due = now - last_renewal >= every
            progress = job.progress if job.progress != job.progress_written else None
            if not due and (progress is None or now - last_progress < PROGRESS_EVERY):
                continue
            sent = self.monotonic()
            stamp = self.clock()

            def change(status: StackRunStatus) -> StackRunStatus:
                update: dict[str, Any] = {}
                if due and status.claim is not None:
                    update["claim"] = claims.renewed(status.claim, stamp)
                if progress is not None:
                    update["progress"] = progress
                return status.model_copy(update=update)
            try:
                written = job.held.update(change)
            except Exception as exc:  # noqa: BLE001 - the API is away: try again; the watchdog keeps the time
                LOG.info("%s: renewing the claim on %s failed: %s", self.identity, job.held.key, exc)
                continue
            if not written:
                LOG.warning("%s: %s was taken over or deleted: stopping its run", self.identity, job.held.key)
                self._forfeit(job, "the run was taken over or deleted")
                return
            if due:
                last_renewal = now
                if self.monotonic() - sent < self.claim_ttl - margin(self.claim_ttl):
                    job.last_sent = sent  # an answer that came too late does not count (leader.py)
            if progress is not None:
                job.progress_written, last_progress = progress, now

    def _watchdog(self) -> None:
        """Kill a run whose claim could not be renewed for ttl - margin, before the claim lapses."""
        limit = self.claim_ttl - margin(self.claim_ttl)
        while not self._stop.wait(WATCHDOG_TICK):
            for job in self.jobs():
                if job.done.is_set() or job.forfeit.is_set():
                    continue
                overdue = self.monotonic() - job.last_sent
                if overdue >= limit:
                    LOG.warning("%s: could not renew the claim on %s for %.1fs: killing its run before the claim "
                                "lapses", self.identity, job.held.key, overdue)
                    self._forfeit(job, f"the claim could not be renewed for {overdue:.1f}s")

    def _forfeit(self, job: Job, why: str) -> None:
        if job.forfeit.is_set():
            return
        job.forfeit.set()
        job.cancelled_for = job.cancelled_for or why
        self._cancel(job, 0)

    def _cancel(self, job: Job, grace: float) -> None:
        """engine.cancel stops every run in flight of this runner's engine: the runs other than `job` (with
        --workers > 1) are handed back, for this runner or another to run again."""
        for other in self.jobs():
            if other is not job and not other.cancelled_for:
                other.cancelled_for = "handback"
        self.engine.cancel(grace)

    # ----------------------------------------------------------------- executing
    def _execute(self, job: Job) -> None:
        started = self.monotonic()
        key, raw = job.held.key, job.held.raw
        phase, out, reason, error = "Failed", None, "", ""
        try:
            phase, out, reason, error = self._run(job, raw)
        except Exception as exc:  # noqa: BLE001 - whatever happens, the run gets a result
            LOG.exception("%s: running %s failed", self.identity, key)
            phase, reason, error = "Failed", "Error", f"{type(exc).__name__}: {exc}"
        finally:
            recorded = self._finish(job, phase, out, reason, error)
            spec = raw.get("spec") or {}
            outcome = {"Succeeded": "succeeded", "Drifted": "failed", "Cancelled": "cancelled", "Refused": "refused",
                       "HandedBack": "handed back", "Lost": "lost"}.get(
                recorded, "locked" if reason == "StackLocked" else "failed")
            logs.log_run(job.operation, outcome, self.monotonic() - started,
                         changes=None if out is None else out.changes, drifted=[] if out is None else out.drifted,
                         reason=reason, error=error, stack=job.stack, cluster=str(spec.get("cluster") or ""),
                         runner=self.identity, run=key, phase=recorded)
            self.metrics.runs.labels(job.operation, recorded).inc()
            with self._lock:
                self._jobs.pop(key, None)
            job.done.set()
            self.wake()

    def _run(self, job: Job, raw: Raw) -> tuple[str, RunResult | None, str, str]:
        """(phase, result, reason, message) of the run: refused, cancelled, or what the engine did."""
        key = job.held.key
        if self._second_of_stack(job):
            job.cancelled_for = "second"
            return "Cancelled", None, CANCELLED, "another runner claimed a run of the same stack first"
        spec = spec_of(raw)
        if isinstance(spec, str):
            return "Refused", None, REFUSED, f"refused: the spec does not parse ({spec})"
        secret = self.runs.secret(spec.inputs_secret)
        why = refusal(key, (raw.get("metadata") or {}).get("generation"), spec, secret,
                      service_namespace=self.namespace)
        if why is not None:
            LOG.warning("%s: refused %s: %s", self.identity, key, why)
            return "Refused", None, REFUSED, f"refused: {why}"
        deadline = parse_rfc3339(spec.deadline)
        if deadline is not None and self.clock() >= deadline:
            return "Cancelled", None, CANCELLED, f"not started: its deadline {spec.deadline} had passed"
        live = None
        if job.takeover_of is not None or job.handed_back:
            live = self._before_recover(job)
            if live is None:
                return "Cancelled", None, CANCELLED, "stopped before it started"
        if job.forfeit.is_set() or job.cancelled_for:
            return "Cancelled", None, CANCELLED, "stopped before it started"
        stamp = rfc3339_seconds(self.clock())
        if not job.held.update(lambda status: status.model_copy(update={"start_time": stamp})):
            self._forfeit(job, "the run was taken over or deleted before it started")
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
                LOG.info("%s: %s is locked: recovering, then once more", self.identity, spec.stack)
                live = live if live is not None else self._live(spec.stack, self.clock())
                self.engine.recover(spec.stack, live_runners=live)
                out = self._call(job, spec, secret or {})
        except RunCancelled as exc:
            return "Cancelled", None, CANCELLED, self._cancelled_message(job, str(exc))
        except EngineError as exc:
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
        itself, as the watch first showed it: `_seen`) yields, the earlier one sees a later one and runs. A run of
        one stack is never executed twice at once."""
        mine = job.claim_version
        deadline = self.monotonic() + max(2.0, renew_every(self.claim_ttl))
        while _version_text(self.informer.resource_version) < mine and self.monotonic() < deadline:
            if job.forfeit.wait(0.02):
                return False
        now = self.clock()
        with self._lock:
            seen = dict(self._claims_seen)
        for run, _ in self._views().values():
            claim = run.status.claim
            since = seen.get(run.key)
            if run.key != job.held.key and run.stack == job.stack and not run.finished \
                    and run.status.phase == "Running" and claim is not None and claim.holder != self.identity \
                    and not claims.expired(claim, now) and since is not None \
                    and since[:2] == (claim.holder, claim.acquire_time) and since[2] < mine:
                LOG.info("%s: %s: %s holds %s of the same stack since before this claim: handing it back",
                         self.identity, job.held.key, claim.holder, run.key)
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
        return self.engine.recover(spec.stack, live_runners=self._live(spec.stack, self.clock()))

    def _live(self, stack: str, now: datetime) -> dict[str, str]:
        return claims.live_holders((v for v, _ in self._views().values()), stack, now, grace=self.cancel_grace)

    def _before_recover(self, job: Job) -> dict[str, str] | None:
        """The runners with a live claim on the stack, once the claim this runner took over has lapsed by the cancel
        grace (then its runner's lock is stale: locks.lock_is_stale); None when the run was lost meanwhile."""
        previous = job.takeover_of
        until = claims.expiry(previous) if previous is not None else None
        if until is not None:
            safe = until + timedelta(seconds=self.cancel_grace)
            while (left := (safe - self.clock()).total_seconds()) > 0:
                if job.forfeit.wait(min(left, 0.5)) or self._stop.is_set() or job.cancelled_for:
                    return None
        return self._live(job.stack, self.clock())

    def _deadline_timer(self, job: Job, deadline: datetime | None) -> threading.Timer | None:
        """Cancel the run when its deadline passes (the engine's own --run-timeout bounds it as well)."""
        if deadline is None:
            return None

        def passed() -> None:
            # Cancelled again while the run is not done: a cancel that came between the check before the engine
            # call and the engine starting its run found nothing to stop (the engine stops the runs in flight only).
            while not job.done.is_set():
                job.cancelled_for = job.cancelled_for or f"its deadline {rfc3339_seconds(deadline)} passed"
                self._cancel(job, self.cancel_grace)
                if job.done.wait(self.cancel_grace + 1.0):
                    return
        timer = threading.Timer(max(0.0, (deadline - self.clock()).total_seconds()), passed)
        timer.daemon = True
        timer.start()
        return timer

    def _shown(self, job: Job, message: str) -> str:
        """The message as the run's status shows it. A run beside its cluster is read by the cluster's tenant: every
        ID its stack's inputs do not hold of its own side is redacted (stacks.disclosure; the inputs of an up or a
        preview, else the stack's as last applied, looked up only when the message has an ID). A run in the
        service's namespace (a transit stack's) keeps the whole text; so does this runner's log line."""
        if job.held.key.partition("/")[0] == self.namespace:
            return message

        def known() -> frozenset[str]:
            inputs = job.inputs
            if inputs is None:
                try:
                    inputs = self.engine.applied(job.stack)
                except Exception as exc:  # noqa: BLE001 - then no ID is the tenant's: every one is redacted
                    LOG.info("%s: %s: no inputs to tell the tenant's IDs by (%s)", self.identity, job.held.key, exc)
            return known_to(inputs if isinstance(inputs, StackInputs) else None)
        return redact(message, known)

    def _cancelled_message(self, job: Job, error: str) -> str:
        if job.cancelled_for == "handback":
            return f"cancelled: runner {self.identity} stopped ({error})"
        return f"cancelled: {job.cancelled_for}" if job.cancelled_for else error

    # ----------------------------------------------------------------- the result
    def _finish(self, job: Job, phase: str, out: RunResult | None, reason: str, message: str) -> str:
        """Write the result (the Secret, then the status), or hand the run back; nothing once forfeit. Returns the
        phase as recorded (HandedBack, Lost: not written as phases)."""
        if job.forfeit.is_set():
            return "Lost"
        stamp = rfc3339_seconds(self.clock())
        if job.cancelled_for in ("handback", "second") and phase == "Cancelled":
            text = f"handed back by runner {self.identity}, which stopped before the run finished: another " \
                   "runner takes it over" if job.cancelled_for == "handback" else ""
            runner = self.identity if job.cancelled_for == "handback" else job.previous_runner
            try:
                if job.held.update(lambda status: status.model_copy(update={
                        "phase": "Pending", "claim": None, "message": text, "progress": None, "runner": runner})):
                    return "HandedBack"
            except Exception as exc:  # noqa: BLE001 - not handed back: its claim lapses, then it is taken over
                LOG.warning("%s: handing %s back failed: %s", self.identity, job.held.key, exc)
            return "Lost"
        spec = spec_of(job.held.raw)
        if out is not None and not isinstance(spec, str):
            try:
                self.runs.write_result(spec.inputs_secret, result_payload(out.outputs, list(out.drifted)))
            except Exception as exc:  # noqa: BLE001 - the status still says what happened
                LOG.warning("%s: writing the result of %s into its Secret failed: %s", self.identity, job.held.key,
                            exc)
        changes = dict(out.changes) if out is not None else {}
        shown = self._shown(job, message)

        def change(status: StackRunStatus) -> StackRunStatus:
            return status.model_copy(update={
                "phase": phase, "reason": reason or None, "changes": changes,
                "summary": summary(changes) if out is not None else "", "message": shown[:32768],
                "drifted": len(out.drifted) if out is not None and phase == "Drifted" else 0,
                "permalink": out.permalink if out is not None else None, "end_time": stamp,
                "progress": None, "runner": self.identity})  # the claim stays: who held it last, the takeovers
        for _ in range(3):
            try:
                return phase if job.held.update(change) else "Lost"
            except Exception as exc:  # noqa: BLE001 - the API is away: a few tries while the claim holds
                LOG.info("%s: writing the result of %s failed: %s", self.identity, job.held.key, exc)
                if job.forfeit.wait(1.0):
                    return "Lost"
        return "Lost"


def _version(raw: Raw) -> int:
    return _version_text((raw.get("metadata") or {}).get("resourceVersion"))


def _version_text(version: str | None) -> int:
    """A resourceVersion as a number (etcd's revision: one API server's versions are ordered so)."""
    try:
        return int(version or 0)
    except ValueError:
        return 0
