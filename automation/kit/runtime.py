"""The runtime, the way controller-runtime's manager works: one informer and one store per kind, shared by every
controller in the process, and one start-when-synced.

    Source(kind) ──► Informer ──► Store (the one copy) ──► Fanout ──► watchers: kind -> keys
                                                                         │
    Controller: WorkQueue ◄──────────────────────────────────────────────┘ ──► Workers ──► reconcile(key) -> Outcome

- `Manager.source(source, store)` adds a kind: one Informer lists and watches it into `store` (the Cache for
  the kinds the stacks read, a TenantStore for Tenants, a DictStore else). A second source of a kind is refused:
  two consumers of one kind share its informer. A later kind (Cluster API Clusters, Hive ClusterDeployments, a
  GitRepo) is a Source and a watch registration, not a new informer type.
- `Manager.watch(kind, handler)` hears every change of a kind after its store took it (automation.adapters.kube.
  informer.Fanout); `Controller.watches(kind, keys)` is the usual handler: the keys a changed object maps to go
  into the controller's queue. A controller may also be fed by someone else (the Mapper feeds the stacks').
- `Manager.controller(name, reconcile, queue=, workers=)`: a WorkQueue served by `workers` threads, each
  calling `reconcile(key) -> Outcome` (automation/kit/queue.py). Controllers that must share a bound wrap their
  reconciles in one `Slots`: the clusters' and the transit stacks' (automation/service/fleet.py, transit.py) take
  --workers slots together, the engine's bound; each controller declares itself in its module's `setup(manager,
  ...)` (docs/architecture.md, "The controller kit").
- Start: every informer starts; once each has listed once, the `on_synced` steps run in order (one returning
  False stops the start: the manager was halted meanwhile), then the runnables (the mapper, resync loops),
  then the controllers' workers. Nothing reconciles against a half-filled store.
- `halt()` takes no more keys (the ones in hand finish); `stop(timeout)` stops runnables, workers, informers.
"""
from __future__ import annotations

import logging
import threading
from collections import deque
from contextlib import contextmanager
from typing import Any, Callable, Hashable, Iterable, Iterator, Protocol

from automation.adapters.kube.informer import DictStore, Fanout, Handler, Informer, Raw, Source, Store, wait_synced
from automation.kit.queue import Outcome, WorkQueue, Workers

LOG = logging.getLogger("hubwright.runtime")

Reconcile = Callable[[Any], Outcome]  # a key ("namespace/name", a transit stack's, a Tenant's name) -> Outcome
KeysOf = Callable[[str, Raw], Iterable[Hashable]]  # (ADDED | MODIFIED | DELETED, object) -> keys to enqueue


class Runnable(Protocol):
    """A thread the manager starts once synced and stops with it (automation.adapters.loop.Loop is one)."""

    def start(self) -> None: ...

    def stop(self, timeout: float | None = None) -> None: ...

    def alive(self) -> bool: ...


class Slots:
    """The engine's bound, one for the controllers whose reconciles run stacks (the clusters' and the transit
    stacks'): at most `size` of their reconciles at once, all controllers together, as when one queue's --workers
    threads served both. A reconcile waiting for a slot is served in the order it asked, so no controller's worker
    starves behind another's."""

    def __init__(self, size: int):
        if size < 1:
            raise ValueError(f"slots must be at least 1, got {size}")
        self.size = size
        self._cond = threading.Condition()
        self._busy = 0
        self._waiting: deque[object] = deque()

    @contextmanager
    def slot(self) -> Iterator[None]:
        ticket = object()
        with self._cond:
            self._waiting.append(ticket)
            while self._waiting[0] is not ticket or self._busy >= self.size:
                self._cond.wait()
            self._waiting.popleft()
            self._busy += 1
            self._cond.notify_all()
        try:
            yield
        finally:
            with self._cond:
                self._busy -= 1
                self._cond.notify_all()

    def bound(self, reconcile: Reconcile) -> Reconcile:
        """`reconcile`, run in a slot."""
        def bounded(key: Any) -> Outcome:
            with self.slot():
                return reconcile(key)
        return bounded

    @property
    def busy(self) -> int:
        with self._cond:
            return self._busy


class Controller:
    """A queue of keys and the workers that reconcile them; what it watches puts keys in the queue."""

    def __init__(self, manager: Manager, name: str, reconcile: Reconcile, queue: WorkQueue, workers: int,
                 threads: str | None = None):
        self.name = name
        self.reconcile = reconcile
        self.queue = queue
        self.workers = Workers(queue, reconcile, workers, name=threads or f"{name}-worker")
        self._manager = manager

    def watches(self, kind: str, keys: KeysOf) -> Controller:
        """Enqueue `keys(event, object)` on every change of `kind`."""
        def enqueue(event: str, raw: Raw) -> None:
            for key in keys(event, raw):
                self.queue.add(key)
        self._manager.watch(kind, enqueue)
        return self


