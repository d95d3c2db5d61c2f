"""Cache: the service's one copy of the watched objects and of what resolve() reads from them (Clusters,
the HubConfig, Namespace annotations, the role map). It is the store of every informer
(automation/adapters/kube/informer.py: `stores()`), so the informers keep no copy of their own. Thread-safe."""
from __future__ import annotations

import hashlib
import json
import logging
import threading
from dataclasses import dataclass, field
from typing import Callable, Mapping

from automation.adapters.kube.informer import DictStore, Raw, Store, object_key
from automation.kit.objects import Obj
from stacks.errors import FieldError, InvalidSpec
from stacks.model.cluster import Cluster
from stacks.model.hub import HubConfig
from stacks.model.loading import parse, resolved_part
from stacks.names import ANNOTATION_PREFIX, RETAINED, RETAINEDS
from stacks.retention import RetainedStack, Retention
from stacks.status import HUB_NOT_FOUND

LOG = logging.getLogger("hubwright.cache")


# --------------------------------------------------------------------------- cache

@dataclass
class ClusterEntry:
    raw: Raw
    parsed: Cluster | InvalidSpec
    inputs: bytes  # a hash of stacks.model.loading.resolved_part of the object: a change here may change StackInputs
    placement: str | None  # the endpoint VPC the status says the stack uses
    attachment: str | None = None  # its Transit Gateway attachment, as its status says (the transit stack reads it)
    stack: bool = False  # its stack exists (status.stack, written as its first run starts): it keeps its slot


def _fingerprint(part: Raw) -> bytes:
    return hashlib.blake2b(json.dumps(part, sort_keys=True, default=str).encode(), digest_size=16).digest()


def _placement_of(raw: Raw) -> str | None:
    outputs = (raw.get("status") or {}).get("outputs") or {}
    return outputs.get("endpointVPC") if isinstance(outputs, dict) else None


def _attachment_of(raw: Raw) -> str | None:
    outputs = (raw.get("status") or {}).get("outputs") or {}
    value = outputs.get("transitAttachment") if isinstance(outputs, dict) else None
    return value if isinstance(value, str) else None


def _stack_of(raw: Raw) -> bool:
    """Whether the status says the cluster's stack exists: the service writes status.stack as a run starts (a
    tenant cannot write the status, stacks.admission.tenant_admin_clusterrole)."""
    return bool((raw.get("status") or {}).get("stack"))


