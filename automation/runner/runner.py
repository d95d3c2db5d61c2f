"""The runner: claims HubStackRuns, executes them through an Engine, writes what happened (docs/service.md,
"Runners"; the rules are stacks/runs/). It runs on the controller kit's Manager (automation/kit/runtime.py), as
the service's controllers do:

    Manager ── informer (every HubStackRun) ──► RunStore (jobs.py) ──► wake: the "runner-pick" queue gets its key
       │
       ├─ "runner-pick": 1 worker, one key (PICK); its reconcile is one pick pass (pick.py) over every claimable
       │     run, fair between namespaces, one per stack, while a slot is free; a claim is a status write at the
       │     run's resourceVersion (409: another runner won). It comes back at the next claim's expiry
       │     (Outcome.done(requeue_after)), or sooner when a change or a freed slot wakes it.
       ├─ "runner-run": --workers workers; a claimed run's key: check, recover, engine, result (execute.py)
       ├─ "runner-renew": the held runs' keys, each back every few tenths of a second while held: renews the
       │     claim every `renew_every`, writes progress (at most 1/s) (lease.py)
       └─ "runner-watchdog" (a runnable): a run whose claim could not be renewed for ttl - margin is killed
              (engine.cancel(0)) before the claim lapses, and nothing more is written to it

The Manager starts the workers once the informer has listed (nothing is picked against a half-filled store) and
stops them all; its probes are the runner's /healthz and /readyz. Every read and write of the API server goes
through the object port (automation.adapters.kube.stackruns over automation.kit.objects.Objects). Built on an
object port instead of an ApiClient (tests/test_runner_direct.py, over doubles.objects.FakeObjects), the runner
has no informer: the test hands each change to `seen`, and calls the reconciles itself.

`drain(grace)` (SIGTERM): no more claims; the runs in flight get `grace` to finish, then they are cancelled and
handed back (Pending, no claim, `runner` still names this one, so the next runner recovers the stack's lock first).
"""
from __future__ import annotations

import logging
import re
import socket
import threading
import time
from typing import Callable

from automation.adapters.engine import Engine
from automation.adapters.history import HistoryStore
from automation.adapters.kube.stackruns import Api, StackRunClient, stackrun_source_of
from automation.adapters.loop import Every
from automation.kit.queue import Outcome
from automation.kit.runtime import Manager
from automation.runner.execute import Execution
from automation.runner.jobs import (CANCELLED, MAX_WAKE, MIN_MARGIN, PROGRESS_EVERY, WATCHDOG_TICK, Clock, Job, Jobs,
                                    Raw, RunnerMetrics, RunStore, Settings, margin, renew_every, utc_now,
                                    version_number)
from automation.runner.lease import Lease
from automation.runner.pick import Picker
from stacks.names import STACKRUNS
from stacks.runs import claims
from stacks.runs.admission import OUTSIDE_A_POD

__all__ = ["Runner", "hosts_problem", "Job", "RunnerMetrics", "PICK", "MAX_WAKE", "MIN_MARGIN", "WATCHDOG_TICK",
           "PROGRESS_EVERY", "CANCELLED", "margin", "renew_every", "utc_now"]

LOG = logging.getLogger("hubwright.runner")
PICK = "pick"  # the one key of the picker's queue


def hosts_problem(identity: str, runner_hosts: str | None) -> str | None:
    """Why a runner named `identity` cannot run beside the others (None: it can): its name must match
    --runner-hosts, or no other runner would ever recover a stack lock it left (automation.adapters.engine.locks)."""
    if not runner_hosts or re.fullmatch(runner_hosts, identity):
        return None
    return (f"runner {identity!r} (its name: --identity or POD_NAME, else its host name) does not match "
            f"--runner-hosts {runner_hosts!r} (HUBWRIGHT_RUNNER_HOSTS; the default matches the runner Deployment's pod "
            f"names): no other runner would ever recover a stack lock this one leaves. Outside a pod, pass "
            f"--runner-hosts {identity!r} (or a regex matching every runner's host name) to every runner and to the "
            f"service ({OUTSIDE_A_POD})")


