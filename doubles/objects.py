"""The one in-memory API server every controller's direct tests use: `FakeObjects`, the object port
(automation.kit.objects.Objects) for every kind, like controller-runtime's fake client.

- It stamps uid, creationTimestamp, resourceVersion (every write) and generation (spec changes only).
- A write carrying a stale metadata.resourceVersion (a patch, a status patch at a version) raises Conflict; a
  create of an existing name raises Conflict; a missing object reads as None (404) and deletes as False.
- A deleted object with finalizers is held (deletionTimestamp set) until its last finalizer goes.
- A Secret's stringData is stored as base64 data; list selectors take a=b, a and !a.
- It records every status write (`status_writes`), Event (`events`) and call (`calls`), and hands each change
  to its watchers as a watch would (`watch(kind, handler)`), synchronously.
- `fail(method, kind, error, times=1)` makes the next calls of a method on a kind raise (an API server away).
The test's side (what a user does with kubectl) is `create`, `patch` and `delete` too: one store, one behaviour.
"""
from __future__ import annotations

import base64
import copy
import itertools
import threading
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Literal

from automation.kit.objects import HUBCLUSTERS, HUBCONFIGS, HUBRETAINEDSTACKS, NAMESPACES, ApiError, Conflict, Kind, Obj
from automation.service.cache import Cache
from stacks.names import RETAINEDS
from doubles.engine import utc_now
from doubles.factories import NAMESPACES as OWNED

Raw = dict[str, Any]
Handler = Callable[[str, Raw], None]  # (ADDED | MODIFIED | DELETED, object), like an informer's handler


@dataclass(frozen=True)
class StatusPatch:
    kind: str  # the plural
    key: str
    status: Raw  # the merge patch sent
    resource_version: str | None


@dataclass(frozen=True)
class RecordedEvent:
    kind: str  # the involved object's kind ("HubTenant")
    key: str
    type: str
    reason: str
    message: str


