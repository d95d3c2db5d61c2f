"""The clusters' reconciler without an API server or threads: `FakeClusters` and `StaticDesired`.

- `FakeClusters`: the production ClusterClient (automation/service/clusters/client.py) over doubles.objects'
  FakeObjects, the in-memory API server of every kind (it stamps uid, resourceVersion and generation, answers a
  stale resourceVersion with a conflict and a missing object with "gone", holds a deleted object while it has
  finalizers), with its status writes done on the caller's thread. On top, what the direct tests look at: the
  status writes the reconciler asked for (`writes`), the Events (`events`), the facts agents revoked (`revoked`),
  and a user's hands on the HubClusters by key (`create`, `patch`, `delete`, `get`). Each change is handed to its
  watchers as a watch would (`watch(cache.apply)`), synchronously.
- `StaticDesired`: automation.service.snapshot.DesiredView from dicts a test fills (no resolution at all).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from automation.kit.objects import HUBCLUSTERS
from automation.service.clusters import ClusterClient, cluster_writer
from doubles.objects import FakeObjects, RecordedEvent
from doubles import factories
from stacks.errors import InvalidSpec
from stacks.model.fields import DeletionPolicy
from stacks.model.hub import HubConfig
from stacks.retention import own_policy, policy_of
from stacks.inputs import StackInputs
from stacks.status import ClusterStatus
from stacks.transit import TransitInputs

Raw = dict[str, Any]
Watcher = Callable[[str, Raw], None]  # (ADDED | MODIFIED | DELETED, object), like an informer's handler


def key_of(raw: Raw) -> str:
    meta = raw.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def _split(key: str) -> tuple[str, str]:
    namespace, _, name = key.partition("/")
    return namespace, name


@dataclass(frozen=True)
class StatusWrite:
    key: str
    status: ClusterStatus
    later: bool  # write_later (a finished run's report, off the worker's path) rather than write


class FakeClusters(ClusterClient):
    """The ClusterClient over an in-memory API server (module docstring); `store` is its FakeObjects."""

    def __init__(self, store: FakeObjects | None = None) -> None:
        self.store = store if store is not None else FakeObjects()
        super().__init__(self.store, writer=cluster_writer(self.store, background=False))
        self.writes: list[StatusWrite] = []
        self.revoked: list[str] = []
        self.revoke_errors: list[Exception] = []  # raised by the next revoke_agent calls, one each

    # -- what a test looks at
    @property
    def objects_by_key(self) -> dict[str, Raw]:
        return self.store.objects_of(HUBCLUSTERS)

    @property
    def events(self) -> list[RecordedEvent]:
        """The Events on HubClusters (kind, key, type, reason, message)."""
        return [e for e in self.store.events if e.kind == HUBCLUSTERS.kind]

    @property
    def conflicts(self) -> int:
        """Writes answered with a conflict (a stale resourceVersion)."""
        return self.store.conflicts

    def events_of(self, key: str) -> list[tuple[str, str]]:
        return [(e.type, e.reason) for e in self.events if e.key == key]

    # -- the API server's side: what a user (a test) does
    def watch(self, watcher: Watcher) -> None:
        self.store.watch(HUBCLUSTERS, watcher)

    def create(self, doc: Raw) -> Raw:
        return self.store.create(HUBCLUSTERS, doc)

    def patch(self, key: str, patch: Raw) -> Raw:
        """A merge patch of metadata and spec, as `kubectl patch --type merge` (a spec change: a new generation)."""
        namespace, name = _split(key)
        patched = self.store.patch(HUBCLUSTERS, name, patch, namespace)
        if patched is None:
            raise KeyError(f"{key} not found (404)")
        return patched

    def delete(self, key: str) -> None:
        """Held by its finalizers (deletionTimestamp set), else gone."""
        namespace, name = _split(key)
        if not self.store.delete(HUBCLUSTERS, name, namespace):
            raise KeyError(f"{key} not found (404)")

    def get(self, key: str) -> Raw | None:
        namespace, name = _split(key)
        return self.store.get(HUBCLUSTERS, name, namespace)

    # -- the ClusterClient, recording what was asked
    def write(self, raw: Raw, status: ClusterStatus, *, previous: ClusterStatus) -> bool:
        written = super().write(raw, status, previous=previous)
        if written:
            self.writes.append(StatusWrite(key_of(raw), status, False))
        return written

    def write_later(self, raw: Raw, status: ClusterStatus, *, previous: ClusterStatus) -> None:
        if self.get(key_of(raw)) is not None:
            self.writes.append(StatusWrite(key_of(raw), status, True))
        super().write_later(raw, status, previous=previous)

    def revoke_agent(self, namespace: str, name: str) -> None:
        if self.revoke_errors:
            raise self.revoke_errors.pop(0)
        super().revoke_agent(namespace, name)
        self.revoked.append(f"{namespace}/{name}")


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
    hub: HubConfig | None = field(default_factory=factories.hub)  # its spec.deletion decides a delete

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

    def deletion_policy(self, key: str, spec: Any) -> DeletionPolicy | InvalidSpec:
        try:
            return policy_of(f"HubCluster {key}", own_policy(spec), self.hub)
        except InvalidSpec as exc:
            return exc

    def network_query(self, key: str) -> None:
        """No discovery here: the declared networks are taken as they are."""
        return None
