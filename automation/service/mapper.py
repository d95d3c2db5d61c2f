"""From the cache to cluster keys: resolve_all() over the cache, memoised per input version
(Desired), mesh join stamps handed out in plan order (JoinStamps), and the Mapper, which enqueues
exactly the clusters whose StackInputs.digest() (or deletion, generation, validity) changed."""
from __future__ import annotations

import dataclasses
import json
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from automation.service.cache import Cache
from automation.adapters.loop import Loop
from automation.adapters.watch import Raw
from stacks.errors import InvalidSpec
from stacks.inputs import StackInputs
from stacks.model import Cluster
from stacks.ingress import Route
from stacks.mesh import MeshPlan
from stacks.resolve import Fleet, resolve_all
from stacks.transit import TransitInputs
from stacks.names import JOIN_STATUS_KEY, RECONCILE_REQUEST_ANNOTATION

LOG = logging.getLogger("clusternet.mapper")


# --------------------------------------------------------------------------- desired state

@dataclass(frozen=True)
class Resolution:
    inputs_version: int
    placement_version: int
    inputs: Mapping[str, StackInputs | InvalidSpec]
    digests: Mapping[str, str]  # key -> digest, or "invalid:<reason>:<message>"
    stamps: Mapping[str, dict] = field(default_factory=dict)  # mesh join stamps to hand out: key -> meshJoin
    unstamp: frozenset[str] = frozenset()  # clusters whose meshJoin is stale and must go
    fleet: Fleet | None = None  # what was resolved (valid clusters only); None without a valid hub
    stamps_version: int = 0
    routes: tuple[Route, ...] = ()  # the shared ingress's routes (stacks.resolve.resolve_all)
    mesh: MeshPlan | None = None  # the mesh plan: its groups' states and the transit stacks' inputs

    @property
    def transit(self) -> Mapping[str, TransitInputs]:
        """Transit stack -> its inputs (stacks.transit): the stacks the service owns besides the clusters'."""
        return self.mesh.transit if self.mesh is not None else {}


_UNSET: Any = object()


class JoinStamps:
    """The mesh join stamps this service has handed out (stacks.mesh: written once, in plan order).

    One thread (the mapper) hands them out, a whole plan at a time, in the plan's order; resolve()
    sees them at once (overlaid on the cached Clusters) and the reconciler writes them into the
    status. So two workers can never number two joiners alike, whatever the watch has caught up with.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stamps: dict[str, dict | None] = {}  # key -> status.meshJoin (None: take it away)
        self.version = 0

    def get(self, key: str, default: Any = _UNSET) -> Any:
        with self._lock:
            return self._stamps.get(key, default)

    def take(self, stamps: Mapping[str, dict], unstamp: Iterable[str]) -> bool:
        """Adopt a plan's new stamps and removals; True when anything changed."""
        with self._lock:
            changed = False
            for key, stamp in stamps.items():  # in plan order
                if self._stamps.get(key) is None:
                    self._stamps[key] = dict(stamp)
                    changed = True
            for key in unstamp:
                if key not in self._stamps or self._stamps[key] is not None:
                    self._stamps[key] = None
                    changed = True
            if changed:
                self.version += 1
            return changed

    def forget(self, key: str) -> None:
        with self._lock:
            if self._stamps.pop(key, _UNSET) is not _UNSET:
                self.version += 1

    def overlay(self, clusters: Iterable[Cluster]) -> tuple[Cluster, ...]:
        with self._lock:
            stamps = dict(self._stamps)
        out = []
        for cluster in clusters:
            wanted = stamps.get(cluster.key, _UNSET)
            have = (cluster.status or {}).get(JOIN_STATUS_KEY)
            if wanted is not _UNSET and wanted != have:
                cluster = cluster.model_copy(update={"status": {JOIN_STATUS_KEY: wanted} if wanted else None})
            out.append(cluster)
        return tuple(out)