class FakeObjects:
    """An in-memory API server for every kind, behind the object port (module docstring)."""

    def __init__(self) -> None:
        self.store: dict[tuple[str, str], Raw] = {}  # (plural, key) -> object
        self.status_writes: list[StatusPatch] = []
        self.events: list[RecordedEvent] = []
        self.calls: list[tuple[str, str, str]] = []  # (method, plural, key)
        self.conflicts = 0  # writes answered with a conflict
        self._watchers: dict[str, list[Handler]] = {}
        self._failures: dict[tuple[str, str], list[Exception]] = {}
        self._rv = itertools.count(1)
        self._lock = threading.RLock()

    # -- what a test sets up and looks at
    def watch(self, kind: Kind, handler: Handler) -> None:
        self._watchers.setdefault(kind.plural, []).append(handler)

    def fail(self, method: str, kind: Kind, error: Exception | None = None, times: int = 1) -> None:
        """The next `times` calls of `method` ("get", "patch", ...) on `kind` raise `error` (default: a 500)."""
        self._failures.setdefault((method, kind.plural), []).extend(
            [error or ApiError(500, "Internal Server Error")] * times)

    def objects_of(self, kind: Kind) -> dict[str, Raw]:
        with self._lock:
            return {key: copy.deepcopy(obj) for (plural, key), obj in self.store.items() if plural == kind.plural}

    def events_of(self, key: str) -> list[tuple[str, str]]:
        return [(e.type, e.reason) for e in self.events if e.key == key]

    # -- the port
    def get(self, kind: Kind, name: str, namespace: str | None = None) -> Raw | None:
        key = _key(kind, name, namespace)
        self._called("get", kind, key)
        with self._lock:
            obj = self.store.get((kind.plural, key))
            return copy.deepcopy(obj) if obj is not None else None

    def list(self, kind: Kind, namespace: str | None = None, *, label_selector: str | None = None,
             field_selector: str | None = None, limit: int | None = None) -> Raw:
        self._called("list", kind, namespace or "")
        with self._lock:
            items = [copy.deepcopy(obj) for (plural, _), obj in sorted(self.store.items())
                     if plural == kind.plural and (namespace is None or Obj(obj).namespace == namespace)
                     and _selected(obj, label_selector)]
        shown = items if limit is None else items[:limit]
        meta: Raw = {"resourceVersion": str(next(self._rv))}
        if len(items) > len(shown):
            meta.update(remainingItemCount=len(items) - len(shown), **{"continue": "more"})
        return {"items": shown, "metadata": meta}

    def create(self, kind: Kind, body: Raw, namespace: str | None = None) -> Raw:
        obj = _folded(kind, copy.deepcopy(body))
        meta = obj.setdefault("metadata", {})
        if kind.namespaced:
            meta["namespace"] = namespace or meta.get("namespace") or "default"
        key = Obj(obj).key
        self._called("create", kind, key)
        with self._lock:
            if (kind.plural, key) in self.store:
                self.conflicts += 1
                raise Conflict(409, f"{kind.kind} {key} already exists")
            obj.setdefault("apiVersion", kind.api_version)
            obj.setdefault("kind", kind.kind)
            meta.update(uid=str(uuid.uuid4()), generation=1, creationTimestamp=utc_now())
            return self._put(kind, "ADDED", obj)

    def patch(self, kind: Kind, name: str, patch: Raw, namespace: str | None = None) -> Raw | None:
        """A JSON merge patch of metadata, spec and the rest (not status: that is the status subresource's)."""
        key = _key(kind, name, namespace)
        self._called("patch", kind, key)
        with self._lock:
            stored = self.store.get((kind.plural, key))
            if stored is None:
                return None
            patch = _folded(kind, copy.deepcopy(patch))
            self._check_version(stored, (patch.get("metadata") or {}).pop("resourceVersion", None))
            patch.pop("status", None)
            obj = copy.deepcopy(stored)
            _merge(obj, patch)
            if obj.get("spec") != stored.get("spec"):
                obj["metadata"]["generation"] = int(obj["metadata"].get("generation") or 1) + 1
            if obj["metadata"].get("deletionTimestamp") and not obj["metadata"].get("finalizers"):
                self._remove(kind, key)
                return obj
            return self._put(kind, "MODIFIED", obj)

    def patch_status(self, kind: Kind, name: str, status: Raw, namespace: str | None = None, *,
                     resource_version: str | None = None) -> Raw | None:
        key = _key(kind, name, namespace)
        self._called("patch_status", kind, key)
        with self._lock:
            stored = self.store.get((kind.plural, key))
            if stored is None:
                return None
            self._check_version(stored, resource_version)
            self.status_writes.append(StatusPatch(kind.plural, key, copy.deepcopy(status), resource_version))
            obj = copy.deepcopy(stored)
            holder: Raw = {"status": obj.get("status") or {}}
            _merge(holder, {"status": status})
            obj["status"] = holder.get("status") or {}
            return self._put(kind, "MODIFIED", obj)

    def replace_status(self, kind: Kind, raw: Raw) -> Raw | None:
        """The status subresource replaced by raw's (PUT), at raw's resourceVersion."""
        obj = Obj(raw)
        key = _key(kind, obj.name, obj.namespace)
        self._called("replace_status", kind, key)
        with self._lock:
            stored = self.store.get((kind.plural, key))
            if stored is None:
                return None
            self._check_version(stored, obj.resource_version)
            status = copy.deepcopy(raw.get("status") or {})
            self.status_writes.append(StatusPatch(kind.plural, key, status, obj.resource_version))
            new = copy.deepcopy(stored)
            new["status"] = status
            return self._put(kind, "MODIFIED", new)

    def delete(self, kind: Kind, name: str, namespace: str | None = None, *, uid: str | None = None) -> bool:
        """Held by its finalizers (deletionTimestamp set), else gone; False when it was not there; with `uid`, only
        that object (another one of the name: Conflict, as the API server's precondition answers)."""
        key = _key(kind, name, namespace)
        self._called("delete", kind, key)
        with self._lock:
            stored = self.store.get((kind.plural, key))
            if stored is None:
                return False
            if uid is not None and stored["metadata"].get("uid") != uid:
                self.conflicts += 1
                raise Conflict(409, f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                                    f"{stored['metadata'].get('uid')}")
            if stored["metadata"].get("finalizers"):
                if not stored["metadata"].get("deletionTimestamp"):
                    obj = copy.deepcopy(stored)
                    obj["metadata"]["deletionTimestamp"] = utc_now()
                    self._put(kind, "MODIFIED", obj)
            else:
                self._remove(kind, key)
            return True

    def event(self, kind: Kind, raw: Raw, type_: Literal["Normal", "Warning"], reason: str, message: str) -> None:
        self.events.append(RecordedEvent(kind.kind, Obj(raw).key, type_, reason, message))

    def close(self) -> None:
        pass

    # -- the store
    def _called(self, method: str, kind: Kind, key: str) -> None:
        self.calls.append((method, kind.plural, key))
        queued = self._failures.get((method, kind.plural))
        if queued:
            raise queued.pop(0)

    def _check_version(self, stored: Raw, version: str | None) -> None:
        if version is not None and version != stored["metadata"].get("resourceVersion"):
            self.conflicts += 1
            raise Conflict(409, f"the object has been modified (resourceVersion {version} is stale)")

    def _put(self, kind: Kind, event: str, obj: Raw) -> Raw:
        obj["metadata"]["resourceVersion"] = str(next(self._rv))
        self.store[(kind.plural, Obj(obj).key)] = obj
        self._deliver(kind, event, obj)
        return copy.deepcopy(obj)

    def _remove(self, kind: Kind, key: str) -> None:
        obj = self.store.pop((kind.plural, key))
        self._deliver(kind, "DELETED", obj)

    def _deliver(self, kind: Kind, event: str, obj: Raw) -> None:
        for handler in self._watchers.get(kind.plural, []):
            handler(event, copy.deepcopy(obj))


