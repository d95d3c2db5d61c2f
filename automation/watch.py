"""Watch: the Kubernetes objects in, cluster keys to reconcile out.

    Informer (one per kind)  list, then watch from the list's resourceVersion;
                             a dropped stream resumes from the last version seen;
                             410 Gone relists and passes on the differences only
        │ events
        ▼
    Cache                    the local copy of what resolve() reads: Clusters,
                             the HubConfig, Namespace annotations, the role map
        │ change signal
        ▼
    Desired                  resolve_fleet() over the cache, memoised per input version
        │
        ▼
    Mapper                   enqueues exactly the clusters whose StackInputs.digest()
                             (or deletion, generation, validity) changed: an edit of one
                             Cluster, a Namespace annotation, the role map or a mesh
                             member reaches only the stacks whose inputs it changes.

Official `kubernetes` client only; no monkeypatching, no custom transport.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import urllib3
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from stacks.accounts import DEFAULT_REGION_ANNOTATION, OWNER_ACCOUNT_ANNOTATION, REGION_ANNOTATION
from stacks.errors import FieldError, InvalidSpec
from stacks.inputs import StackInputs
from stacks.model import GROUP, Cluster, HubConfig, parse
from stacks.mesh import JOIN_STATUS_KEY
from stacks.resolve import Fleet, mesh_of, resolve_fleet
from stacks.status import HUB_NOT_FOUND

LOG = logging.getLogger("clusternet.watch")
VERSION = "v1alpha1"
ANNOTATION_PREFIX = "clusternet.io/"  # the only Namespace annotations resolve() reads

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


# --------------------------------------------------------------------------- cache

@dataclass
class ClusterEntry:
    raw: Raw
    parsed: Cluster | InvalidSpec
    inputs: str  # what of the object resolve() reads, serialised: a change here may change StackInputs
    placement: str | None  # the endpoint VPC the status says the stack uses


def _inputs_of(raw: Raw) -> str:
    meta = raw.get("metadata") or {}
    relevant = {
        "name": meta.get("name"), "namespace": meta.get("namespace"), "labels": meta.get("labels"),
        "annotations": meta.get("annotations"), "created": meta.get("creationTimestamp"), "spec": raw.get("spec"),
        "deleting": bool(meta.get("deletionTimestamp")), "meshJoin": (raw.get("status") or {}).get(JOIN_STATUS_KEY),
    }
    return json.dumps(relevant, sort_keys=True, default=str)


def _placement_of(raw: Raw) -> str | None:
    outputs = (raw.get("status") or {}).get("outputs") or {}
    return outputs.get("endpointVPC") if isinstance(outputs, dict) else None


def _parse_cluster(raw: Raw) -> Cluster | InvalidSpec:
    doc = {k: v for k, v in raw.items() if k != "status"}
    meta = doc.get("metadata") or {}
    doc["metadata"] = {k: v for k, v in meta.items() if k not in ("managedFields", "ownerReferences")}
    join = (raw.get("status") or {}).get(JOIN_STATUS_KEY)
    if join:  # the only part of the status resolve() reads: the mesh join order
        doc["status"] = {JOIN_STATUS_KEY: join}
    try:
        parsed = parse(doc)
    except InvalidSpec as exc:
        return exc
    if not isinstance(parsed, Cluster):
        return InvalidSpec.one(object_key(raw), "kind", f"expected a Cluster, got {type(parsed).__name__}")
    return parsed


class Cache:
    """What the service knows of the cluster objects. Thread-safe; fed by the informers."""

    def __init__(self, *, hub_name: str, role_map_name: str, role_map_namespace: str,
                 parse_role_map: Callable[[Raw | None], Mapping[str, str]]):
        self.hub_name = hub_name
        self.role_map_name = role_map_name
        self.role_map_namespace = role_map_namespace
        self._parse_role_map = parse_role_map
        self._lock = threading.Condition()
        self.clusters: dict[str, ClusterEntry] = {}
        self.hub: HubConfig | InvalidSpec | None = None
        self.namespaces: dict[str, dict[str, str]] = {}
        self.role_map: Mapping[str, str] = {}
        self.inputs_version = 0  # bumps when anything resolve() reads changes
        self.placement_version = 0  # bumps when a recorded endpoint VPC changes
        self.revision = 0  # bumps on every change (status included)
        self.touched: set[str] = set()  # cluster keys changed since the mapper last looked

    # -- handlers (one per informer)
    def on_cluster(self, kind: str, raw: Raw) -> None:
        key = object_key(raw)
        with self._lock:
            old = self.clusters.get(key)
            if kind == "DELETED":
                if old is None:
                    return
                del self.clusters[key]
                self.inputs_version += 1
                if old.placement is not None:
                    self.placement_version += 1
            else:
                inputs = _inputs_of(raw)
                parsed = old.parsed if old is not None and old.inputs == inputs else _parse_cluster(raw)
                entry = ClusterEntry(raw, parsed, inputs, _placement_of(raw))
                self.clusters[key] = entry
                if old is None or old.inputs != inputs:
                    self.inputs_version += 1
                if (old.placement if old else None) != entry.placement:
                    self.placement_version += 1
            self.touched.add(key)
            self._changed()

    def on_hub(self, kind: str, raw: Raw) -> None:
        if (raw.get("metadata") or {}).get("name") != self.hub_name:
            return
        with self._lock:
            if kind == "DELETED":
                self.hub = None
            else:
                try:
                    hub = parse({k: v for k, v in raw.items() if k != "status"})
                    self.hub = hub if isinstance(hub, HubConfig) else InvalidSpec.one(
                        f"HubConfig {self.hub_name}", "kind", "not a HubConfig")
                except InvalidSpec as exc:
                    self.hub = exc
            self.inputs_version += 1
            self._changed()

    def on_namespace(self, kind: str, raw: Raw) -> None:
        meta = raw.get("metadata") or {}
        name = meta.get("name")
        annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith(ANNOTATION_PREFIX)}
        with self._lock:
            old = self.namespaces.get(name)
            if kind == "DELETED":
                self.namespaces.pop(name, None)
            else:
                self.namespaces[name] = annotations
            if (old or {}) != (annotations if kind != "DELETED" else {}):
                self.inputs_version += 1
                self._changed()

    def on_configmap(self, kind: str, raw: Raw) -> None:
        meta = raw.get("metadata") or {}
        if meta.get("name") != self.role_map_name or meta.get("namespace", self.role_map_namespace) != \
                self.role_map_namespace:
            return
        entries = dict(self._parse_role_map(None if kind == "DELETED" else raw))
        with self._lock:
            if entries != self.role_map:
                self.role_map = entries
                self.inputs_version += 1
                self._changed()

    def _changed(self) -> None:
        self.revision += 1
        self._lock.notify_all()

    # -- reads
    def wait_for_change(self, seen_revision: int, timeout: float) -> int:
        with self._lock:
            self._lock.wait_for(lambda: self.revision != seen_revision, timeout)
            return self.revision

    def take_touched(self) -> set[str]:
        with self._lock:
            touched, self.touched = self.touched, set()
            return touched

    def cluster(self, key: str) -> Raw | None:
        with self._lock:
            entry = self.clusters.get(key)
            return entry.raw if entry is not None else None

    def entries(self) -> dict[str, ClusterEntry]:
        with self._lock:
            return dict(self.clusters)

    def snapshot(self) -> tuple[int, int, Fleet | None, dict[str, InvalidSpec], dict[str, str]]:
        """(inputs_version, placement_version, fleet of the valid clusters, invalid ones, placements)."""
        with self._lock:
            entries = list(self.clusters.items())
            hub, namespaces, role_map = self.hub, dict(self.namespaces), dict(self.role_map)
            versions = (self.inputs_version, self.placement_version)
        invalid: dict[str, InvalidSpec] = {}
        if hub is None or isinstance(hub, InvalidSpec):
            for key, entry in entries:
                invalid[key] = entry.parsed if isinstance(entry.parsed, InvalidSpec) else _hub_problem(
                    self.hub_name, key, hub)
            return versions[0], versions[1], None, invalid, {}
        valid = []
        placements: dict[str, str] = {}
        for key, entry in entries:
            if isinstance(entry.parsed, InvalidSpec):
                invalid[key] = entry.parsed
            else:
                valid.append(entry.parsed)
                if entry.placement:
                    placements[key] = entry.placement
        fleet = Fleet(hub=hub, clusters=tuple(valid), namespaces=namespaces, role_map=role_map,
                      placements=placements)
        return versions[0], versions[1], fleet, invalid, placements

    def placements(self) -> tuple[int, dict[str, str]]:
        with self._lock:
            return self.placement_version, {k: e.placement for k, e in self.clusters.items() if e.placement}


def _hub_problem(hub_name: str, key: str, hub: InvalidSpec | None) -> InvalidSpec:
    if hub is None:
        return InvalidSpec.one(f"Cluster {key}", "(hub)",
                               f"HubConfig {hub_name} does not exist; create it, or start the service with "
                               f"--hub-name naming the one to use", condition=HUB_NOT_FOUND)
    return InvalidSpec([FieldError(f"Cluster {key}", "(hub)", f"HubConfig {hub_name} is invalid"), *hub.errors],
                       "InvalidHubConfig")


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
    """resolve_fleet() over the cache, recomputed only when something it reads has changed.

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
                    self._current = Resolution(current.inputs_version, version, current.inputs, current.digests,
                                               current.stamps, current.unstamp, current.fleet,
                                               current.stamps_version)
                    return self._current
            stamps_version = self.stamps.version
            inputs_version, placement_version, fleet, invalid, _ = self.cache.snapshot()
            resolved: dict[str, StackInputs | InvalidSpec] = dict(invalid)
            stamps: Mapping[str, dict] = {}
            unstamp: frozenset[str] = frozenset()
            if fleet is not None:
                fleet = dataclasses.replace(fleet, clusters=self.stamps.overlay(fleet.clusters))
                resolved.update(resolve_fleet(fleet))
                mesh = mesh_of(fleet)
                stamps, unstamp = mesh.stamps, frozenset(mesh.unstamp)
            self.resolves += 1
            self._current = Resolution(inputs_version, placement_version, resolved,
                                       {k: _digest(v) for k, v in resolved.items()}, stamps, unstamp, fleet,
                                       stamps_version)
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