def _digest(value: StackInputs | InvalidSpec) -> str:
    return value.digest() if isinstance(value, StackInputs) else f"invalid:{value.reason}:{value}"


class Desired:
    """resolve_all() over the cache, recomputed only when something it reads has changed.

    A recorded endpoint VPC equal to the one resolve already chose changes nothing, so a
    status write never costs a re-resolve.
    """

    def __init__(self, cache: Cache, stamps: JoinStamps | None = None):
        self.cache = cache
        self.stamps = stamps or JoinStamps()
        self._lock = threading.Lock()
        self._current: Resolution | None = None
        self.resolves = 0

    def get(self) -> Resolution:
        with self._lock:
            current = self._current
            if current is not None and current.inputs_version == self.cache.inputs_version \
                    and current.stamps_version == self.stamps.version:
                if current.placement_version == self.cache.placement_version:
                    return current
                version, placements = self.cache.placements()
                if all(_placed_at(current.inputs.get(k)) == vpc for k, vpc in placements.items()):
                    self._current = dataclasses.replace(current, placement_version=version)
                    return self._current
            stamps_version = self.stamps.version
            inputs_version, placement_version, fleet, invalid, _ = self.cache.snapshot()
            resolved: dict[str, StackInputs | InvalidSpec] = dict(invalid)
            stamps: Mapping[str, dict] = {}
            unstamp: frozenset[str] = frozenset()
            routes: tuple[Route, ...] = ()
            mesh: MeshPlan | None = None
            if fleet is not None:
                fleet = dataclasses.replace(fleet, clusters=self.stamps.overlay(fleet.clusters))
                everything = resolve_all(fleet)
                resolved.update(everything.inputs)
                routes = everything.routes
                stamps, unstamp = everything.mesh.stamps, frozenset(everything.mesh.unstamp)
                mesh = everything.mesh
            self.resolves += 1
            self._current = Resolution(inputs_version, placement_version, resolved,
                                       {k: _digest(v) for k, v in resolved.items()}, stamps, unstamp, fleet,
                                       stamps_version, routes, mesh)
            return self._current

    def mesh_join(self, key: str, current: dict | None) -> dict | None:
        """The status.meshJoin the cluster should carry: the stamp handed out, else what it has."""
        wanted = self.stamps.get(key)
        return current if wanted is _UNSET else wanted

    def inputs(self, key: str) -> StackInputs | InvalidSpec | None:
        return self.get().inputs.get(key)


def _placed_at(value: StackInputs | InvalidSpec | None) -> str | None:
    if isinstance(value, StackInputs) and value.private_link is not None:
        return value.private_link.endpoint_vpc.vpc_id
    return None


# --------------------------------------------------------------------------- mapper

Triage = Callable[[str, Raw, "StackInputs | InvalidSpec | None"], "float | None"]