class Manager:
    """One informer and one store per kind, the controllers over them, one start-when-synced (module docstring)."""

    def __init__(self, *, watch_timeout: int = 300, on_restart: Callable[[str, str], None] | None = None):
        self._watch_timeout, self._on_restart = watch_timeout, on_restart
        self._informers: dict[str, Informer] = {}
        self._fanouts: dict[str, Fanout] = {}
        self._pending: dict[str, list[Handler]] = {}  # handlers of kinds whose source is not added yet
        self.controllers: list[Controller] = []
        self._steps: list[Callable[[], bool]] = []
        self._runnables: list[Runnable] = []
        self._stopped = threading.Event()
        self.started = threading.Event()  # every informer listed, every step done, every worker started
        self._lock = threading.Lock()

    # -- what it runs (registered before start())
    def source(self, source: Source, store: Store | None = None) -> Store:
        """Watch a kind (`source.name`) into `store` (None: a DictStore); returns the store. One source per kind."""
        with self._lock:
            if source.name in self._informers:
                raise ValueError(f"kind {source.name!r} is watched already: one informer per kind")
            fanout = Fanout(source.name, store if store is not None else DictStore(lambda kind, raw: None))
            fanout.handlers.extend(self._pending.pop(source.name, []))
            self._fanouts[source.name] = fanout
            self._informers[source.name] = Informer(source, fanout, timeout_seconds=self._watch_timeout,
                                                    on_restart=self._on_restart)
            return fanout.store

    def watch(self, kind: str, handler: Handler) -> None:
        """Call `handler(event, object)` on every change of `kind`, after its store took it."""
        with self._lock:
            fanout = self._fanouts.get(kind)
            if fanout is not None:
                fanout.handlers.append(handler)
            else:
                self._pending.setdefault(kind, []).append(handler)

    def store(self, kind: str) -> Store:
        return self._fanouts[kind].store

    def controller(self, name: str, reconcile: Reconcile, *, queue: WorkQueue | None = None, workers: int = 1,
                   threads: str | None = None) -> Controller:
        """A controller: `workers` threads (named `threads`-N, default `name`-worker-N) reconciling its queue's keys."""
        controller = Controller(self, name, reconcile, queue if queue is not None else WorkQueue(), workers, threads)
        self.controllers.append(controller)
        return controller

    def on_synced(self, step: Callable[[], bool]) -> None:
        """Run `step` once every informer has listed, before any runnable or worker starts; False: stop there."""
        self._steps.append(step)

    def runnable(self, runnable: Runnable) -> None:
        """Start `runnable` once synced (after the steps, before the workers); stop it with the manager."""
        self._runnables.append(runnable)

    @property
    def informers(self) -> dict[str, Informer]:
        return dict(self._informers)

    # -- lifecycle
    def start(self) -> None:
        if self._pending:
            raise ValueError(f"watched without a source: {', '.join(sorted(self._pending))}")
        for informer in self._informers.values():
            informer.start()
        threading.Thread(target=self._start_when_synced, name="manager-start", daemon=True).start()

    def _start_when_synced(self) -> None:
        if not wait_synced(self._informers.values(), self._stopped):
            return
        for step in self._steps:
            if not step() or self._stopped.is_set():
                return
        with self._lock:  # not while stop() runs: what starts now is stopped with the rest
            if self._stopped.is_set():
                return
            for runnable in self._runnables:
                runnable.start()
            for controller in self.controllers:
                controller.workers.start()
            self.started.set()
        LOG.info("informers synced (%s); %d controller(s) started", ", ".join(self._informers),
                 len(self.controllers))

    def halt(self) -> None:
        """Take no more keys (the ones in hand are finished); nothing starts any more."""
        self._stopped.set()
        for controller in self.controllers:
            controller.queue.shutdown()
            controller.workers.halt()

    def stop(self, timeout: float = 10.0) -> None:
        """Halt, then stop the runnables (last started, first stopped), the workers (waiting at most `timeout`
        seconds for the keys in hand) and the informers."""
        with self._lock:
            self.halt()
        for runnable in reversed(self._runnables):
            runnable.stop()
        for controller in self.controllers:
            controller.workers.stop(timeout=timeout)
        for informer in self._informers.values():
            informer.stop()

    # -- probes
    def synced(self) -> dict[str, bool]:
        """Kind -> whether its informer has listed once."""
        return {kind: informer.synced.is_set() for kind, informer in self._informers.items()}

    def alive(self) -> bool:
        """Every thread still runs (or the manager was stopped)."""
        return self._stopped.is_set() or (all(i.alive() for i in self._informers.values())
                                          and all(r.alive() for r in self._runnables)
                                          and all(c.workers.alive() for c in self.controllers))
