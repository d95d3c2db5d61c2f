"""The work queue: one entry per cluster key, one operation per stack at a time.

Semantics of client-go's workqueue, which the Pulumi Kubernetes Operator and
every controller-runtime operator rely on:

- `add(key)` while the key is already queued coalesces (100 events -> 1 entry);
  while the key is being worked on, it is marked dirty and queued again once the
  worker calls `done(key)` - never handed to a second worker meanwhile. With
  `settle` > 0 it is queued again only once its changes have stopped for
  `settle` seconds (at most `settle_max` later): a burst of edits to one cluster
  costs two runs, the first at once and one with the final state.
- `add_after(key, seconds)` schedules a key (drift checks, lock waits); the
  earliest time wins, and `add(key)` supersedes a pending timer.
- `add_rate_limited(key)` retries with capped exponential backoff and jitter;
  `forget(key)` resets it after a success. The cap is minutes, not the
  24 hours after which the operator's users found stacks silently given up on.

Fair between tenants: the ready keys are grouped by namespace (`group=`; the
part of a "namespace/name" key before the "/", a key without one is a group of
its own), and `get()` hands out a key of the group with the fewest keys in
flight; among equals, the group that has waited longest (since it got work or
was last served), so they take turns; within a group, first come first served.
So a freed worker never goes to a namespace that already holds more workers
than another namespace with work waiting: a namespace with nothing in flight
gets the next worker that frees up, behind only other namespaces with nothing
in flight that waited longer, however many keys (failing or changing) another
namespace has queued; busy namespaces converge on equal shares.
What it does not do:
- pre-empt: a run that has started runs to its end, so a newcomer waits for the
  first run in flight to end (one run time at most);
- reserve: it is work-conserving, a worker never idles while any key is ready,
  so one namespace alone may use every worker;
- weigh time: the share is counted in runs in flight, not seconds, and a key
  waiting on a timer (backoff, drift check, settle) is not ready and not counted;
- know accounts: a tenant that owns several namespaces gets several shares.

`Workers` runs N threads that take keys and hand them to the reconciler; what
the reconciler returns (an `Outcome`) decides how the key comes back.
"""
from __future__ import annotations

import heapq
import itertools
import logging
import random
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass
from typing import Callable, Hashable

from automation.adapters.backoff import Backoff

LOG = logging.getLogger("hubwright.queue")


@dataclass(frozen=True)
class Outcome:
    """What a reconcile asks of the queue for its key: done (maybe come back after a while), retry with backoff,
    or stalled with a reason (nothing runs until an input changes; with a recheck delay, looked at again then).
    The queue treats a stalled outcome like done-after: the reason is for the reconciler's callers and tests."""

    failed: bool = False  # retry with backoff
    requeue_after: float | None = None  # come back later (drift check, stack locked, stalled recheck); not a failure
    stalled: str | None = None  # the reason a person must act (a condition reason: InvalidSpec, AccessDenied, ...)

    @classmethod
    def done(cls, requeue_after: float | None = None) -> "Outcome":
        return cls(False, requeue_after)

    @classmethod
    def retry(cls) -> "Outcome":
        return cls(True, None)

    @classmethod
    def stall(cls, reason: str, recheck: float | None = None) -> "Outcome":
        """Refused for `reason`: looked at again after `recheck` seconds (None: only when an input changes)."""
        return cls(False, recheck, reason)


def fairness_group(key: Hashable) -> Hashable:
    """The group of a "namespace/name" key: its namespace. A key without "/" is a group of its own."""
    if isinstance(key, str) and "/" in key:
        return key.split("/", 1)[0]
    return key