class Mapper(Loop):
    """Turns cache changes into queue entries: only the clusters whose desired stack changed.

    `triage(key, raw, desired)` (the reconciler's) says, for a cluster seen for the
    first time, when it needs a reconcile: 0 now, N seconds (the drift check), None never.
    `observers` are called with each new Resolution (e.g. the shared ingress ConfigMap sync); `watchers` on every
    pass, with the current one (the mesh's group states follow the clusters' statuses, which resolve never reads).
    Transit stacks (stacks.transit) are keys too: queued when their inputs change, appear or go.
    A new value of the reconcile-request annotation queues the key at once and `reset`s its backoff.
    """

    def __init__(self, cache: Cache, desired: Desired, *, add: Callable[[str], None],
                 add_after: Callable[[str, float], None], triage: Triage,
                 observers: Iterable[Callable[[Resolution], None]] = (),
                 watchers: Iterable[Callable[[Resolution], None]] = (),
                 reset: Callable[[str], None] = lambda key: None):
        super().__init__("mapper")
        self.cache, self.desired = cache, desired
        self.add, self.add_after, self.triage, self.reset = add, add_after, triage, reset
        self.observers = tuple(observers)
        self.watchers = tuple(watchers)
        self._seen: dict[str, tuple] = {}
        self._seen_transit: dict[str, str | None] = {}  # transit stack -> digest last queued for (None: to go)
        self._resolution: Resolution | None = None
        self.enqueued = 0
        self.mapped_revision = -1  # the cache revision the last pass saw (a later one: changes not mapped yet)

    def run(self) -> None:
        revision = -1
        while not self._stop.is_set():
            revision = self.cache.wait_for_change(revision, timeout=0.5)
            try:
                self.map_once()
                self.mapped_revision = revision
            except Exception:  # noqa: BLE001 - keep mapping; the next change retries
                LOG.exception("mapping changes to clusters failed")

    def map_once(self) -> None:
        touched = self.cache.take_touched()
        resolution = self.desired.get()
        if self.desired.stamps.take(resolution.stamps, resolution.unstamp):
            resolution = self.desired.get()  # the same plan, now seeing the stamps it handed out
        entries = self.cache.entries()
        if resolution is not self._resolution and (
                self._resolution is None or resolution.digests != self._resolution.digests):
            keys: Iterable[str] = set(entries) | set(self._seen)  # the fleet's inputs moved: look at all
        else:
            keys = touched
        if resolution is not self._resolution:
            for observe in self.observers:
                try:
                    observe(resolution)
                except Exception:  # noqa: BLE001 - an observer must not stop the mapping
                    LOG.exception("observer %r failed", observe)
        self._resolution = resolution
        for key in keys:
            entry = entries.get(key)
            if entry is None:
                self.desired.stamps.forget(key)
                if self._seen.pop(key, None) is not None:
                    self._enqueue(key)  # gone: the reconciler forgets it (and checks for an orphan)
                continue
            meta = entry.raw.get("metadata") or {}
            # Not the status and not the finalizers: the service's own writes must not queue the key again
            # (a failed run waits for its backoff).
            join = (entry.raw.get("status") or {}).get(JOIN_STATUS_KEY)
            request = (meta.get("annotations") or {}).get(RECONCILE_REQUEST_ANNOTATION)
            fingerprint = (resolution.digests.get(key), meta.get("generation"), bool(meta.get("deletionTimestamp")),
                           json.dumps(self.desired.mesh_join(key, join), sort_keys=True), request, meta.get("uid"))
            previous = self._seen.get(key)
            self._seen[key] = fingerprint
            if previous == fingerprint:
                continue
            if previous is not None and previous[-1] == fingerprint[-1]:
                if previous[-2] != request:  # asked for by a person: now, with a fresh backoff
                    self.reset(key)
                self._enqueue(key)
                continue
            due = self.triage(key, entry.raw, resolution.inputs.get(key))
            if due is None:
                continue
            if due <= 0:
                self._enqueue(key)
            else:
                self.add_after(key, due)
        self._map_transit(resolution)
        for watch in self.watchers:
            try:
                watch(resolution)
            except Exception:  # noqa: BLE001 - a watcher must not stop the mapping
                LOG.exception("watcher %r failed", watch)

    def _map_transit(self, resolution: Resolution) -> None:
        """Queue each transit stack whose inputs changed, and each one recorded but no longer wanted."""
        recorded = set(((self.cache.hub_status.get("mesh") or {}).get("transit") or {}))
        for stack in sorted(set(resolution.transit) | recorded | set(self._seen_transit)):
            wanted = resolution.transit.get(stack)
            digest = wanted.digest() if wanted is not None else None
            if digest is None and stack not in recorded:
                self._seen_transit.pop(stack, None)
                continue
            if self._seen_transit.get(stack, "") != digest:
                self._seen_transit[stack] = digest
                self._enqueue(stack)

    def _enqueue(self, key: str) -> None:
        self.enqueued += 1
        self.add(key)


