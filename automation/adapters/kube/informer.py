"""Informers: list + watch of one kind of Kubernetes object into a Store.

An Informer lists, then watches from the list's resourceVersion; a dropped stream resumes from the last
version seen; 410 Gone relists and passes on the differences only. Its Store is the one copy of the objects:
the service's Cache (automation/service/cache.py) is the store of the four kinds it reads, so nothing is kept
twice; a Fanout passes each change the store took on to the other consumers of the kind (the runtime,
automation/kit/runtime.py, runs one informer per kind for every controller). Official `kubernetes`
client only; no monkeypatching, no custom transport.
"""
from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Protocol, runtime_checkable

import urllib3
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from automation.adapters.backoff import Backoff
from automation.adapters.loop import Loop
from automation.adapters.kube.objects import error_text
from stacks.names import CLUSTERS, GROUP, HUBCONFIGS, RETAINEDS, VERSION

LOG = logging.getLogger("hubwright.watch")

Raw = dict[str, Any]
Handler = Callable[[str, Raw], None]  # (ADDED | MODIFIED | DELETED, object)


@runtime_checkable
class Store(Protocol):
    """Where an informer keeps what it has seen: the one copy of each object (the service's Cache is one).
    `apply` is told every change, after the informer has dropped replays of what the store already holds."""

    def get(self, key: str) -> Raw | None: ...

    def keys(self) -> list[str]: ...

    def apply(self, kind: str, raw: Raw) -> None: ...


class DictStore:
    """A Store that only keeps the objects and passes each change on to `handler`."""

    def __init__(self, handler: Handler):
        self.handler = handler
        self._objects: dict[str, Raw] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> Raw | None:
        with self._lock:
            return self._objects.get(key)

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._objects)

    def apply(self, kind: str, raw: Raw) -> None:
        with self._lock:
            if kind == "DELETED":
                self._objects.pop(object_key(raw), None)
            else:
                self._objects[object_key(raw)] = raw
        self.handler(kind, raw)


class Fanout:
    """A Store that is `store` (the one copy of the kind), and passes every change it took on to more handlers:
    one informer, several consumers. A handler that raises is logged; the others still hear of the change."""

    def __init__(self, name: str, store: Store):
        self.name = name
        self.store = store
        self.handlers: list[Handler] = []

    def get(self, key: str) -> Raw | None:
        return self.store.get(key)

    def keys(self) -> list[str]:
        return self.store.keys()

    def apply(self, kind: str, raw: Raw) -> None:
        self.store.apply(kind, raw)
        for handler in self.handlers:
            try:
                handler(kind, raw)
            except Exception:  # noqa: BLE001 - one consumer's bug must not starve the others
                LOG.exception("%s: a handler of %s %s failed", self.name, kind, object_key(raw))


def object_key(raw: Mapping[str, Any]) -> str:
    meta = raw.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


# --------------------------------------------------------------------------- informer

@dataclass
class Source:
    """How to list one kind: `list_fn(**kwargs)` is a kubernetes-client list call (watch=True streams it)."""

    name: str  # for logs and metrics: "clusters", "namespaces", ...
    list_fn: Callable[..., Any]
    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