def _key(kind: Kind, name: str, namespace: str | None) -> str:
    return f"{namespace}/{name}" if kind.namespaced and namespace else name


def _selected(obj: Raw, selector: str | None) -> bool:
    """Equality (a=b) and existence (a, !a) selectors, which is what the controllers use."""
    if not selector:
        return True
    labels = Obj(obj).labels

    def match(part: str) -> bool:
        key, sep, value = part.partition("=")
        if not sep:
            return key[1:] not in labels if key.startswith("!") else key in labels
        return labels.get(key) == value
    return all(match(part) for part in selector.split(","))


def _folded(kind: Kind, body: Raw) -> Raw:
    """A Secret's stringData folded into data, base64, as the API server stores it."""
    if kind.plural == "secrets" and "stringData" in body:
        plain = body.pop("stringData") or {}
        body["data"] = {**(body.get("data") or {}),
                        **{k: base64.b64encode(str(v).encode()).decode() for k, v in plain.items()}}
    return body


def _merge(target: Raw, patch: Raw) -> None:
    for name, value in patch.items():
        if value is None:
            target.pop(name, None)
        elif isinstance(value, dict) and isinstance(target.get(name), dict):
            _merge(target[name], value)
        else:
            target[name] = copy.deepcopy(value)


def fake_hub(store: FakeObjects, hub: Raw) -> Cache:
    """A real Cache fed by `store` as the service's informers feed it (HubClusters, the HubConfig, Namespaces), with
    the factories' owned namespaces and `hub` (a HubConfig document, doubles.factories.hub_doc) made in it: the
    world a direct test of a stack controller starts from."""
    cache = Cache(hub_name="default", role_map_name="role-map", role_map_namespace="hubwright-system",
                  parse_role_map=lambda raw: {})
    stores = cache.stores()
    store.watch(HUBCLUSTERS, cache.apply)
    store.watch(HUBCONFIGS, stores["hubconfigs"].apply)
    store.watch(NAMESPACES, stores["namespaces"].apply)
    store.watch(HUBRETAINEDSTACKS, stores[RETAINEDS].apply)
    for name, annotations in OWNED.items():
        store.create(NAMESPACES, {"metadata": {"name": name, "annotations": annotations}})
    store.create(HUBCONFIGS, hub)
    return cache
