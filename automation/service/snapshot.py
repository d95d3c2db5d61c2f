"""What a worker thread may read of the desired state. Only the mapper resolves (automation/service/mapper.py:
FleetPublisher, entered from the mapper's thread alone); after each pass it publishes a `Snapshot`, frozen, and only then
queues the keys that pass found. The reconcilers read through `DesiredView` (a `Published`: the latest Snapshot)
and never drain or resolve.

    mapper thread:  Cache.drain ─► FleetPublisher.get (resolve) ─► Snapshot ─► Published.publish ─► WorkQueue.add
    worker threads:                                          Published.inputs(key), ... (reads, nothing else)

A Snapshot shares its bulk with the one before (`Frozen`: a base nobody mutates and a small overlay of what
changed), so publishing one costs what the pass changed, not a copy of the fleet.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Generic, Iterable, Iterator, Mapping, Protocol, TypeVar

from automation.service.cache import Cache
from stacks.accounts import cluster_region, region_overridden
from stacks.errors import InvalidSpec
from stacks.inputs import SharedIngressInputs, StackInputs
from stacks.keys import unknown_key_messages
from stacks.model.cluster import Cluster
from stacks.model.fields import DeletionPolicy
from stacks.model.hub import HubConfig
from stacks.retention import own_policy, policy_of
from stacks.network.query import NetworkQuery, query_of
from stacks.targets import AwsTarget
from stacks.tenancy import cluster_namespace, shared_warning
from stacks.transit import TransitInputs



class DesiredView(Protocol):
    def inputs(self, key: str) -> StackInputs | InvalidSpec | None:
        """The cluster's desired StackInputs, its refusal, or None (no stack: registered only, or not resolved)."""

    def registered_only(self, key: str) -> bool:
        """Whether the cluster is registered only (no AWS part): it has no stack, by design."""

    def mesh_join(self, key: str, current: dict | None) -> dict | None:
        """The status.meshJoin the cluster should carry: the stamp handed out, else `current`."""

    def routed_id(self, key: str, current: str | None) -> str | None:
        """The status.sharedIngress.clusterID the cluster should carry: the ID it is routed on, else `current`."""

    def claims_of(self, key: str, current: dict | None) -> dict | None:
        """The status.claims the cluster should carry: what admission granted it, else `current`."""

    def placed_in(self, key: str) -> tuple[str | None, str | None]:
        """(account, region) of the cluster as its input says; None where the input cannot tell."""

    def transit(self, stack: str) -> TransitInputs | None:
        """A transit stack's desired inputs; None when no mesh group uses it."""

    def network_query(self, key: str) -> NetworkQuery | None:
        """What discovery reads for the cluster (stacks.network.query), in the account the tenancy gate admitted
        it to; None: registered only, refused at the gate, or unknown."""

    def account_shared(self, key: str) -> str | None:
        """Why the running cluster's account is one two namespaces own without the administrator's say (the
        AccountShared Warning condition), or None."""

    def region_overridden(self, key: str) -> str | None:
        """Why the cluster is not in its spec.region under HubConfig spec.regionPrecedence: Legacy (the
        RegionOverridden Warning condition), or None."""

    def unknown_keys(self, key: str) -> str | None:
        """The cluster's labels and annotations under hubwright.io/ that nothing reads (the UnknownKeys Warning
        condition), or None."""

    def deletion_policy(self, key: str, spec: Any) -> DeletionPolicy | InvalidSpec:
        """What deleting the cluster does to its stack (stacks.retention.policy_of), or why that cannot be done
        now."""


# --------------------------------------------------------------------------- a persistent map

K = TypeVar("K")
V = TypeVar("V")
_DROPPED: Any = object()
_MISSING: Any = object()


