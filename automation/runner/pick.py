"""The pick: one level-triggered pass over every claimable run, the reconcile of the runner's single-key
"runner-pick" controller (automation/runner/runner.py).

    the runs' store ──► claimable (stacks.runs.claims) ──► fair between namespaces (stacks.runs.order)
                             │ one run per stack, while a slot is free
                             ▼ claim: status Running + claim, at the run's resourceVersion (409: another runner won)
                        the job ──► the "runner-run" workers (execute.py), the "runner-renew" workers (lease.py)

A pass returns the seconds until a claim seen here lapses (at most MAX_WAKE): the controller looks again then
(`add_after`), without being woken by a change. Not a queue of runs: which run goes first depends on every other
claimable run (the namespaces' turns, the stacks in flight), so each pass looks at all of them.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable

from automation.adapters.kube.stackruns import StackRunClient
from automation.kit.objects import Obj
from automation.runner.jobs import MAX_WAKE, Job, Jobs, Raw, RunStore, Settings, version_number
from stacks.runs import claims, order

LOG = logging.getLogger("hubwright.runner")


class Picker:
    """Claims what may be claimed (module docstring); `start(job)` hands a claimed run to the workers."""

    def __init__(self, settings: Settings, *, jobs: Jobs, store: RunStore, runs: StackRunClient,
                 start: Callable[[Job], None], draining: threading.Event):
        self.settings, self.jobs, self.store, self.runs = settings, jobs, store, runs
        self.start, self.draining = start, draining
        self.served: dict[str, float] = {}  # namespace -> when this runner last started one of its runs
        self.picks = 0  # how many times it has looked at every run (a test's "it looked, and left it alone")

    def pick(self, views: dict[str, tuple[claims.RunView, Raw]]) -> float:
        """Claim what may be claimed among `views` (RunStore.views) while a slot is free; returns the seconds
        until a claim seen here lapses (the next time to look without being woken)."""
        now = self.settings.clock()
        grouped = claims.by_stack(v for v, _ in views.values())
        mine, busy_stacks = self.jobs.held()
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
        for run in order.fair(candidates, self.served):
            if self.draining.is_set() or len(mine) >= self.settings.workers:
                break
            if run.stack in busy_stacks:
                continue
            job = self._claim(run, views[run.key][1])
            if job is None:
                continue
            mine.add(run.key)
            busy_stacks.add(run.stack)
            self.served[run.namespace] = self.settings.monotonic()
        self.picks += 1
        return next_look

    def _claim(self, run: claims.RunView, raw: Raw) -> Job | None:
        settings = self.settings
        obj = Obj(raw)
        previous = run.status.claim
        took = claims.claimed(run, settings.identity, settings.clock(), int(settings.claim_ttl))
        held = self.runs.hold(raw, settings.identity)
        sent = settings.monotonic()
        if not held.update(lambda status: status.model_copy(update={
                "phase": "Running", "runner": settings.identity, "claim": took, "message": "",
                "observed_generation": obj.generation})):
            LOG.debug("%s: %s was claimed by another runner first", settings.identity, run.key)
            return None
        job = Job(held=held, stack=run.stack, operation=str(obj.spec.get("operation") or "?"),
                  takeover_of=previous if run.status.phase == "Running" and previous is not None else None,
                  handed_back=run.status.runner is not None, previous_runner=run.status.runner, last_sent=sent,
                  claim_version=version_number(Obj(held.raw).resource_version), last_renewal=sent)
        LOG.info("%s: claimed %s (%s %s%s)", settings.identity, run.key, job.operation, run.stack,
                 f", taken over from {previous.holder}" if job.takeover_of is not None and previous else "")
        self.jobs.add(job)
        self.start(job)
        return job