class _FairReady:
    """The ready keys, first come first served within their group; `pop()` serves the group with the fewest
    keys in flight, and among those the one that has waited longest.

    A group's turn is stamped when it gets work and again each time it is served (to the back of the line of
    its equals). A heap holds an entry (in flight, turn, group) per group with ready keys; an entry that no
    longer matches its group's count and turn is stale and skipped when popped, and the heap is rebuilt once
    stale entries outnumber live ones: O(log groups) amortized per operation, whatever the number of keys.
    No two entries tie on (in flight, turn), so groups themselves are never compared: turns are unique per
    group, and while a group keeps its turn its count only goes down (`pop` gives it a new turn).
    """

    def __init__(self, group: Callable[[Hashable], Hashable]):
        self._group = group
        self._keys: dict[Hashable, deque[Hashable]] = {}  # group -> its ready keys; only groups that have some
        self._turn: dict[Hashable, int] = {}  # group -> its place in line, for the groups in _keys
        self._running: Counter[Hashable] = Counter()  # group -> keys handed out and not finished
        self._heap: list[tuple[int, int, Hashable]] = []
        self._turns = itertools.count()
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def push(self, key: Hashable) -> None:
        group = self._group(key)
        keys = self._keys.get(group)
        if keys is None:
            keys = self._keys[group] = deque()
            self._turn[group] = next(self._turns)
            self._offer(group)
        keys.append(key)
        self._len += 1

    def pop(self) -> Hashable:
        """The next key (there must be one), counted in flight for its group until `finished(key)`."""
        while True:
            running, turn, group = heapq.heappop(self._heap)
            if self._turn.get(group) == turn and self._running[group] == running:
                break
        keys = self._keys[group]
        key = keys.popleft()
        self._len -= 1
        self._running[group] += 1
        if keys:
            self._turn[group] = next(self._turns)
            self._offer(group)
        else:
            del self._keys[group], self._turn[group]
        return key

    def finished(self, key: Hashable) -> None:
        group = self._group(key)
        self._running[group] -= 1
        if self._running[group] <= 0:
            del self._running[group]
        if group in self._keys:
            self._offer(group)  # one fewer in flight: it moves up the line; its old entry is now stale

    def _offer(self, group: Hashable) -> None:
        heapq.heappush(self._heap, (self._running[group], self._turn[group], group))
        if len(self._heap) > 2 * len(self._turn) + 16:
            self._heap = [(self._running[g], turn, g) for g, turn in self._turn.items()]
            heapq.heapify(self._heap)


