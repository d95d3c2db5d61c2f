"""From the cache to cluster keys: resolve_all() over the cache, kept up to date change by change
(FleetPublisher, on stacks.incremental), mesh join stamps handed out in plan order (JoinStamps), and the Mapper, which enqueues
exactly the clusters whose StackInputs.digest() (or deletion, generation, validity) changed.

Decisions are made on one thread: FleetPublisher is entered from the mapper's thread alone (WrongThread otherwise). After
each pass the mapper publishes a frozen Snapshot (automation/service/snapshot.py), then queues the keys; the workers
read that snapshot and never drain or resolve. One Cluster event walks cache -> mapper -> queue -> reconciler ->
engine, with no climb back up."""
from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, NamedTuple

from automation.service.cache import Cache, Shared, hub_problem
from automation.service.snapshot import Frozen, Published, Snapshot
from automation.adapters.loop import Loop
from automation.adapters.kube.informer import Raw
from automation.kit.objects import Obj
from stacks.errors import InvalidSpec
from stacks.inputs import SharedIngressInputs, StackInputs
from stacks.targets import AwsTarget
from stacks.incremental import FleetResolver
from stacks.resolve import Resolved
from stacks.model.cluster import Cluster
from stacks.model.hub import HubConfig
from stacks.ingress import Route, recorded_id
from stacks.mesh.plan import MeshPlan
from stacks.transit import GroupState, MeshStatus, TransitInputs
from stacks.claims import recorded
from stacks.tenancy import contested_accounts
from stacks.names import (CLAIMS_STATUS_KEY, DRIFT_CHECK_REQUEST_ANNOTATION, INGRESS_STATUS_KEY, JOIN_STATUS_KEY,
                          RECONCILE_REQUEST_ANNOTATION)

LOG = logging.getLogger("hubwright.mapper")


# --------------------------------------------------------------------------- desired state

@dataclass(frozen=True)
class FleetAnswer:
    inputs: Mapping[str, StackInputs | InvalidSpec]
    digests: Mapping[str, str]  # key -> digest, or "invalid:<reason>:<message>"
    stamps: Mapping[str, dict] = field(default_factory=dict)  # mesh join stamps to hand out: key -> meshJoin
    unstamp: frozenset[str] = frozenset()  # clusters whose meshJoin is stale and must go
    hub: HubConfig | None = None  # the HubConfig resolved against; None: none valid (every cluster is refused)
    recorded_groups: Mapping[str, GroupState] = field(default_factory=dict)  # HubConfig status.mesh.groups read
    routes: tuple[Route, ...] = ()  # the shared ingress's routes (stacks.resolve.resolve_all)
    mesh: MeshPlan | None = None  # the mesh plan: its groups' states and the transit stacks' inputs
    guests: Mapping[str, SharedIngressInputs] = field(default_factory=dict)  # routed clusters' node proxies

    @property
    def transit(self) -> Mapping[str, TransitInputs]:
        """Transit stack -> its inputs (stacks.transit): the stacks the service owns besides the clusters'."""
        return self.mesh.transit if self.mesh is not None else {}


_UNSET: Any = object()


class WrongThread(RuntimeError):
    """FleetPublisher was entered from a thread other than the mapper's: a worker must read the published Snapshot."""


class JoinStamps:
    """The mesh join stamps this service has handed out (stacks.mesh: written once, in plan order).

    One thread (the mapper) hands them out, a whole plan at a time, in the plan's order; resolve()
    sees them at once (overlaid on the cached Clusters) and the reconciler writes them into the
    status. So two workers can never number two joiners alike, whatever the watch has caught up with.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stamps: Frozen[str, dict | None] = Frozen()  # key -> status.meshJoin (None: take it away)
        self._changed: set[str] = set()  # keys whose stamp changed since FleetPublisher last drained them

    def get(self, key: str, default: Any = _UNSET) -> Any:
        with self._lock:
            return self._stamps.get(key, default)

    def take(self, stamps: Mapping[str, dict], unstamp: Iterable[str]) -> bool:
        """Adopt a plan's new stamps and removals; True when anything changed."""
        with self._lock:
            changes: dict[str, dict | None] = {}
            for key, stamp in stamps.items():  # in plan order
                if self._stamps.get(key) is None:
                    changes[key] = dict(stamp)
            for key in unstamp:
                if key not in self._stamps or self._stamps[key] is not None:
                    changes[key] = None
            self._stamps = self._stamps.updated(changes)
            self._changed |= set(changes)
            return bool(changes)

    def forget(self, key: str) -> None:
        with self._lock:
            if key in self._stamps:
                self._stamps = self._stamps.updated({}, [key])
                self._changed.add(key)

    def frozen(self) -> Frozen[str, dict | None]:
        """The stamps handed out, as they are now: an immutable map (for the Snapshot)."""
        with self._lock:
            return self._stamps

    def drain(self) -> set[str]:
        """The keys whose stamp changed since the last drain."""
        with self._lock:
            changed, self._changed = self._changed, set()
            return changed

    def overlay(self, cluster: Cluster) -> Cluster:
        """The cluster as resolve() must see it: with the stamp handed out, whatever the watch has caught up with."""
        wanted = self.get(cluster.key)
        have = (cluster.status or {}).get(JOIN_STATUS_KEY)
        if wanted is not _UNSET and wanted != have:
            rest = {k: v for k, v in (cluster.status or {}).items() if k != JOIN_STATUS_KEY}  # sharedIngress stays
            status = {**rest, JOIN_STATUS_KEY: wanted} if wanted else rest
            cluster = cluster.model_copy(update={"status": status or None})
        return cluster