class Frozen(Mapping[K, V], Generic[K, V]):
    """An immutable mapping that shares its bulk with the one it was made from: a base dict nobody mutates and an
    overlay of the changes since (a removal: _DROPPED). `updated` copies the overlay only, and folds it into a new
    base once it outgrows √(base) entries: a change costs O(√n) at worst (about 20 µs at 50,000 entries), never a
    copy of the whole map per pass."""

    __slots__ = ("_base", "_over", "_len")

    def __init__(self, items: Mapping[K, V] | None = None):
        self._base: dict[K, V] = dict(items or {})
        self._over: dict[K, Any] = {}
        self._len = len(self._base)

    def __getitem__(self, key: K) -> V:
        value = self._over.get(key, _MISSING)
        if value is _MISSING:
            return self._base[key]
        if value is _DROPPED:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        value = self._over.get(key, _MISSING)  # type: ignore[arg-type]
        return key in self._base if value is _MISSING else value is not _DROPPED

    def __iter__(self) -> Iterator[K]:
        over = self._over
        for key in self._base:
            if key not in over:
                yield key
        for key, value in over.items():
            if value is not _DROPPED:
                yield key

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        return f"Frozen({dict(self.items())!r})"

    def updated(self, changes: Mapping[K, V], dropped: Iterable[K] = ()) -> "Frozen[K, V]":
        """A new map: this one with `changes` set and `dropped` removed (a key is in one or the other, not both)."""
        dropped = [key for key in dropped if key in self]
        if not changes and not dropped:
            return self
        over = dict(self._over)
        length = self._len
        for key, value in changes.items():
            length += key not in self
            over[key] = value
        for key in dropped:
            length -= 1
            if key in self._base:
                over[key] = _DROPPED
            else:
                del over[key]
        base = self._base
        if len(over) > max(32, math.isqrt(len(base))):
            base = dict(base)
            for key, value in over.items():
                if value is _DROPPED:
                    del base[key]
                else:
                    base[key] = value
            over = {}
        new: Frozen[K, V] = Frozen.__new__(Frozen)
        new._base, new._over, new._len = base, over, length
        return new


# --------------------------------------------------------------------------- the snapshot

