"""The clusters' reconciler without an API server or threads: `FakeClusters` and `StaticDesired`.

- `FakeClusters`: automation.adapters.kube.clusters.ClusterClient in memory, like controller-runtime's fake
  client: an object store that stamps uid, resourceVersion (every write) and generation (spec changes only),
  answers a stale resourceVersion with a conflict (the reconciler reads again) and a missing object with
  "gone", holds a deleted object while it has finalizers, and records every status write, Event and agent
  revocation. Each change is handed to its watchers as a watch would (`watch(cache.apply)`), synchronously.
- `StaticDesired`: automation.service.snapshot.DesiredView from dicts a test fills (no resolution at all).
"""
from __future__ import annotations

import copy
import itertools
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from automation.adapters.kube import FINALIZER_ATTEMPTS, FinalizerConflict
from doubles.engine import utc_now
from stacks.errors import InvalidSpec
from stacks.inputs import StackInputs
from stacks.status import ClusterStatus
from stacks.transit import TransitInputs

Raw = dict[str, Any]
Watcher = Callable[[str, Raw], None]  # (ADDED | MODIFIED | DELETED, object), like an informer's handler


def key_of(raw: Raw) -> str:
    meta = raw.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


@dataclass(frozen=True)
class StatusWrite:
    key: str
    status: ClusterStatus
    later: bool  # write_later (a finished run's report, off the worker's path) rather than write


@dataclass(frozen=True)
class Event:
    key: str
    type: str
    reason: str
    message: str


class FakeClusters:
    """An in-memory API server for HubClusters, behind the ClusterClient interface."""

    def __init__(self) -> None:
        self.objects: dict[str, Raw] = {}
        self.writes: list[StatusWrite] = []
        self.events: list[Event] = []
        self.revoked: list[str] = []
        self.conflicts = 0  # finalizer edits answered with a conflict (a stale resourceVersion)
        self.revoke_errors: list[Exception] = []  # raised by the next revoke_agent calls, one each
        self._watchers: list[Watcher] = []
        self._rv = itertools.count(1)
        self._written: dict[str, tuple[str | None, ClusterStatus]] = {}
        # The reconciler writes the finalizer beside the Running mark (a side thread): one writer at a time, as
        # the API server serializes writes of one object.
        self._lock = threading.RLock()

    # -- the API server's side: what a user (a test) does
    def watch(self, watcher: Watcher) -> None:
        self._watchers.append(watcher)

    def create(self, doc: Raw) -> Raw:
        obj = copy.deepcopy(doc)
        meta = obj.setdefault("metadata", {})
        key = key_of(obj)
        if key in self.objects:
            raise ValueError(f"{key} already exists (409)")
        meta.update(uid=str(uuid.uuid4()), generation=1, creationTimestamp=utc_now())
        return self._store("ADDED", obj)

    def patch(self, key: str, patch: Raw) -> Raw:
        """A merge patch of metadata and spec, as `kubectl patch --type merge` (a spec change: a new generation)."""
        obj = copy.deepcopy(self._live(key))
        before = copy.deepcopy(obj.get("spec"))
        _merge(obj, patch)
        if obj.get("spec") != before:
            obj["metadata"]["generation"] = obj["metadata"].get("generation", 1) + 1
        return self._store("MODIFIED", obj)

    def delete(self, key: str) -> None:
        """Held by its finalizers (deletionTimestamp set), else gone."""
        obj = copy.deepcopy(self._live(key))
        if obj["metadata"].get("finalizers"):
            obj["metadata"].setdefault("deletionTimestamp", utc_now())
            self._store("MODIFIED", obj)
        else:
            self._remove(key)

    def get(self, key: str) -> Raw | None:
        obj = self.objects.get(key)
        return copy.deepcopy(obj) if obj is not None else None

    def events_of(self, key: str) -> list[tuple[str, str]]:
        return [(e.type, e.reason) for e in self.events if e.key == key]

    # -- ClusterClient
    def status(self, key: str, raw: Raw) -> ClusterStatus:
        uid = (raw.get("metadata") or {}).get("uid")
        mine = self._written.get(key)
        if mine is not None and mine[0] == uid:
            return mine[1]
        try:
            return ClusterStatus.model_validate(raw.get("status") or {})
        except ValueError:  # garbage in the status: start over, as StatusWriter does
            return ClusterStatus.model_validate({})

    def write(self, raw: Raw, status: ClusterStatus, *, previous: ClusterStatus) -> bool:
        return self._write(raw, status, later=False)

    def write_later(self, raw: Raw, status: ClusterStatus, *, previous: ClusterStatus) -> None:
        self._write(raw, status, later=True)

    def forget(self, key: str) -> None:
        self._written.pop(key, None)

    def event(self, raw: Raw, type_: Literal["Normal", "Warning"], reason: str, message: str) -> None:
        self.events.append(Event(key_of(raw), type_, reason, message))

    def edit_finalizers(self, raw: Raw, change: Callable[[list[str]], list[str]]) -> bool:
        with self._lock:
            return self._edit_finalizers(raw, change)

    def _edit_finalizers(self, raw: Raw, change: Callable[[list[str]], list[str]]) -> bool:
        key = key_of(raw)
        live = raw  # like the real one: the caller's (cached) copy first
        for _ in range(FINALIZER_ATTEMPTS):
            names = list((live.get("metadata") or {}).get("finalizers") or [])
            wanted = change(names)
            if wanted == names:
                return True
            stored = self.objects.get(key)
            if stored is None:
                return False
            if stored["metadata"].get("resourceVersion") != live["metadata"].get("resourceVersion"):
                self.conflicts += 1  # 409: read again
                live = copy.deepcopy(stored)
                continue
            obj = copy.deepcopy(stored)
            obj["metadata"]["finalizers"] = wanted
            if not wanted and obj["metadata"].get("deletionTimestamp"):
                self._remove(key)
            else:
                self._store("MODIFIED", obj)
            return True
        raise FinalizerConflict(f"could not update the finalizers of {key}: {FINALIZER_ATTEMPTS} conflicts")

    def revoke_agent(self, namespace: str, name: str) -> None:
        if self.revoke_errors:
            raise self.revoke_errors.pop(0)
        self.revoked.append(f"{namespace}/{name}")

    def close(self) -> None:
        pass

    # -- the store
    def _live(self, key: str) -> Raw:
        obj = self.objects.get(key)
        if obj is None:
            raise KeyError(f"{key} not found (404)")
        return obj

    def _write(self, raw: Raw, status: ClusterStatus, *, later: bool) -> bool:
        with self._lock:
            return self._write_locked(raw, status, later=later)

    def _write_locked(self, raw: Raw, status: ClusterStatus, *, later: bool) -> bool:
        key = key_of(raw)
        stored = self.objects.get(key)
        if stored is None or stored["metadata"].get("uid") != (raw.get("metadata") or {}).get("uid"):
            return False  # 404: gone (or a later object of the same name)
        self._written[key] = (stored["metadata"]["uid"], status)
        self.writes.append(StatusWrite(key, status, later))
        obj = copy.deepcopy(stored)
        obj["status"] = status.model_dump(by_alias=True, exclude_none=True, mode="json")
        self._store("MODIFIED", obj)
        return True

    def _store(self, kind: str, obj: Raw) -> Raw:
        with self._lock:
            obj["metadata"]["resourceVersion"] = str(next(self._rv))
            self.objects[key_of(obj)] = obj
            self._deliver(kind, obj)
            return copy.deepcopy(obj)

    def _remove(self, key: str) -> None:
        with self._lock:
            obj = self.objects.pop(key)
            self._deliver("DELETED", obj)

    def _deliver(self, kind: str, obj: Raw) -> None:
        for watcher in self._watchers:
            watcher(kind, copy.deepcopy(obj))