def _digest(value: StackInputs | InvalidSpec) -> str:
    return value.digest() if isinstance(value, StackInputs) else f"invalid:{value.reason}:{value}"


class FleetPublisher:
    """resolve_all() over the cache, kept up to date one change at a time (stacks.incremental.FleetResolver).

    `get()` reads only what changed since the last call (Cache.drain, JoinStamps.drain), so an event costs what
    it couples, not the fleet; `take_changed()` hands the mapper the keys whose answer moved; `publish()` freezes
    the answer into `view` (automation/service/snapshot.py), which is all a worker reads.

    Only the mapper resolves: once `own()` (the mapper, as its thread starts), entering from any other thread
    raises WrongThread. Before, a single thread (a test, the start-up's seed_routes) may use it.
    """

    def __init__(self, cache: Cache, stamps: JoinStamps | None = None, *, discovery: bool = False):
        self.cache = cache
        self.discovery = discovery  # a discovery reads the networks: a cluster waits for its status.network
        self.stamps = stamps or JoinStamps()
        self.view = Published()  # the latest Snapshot: what the reconcilers read (DesiredView)
        self._owner: int | None = None  # the mapper's thread, once it started
        self._lock = threading.Lock()
        self._resolver: FleetResolver | None = None  # None while no valid HubConfig
        self._hub: HubConfig | None = None
        self._hub_as_cached: HubConfig | InvalidSpec | None = None
        self._namespaces: set[str] = set()  # the names the resolver was given
        self._invalid: dict[str, InvalidSpec] = {}  # refused before resolve: unparseable, or no valid hub
        self._inputs: Frozen[str, StackInputs | InvalidSpec] = Frozen()  # the answer: resolved, or refused before
        self._digests: Frozen[str, str] = Frozen()
        self._gates: Frozen[str, AwsTarget] = Frozen()  # where each admitted cluster's discovery looks
        self._decided: dict[str, str] = {}  # key -> the endpoint VPC placed in, kept (see _pin)
        self._granted: Frozen[str, dict[str, str]] = Frozen()  # key -> what admission granted it (see _pin)
        self._contested: dict[str, tuple[str, ...]] = {}  # stacks.tenancy.contested_accounts, for the Snapshot
        self._changed: set[str] = set()  # keys whose answer moved since the mapper last took them
        self._current: FleetAnswer | None = None
        self.resolves = 0
        self._published: dict[str, str] = {}  # see seed_routes

    def own(self) -> None:
        """From now on only the calling thread (the mapper's) may enter: see WrongThread."""
        self._owner = threading.get_ident()

    def _enter(self) -> None:
        if self._owner is not None and threading.get_ident() != self._owner:
            raise WrongThread(f"FleetPublisher entered from thread {threading.current_thread().name!r}: only the mapper "
                              f"resolves; a worker reads the published Snapshot (FleetPublisher.view)")

    def seed_routes(self, published: Mapping[str, str]) -> None:
        """The routes the shared-ingress ConfigMap held when this service started (cluster -> ID): a cluster routed
        there whose status records no ID yet (routed before IDs were recorded: the upgrade) is resolved as if it
        recorded that one, and the reconciler records it. So a node proxy installed before keeps working."""
        self._enter()
        with self._lock:
            self._published = dict(published)

    def get(self) -> FleetAnswer:
        """The answer, brought up to date with what changed. One resolve pass, then again over only what that pass
        decided itself: the endpoint VPCs it placed (pinned, see _pin) and the mesh join stamps it handed out
        (adopted, see JoinStamps). A plain loop here: nothing below calls back up into it."""
        self._enter()
        with self._lock:
            delta = self.cache.drain()
            keys = set(delta.clusters) | self.stamps.drain()
            if self._current is not None and not delta and not keys:
                return self._current
            if delta.shared:
                keys |= self._take_shared(self.cache.shared())
            elif self._resolver is not None:
                namespaces = self.cache.shared().namespaces if delta.namespaces else {}
                for name in delta.namespaces:
                    self._resolver.set_namespace(name, namespaces.get(name))
                self._namespaces = (self._namespaces - delta.namespaces) | (delta.namespaces & set(namespaces))
            if delta.shared or delta.namespaces:
                namespaces = self.cache.shared().namespaces
                self._contested = contested_accounts(self._hub, namespaces) if self._hub is not None else {}
            moved = {key for key in keys if self._put(key)}
            resolved: Resolved | None = None
            changed: set[str] = set()
            scope, passes = keys, 0
            while self._resolver is not None:
                resolved, more = self._resolver.resolve()
                changed |= more
                again = self._pin(scope | more)  # the same placements, now kept
                mesh = resolved.mesh
                if not again and mesh is not None and self.stamps.take(mesh.stamps, mesh.unstamp):
                    stamped = self.stamps.drain()  # the same plan, now seeing the stamps it handed out
                    moved |= {key for key in stamped if self._put(key)}
                    again |= stamped
                passes += 1
                if not again:
                    break
                if passes >= 4:  # a pin or a stamp is decided once: a second pass settles both
                    LOG.warning("resolve did not settle after %d passes (%d keys still moving)", passes, len(again))
                    break
                scope = again
            moved |= changed
            self._answer(moved, resolved.inputs if resolved is not None else {})
            self._changed |= moved
            self.resolves += 1
            mesh = resolved.mesh if resolved is not None else None
            self._current = FleetAnswer(
                self._inputs, self._digests, mesh.stamps if mesh else {},
                frozenset(mesh.unstamp) if mesh else frozenset(), self._hub,
                self._resolver.recorded_groups if self._resolver is not None else {},
                resolved.routes if resolved is not None else (), mesh, resolved.guests if resolved is not None else {})
            return self._current

    def _answer(self, moved: Iterable[str], resolved: Mapping[str, StackInputs | InvalidSpec]) -> None:
        """Carry the moved keys' answers (a refusal before resolve wins) and digests into the next frozen maps."""
        inputs: dict[str, StackInputs | InvalidSpec] = {}
        digests: dict[str, str] = {}
        gone = []
        for key in moved:
            value: StackInputs | InvalidSpec | None = self._invalid.get(key)
            if value is None:
                value = resolved.get(key)
            if value is None:
                gone.append(key)
            else:
                inputs[key], digests[key] = value, _digest(value)
        self._inputs = self._inputs.updated(inputs, gone)
        self._digests = self._digests.updated(digests, gone)
        gates: dict[str, AwsTarget] = {}
        for key in moved:
            gate = self._resolver.target_of(key) if self._resolver is not None else None
            if gate is not None:
                gates[key] = gate
        self._gates = self._gates.updated(gates, [key for key in moved if key not in gates and key in self._gates])

    def publish(self, resolution: FleetAnswer) -> Snapshot:
        """Freeze `resolution` (get()'s last) and the stamps handed out into `view`, where the workers read it."""
        self._enter()
        snapshot = Snapshot(number=self.resolves, values=resolution.inputs, guests=resolution.guests,
                            stamps=self.stamps.frozen(), transits=resolution.transit, hub=resolution.hub,
                            cache=self.cache, gates=self._gates, claims=self._granted, contested=self._contested)
        self.view.publish(snapshot)
        return snapshot

    def take_changed(self) -> set[str]:
        """The keys whose desired inputs (or refusal) moved since the last call: the mapper looks at these."""
        self._enter()
        with self._lock:
            changed, self._changed = self._changed, set()
            return changed

    def _take_shared(self, shared: Shared) -> set[str]:
        """Hand the resolver the shared objects; the keys to read again (all: when the hub became or stopped being
        valid)."""
        hub = shared.hub if isinstance(shared.hub, HubConfig) else None
        status = MeshStatus.from_hub_status(shared.hub_status)
        everyone = set(self.cache.keys()) | set(self._digests) if (hub is None) != (self._hub is None) else set()
        if hub is None:
            self._resolver = None
            everyone |= set(self._invalid)  # the hub's problem changed: every refusal says so
        elif self._resolver is None:
            self._resolver = FleetResolver(hub, namespaces=shared.namespaces, role_map=shared.role_map,
                                           foreign_endpoints=shared.foreign_endpoints, mesh_status=status,
                                           discovery=self.discovery, retention=shared.retention)
        else:
            self._resolver.set_hub(hub)
            self._resolver.set_role_map(shared.role_map)
            self._resolver.set_foreign_endpoints(shared.foreign_endpoints)
            self._resolver.set_retention(shared.retention)
            self._resolver.set_mesh_status(status.groups, status.transit)
            for name in set(shared.namespaces) | set(self._namespaces):
                self._resolver.set_namespace(name, shared.namespaces.get(name))
        self._hub, self._hub_as_cached = hub, shared.hub
        self._namespaces = set(shared.namespaces)
        return everyone

    def _pin(self, keys: Iterable[str]) -> set[str]:
        """Keep each endpoint VPC decided from now on, as if the status recorded it already; the keys newly pinned
        (handed to the resolver again: get() resolves once more).

        Placement fills a region's VPCs in age order around the ones recorded, so a record arriving after a run
        could move a younger cluster that is not recorded yet, whose run then records the other VPC, and so on.
        A placement decided once, and given back as existing, never moves another.

        What admission granted (stacks.claims) is pinned the same way, as status.claims: the holder of a VPC, a load
        balancer, an infra ID or an API host holds it from this pass on, before the reconciler records it, so no
        claimant arriving in between takes it."""
        if self._resolver is None:
            return set()
        pinned = set()
        grants: dict[str, dict[str, str]] = {}
        for key in keys:
            vpc = self._resolver.endpoint_vpc(key)
            moved = False
            if vpc is None:
                self._decided.pop(key, None)
            elif self._decided.get(key) != vpc:
                self._decided[key] = vpc
                moved = True
            granted = self._resolver.granted_of(key)
            if granted is not None and self._granted.get(key) != granted:
                grants[key] = dict(granted)
            if moved or key in grants:
                pinned.add(key)
        if grants:
            self._granted = self._granted.updated(grants)
        for key in pinned:
            self._put(key)
        return pinned

    def _put(self, key: str) -> bool:
        """Hand the resolver the cluster as cached now; True when its refusal before resolve moved."""
        entry = self.cache.entry(key)
        refused: InvalidSpec | None = None
        if entry is not None and isinstance(entry.parsed, InvalidSpec):
            refused = entry.parsed
        elif entry is not None and self._resolver is None:
            cached = self._hub_as_cached  # not a valid HubConfig: the resolver would be there
            refused = hub_problem(self.cache.hub_name, key, cached if isinstance(cached, InvalidSpec) else None)
        if entry is None and key in self._granted:
            self._granted = self._granted.updated({}, [key])  # gone: what it held is free again
        if self._resolver is not None:
            if entry is None or refused is not None or isinstance(entry.parsed, InvalidSpec):
                self._resolver.remove(key)
            else:
                cluster = self.stamps.overlay(entry.parsed)
                if key in self._published and recorded_id(cluster) is None:
                    cluster = cluster.model_copy(update={"status": {
                        **(cluster.status or {}), INGRESS_STATUS_KEY: {"clusterID": self._published[key]}}})
                granted = self._granted.get(key)
                if granted is not None and recorded(cluster) != granted:
                    cluster = cluster.model_copy(update={"status": {**(cluster.status or {}),
                                                                    CLAIMS_STATUS_KEY: granted}})
                self._resolver.put(cluster, self._decided.get(key) or entry.placement, entry.attachment,
                                   entry.stack)
        old = self._invalid.get(key)
        if refused is None:
            self._invalid.pop(key, None)
        else:
            self._invalid[key] = refused
        return old != refused