class Runner:
    def __init__(self, api: Api, engine: Engine, *, namespace: str, identity: str | None = None,
                 claim_ttl: float = 30.0, workers: int = 1, cancel_grace: float = 60.0,
                 runner_hosts: str | None = None, clock: Clock = utc_now,
                 monotonic: Callable[[], float] = time.monotonic, metrics: RunnerMetrics | None = None,
                 not_ready: str | None = None, history: HistoryStore | None = None):
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
        unmatched = hosts_problem(self.identity, runner_hosts)
        if unmatched is not None:
            raise ValueError(unmatched)
        # Whole seconds, as the claim records it (rounded down: the watchdog never counts on more than is written).
        self.claim_ttl, self.workers, self.cancel_grace = float(int(claim_ttl)), workers, cancel_grace
        self.runner_hosts = runner_hosts
        self.clock, self.monotonic = clock, monotonic
        self.settings = Settings(self.identity, namespace, self.claim_ttl, workers, cancel_grace, clock, monotonic)
        self.metrics = metrics or RunnerMetrics()
        self.runs = StackRunClient(api, namespace)
        self.store = RunStore()
        self._jobs = Jobs()
        self._stopping = threading.Event()
        self._draining = threading.Event()
        self.manager = Manager()
        source = stackrun_source_of(api)
        if source is not None:  # over an object port, the test hands the changes to `seen`
            self.manager.source(source, self.store)
            self.manager.watch(source.name, lambda event, raw: self.wake())
        self.lease = Lease(self.settings, self._jobs, engine)
        self.execution = Execution(self.settings, jobs=self._jobs, store=self.store, runs=self.runs, engine=engine,
                                   lease=self.lease, metrics=self.metrics, seen=self._seen_version, wake=self.wake,
                                   stopping=self._stopping, history=history)
        self.picker = Picker(self.settings, jobs=self._jobs, store=self.store, runs=self.runs, start=self._start,
                             draining=self._draining)
        self._picking = self.manager.controller("runner-pick", self.reconcile_pick, threads="runner-pick")
        self._running = self.manager.controller("runner-run", self.execution.execute, workers=workers,
                                                threads="runner-run")
        # Twice the slots: the last renewal of a run that just ended, still in flight, never holds up a live run's.
        self._renewing = self.manager.controller("runner-renew", self.lease.renew, workers=2 * workers,
                                                 threads="runner-renew")
        self.watchdog = Every("runner-watchdog", WATCHDOG_TICK, self.lease.watch)
        self.manager.runnable(self.watchdog)
        self.manager.on_synced(self._synced)
        self.metrics.busy.set_function(lambda: len(self.jobs()))

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """The informer, then (once it listed) the workers and the watchdog."""
        self.manager.start()

    def _synced(self) -> bool:
        self.wake()  # the first pass, once the store holds every run
        return True

    def wake(self) -> None:
        """Look at the runs again (a run changed, a slot is free)."""
        self._picking.queue.add(PICK)

    def seen(self, event: str, raw: Raw) -> None:
        """What the informer does with a change of a run: the store takes it, the picker wakes (over an object
        port, the test's watch calls this)."""
        self.store.apply(event, raw)
        self.wake()

    def _seen_version(self) -> int:
        """The resourceVersion up to which this runner's watch has seen every write of a run."""
        informer = self.manager.informers.get(STACKRUNS)
        listed = version_number(informer.resource_version) if informer is not None else 0
        return max(self.store.version, listed)

    def _start(self, job: Job) -> None:
        """A claimed run goes to the run workers, and to the lease's."""
        self._running.queue.add(job.held.key)
        self._renewing.queue.add_after(job.held.key, self.lease.tick)

    def jobs(self) -> list[Job]:
        return self._jobs.all()

    @property
    def picks(self) -> int:
        """How many passes have looked at every run (a test's "it looked, and left it alone")."""
        return self.picker.picks

    def healthy(self) -> tuple[bool, dict]:
        manager = self.manager
        dead = [informer.thread_name for informer in manager.informers.values() if not informer.alive()]
        dead += [c.name for c in manager.controllers if not c.workers.alive()]
        if not self.watchdog.alive():
            dead.append(self.watchdog.thread_name)
        return not dead, {"dead": dead, "runs": [job.held.key for job in self.jobs()]}

    def ready(self) -> tuple[bool, dict]:
        if self.not_ready is not None:
            return False, {"problem": self.not_ready}
        synced = self.manager.started.is_set()
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
        self._stopping.set()
        if self.jobs():
            for job in self.jobs():
                job.cancelled_for = job.cancelled_for or "handback"
            self.engine.cancel(0)
        for job in self.jobs():
            job.done.wait(timeout)
        self.manager.stop(timeout)

    # ----------------------------------------------------------------- picking
    def reconcile_pick(self, key: object = PICK) -> Outcome:
        """The picker's reconcile: one pass, then back at the next claim's expiry (or sooner, when woken)."""
        try:
            wait = self.pick()
        except Exception:  # noqa: BLE001 - an API error must not stop the picking: look again soon
            LOG.exception("%s: picking runs failed", self.identity)
            wait = 1.0
        return Outcome.done(max(0.05, wait))

    def pick(self) -> float:
        """Claim what may be claimed while a slot is free (pick.py); returns the seconds until a claim seen here
        lapses (the next time to look without being woken)."""
        if self.not_ready is not None:
            return MAX_WAKE  # a run claimed here would only fail: leave it to a runner that can run it
        return self.picker.pick(self._views())

    def _views(self) -> dict[str, tuple[claims.RunView, Raw]]:
        return self.store.views()

    def _shown(self, job: Job, message: str) -> str:
        """The message as the run's status shows it (Execution.shown: redacted for a tenant's run)."""
        return self.execution.shown(job, message)