class WorkQueue:
    def __init__(self, backoff: Backoff = Backoff(), *, settle: float = 0.0, settle_max: float | None = None,
                 clock: Callable[[], float] = time.monotonic, rand: Callable[[], float] = random.random,
                 group: Callable[[Hashable], Hashable] = fairness_group):
        self.backoff = backoff
        self.settle = settle
        self.settle_max = settle_max if settle_max is not None else 20 * settle
        self._clock = clock
        self._rand = rand
        self._cond = threading.Condition()
        self._ready = _FairReady(group)  # fair between groups (namespaces), see the module docstring
        self._dirty: set[Hashable] = set()  # queued or to be queued again after done()
        self._processing: set[Hashable] = set()
        self._waiting: dict[Hashable, float] = {}  # key -> due time (earliest)
        self._timers: list[tuple[float, int, Hashable]] = []
        self._seq = itertools.count()
        self._failures: dict[Hashable, int] = {}
        self._last_add: dict[Hashable, float] = {}
        self._settling: dict[Hashable, float] = {}  # key -> when it started waiting for its changes to stop
        self._shutdown = False
        self._wakes = 0  # wake(): every get() waiting returns None (its workers are stopping)

    # -- adding
    def add(self, key: Hashable) -> None:
        with self._cond:
            if self._shutdown:
                return
            self._last_add[key] = self._clock()
            if key in self._settling:
                return  # its timer looks again once the changes stop
            self._waiting.pop(key, None)
            if key in self._dirty:
                return
            self._dirty.add(key)
            if key not in self._processing:
                self._ready.push(key)
                self._cond.notify()

    def add_after(self, key: Hashable, seconds: float) -> None:
        if seconds <= 0:
            self.add(key)
            return
        with self._cond:
            if self._shutdown or key in self._settling:
                return
            due = self._clock() + seconds
            current = self._waiting.get(key)
            if current is not None and current <= due:
                return
            self._arm(key, due)

    def _arm(self, key: Hashable, due: float) -> None:
        self._waiting[key] = due
        heapq.heappush(self._timers, (due, next(self._seq), key))
        self._cond.notify()

    def add_rate_limited(self, key: Hashable) -> float:
        """Schedule a retry after the key's next backoff delay; returns the delay."""
        with self._cond:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        delay = self.backoff.delay(failures, self._rand)
        self.add_after(key, delay)
        return delay

    def forget(self, key: Hashable) -> None:
        with self._cond:
            self._failures.pop(key, None)

    def failures(self, key: Hashable) -> int:
        with self._cond:
            return self._failures.get(key, 0)

    # -- taking
    def get(self, timeout: float | None = None) -> Hashable | None:
        """The next key, marked in flight until done(key). None on shutdown or timeout."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            wakes = self._wakes
            while True:
                self._promote_due()
                if self._ready:
                    key = self._ready.pop()
                    self._dirty.discard(key)
                    self._processing.add(key)
                    return key
                if self._shutdown or self._wakes != wakes:
                    return None
                now = self._clock()
                waits = [t - now for t in (deadline, self._timers[0][0] if self._timers else None) if t is not None]
                if deadline is not None and now >= deadline:
                    return None
                self._cond.wait(max(0.0, min(waits)) if waits else None)

    def done(self, key: Hashable) -> None:
        with self._cond:
            if key in self._processing:
                self._processing.remove(key)
                self._ready.finished(key)
            if key not in self._dirty:
                return
            now = self._clock()
            quiet_at = self._last_add.get(key, now) + self.settle
            if self.settle > 0 and quiet_at > now:  # changed while it ran: let the changes stop first
                self._dirty.discard(key)
                self._settling[key] = now
                self._arm(key, quiet_at)
            else:
                self._ready.push(key)
                self._cond.notify()

    def _promote_due(self) -> None:
        now = self._clock()
        while self._timers and self._timers[0][0] <= now:
            due, _, key = heapq.heappop(self._timers)
            if self._waiting.get(key) != due:
                continue  # superseded by an earlier timer or by add()
            del self._waiting[key]
            started = self._settling.get(key)
            if started is not None:
                quiet_at = self._last_add.get(key, now) + self.settle
                if quiet_at > now and now - started < self.settle_max:
                    self._arm(key, min(quiet_at, started + self.settle_max))
                    continue
                del self._settling[key]
            if key not in self._dirty:
                self._dirty.add(key)
                if key not in self._processing:
                    self._ready.push(key)

    def wake(self) -> None:
        """Every get() waiting now returns None at once (workers that are stopping look at their stop flag)."""
        with self._cond:
            self._wakes += 1
            self._cond.notify_all()

    # -- state
    def shutdown(self) -> None:
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()

    @property
    def depth(self) -> int:
        """Keys ready to be worked on (not counting timers or keys in flight)."""
        with self._cond:
            return len(self._ready)

    @property
    def in_flight(self) -> int:
        with self._cond:
            return len(self._processing)

    @property
    def scheduled(self) -> int:
        with self._cond:
            return len(self._waiting)

    def idle(self) -> bool:
        """Nothing queued and nothing in flight (timers may be pending)."""
        with self._cond:
            return not self._ready and not self._processing

    def next_due(self) -> float | None:
        """Seconds until the earliest scheduled key comes back (retry, drift check, lock wait); None: none is."""
        with self._cond:
            return max(0.0, min(self._waiting.values()) - self._clock()) if self._waiting else None


class Workers:
    """N threads: take a key, reconcile it, put it back as the Outcome says."""

    def __init__(self, queue: WorkQueue, reconcile: Callable[[Hashable], Outcome], count: int,
                 *, name: str = "worker"):
        if count < 1:
            raise ValueError(f"workers must be at least 1, got {count}")
        self.queue = queue
        self.reconcile = reconcile
        self.count = count
        self._name = name
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()

    def start(self) -> None:
        self._stop.clear()
        for i in range(self.count):
            thread = threading.Thread(target=self._loop, name=f"{self._name}-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def halt(self) -> None:
        """Take no new keys (the runs in flight go on)."""
        self._stop.set()
        self.queue.wake()

    def stop(self, timeout: float = 10.0) -> None:
        """Take no new keys; wait at most `timeout` seconds in all for the runs in flight (the engine cancels
        them first: Pipeline.stop), then leave what is still running to the process's exit."""
        self._stop.set()
        self.queue.wake()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._threads = [t for t in self._threads if t.is_alive()]
        if self._threads:
            LOG.warning("%d worker thread(s) still busy after %.0fs: %s", len(self._threads), timeout,
                        ", ".join(t.name for t in self._threads))

    def alive(self) -> bool:
        """Every started worker thread still runs (or none was started)."""
        return all(t.is_alive() for t in self._threads) or self._stop.is_set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            key = self.queue.get(timeout=0.5)
            if key is None:
                continue
            outcome = Outcome.retry()  # a bug must not kill the worker; the key comes back later
            try:
                outcome = self.reconcile(key)
            except Exception as exc:  # not a Failure (the reconciler reports those): an API error, a bug
                if self.queue.failures(key) == 0:  # the traceback once per streak, not once per retry
                    LOG.exception("reconcile %s raised; retrying with backoff", key)
                else:
                    LOG.warning("reconcile %s raised again (failure %d): %s: %s", key, self.queue.failures(key) + 1,
                                type(exc).__name__, exc)
            finally:
                # Its next time is set before the key is let go, so the queue is never seen idle in between.
                try:
                    self.apply(key, outcome)
                finally:
                    self.queue.done(key)

    def apply(self, key: Hashable, outcome: Outcome) -> None:
        if outcome.failed:
            delay = self.queue.add_rate_limited(key)
            LOG.info("%s: retry in %.1fs (failure %d)", key, delay, self.queue.failures(key))
            return
        self.queue.forget(key)
        if outcome.requeue_after is not None:
            self.queue.add_after(key, outcome.requeue_after)