def _parse_cluster(part: Raw) -> Cluster | InvalidSpec:
    """The Cluster of `part` (stacks.model.loading.resolved_part of the object): resolve() can read nothing else."""
    try:
        parsed = parse(part)
    except InvalidSpec as exc:
        return exc
    if not isinstance(parsed, Cluster):
        return InvalidSpec.one(object_key(part), "kind", f"expected a Cluster, got {type(parsed).__name__}")
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
        self.hub_status: Raw = {}  # HubConfig status: the mesh's recorded state (stacks.transit), ours to write
        self.namespaces: dict[str, dict[str, str]] = {}
        self.namespace_uids: dict[str, str] = {}  # a name is reused; a retained stack is bound to the UID
        self.retained: dict[str, RetainedStack] = {}  # HubRetainedStacks, by the key of the cluster each was
        self.role_map: Mapping[str, str] = {}
        self.foreign_endpoints: Mapping[str, int] = {}  # the endpoint census (automation/service/census.py)
        self.revision = 0  # bumps on every change (status included)
        self._wakes = 0  # wake(): a wait_for_change returns at once (the mapper is stopping)
        self.touched: set[str] = set()  # cluster keys changed since the mapper last looked
        # What resolve() reads and has changed since FleetPublisher last drained it (automation/service/mapper.py).
        self._changed_clusters: set[str] = set()  # parsed Cluster, recorded VPC, attachment or stack (or gone)
        self._changed_namespaces: set[str] = set()  # hubwright annotations
        self._changed_shared = True  # the HubConfig (spec or status), the role map or the endpoint census
        self._hub_store = DictStore(self.on_hub)
        self._namespace_store = DictStore(self.on_namespace)
        self._configmap_store = DictStore(self.on_configmap)
        self._retained_store = DictStore(self.on_retained)

    # -- the informers' stores
    def stores(self) -> dict[str, Store]:
        """The store of each of automation.adapters.kube.informer.sources(): the Clusters live in the cache's entries;
        the other kinds, a handful of objects, in a DictStore each, whose changes the cache digests."""
        return {"clusters": self, "hubconfigs": self._hub_store, "namespaces": self._namespace_store,
                "configmaps": self._configmap_store, RETAINEDS: self._retained_store}

    def get(self, key: str) -> Raw | None:
        """A Cluster as last seen (the clusters' Store)."""
        with self._lock:
            entry = self.clusters.get(key)
            return entry.raw if entry is not None else None

    def keys(self) -> list[str]:
        with self._lock:
            return list(self.clusters)

    # -- handlers: the Clusters' (the Store's apply), then one per small kind
    def apply(self, kind: str, raw: Raw) -> None:
        key = object_key(raw)
        with self._lock:
            old = self.clusters.get(key)
            if kind == "DELETED":
                if old is None:
                    return
                del self.clusters[key]
                self._changed_clusters.add(key)
            else:
                part = resolved_part(raw)
                inputs = _fingerprint(part)
                parsed = old.parsed if old is not None and old.inputs == inputs else _parse_cluster(part)
                entry = ClusterEntry(raw, parsed, inputs, _placement_of(raw), _attachment_of(raw), _stack_of(raw))
                self.clusters[key] = entry
                if old is None or (old.inputs, old.placement, old.attachment, old.stack) != \
                        (inputs, entry.placement, entry.attachment, entry.stack):
                    self._changed_clusters.add(key)
            self.touched.add(key)
            self._changed()

    def on_hub(self, kind: str, raw: Raw) -> None:
        if Obj(raw).name != self.hub_name:
            return
        with self._lock:
            if kind == "DELETED":
                self.hub = None
                self.hub_status = {}
            else:
                try:
                    hub = parse({k: v for k, v in raw.items() if k != "status"})
                    self.hub = hub if isinstance(hub, HubConfig) else InvalidSpec.one(
                        f"HubConfig {self.hub_name}", "kind", "not a HubConfig")
                except InvalidSpec as exc:
                    self.hub = exc
                status = raw.get("status")
                self.hub_status = status if isinstance(status, dict) else {}
            self._changed_shared = True
            self._changed()

    def on_namespace(self, kind: str, raw: Raw) -> None:
        obj = Obj(raw)
        name = obj.name
        annotations = {k: v for k, v in obj.annotations.items() if k.startswith(ANNOTATION_PREFIX)}
        with self._lock:
            old = self.namespaces.get(name)
            uid = None if kind == "DELETED" else obj.uid
            if uid != self.namespace_uids.get(name):
                if uid is None:
                    self.namespace_uids.pop(name, None)
                else:
                    self.namespace_uids[name] = uid
                if any(r.spec.namespace == name for r in self.retained.values()):
                    self._changed_shared = True  # who may adopt a retained stack of it (stacks.retention)
                    self._changed()
            if kind == "DELETED":
                self.namespaces.pop(name, None)
            else:
                self.namespaces[name] = annotations
            if (old or {}) != (annotations if kind != "DELETED" else {}):
                self._changed_namespaces.add(name)
                self._changed()

    def on_configmap(self, kind: str, raw: Raw) -> None:
        obj = Obj(raw)
        if obj.name != self.role_map_name or (obj.namespace or self.role_map_namespace) != self.role_map_namespace:
            return
        entries = dict(self._parse_role_map(None if kind == "DELETED" else raw))
        with self._lock:
            if entries != self.role_map:
                self.role_map = entries
                self._changed_shared = True
                self._changed()

    def on_retained(self, kind: str, raw: Raw) -> None:
        """A HubRetainedStack: it holds its cluster's claims and slot until released or adopted (stacks.retention)."""
        try:
            record = RetainedStack.model_validate({k: v for k, v in raw.items() if k != "status"})
        except ValueError as exc:  # only the service and the hub administrator write them
            LOG.error("%s %s is unreadable and holds nothing until it is mended: %s", RETAINED.kind,
                      Obj(raw).name, exc)
            return
        with self._lock:
            if kind == "DELETED":
                held = self.retained.get(record.key)
                if held is not None and held.metadata.uid == record.metadata.uid:  # not a newer one of the key
                    del self.retained[record.key]
            else:
                self.retained[record.key] = record
            self._changed_shared = True
            self._changed()

    def retention(self) -> Retention:
        """The retained stacks as admission reads them, with the UIDs of the namespaces they name."""
        with self._lock:
            return Retention(dict(self.retained),
                             {r.spec.namespace: self.namespace_uids.get(r.spec.namespace) for r in self.retained.values()})

    def retained_of(self, key: str) -> RetainedStack | None:
        with self._lock:
            return self.retained.get(key)

    def namespace_uid(self, name: str) -> str | None:
        with self._lock:
            return self.namespace_uids.get(name)

    def set_foreign_endpoints(self, counts: Mapping[str, int]) -> None:
        """The endpoint census's answer: VPC ID -> endpoints there that hubwright did not make."""
        counts = {vpc: n for vpc, n in counts.items() if n}
        with self._lock:
            if counts != self.foreign_endpoints:
                self.foreign_endpoints = counts
                self._changed_shared = True
                self._changed()

    def _changed(self) -> None:
        self.revision += 1
        self._lock.notify_all()

    # -- reads
    def wait_for_change(self, seen_revision: int, timeout: float) -> int:
        with self._lock:
            wakes = self._wakes
            self._lock.wait_for(lambda: self.revision != seen_revision or self._wakes != wakes, timeout)
            return self.revision

    def wake(self) -> None:
        """Every wait_for_change waiting now returns at once."""
        with self._lock:
            self._wakes += 1
            self._lock.notify_all()

    def take_touched(self) -> set[str]:
        with self._lock:
            touched, self.touched = self.touched, set()
            return touched

    def entries(self) -> dict[str, ClusterEntry]:
        with self._lock:
            return dict(self.clusters)

    def entry(self, key: str) -> ClusterEntry | None:
        with self._lock:
            return self.clusters.get(key)

    def drain(self) -> Delta:
        """What resolve() reads and has changed since the last drain (the first: the hub and everything since)."""
        with self._lock:
            delta = Delta(frozenset(self._changed_clusters), frozenset(self._changed_namespaces),
                          self._changed_shared)
            self._changed_clusters, self._changed_namespaces, self._changed_shared = set(), set(), False
            return delta

    def namespace(self, name: str) -> Raw | None:
        """A Namespace as last seen (labels and every annotation), or None."""
        return self._namespace_store.get(name)

    def annotations_of(self, namespace: str) -> dict[str, str]:
        """One namespace's hubwright annotations, as cached (a copy)."""
        with self._lock:
            return dict(self.namespaces.get(namespace, {}))

    def shared(self) -> Shared:
        """The objects every cluster's resolution reads, as they are now."""
        with self._lock:
            return Shared(self.hub, self.hub_status, dict(self.role_map), dict(self.foreign_endpoints),
                          {name: dict(annotations) for name, annotations in self.namespaces.items()},
                          self.retention())


@dataclass(frozen=True)
class Delta:
    """Changes FleetPublisher has not seen: cluster keys and namespace names to read again; whether `Shared` changed."""
    clusters: frozenset[str]
    namespaces: frozenset[str]
    shared: bool

    def __bool__(self) -> bool:
        return bool(self.clusters or self.namespaces or self.shared)


@dataclass(frozen=True)
class Shared:
    hub: HubConfig | InvalidSpec | None
    hub_status: Raw
    role_map: Mapping[str, str]
    foreign_endpoints: Mapping[str, int]
    namespaces: Mapping[str, Mapping[str, str]]
    retention: Retention = field(default_factory=Retention.empty)


def hub_problem(hub_name: str, key: str, hub: InvalidSpec | None) -> InvalidSpec:
    if hub is None:
        return InvalidSpec.one(f"HubCluster {key}", "",  # not a field of the cluster: its hub
                               f"HubConfig {hub_name} does not exist; create it, or start the service with "
                               f"--hub-name naming the one to use", condition=HUB_NOT_FOUND)
    return InvalidSpec([FieldError(f"HubCluster {key}", "", f"HubConfig {hub_name} is invalid"), *hub.errors],
                       "InvalidHubConfig")