class Informer(Loop):
    """List + watch of one kind into `store` (a Store, or a handler: kept in a DictStore); runs in its own thread."""

    def __init__(self, source: Source, store: Store | Handler, *, timeout_seconds: int = 300, page_size: int = 500,
                 retry_base: float = 0.5, retry_cap: float = 30.0,
                 on_restart: Callable[[str, str], None] | None = None):
        super().__init__(f"informer-{source.name}")
        self.source = source
        self.store: Store = store if isinstance(store, Store) else DictStore(store)
        self.timeout_seconds = timeout_seconds
        self.page_size = page_size
        self._backoff = Backoff(retry_base, retry_cap)
        self.on_restart = on_restart or (lambda source, reason: None)
        self.resource_version: str | None = None
        self.synced = threading.Event()
        self.lists = 0  # how many full lists (1 + one per 410 Gone / expired version)
        self.watches = 0  # how many watch requests the server ended (its timeout): each renewed from our version
        self._watch: watch.Watch | None = None

    def _interrupt(self) -> None:
        if self._watch is not None:
            self._watch.stop()

    def run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                if self.resource_version is None:
                    self.relist()
                self.watch_once()
                failures = 0
            except ApiException as exc:
                if self._stop.is_set():
                    break
                if exc.status == 410:  # our version is older than the server keeps: list again
                    LOG.info("%s: resourceVersion %s expired (410 Gone); relisting", self.source.name,
                             self.resource_version)
                    self.on_restart(self.source.name, "gone")
                    self.resource_version = None
                    continue
                failures += 1
                self.on_restart(self.source.name, f"http{exc.status}")
                LOG.warning("%s: watch failed (%s); retrying", self.source.name, error_text(exc))
                self._pause(failures)
            except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
                if self._stop.is_set():
                    break
                failures += 1
                self.on_restart(self.source.name, "dropped")
                LOG.info("%s: watch connection lost (%s); resuming from %s", self.source.name,
                         type(exc).__name__, self.resource_version)
                self._pause(failures)

    def _pause(self, failures: int) -> None:
        self._stop.wait(self._backoff.delay(failures - 1))

    # -- list
    def relist(self) -> None:
        """List everything; hand on only what differs from what we had (adds, changes, deletions)."""
        items: list[Raw] = []
        token = None
        while True:
            kwargs = dict(self.source.kwargs, limit=self.page_size, _preload_content=False,
                          _request_timeout=(10, 60))
            if token:
                kwargs["_continue"] = token
            response = self.source.list_fn(*self.source.args, **kwargs)
            page = json.loads(response.data)
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                version = meta.get("resourceVersion")
                break
        self.lists += 1
        fresh = {object_key(raw): raw for raw in items}
        for raw in fresh.values():
            self._deliver("MODIFIED", raw)  # ADDED when new; nothing when the store holds it already
        for key in [k for k in self.store.keys() if k not in fresh]:
            old = self.store.get(key)
            if old is not None:
                self._deliver("DELETED", old)
        self.resource_version = version
        self.synced.set()

    # -- watch
    def watch_once(self) -> None:
        """One watch request, until the server ends it (timeout) or the connection drops."""
        self._watch = watch.Watch()
        try:
            stream = self._watch.stream(
                self.source.list_fn, *self.source.args, **self.source.kwargs,
                resource_version=self.resource_version, allow_watch_bookmarks=True,
                timeout_seconds=self.timeout_seconds,
                _request_timeout=(10, self.timeout_seconds + 30))
            for event in stream:
                if self._stop.is_set():
                    break
                kind, raw = event["type"], event["raw_object"]
                version = (raw.get("metadata") or {}).get("resourceVersion") if isinstance(raw, dict) else None
                if kind != "BOOKMARK":
                    self._deliver(kind, raw)
                if version:
                    self.resource_version = version
            else:
                self.watches += 1
        finally:
            self._watch = None

    @property
    def objects(self) -> dict[str, Raw]:
        """What the store holds now (a copy)."""
        return {key: raw for key in self.store.keys() if (raw := self.store.get(key)) is not None}

    def _deliver(self, kind: str, raw: Raw) -> None:
        key = object_key(raw)
        old = self.store.get(key)
        if kind == "DELETED":
            if old is None:
                return
        else:
            if old is not None and old == raw:
                return  # a replayed ADDED, or a relisted object with nothing new
            kind = "ADDED" if old is None else "MODIFIED"
        try:
            self.store.apply(kind, raw)
        except Exception:  # noqa: BLE001 - one bad object must not stop the watch
            LOG.exception("%s: handling %s %s failed", self.source.name, kind, key)


# --------------------------------------------------------------------------- wiring

def sources(api_client: client.ApiClient, *, hub_name: str, role_map_name: str, role_map_namespace: str,
            watch_namespace: str | None = None, every_namespace: bool = False) -> dict[str, Source]:
    """What the service watches, one Source per kind: Clusters (in one namespace or all), their Namespaces, the
    HubConfig and the role-map ConfigMap. With `every_namespace`, every Namespace even with `watch_namespace`: the
    tenant controller runs beside (a Tenant's namespace may be any; it adds the Tenants' source itself), or a source
    family reads namespaces of its own (HyperShift's control-plane namespaces)."""
    custom = client.CustomObjectsApi(api_client)
    core = client.CoreV1Api(api_client)
    if watch_namespace:
        clusters = Source("clusters", custom.list_namespaced_custom_object, (GROUP, VERSION, watch_namespace,
                                                                             CLUSTERS))
        namespaces = Source("namespaces", core.list_namespace) if every_namespace else \
            Source("namespaces", core.list_namespace, kwargs={"field_selector": f"metadata.name={watch_namespace}"})
    else:
        clusters = Source("clusters", custom.list_cluster_custom_object, (GROUP, VERSION, CLUSTERS))
        namespaces = Source("namespaces", core.list_namespace)
    return {
        "clusters": clusters,
        "hubconfigs": Source("hubconfigs", custom.list_cluster_custom_object, (GROUP, VERSION, HUBCONFIGS),
                             {"field_selector": f"metadata.name={hub_name}"}),
        "namespaces": namespaces,
        "configmaps": Source("configmaps", core.list_namespaced_config_map, (role_map_namespace,),
                             {"field_selector": f"metadata.name={role_map_name}"}),
        RETAINEDS: Source(RETAINEDS, custom.list_cluster_custom_object, (GROUP, VERSION, RETAINEDS)),
    }


def wait_synced(informers: Iterable[Informer], stop: threading.Event, *, poll: float = 0.2) -> bool:
    """Block until every informer has listed once (True), or until `stop` is set (False): what a consumer of
    their caches waits for, so nothing is judged against a half-filled cache."""
    for informer in informers:
        while not informer.synced.wait(poll):
            if stop.is_set():
                return False
    return not stop.is_set()
