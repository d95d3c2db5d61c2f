"""Watch: the Kubernetes objects in, cluster keys to reconcile out.

    Informer (one per kind)  list, then watch from the list's resourceVersion;     automation/watch.py
                             a dropped stream resumes from the last version seen;
                             410 Gone relists and passes on the differences only
        │ events
        ▼
    Cache                    the local copy of what resolve() reads: Clusters,      automation/cache.py
                             the HubConfig, Namespace annotations, the role map
        │ change signal
        ▼
    Desired                  resolve_fleet() over the cache, memoised per input     automation/mapper.py
                             version
        │
        ▼
    Mapper                   enqueues exactly the clusters whose StackInputs.digest()  automation/mapper.py
                             (or deletion, generation, validity) changed: an edit of one
                             Cluster, a Namespace annotation, the role map or a mesh
                             member reaches only the stacks whose inputs it changes.

Official `kubernetes` client only; no monkeypatching, no custom transport.
"""
from __future__ import annotations

import json
import logging
import random
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

import urllib3
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from stacks.model import GROUP

if TYPE_CHECKING:
    from automation.cache import Cache

LOG = logging.getLogger("clusternet.watch")
VERSION = "v1alpha1"

Raw = dict[str, Any]
Handler = Callable[[str, Raw], None]  # (ADDED | MODIFIED | DELETED, object)


def object_key(raw: Raw) -> str:
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


class Informer:
    """List + watch of one kind, feeding `handler` the changes; runs in its own thread."""

    def __init__(self, source: Source, handler: Handler, *, timeout_seconds: int = 300, page_size: int = 500,
                 retry_base: float = 0.5, retry_cap: float = 30.0,
                 on_restart: Callable[[str, str], None] | None = None):
        self.source = source
        self.handler = handler
        self.timeout_seconds = timeout_seconds
        self.page_size = page_size
        self.retry_base, self.retry_cap = retry_base, retry_cap
        self.on_restart = on_restart or (lambda source, reason: None)
        self.resource_version: str | None = None
        self.objects: dict[str, Raw] = {}
        self.synced = threading.Event()
        self.lists = 0  # how many full lists (1 + one per 410 Gone / expired version)
        self._stop = threading.Event()
        self._watch: watch.Watch | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle
    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self.run, name=f"informer-{self.source.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = 5) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()
        if self._thread is not None:
            self._thread.join(timeout)

    def alive(self) -> bool:
        return self._thread is None or self._thread.is_alive()

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
                LOG.warning("%s: watch failed (%s %s); retrying", self.source.name, exc.status, exc.reason)
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
        ceiling = min(self.retry_cap, self.retry_base * 2 ** min(failures - 1, 16))
        self._stop.wait(ceiling / 2 + random.random() * ceiling / 2)

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
        for key, raw in fresh.items():
            old = self.objects.get(key)
            if old is None:
                self._deliver("ADDED", raw)
            elif _version(old) != _version(raw) or old != raw:
                self._deliver("MODIFIED", raw)
        for key in [k for k in self.objects if k not in fresh]:
            self._deliver("DELETED", self.objects[key])
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
        finally:
            self._watch = None

    def _deliver(self, kind: str, raw: Raw) -> None:
        key = object_key(raw)
        if kind == "DELETED":
            if self.objects.pop(key, None) is None:
                return
        else:
            old = self.objects.get(key)
            if old is not None and old == raw:
                return  # a replayed ADDED with nothing new
            self.objects[key] = raw
            kind = "ADDED" if old is None else "MODIFIED"
        try:
            self.handler(kind, raw)
        except Exception:  # noqa: BLE001 - one bad object must not stop the watch
            LOG.exception("%s: handling %s %s failed", self.source.name, kind, key)


def _version(raw: Raw) -> str | None:
    return (raw.get("metadata") or {}).get("resourceVersion")


# --------------------------------------------------------------------------- wiring

def sources(api_client: client.ApiClient, *, hub_name: str, role_map_name: str, role_map_namespace: str,
            watch_namespace: str | None = None) -> dict[str, Source]:
    """The four lists the service watches (Clusters in one namespace or all)."""
    custom = client.CustomObjectsApi(api_client)
    core = client.CoreV1Api(api_client)
    if watch_namespace:
        clusters = Source("clusters", custom.list_namespaced_custom_object, (GROUP, VERSION, watch_namespace,
                                                                             "clusters"))
        namespaces = Source("namespaces", core.list_namespace,
                            kwargs={"field_selector": f"metadata.name={watch_namespace}"})
    else:
        clusters = Source("clusters", custom.list_cluster_custom_object, (GROUP, VERSION, "clusters"))
        namespaces = Source("namespaces", core.list_namespace)
    return {
        "clusters": clusters,
        "hubconfigs": Source("hubconfigs", custom.list_cluster_custom_object, (GROUP, VERSION, "hubconfigs"),
                             {"field_selector": f"metadata.name={hub_name}"}),
        "namespaces": namespaces,
        "configmaps": Source("configmaps", core.list_namespaced_config_map, (role_map_namespace,),
                             {"field_selector": f"metadata.name={role_map_name}"}),
    }


def informers(cache: Cache, srcs: Mapping[str, Source], **options: Any) -> list[Informer]:
    handlers = {"clusters": cache.on_cluster, "hubconfigs": cache.on_hub, "namespaces": cache.on_namespace,
                "configmaps": cache.on_configmap}
    return [Informer(src, handlers[name], **options) for name, src in srcs.items()]