@dataclass(frozen=True)
class Snapshot:
    """What one mapper pass decided, frozen (DesiredView). `number`: the pass's (0: none yet, nothing resolved).

    `placed_in` and `registered_only` read the Cluster as cached (like the reconciler's own read of it) against
    this pass's HubConfig: a read, never a drain or a resolve."""

    number: int = 0
    values: Mapping[str, StackInputs | InvalidSpec] = field(default_factory=Frozen)
    guests: Mapping[str, SharedIngressInputs] = field(default_factory=dict)
    stamps: Mapping[str, dict | None] = field(default_factory=Frozen)  # the join stamps handed out (None: to be taken away)
    transits: Mapping[str, TransitInputs] = field(default_factory=dict)
    hub: HubConfig | None = None
    cache: "Cache | None" = None
    gates: Mapping[str, AwsTarget] = field(default_factory=Frozen)  # where each admitted cluster was admitted
    claims: Mapping[str, dict[str, str]] = field(default_factory=Frozen)  # what admission granted (stacks.claims)
    contested: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # stacks.tenancy.contested_accounts

    def inputs(self, key: str) -> StackInputs | InvalidSpec | None:
        return self.values.get(key)

    def mesh_join(self, key: str, current: dict | None) -> dict | None:
        """The status.meshJoin the cluster should carry: the stamp handed out, else what it has."""
        wanted = self.stamps.get(key, _MISSING)
        return current if wanted is _MISSING else wanted

    def routed_id(self, key: str, current: str | None) -> str | None:
        """The status.sharedIngress.clusterID the cluster should carry: the ID it is routed on now, else what it has
        (a record is never taken away: the cluster is routed on it again when it comes back)."""
        guest = self.guests.get(key)
        return guest.cluster_id if guest is not None else current

    def claims_of(self, key: str, current: dict | None) -> dict | None:
        """The status.claims the cluster should carry: what admission granted it, else what it has (a record is
        taken away by nothing but a newer grant)."""
        granted = self.claims.get(key)
        return dict(granted) if granted is not None else current

    def transit(self, stack: str) -> TransitInputs | None:
        return self.transits.get(stack)

    def placed_in(self, key: str) -> tuple[str | None, str | None]:
        """(account, region) of the cluster as its input says, refused or not: spec.accountID, and the region
        stacks.accounts.cluster_region gives. None where the input cannot tell: a registered-only or unparseable
        cluster, an unknown region, no valid HubConfig (whose region is the last fallback). The status's ACCOUNT
        and REGION columns."""
        cluster = self._cluster(key)
        if cluster is None or not cluster.spec.provisioned:
            return None, None
        try:
            region = cluster_region(cluster, self.hub, self.cache.annotations_of(cluster_namespace(cluster)))[0] \
                if self.hub is not None and self.cache is not None else None
        except InvalidSpec:
            region = None
        return cluster.spec.account_id, region

    def registered_only(self, key: str) -> bool:
        """Whether the cached cluster is registered only (no AWS part): resolve() gives it no inputs, by design."""
        cluster = self._cluster(key)
        return cluster is not None and not cluster.spec.provisioned

    def account_shared(self, key: str) -> str | None:
        value = self.values.get(key)
        if not isinstance(value, StackInputs) or value.cluster.account_id not in self.contested:
            return None
        return shared_warning(value.cluster.account_id, self.contested[value.cluster.account_id])

    def unknown_keys(self, key: str) -> str | None:
        cluster = self._cluster(key)
        if cluster is None:
            return None
        return "; ".join(unknown_key_messages(cluster.metadata.labels, cluster.metadata.annotations)) or None

    def region_overridden(self, key: str) -> str | None:
        cluster = self._cluster(key)
        if cluster is None or self.hub is None or self.cache is None or not cluster.spec.provisioned:
            return None
        return region_overridden(cluster, self.hub, self.cache.annotations_of(cluster_namespace(cluster)))

    def network_query(self, key: str) -> NetworkQuery | None:
        cluster, target = self._cluster(key), self.gates.get(key)
        if cluster is None or target is None or self.hub is None:
            return None
        return query_of(cluster, target, self.hub)

    def deletion_policy(self, key: str, spec: Any) -> DeletionPolicy | InvalidSpec:
        """What deleting the cluster (its `spec` as the API server holds it: parseable or not) does to its stack,
        against this pass's HubConfig (stacks.retention.policy_of), or why that cannot be done now."""
        try:
            return policy_of(f"HubCluster {key}", own_policy(spec), self.hub)
        except InvalidSpec as exc:
            return exc

    def _cluster(self, key: str) -> Cluster | None:
        entry = self.cache.entry(key) if self.cache is not None else None
        return entry.parsed if entry is not None and isinstance(entry.parsed, Cluster) else None


class Published:
    """The latest Snapshot, as the workers read it (DesiredView). The mapper publishes one after each pass, before
    it queues any key that pass found, so a worker never reads an answer older than the change it was queued for.
    Publishing is one reference assignment: a reader sees the old snapshot or the new one, whole."""

    def __init__(self) -> None:
        self.current = Snapshot()

    def publish(self, snapshot: Snapshot) -> None:
        self.current = snapshot

    def inputs(self, key: str) -> StackInputs | InvalidSpec | None:
        return self.current.inputs(key)

    def registered_only(self, key: str) -> bool:
        return self.current.registered_only(key)

    def mesh_join(self, key: str, current: dict | None) -> dict | None:
        return self.current.mesh_join(key, current)

    def routed_id(self, key: str, current: str | None) -> str | None:
        return self.current.routed_id(key, current)

    def claims_of(self, key: str, current: dict | None) -> dict | None:
        return self.current.claims_of(key, current)

    def placed_in(self, key: str) -> tuple[str | None, str | None]:
        return self.current.placed_in(key)

    def transit(self, stack: str) -> TransitInputs | None:
        return self.current.transit(stack)

    def network_query(self, key: str) -> NetworkQuery | None:
        return self.current.network_query(key)

    def account_shared(self, key: str) -> str | None:
        return self.current.account_shared(key)

    def region_overridden(self, key: str) -> str | None:
        return self.current.region_overridden(key)

    def deletion_policy(self, key: str, spec: Any) -> DeletionPolicy | InvalidSpec:
        return self.current.deletion_policy(key, spec)

    def unknown_keys(self, key: str) -> str | None:
        return self.current.unknown_keys(key)
