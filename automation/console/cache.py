"""The console's informer cache: every HubCluster, HubStackRun, HubCluster Event and Namespace, and the HubConfig,
each listed once and then watched (automation.adapters.kube.informer), never listed per request.

Every change bumps one version and notes the namespace it was in, so a page's event stream can tell, without
naming anything, whether something the viewer may see changed since it last looked (`changed_since`). A
HubCluster's fleet-page Row is made when the object changes, not when a page is asked for. No Secret is read.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Any, Callable, Iterable, Mapping

from kubernetes import client

from automation.adapters.kube.informer import Informer, Raw, Source, object_key
from stacks.console.rows import Row, fleet_part, row_of, tenant_of
from stacks.names import CLUSTERS, GROUP, HUBCONFIGS, STACKRUNS, VERSION

EVERYWHERE = "*"  # a change not in one namespace (the HubConfig, a Namespace's tenant)
CHANGES_KEPT = 4096  # changes remembered for changed_since; an older version reads as "anything may have changed"
EVENTS_PER_CLUSTER = 20  # the newest Events of a cluster kept
SLIM = ("managedFields",)  # metadata the console never shows: not kept


def _annotations(raw: Raw | None) -> Any:
    return None if raw is None else (raw.get("metadata") or {}).get("annotations")


def _slim(raw: Raw) -> Raw:
    meta = raw.get("metadata")
    if isinstance(meta, dict) and any(k in meta for k in SLIM):
        raw = {**raw, "metadata": {k: v for k, v in meta.items() if k not in SLIM}}
    return raw


class _Kind:
    """One kind's store for its informer (automation.adapters.kube.informer.Store)."""

    def __init__(self, cache: ConsoleCache, name: str):
        self.cache, self.name = cache, name
        self.objects: dict[str, Raw] = {}

    def get(self, key: str) -> Raw | None:
        with self.cache.lock:
            return self.objects.get(key)

    def keys(self) -> list[str]:
        with self.cache.lock:
            return list(self.objects)

    def apply(self, kind: str, raw: Raw) -> None:
        self.cache.apply(self, kind, _slim(raw))