# --------------------------------------------------------------------------- mapper

Triage = Callable[[str, Raw, "StackInputs | InvalidSpec | None"], "float | None"]


class Fingerprint(NamedTuple):
    """What of a cluster queues it when it moves. Not its status and not its finalizers: the service's own writes
    must not queue the key again (a failed run waits for its backoff)."""

    digest: str | None  # StackInputs.digest(), or "invalid:<reason>:<message>"
    generation: int | None
    deleting: bool
    mesh_join: str  # the join stamp the snapshot hands out, as JSON
    routed_id: str | None  # a shared-ingress ID to record
    request: str | None  # the reconcile-request annotation: a new value queues at once with a fresh backoff
    check: str | None  # the drift-check-request annotation: the same
    uid: str | None  # another object of the same name: seen for the first time


@dataclass(frozen=True)
class Pass:
    """One mapper pass, as its hooks see it."""

    answer: FleetAnswer
    new: bool  # a different answer from the last pass's
    keys: frozenset[str]  # the cluster keys this pass found changed


Hook = Callable[[Pass], None]


class Mapper(Loop):
    """Turns cache changes into queue entries: only the clusters whose desired stack changed.

    `triage(key, raw, desired)` (the reconciler's) says, for a cluster seen for the
    first time, when it needs a reconcile: 0 now, N seconds (the drift check), None never.
    `hooks` are called in their order on every pass, once its Snapshot is published and before its keys are queued,
    with the `Pass` (its answer, whether that is new, the keys it found): the shared ingress ConfigMap sync (on a
    new answer), the mesh's group states (every pass: they follow the clusters' statuses, which resolve never
    reads), the discovery queue (the pass's keys). A hook that raises is logged; the others still run.
    Transit stacks (stacks.transit) are not its keys: the transit controller's hook queues them in its own queue
    (automation/service/transit.py, TransitKeys).
    A new value of the reconcile-request or the drift-check-request annotation queues the key at once and `reset`s
    its backoff.
    """

    def __init__(self, cache: Cache, desired: FleetPublisher, *, add: Callable[[str], None],
                 add_after: Callable[[str, float], None], triage: Triage,
                 hooks: Iterable[Hook] = (), reset: Callable[[str], None] = lambda key: None):
        super().__init__("mapper")
        self.cache, self.desired = cache, desired
        self.add, self.add_after, self.triage, self.reset = add, add_after, triage, reset
        self.hooks: list[Hook] = list(hooks)  # in order; a controller set up later adds its own (before start)
        self._seen: dict[str, Fingerprint] = {}
        self._resolution: FleetAnswer | None = None
        self.enqueued = 0
        self.mapped_revision = -1  # the cache revision the last pass saw (a later one: changes not mapped yet)

    def _interrupt(self) -> None:
        self.cache.wake()

    def run(self) -> None:
        self.desired.own()  # from here on, only this thread resolves
        revision = -1
        while not self._stop.is_set():
            revision = self.cache.wait_for_change(revision, timeout=0.5)
            if self._stop.is_set():
                break
            try:
                self.map_once()
                self.mapped_revision = revision
            except Exception:  # noqa: BLE001 - keep mapping; the next change retries
                LOG.exception("mapping changes to clusters failed")

    def map_once(self) -> None:
        touched = self.cache.take_touched()
        resolution = self.desired.get()
        # The changed objects, and the clusters whose desired inputs moved because of them: never the whole fleet.
        keys = touched | self.desired.take_changed()
        # Published before any key this pass found is queued: a worker reads an answer at least this new.
        snapshot = self.desired.publish(resolution)
        this = Pass(resolution, resolution is not self._resolution, frozenset(keys))
        self._resolution = resolution
        for hook in self.hooks:
            try:
                hook(this)
            except Exception:  # noqa: BLE001 - a hook must not stop the mapping
                LOG.exception("mapper hook %r failed", hook)
        for key in sorted(keys):
            entry = self.cache.entry(key)
            if entry is None:
                self.desired.stamps.forget(key)
                # Gone: the reconciler forgets it, revokes its agent and checks for an orphan. Also when this
                # mapper never saw it held (added and deleted between two passes): the cache let it go.
                if self._seen.pop(key, None) is not None or key in touched:
                    self._enqueue(key)
                continue
            obj = Obj(entry.raw)
            # Not the status and not the finalizers: the service's own writes must not queue the key again
            # (a failed run waits for its backoff).
            join = obj.status.get(JOIN_STATUS_KEY)
            request = obj.annotations.get(RECONCILE_REQUEST_ANNOTATION)
            check = obj.annotations.get(DRIFT_CHECK_REQUEST_ANNOTATION)
            guest = resolution.guests.get(key)  # routed on a new ID: the reconciler records it
            fingerprint = Fingerprint(resolution.digests.get(key), obj.generation, obj.deleting,
                                      json.dumps(snapshot.mesh_join(key, join), sort_keys=True),
                                      guest.cluster_id if guest is not None else None, request, check, obj.uid)
            previous = self._seen.get(key)
            self._seen[key] = fingerprint
            if previous == fingerprint:
                continue
            if previous is not None and previous.uid == fingerprint.uid:
                if (previous.request, previous.check) != (request, check):  # a person asked: now, with a fresh backoff
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

    def _enqueue(self, key: str) -> None:
        self.enqueued += 1
        self.add(key)


