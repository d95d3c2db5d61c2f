"""The lease: a runner keeps its claim on each run it holds, and kills a run whose claim it could not keep.

- `renew(key)`, the reconcile of the runner's "runner-renew" controller: one look at a held run, every
  min(PROGRESS_EVERY, renew_every) / 2 seconds while it is held: renews the claim every `renew_every(ttl)`, and
  writes the run's progress (at most once every PROGRESS_EVERY seconds). A write that finds the run taken over
  or deleted forfeits it.
- `watch()`, the watchdog's tick (every WATCHDOG_TICK seconds): a run whose claim could not be renewed for
  ttl - margin is killed (engine.cancel(0)) before the claim lapses, and nothing more is written to it
  (automation/adapters/kube/leader.py's rule).
"""
from __future__ import annotations

import logging
from typing import Any

from automation.adapters.engine import Engine
from automation.kit.queue import Outcome
from automation.runner.jobs import PROGRESS_EVERY, Job, Jobs, Settings, margin, renew_every
from stacks.runs import claims
from stacks.runs.model import StackRunStatus

LOG = logging.getLogger("hubwright.runner")


class Lease:
    def __init__(self, settings: Settings, jobs: Jobs, engine: Engine):
        self.settings, self.jobs, self.engine = settings, jobs, engine
        self.every = renew_every(settings.claim_ttl)
        self.tick = min(PROGRESS_EVERY, self.every) / 2  # how often a held run is looked at

    def renew(self, key: str) -> Outcome:
        """Renew the claim on run `key` when due; write its progress when it moved (module docstring)."""
        job = self.jobs.get(key)
        if job is None or job.done.is_set() or job.forfeit.is_set():
            return Outcome.done()
        self._renew(job)
        return Outcome.done() if job.done.is_set() or job.forfeit.is_set() else Outcome.done(self.tick)

    def _renew(self, job: Job) -> None:
        monotonic = self.settings.monotonic
        now = monotonic()
        due = now - job.last_renewal >= self.every
        progress = job.progress if job.progress != job.progress_written else None
        if not due and (progress is None or now - job.last_progress < PROGRESS_EVERY):
            return
        sent = monotonic()
        stamp = self.settings.clock()

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
            LOG.info("%s: renewing the claim on %s failed: %s", self.settings.identity, job.held.key, exc)
            return
        if not written:
            LOG.warning("%s: %s was taken over or deleted: stopping its run", self.settings.identity, job.held.key)
            self.forfeit(job, "the run was taken over or deleted")
            return
        if due:
            job.last_renewal = now
            if monotonic() - sent < self.settings.claim_ttl - margin(self.settings.claim_ttl):
                job.last_sent = sent  # an answer that came too late does not count (leader.py)
        if progress is not None:
            job.progress_written, job.last_progress = progress, now

    def watch(self) -> None:
        """Kill each run whose claim could not be renewed for ttl - margin, before the claim lapses."""
        limit = self.settings.claim_ttl - margin(self.settings.claim_ttl)
        for job in self.jobs.all():
            if job.done.is_set() or job.forfeit.is_set():
                continue
            overdue = self.settings.monotonic() - job.last_sent
            if overdue >= limit:
                LOG.warning("%s: could not renew the claim on %s for %.1fs: killing its run before the claim "
                            "lapses", self.settings.identity, job.held.key, overdue)
                self.forfeit(job, f"the claim could not be renewed for {overdue:.1f}s")

    def forfeit(self, job: Job, why: str) -> None:
        if job.forfeit.is_set():
            return
        job.forfeit.set()
        job.cancelled_for = job.cancelled_for or why
        self.cancel(job, 0)

    def cancel(self, job: Job, grace: float) -> None:
        """engine.cancel stops every run in flight of this runner's engine: the runs other than `job` (with
        --workers > 1) are handed back, for this runner or another to run again."""
        for other in self.jobs.all():
            if other is not job and not other.cancelled_for:
                other.cancelled_for = "handback"
        self.engine.cancel(grace)