class ConsoleCache:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.clusters, self.runs, self.events = _Kind(self, CLUSTERS), _Kind(self, STACKRUNS), _Kind(self, "events")
        self.namespaces, self.hubconfigs = _Kind(self, "namespaces"), _Kind(self, HUBCONFIGS)
        self.configmaps = _Kind(self, "configmaps")  # the role map only (the mesh's picture resolves with it)
        self.rows: dict[str, Row] = {}
        self._by_namespace: dict[str, set[str]] = {}  # namespace -> cluster keys
        self._events_of: dict[str, list[str]] = {}  # cluster key -> event keys, oldest first
        self.version = 0
        # Bumped only by a change the fleet's resolution reads (model.py): a cluster's fleet_part, a Namespace's
        # annotations, the HubConfig, the role map. Status writes, Events and runs leave it, so no page resolves
        # the fleet again for them.
        self.fleet_version = 0
        self._changes: deque[tuple[int, str]] = deque(maxlen=CHANGES_KEPT)

    # ----------------------------------------------------------------- writes (informer threads)
    def apply(self, store: _Kind, kind: str, raw: Raw) -> None:
        key = object_key(raw)
        meta = raw.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        with self.lock:
            old = store.objects.get(key)
            if kind == "DELETED":
                store.objects.pop(key, None)
            else:
                store.objects[key] = raw
            if self._moves_fleet(store, old, None if kind == "DELETED" else raw):
                self.fleet_version += 1
            if store is self.clusters:
                self._cluster(key, namespace, None if kind == "DELETED" else raw)
            elif store is self.events:
                self._event(key, raw, kind == "DELETED")
            elif store is self.namespaces:
                for cluster in self._by_namespace.get(key, ()):
                    self.rows[cluster] = row_of(self.clusters.objects[cluster], self._tenant(key))
                namespace = key
            self.version += 1
            self._changes.append((self.version, namespace or EVERYWHERE))

    def _moves_fleet(self, store: _Kind, old: Raw | None, new: Raw | None) -> bool:
        if store is self.hubconfigs or store is self.configmaps:
            return True
        if store is self.namespaces:
            return _annotations(old) != _annotations(new)
        if store is self.clusters:
            return (old is None) != (new is None) or fleet_part(old or {}) != fleet_part(new or {})
        return False

    def _tenant(self, namespace: str) -> str:
        doc = self.namespaces.objects.get(namespace) or {}
        meta = doc.get("metadata") or {}
        return tenant_of(namespace, meta.get("annotations"), meta.get("labels"))

    def _cluster(self, key: str, namespace: str, raw: Raw | None) -> None:
        if raw is None:
            self.rows.pop(key, None)
            keys = self._by_namespace.get(namespace, set())
            keys.discard(key)
            if not keys:
                self._by_namespace.pop(namespace, None)
            return
        self._by_namespace.setdefault(namespace, set()).add(key)
        self.rows[key] = row_of(raw, self._tenant(namespace))

    def _event(self, key: str, raw: Raw, deleted: bool) -> None:
        involved = raw.get("involvedObject") or {}
        cluster = f"{involved.get('namespace')}/{involved.get('name')}"
        kept = self._events_of.setdefault(cluster, [])
        if key in kept:
            kept.remove(key)
        if not deleted:
            kept.append(key)
        for old in kept[:-EVENTS_PER_CLUSTER]:
            self.events.objects.pop(old, None)
        del kept[:-EVENTS_PER_CLUSTER]
        if not kept:
            self._events_of.pop(cluster, None)

    # ----------------------------------------------------------------- reads (request threads)
    def namespaces_with_clusters(self) -> list[str]:
        with self.lock:
            return sorted(self._by_namespace)

    def rows_in(self, namespaces: Iterable[str] | None) -> list[Row]:
        """The rows of these namespaces' clusters (None: every namespace's)."""
        with self.lock:
            if namespaces is None:
                return list(self.rows.values())
            return [self.rows[k] for ns in namespaces for k in self._by_namespace.get(ns, ())]

    def cluster(self, namespace: str, name: str) -> Raw | None:
        return self.clusters.get(f"{namespace}/{name}")

    def row(self, namespace: str, name: str) -> Row | None:
        with self.lock:
            return self.rows.get(f"{namespace}/{name}")

    def events_of(self, namespace: str, name: str) -> list[Raw]:
        """The cluster's newest Events, newest first."""
        with self.lock:
            keys = self._events_of.get(f"{namespace}/{name}", [])
            found = [self.events.objects[k] for k in keys if k in self.events.objects]
        return sorted(found, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""), reverse=True)

    def runs_where(self, keep: Callable[[Raw], bool]) -> list[Raw]:
        with self.lock:
            return [raw for raw in self.runs.objects.values() if keep(raw)]

    def hubconfig(self) -> Raw | None:
        with self.lock:
            return next(iter(self.hubconfigs.objects.values()), None)

    def role_map(self) -> Mapping[str, str] | None:
        with self.lock:
            doc = next(iter(self.configmaps.objects.values()), None)
        return None if doc is None else dict(doc.get("data") or {})

    def namespace_docs(self) -> Mapping[str, Raw]:
        with self.lock:
            return dict(self.namespaces.objects)

    def cluster_docs(self) -> list[Raw]:
        with self.lock:
            return list(self.clusters.objects.values())

    def changed_since(self, version: int) -> tuple[int, set[str] | None]:
        """(now, the namespaces changed after `version`; None: more than the changes kept, anything may have)."""
        with self.lock:
            if version >= self.version:
                return self.version, set()
            if not self._changes or self._changes[0][0] > version + 1:
                return self.version, None
            return self.version, {ns for v, ns in self._changes if v > version}



def informers(cache: ConsoleCache, api: client.ApiClient, *, hub_name: str, namespace: str, role_map: str,
              timeout_seconds: int = 300) -> list[Informer]:
    """One informer per kind the console shows, each into its store in `cache`."""
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)

    def every(plural: str, store: _Kind, **kwargs: Any) -> Informer:
        return Informer(Source(plural, custom.list_cluster_custom_object, (GROUP, VERSION, plural), kwargs), store,
                        timeout_seconds=timeout_seconds)

    return [
        every(CLUSTERS, cache.clusters),
        every(STACKRUNS, cache.runs),
        every(HUBCONFIGS, cache.hubconfigs, field_selector=f"metadata.name={hub_name}"),
        Informer(Source("namespaces", core.list_namespace), cache.namespaces, timeout_seconds=timeout_seconds),
        Informer(Source("configmaps", core.list_namespaced_config_map, (namespace,),
                        {"field_selector": f"metadata.name={role_map}"}), cache.configmaps,
                 timeout_seconds=timeout_seconds),
        Informer(Source("events", core.list_event_for_all_namespaces,
                        kwargs={"field_selector": "involvedObject.kind=HubCluster"}), cache.events,
                 timeout_seconds=timeout_seconds),
    ]
