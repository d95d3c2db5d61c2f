"""What every part of the runner shares: its settings, the runs it holds (`Job`s, in `Jobs`), the store its
informer fills (`RunStore`), its metrics, and the lease's arithmetic (`margin`, `renew_every`)."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from automation.adapters.kube.stackruns import Held
from automation.kit.objects import Obj
from automation.adapters.engine import Trace
from stacks.inputs import StackProgramInputs
from stacks.runs import claims
from stacks.runs.model import FINISHED, status_of
from stacks.status import RunProgress

MIN_MARGIN = 2.0  # seconds before its claim lapses by which a runner that could not renew has killed its run
WATCHDOG_TICK = 0.05  # how late after its deadline the watchdog may notice it
PROGRESS_EVERY = 1.0  # seconds between two progress writes of one run
MAX_WAKE = 10.0  # the picker looks at least this often (claims that lapse are also woken for exactly)
CANCELLED = "RunCancelled"
Clock = Callable[[], datetime]
Raw = dict[str, Any]


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def margin(ttl: float) -> float:
    """How long before its claim lapses a runner that could not renew has killed its run: 2 s, or 20 % of the
    ttl when that is more."""
    return max(MIN_MARGIN, 0.2 * ttl)


def renew_every(ttl: float) -> float:
    """A renewal every third of the ttl, and at least two within the time the watchdog allows."""
    return min(ttl / 3, (ttl - margin(ttl)) / 2)


@dataclass(frozen=True)
class Settings:
    """Who the runner is and its bounds (the flags of `python -m automation runner`), and its clocks."""

    identity: str
    namespace: str  # the service's: the runs' Secrets, and the transit stacks' runs
    claim_ttl: float  # whole seconds, as the claim records it
    workers: int  # runs held at once
    cancel_grace: float
    clock: Clock = utc_now
    monotonic: Callable[[], float] = time.monotonic


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
    trace: Trace | None = None  # what the engine did (its diff and log), for the run's detail in the history store
    started: bool = False  # a worker took it (automation/runner/execute.py)
    last_renewal: float = float("-inf")  # monotonic: the last renewal that succeeded (automation/runner/lease.py)
    last_progress: float = float("-inf")  # monotonic: the last progress written


class Jobs:
    """The runs this runner holds, by run key."""

    def __init__(self) -> None:
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()

    def all(self) -> list[Job]:
        with self._lock:
            return list(self._jobs.values())

    def get(self, key: str) -> Job | None:
        with self._lock:
            return self._jobs.get(key)

    def add(self, job: Job) -> None:
        with self._lock:
            self._jobs[job.held.key] = job

    def pop(self, key: str) -> None:
        with self._lock:
            self._jobs.pop(key, None)

    def held(self) -> tuple[set[str], set[str]]:
        """(the keys, the stacks) held now."""
        with self._lock:
            return set(self._jobs), {job.stack for job in self._jobs.values()}


def version_number(version: str | None) -> int:
    """A resourceVersion as a number (etcd's revision: one API server's versions are ordered so)."""
    try:
        return int(version or 0)
    except ValueError:
        return 0


class RunStore:
    """The informer's store of HubStackRuns (automation.adapters.kube.informer.Store), which also notes, for each
    run, when its claim first showed: (holder, acquireTime, the resourceVersion at which this runner's watch first
    saw that claim), the claim's own version, which later writes to the run (its start, renewals) do not move; and
    the highest resourceVersion it has seen (the watch has seen every write up to it)."""

    def __init__(self) -> None:
        self._objects: dict[str, Raw] = {}
        self._claims_seen: dict[str, tuple[str, str, int]] = {}
        self.version = 0
        self._lock = threading.Lock()

    def get(self, key: str) -> Raw | None:
        with self._lock:
            return self._objects.get(key)

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._objects)

    def apply(self, kind: str, raw: Raw) -> None:
        """Every change of a run, in the API server's order."""
        obj = Obj(raw)
        key, version, claim = obj.key, version_number(obj.resource_version), status_of(raw).claim
        with self._lock:
            if kind == "DELETED":
                self._objects.pop(key, None)
            else:
                self._objects[key] = raw
            self.version = max(self.version, version)
            if kind == "DELETED" or claim is None:
                self._claims_seen.pop(key, None)
            else:
                known = self._claims_seen.get(key)
                if known is None or known[:2] != (claim.holder, claim.acquire_time):
                    self._claims_seen[key] = (claim.holder, claim.acquire_time, version)

    def claims_seen(self) -> dict[str, tuple[str, str, int]]:
        with self._lock:
            return dict(self._claims_seen)

    def views(self) -> dict[str, tuple[claims.RunView, Raw]]:
        """The unfinished runs (every reader here skips finished ones: picking, a second claim of a stack, the live
        holders), so each pass parses only those, not the --keep-runs history of every stack."""
        found: dict[str, tuple[claims.RunView, Raw]] = {}
        for key in self.keys():
            raw = self.get(key)
            if raw is None or Obj(raw).status.get("phase") in FINISHED:
                continue
            found[key] = (claims.view(raw), raw)
        return found