class Mapper:
    """Turns cache changes into queue entries: only the clusters whose desired stack changed.

    `triage(key, raw, desired)` (the reconciler's) says, for a cluster seen for the
    first time, when it needs a reconcile: 0 now, N seconds (the drift check), None never.
    `observers` are called with each new Resolution (e.g. the shared ingress ConfigMap sync).
    """

    def __init__(self, cache: Cache, desired: Desired, *, add: Callable[[str], None],
                 add_after: Callable[[str, float], None], triage: Triage,
                 observers: Iterable[Callable[[Resolution], None]] = ()):
        self.cache, self.desired = cache, desired
        self.add, self.add_after, self.triage = add, add_after, triage
        self.observers = tuple(observers)
        self._seen: dict[str, tuple] = {}
        self._resolution: Resolution | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.enqueued = 0

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self.run, name="mapper", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = 5) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def run(self) -> None:
        revision = -1
        while not self._stop.is_set():
            revision = self.cache.wait_for_change(revision, timeout=0.5)
            try:
                self.map_once()
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
            fingerprint = (resolution.digests.get(key), meta.get("generation"), bool(meta.get("deletionTimestamp")),
                           json.dumps(self.desired.mesh_join(key, join), sort_keys=True), meta.get("uid"))
            previous = self._seen.get(key)
            self._seen[key] = fingerprint
            if previous == fingerprint:
                continue
            if previous is not None and previous[-1] == fingerprint[-1]:
                self._enqueue(key)
                continue
            due = self.triage(key, entry.raw, resolution.inputs.get(key))
            if due is None:
                continue
            if due <= 0:
                self._enqueue(key)
            else:
                self.add_after(key, due)

    def _enqueue(self, key: str) -> None:
        self.enqueued += 1
        self.add(key)


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