def _merge(target: Raw, patch: Raw) -> None:
    for name, value in patch.items():
        if value is None:
            target.pop(name, None)
        elif isinstance(value, dict) and isinstance(target.get(name), dict):
            _merge(target[name], value)
        else:
            target[name] = copy.deepcopy(value)


@dataclass
class StaticDesired:
    """A DesiredView that answers from what a test put in it (as the mapper's snapshot would publish it)."""

    wanted: dict[str, StackInputs | InvalidSpec] = field(default_factory=dict)
    registered: set[str] = field(default_factory=set)
    stamps: dict[str, dict] = field(default_factory=dict)  # key -> status.meshJoin handed out
    routes: dict[str, str] = field(default_factory=dict)  # key -> shared-ingress cluster ID
    claims: dict[str, dict] = field(default_factory=dict)  # key -> status.claims granted
    shared: dict[str, str] = field(default_factory=dict)  # key -> the AccountShared warning
    overridden: dict[str, str] = field(default_factory=dict)  # key -> the RegionOverridden warning
    placements: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    transits: dict[str, TransitInputs] = field(default_factory=dict)

    def inputs(self, key: str) -> StackInputs | InvalidSpec | None:
        return self.wanted.get(key)

    def registered_only(self, key: str) -> bool:
        return key in self.registered

    def mesh_join(self, key: str, current: dict | None) -> dict | None:
        return self.stamps.get(key, current)

    def routed_id(self, key: str, current: str | None) -> str | None:
        return self.routes.get(key, current)

    def claims_of(self, key: str, current: dict | None) -> dict | None:
        return self.claims.get(key, current)

    def account_shared(self, key: str) -> str | None:
        return self.shared.get(key)

    def region_overridden(self, key: str) -> str | None:
        return self.overridden.get(key)

    def unknown_keys(self, key: str) -> str | None:
        return None

    def placed_in(self, key: str) -> tuple[str | None, str | None]:
        if key in self.placements:
            return self.placements[key]
        wanted = self.wanted.get(key)
        if isinstance(wanted, StackInputs):
            return wanted.cluster.account_id, wanted.cluster.region
        return None, None

    def transit(self, stack: str) -> TransitInputs | None:
        return self.transits.get(stack)

    def network_query(self, key: str) -> None:
        """No discovery here: the declared networks are taken as they are."""
        return None
