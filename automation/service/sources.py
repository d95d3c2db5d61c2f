"""The sources controller: one HubCluster per opted-in source object (a Cluster API Cluster, a Hive
ClusterDeployment, a HyperShift HostedCluster: stacks.sources.families).

A controller on the shared runtime (automation/kit/runtime.py), keyed by source object ("<kind>|ns/name"):
`setup(manager, ...)` declares its informers and watches. It talks to the API server through the controller kit's
object port (automation/kit/objects.py) and finalizer helper (automation/kit/finalizers.py). It reads the source
and what its family reads besides (Cluster API's infrastructure object, HyperShift's control-plane namespace and
HostedControlPlane) and asks stacks.sources.derive, the one rule the offline plan uses too, what HubCluster it
stands for; a change of anything a source read derives it again (`Reads`: an index from what was read to who read
it, kept as the source events arrive):

- taken (the annotation `hubwright.io/enabled: "true"`, in a namespace HubConfig spec.sources allows): our
  finalizer goes on the source first, then the HubCluster is created with an ownerReference to it (controller)
  or updated to say what the source says. A hand-written HubCluster of the same name is adopted (its stack
  kept: same name, same stack) unless it carries `hubwright.io/overrides-source: "true"`, which keeps it as
  written. A HubCluster another source controls is never taken over: the younger source is refused.
- refused (a cross-namespace reference, a classic ELB for PrivateLink, Hive's own PrivateLink besides ours) or
  pending (not installed yet): a Warning or Normal Event on the source says why; a HubCluster kept already is
  left as it is (refusing never destroys).
- not taken any more (the annotation removed, the source deleted, its namespace no longer allowed): the
  HubCluster it controls is deleted (its own finalizer destroys the stack first); our finalizer on the source is
  removed once that HubCluster is gone and every admitted member of its mesh group, the group as the mesh plan
  keys it, has converged without it (the later joiners own the pairs with it: their runs remove the peerings), or
  at the latest HubConfig spec.sources.releaseAfter after the hold began, with a Warning Event naming what had not
  converged (stacks.sources.hold decides both). So the source outlives every resource of ours that uses its VPC or
  load balancer, and a cluster of another namespace wearing the same label never holds it.
- deletion protection (`hubwright.io/deletion-protection`, docs/security.md): the HubCluster carries the source's,
  as the source writes it now (one of the annotations the source decides, stacks.sources.outcome: lifted on the
  source, removed from the HubCluster; also just before a HubCluster the source lets go is deleted,
  stacks.sources.optin.protection_patch); while the source says "true", the HubCluster it no longer takes is not
  deleted (a Warning Event `HubClusterProtected` says so, once).

Note: a finalizer keeps the source object visible; it cannot stop its project's own deletion, which
starts on the deletion timestamp. Cluster API deletes the machines and the control plane before the
infrastructure (the VPC), which in practice gives the stacks their time (docs/sources.md).

How it writes: a derived HubCluster is created with an ownerReference to its source (controller: true), so the
garbage collector deletes it with the source too; updated by a merge patch that nulls what the source no longer
says; deleted with a uid precondition (never a later object of the same name). Our finalizer on the source is added and
removed at the resourceVersion it was read at, so a concurrent edit (CAPA's own finalizers) is never lost. The
condition `hubwright.io/SourceHeld` (stacks.sources.held) is written the same way, on the status subresource: the
whole list at the resourceVersion it was read at (Hive's list is atomic: an apply would claim all of it), a 409
retried by the queue against the next cached copy. Events go on the source object itself.
"""
from __future__ import annotations

import logging
import threading
from datetime import datetime, timezone
from typing import Any, Callable, Hashable, Iterable, Literal, Mapping

from automation.adapters.kube.informer import Raw, Source, Store
from automation.kit.finalizers import ensure_finalizer, release_finalizer
from automation.kit.objects import HUBCLUSTERS, Conflict, Kind, Obj, Objects
from automation.kit.queue import Outcome
from automation.kit.runtime import Manager
from automation.kit.status import StatusWriter
from automation.service.cache import Cache
from automation.service.clusters.reconciler import up_to_date
from automation.service.snapshot import DesiredView
from stacks.inputs import StackInputs
from stacks.model.cluster import Cluster
from stacks.model.hub import HubConfig
from stacks.names import (DELETION_PROTECTION_ANNOTATION, OVERRIDES_SOURCE_ANNOTATION, OWNER_ACCOUNT_ANNOTATION,
                          SOURCE_FINALIZER)
from stacks.sources.derive import derive
from stacks.sources.held import with_held, without_held
from stacks.sources.hold import held_since, hold
from stacks.sources.families import family_of
from stacks.sources.kinds import NAMESPACE, SourceKind
from stacks.sources.optin import deletion_protected, overrides_source, protection_patch
from stacks.sources.outcome import Derived, Pending, Refused
from stacks.sources.watched import watched_version
from stacks.status import ClusterStatus

LOG = logging.getLogger("hubwright.sources")
RELEASED = (f"released by the {SOURCE_FINALIZER} finalizer: its HubCluster is gone and its mesh group's stacks no "
            "longer build toward it")
WAIT = 2.0  # seconds between looks while a released source waits for its HubCluster and its group's stacks


def source_key(kind: SourceKind, raw: Raw) -> str:
    return f"{kind.qualified}|{Obj(raw).key}"


def kind_of(source: SourceKind) -> Kind:
    """The source kind as the object port reaches it: at the version watched."""
    return Kind(source.group, watched_version(source), source.plural, source.kind)


class Reads:
    """Which source keys read which object (kind, namespace, name), from each source's family (`reads`): an event on
    an infrastructure object or a namespace maps to the sources that read it, without a scan of the fleet. Its
    handlers run on the informers' threads, hence the lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._of: dict[str, list[tuple[str, str, str]]] = {}  # source key -> what it reads
        self._by: dict[tuple[str, str, str], set[str]] = {}  # what is read -> source keys

    def note(self, key: str, kind: SourceKind, raw: Raw | None) -> None:
        """`key` (of `kind`) is `raw` now (None: gone)."""
        family = family_of(kind)
        new = [(k.qualified, ns, name) for k, ns, name in family.reads(raw)] if raw is not None and family else []
        with self._lock:
            for read in self._of.pop(key, []):
                readers = self._by.get(read)
                if readers is not None:
                    readers.discard(key)
                    if not readers:
                        del self._by[read]
            if new:
                self._of[key] = new
                for read in new:
                    self._by.setdefault(read, set()).add(key)

    def readers(self, kind: SourceKind, namespace: str, name: str) -> list[str]:
        with self._lock:
            return sorted(self._by.get((kind.qualified, namespace, name), ()))


def controller_ref(raw: Raw | None) -> Mapping[str, Any] | None:
    return next((ref for ref in Obj(raw or {}).owner_references if ref.get("controller")), None)


def write_conditions(objects: Objects, kind: SourceKind, raw: Raw, conditions: list[Raw]) -> Raw | None:
    """Write the source's status.conditions whole, at the resourceVersion it was read at (Conflict on a 409: the
    queue retries against the next cached copy); the object as written, None when it is gone."""
    return StatusWriter(objects, kind_of(kind)).write_entries(raw, {("conditions",): conditions}, at_version=True)


class Sources:
    """The controller's reconcile and what maps events to its keys."""

    def __init__(self, *, kinds: Iterable[SourceKind], stores: Mapping[str, Store], cache: Cache,
                 desired: DesiredView, objects: Objects):
        self.kinds = {k.qualified: k for k in kinds}
        # SourceKind.qualified -> Store (the runtime's, one informer per kind): the sources' and the infrastructure
        # kinds'
        self.stores = stores
        self.cache, self.desired, self.objects = cache, desired, objects
        self.reads = Reads()
        self._said: dict[str, str] = {}  # key -> the last refusal or wait an Event told (told once)
        self._held: dict[str, datetime] = {}  # key -> when this service first held it (a source not deleted)

    # ------------------------------------------------------------------ event -> keys
    def keys_of_source(self, kind: SourceKind) -> Callable[[str, Raw], list[Hashable]]:
        def keys(event: str, raw: Raw) -> list[Hashable]:
            key = source_key(kind, raw)
            self.reads.note(key, kind, None if event == "DELETED" else raw)
            return [key]
        return keys

    def keys_of_related(self, related: SourceKind) -> Callable[[str, Raw], list[Hashable]]:
        """An object sources read changed: the sources that read it."""
        def keys(event: str, raw: Raw) -> list[Hashable]:
            obj = Obj(raw)
            return list(self.reads.readers(related, obj.namespace or "", str(obj.name)))
        return keys

    def keys_of_cluster(self, event: str, raw: Raw) -> list[Hashable]:
        """A HubCluster changed: the source that controls it (a released source waits for it to go)."""
        ref, obj = controller_ref(raw), Obj(raw)
        ns = obj.namespace
        if ref is None:
            return [k for k in self._all_keys(ns) if str(k).split("|", 1)[1] == obj.key]
        return [f"{kind.qualified}|{ns}/{ref.get('name')}" for kind in self.kinds.values()
                if kind.kind == ref.get("kind") and str(ref.get("apiVersion", "")).startswith(f"{kind.group}/")]

    def keys_of_namespace(self, event: str, raw: Raw) -> list[Hashable]:
        """A namespace changed: its sources (its owner account), and those that read it (a control plane's)."""
        name = str(Obj(raw).name)
        return [*self._all_keys(name), *self.reads.readers(NAMESPACE, "", name)]

    def keys_of_hub(self, event: str, raw: Raw) -> list[Hashable]:
        return self._all_keys(None)

    def _all_keys(self, namespace: str | None) -> list[Hashable]:
        out: list[Hashable] = []
        for kind in self.kinds.values():
            out += [f"{kind.qualified}|{k}" for k in self.stores[kind.qualified].keys()
                    if namespace is None or k.split("/", 1)[0] == namespace]
        return out

    # ------------------------------------------------------------------ reconcile
    def reconcile(self, key: str) -> Outcome:
        kind_name, obj = key.split("|", 1)
        kind = self.kinds[kind_name]
        src = self.stores[kind_name].get(obj)
        if src is None:
            self._said.pop(key, None)
            self._held.pop(key, None)
            return Outcome.done()  # gone: our finalizer was released (or never held)
        hub = self.cache.shared().hub
        if not isinstance(hub, HubConfig):
            return Outcome.done()  # no valid HubConfig: nothing is taken or released (its event queues us again)
        ns = str(Obj(src).namespace)
        current = self.cache.get(obj)
        deleting = Obj(src).deleting
        result = None if deleting else derive(
            src, self._related, owner_account=self.cache.annotations_of(ns).get(OWNER_ACCOUNT_ANNOTATION),
            hub=hub)
        if result is None:
            return self._release(kind, key, src, current, hub)
        self._held.pop(key, None)
        if isinstance(result, (Refused, Pending)):
            self._tell(kind, key, src, "Warning" if isinstance(result, Refused) else "Normal", result.reason,
                       str(result))
            return Outcome.done()
        return self._keep(kind, key, src, current, result)

    __call__ = reconcile

    def _related(self, kind: SourceKind, namespace: str, name: str) -> Raw | None:
        """An object a source reads, as watched (which ones, and where, is its family's part: stacks.sources)."""
        if kind == NAMESPACE:
            return self.cache.namespace(name)
        store = self.stores.get(kind.qualified)
        return None if store is None else store.get(f"{namespace}/{name}" if namespace else name)

    def _keep(self, kind: SourceKind, key: str, src: Raw, current: Raw | None, derived: Derived) -> Outcome:
        ref = controller_ref(current)
        uid = Obj(src).uid
        if current is not None and ref is not None and ref.get("uid") != uid:
            self._tell(kind, key, src, "Warning", "NameTaken",
                       f"HubCluster {Obj(current).key} is kept for {ref.get('kind')} {ref.get('name')} already: "
                       "rename one of them")
            return Outcome.done()
        if current is not None and ref is None and overrides_source(Obj(current).annotations):
            self._tell(kind, key, src, "Normal", "Overridden",
                       f"HubCluster {Obj(current).key} is hand-written with {OVERRIDES_SOURCE_ANNOTATION}: "
                       "\"true\" and is kept as written")
            return self._release_finalizer(kind, src)
        cleared = without_held(src)  # taken again: the hold it said is over
        if cleared is not None:
            written = write_conditions(self.objects, kind, src, cleared)
            if written is None:
                return Outcome.done()
            src = written
        if ensure_finalizer(self.objects, kind_of(kind), src, SOURCE_FINALIZER) is None:
            return Outcome.done()
        if current is None:
            if self._create(derived.doc):
                self._tell(kind, key, src, "Normal", "HubClusterCreated", f"HubCluster {derived.key} created")
            return Outcome.done()
        patch = derived.merge_patch(current)
        if patch is not None:
            adopted = ref is None
            current_obj = Obj(current)
            patched = self.objects.patch(HUBCLUSTERS, current_obj.name, patch, current_obj.namespace)
            if patched is not None and adopted:
                self._tell(kind, key, src, "Normal", "HubClusterAdopted",
                           f"hand-written HubCluster {current_obj.key} now follows this object (its stack is "
                           f"kept); annotate it {OVERRIDES_SOURCE_ANNOTATION}: \"true\" to keep it as written")
        self._said.pop(key, None)
        return Outcome.done()

    def _release(self, kind: SourceKind, key: str, src: Raw, current: Raw | None, hub: HubConfig) -> Outcome:
        """Not taken (any more): the HubCluster it controls goes, then, once its group converged (or at the bound),
        our finalizer."""
        source = Obj(src)
        ref = controller_ref(current)
        own: list[str] = []
        if current is not None and ref is not None and ref.get("uid") == source.uid:
            kept = Obj(current)
            if not kept.deleting:
                if deletion_protected(src):  # the API server would refuse: said once, looked at when it changes
                    self._tell(kind, key, src, "Warning", "HubClusterProtected",
                               f"HubCluster {kept.key} is not deleted: this object protects it "
                               f"({DELETION_PROTECTION_ANNOTATION}: \"true\"); remove the annotation to let it go")
                    return Outcome.done()
                lifted = protection_patch(src, current)  # lifted on the source, not yet on its HubCluster
                if lifted is not None and self.objects.patch(HUBCLUSTERS, kept.name, lifted, kept.namespace) is None:
                    return Outcome.done()  # gone already
                self._delete(current)
                self._tell(kind, key, src, "Normal", "HubClusterDeleted",
                           f"HubCluster {Obj(current).key} deleted: its stack is destroyed first")
            own.append(f"HubCluster {Obj(current).key}")
        elif self.desired.inputs(source.key) is not None:
            own.append(f"the stack of {source.key}")  # the mapper has not resolved the fleet without it yet
        if SOURCE_FINALIZER not in source.finalizers:
            return Outcome.done(WAIT) if own else Outcome.done()
        now = datetime.now(timezone.utc)
        decided = hold(own=own, namespace=str(source.namespace), labels=source.labels,
                       shares=self._shares(), converged=self._converged, hub=hub,
                       since=held_since(source.deletion_timestamp, self._held.setdefault(key, now)), now=now)
        if not decided.release:
            # Said once per fact (what it waits for), on the source itself, not a log line every WAIT: an Event, and
            # the condition `kubectl get -o yaml` shows for as long as it holds.
            waiting = decided.waiting_message()
            self._tell(kind, key, src, "Normal", "WaitingForPeers", waiting)
            self._show_hold(kind, src, True, "WaitingForPeers", waiting, now)
            return Outcome.done(WAIT)
        if decided.expired:
            self._tell(kind, key, src, "Warning", "ReleasedUnconverged", decided.message())
        shown = self._show_hold(kind, src, False, "ReleasedUnconverged" if decided.expired else "Released",
                                decided.message() if decided.expired else RELEASED, now)
        return self._release_finalizer(kind, shown) if shown is not None else Outcome.done()

    def _show_hold(self, kind: SourceKind, src: Raw, held: bool, reason: str, message: str, now: datetime
                   ) -> Raw | None:
        """The condition on the source saying whether our finalizer holds it (stacks.sources.held), written when it
        changes; the source as it is now (None: gone). A release is not written on an object that goes with it."""
        source = Obj(src)
        if not held and source.deleting and source.finalizers == [SOURCE_FINALIZER]:
            return src
        conditions = with_held(src, held=held, reason=reason, message=message, now=now)
        return src if conditions is None else write_conditions(self.objects, kind, src, conditions)

    def _release_finalizer(self, kind: SourceKind, src: Raw) -> Outcome:
        release_finalizer(self.objects, kind_of(kind), src, SOURCE_FINALIZER)
        return Outcome.done()

    def _create(self, doc: Raw) -> bool:
        """Create the derived HubCluster; False when one of that name exists already (the cache will show it)."""
        try:
            self.objects.create(HUBCLUSTERS, doc)
        except Conflict:
            return False
        return True

    def _delete(self, current: Raw) -> None:
        """Delete the HubCluster this source controls, with its uid as a precondition: never a later one of the same
        name (a 409: not ours to delete); gone already is fine."""
        obj = Obj(current)
        try:
            self.objects.delete(HUBCLUSTERS, obj.name, obj.namespace, uid=obj.uid)
        except Conflict:
            pass

    def _shares(self) -> dict[str, str | None]:
        """Cluster key -> the mesh group its desired inputs give it a share of (admitted members only)."""
        out: dict[str, str | None] = {}
        for peer, entry in self.cache.entries().items():
            desired = self.desired.inputs(peer) if isinstance(entry.parsed, Cluster) else None
            if isinstance(desired, StackInputs) and desired.mesh is not None:
                out[peer] = desired.mesh.group
        return out

    def _converged(self, peer: str) -> bool:
        """Whether the peer's last up applied what it should build now (the group without the source)."""
        entry, desired = self.cache.entry(peer), self.desired.inputs(peer)
        if entry is None or not isinstance(desired, StackInputs):
            return True  # gone, refused or registered only: it runs nothing, so it converges to nothing
        try:
            status = ClusterStatus.model_validate(Obj(entry.raw).status)
        except ValueError:
            return True
        return up_to_date(status, desired.digest())

    def _tell(self, kind: SourceKind, key: str, src: Raw, type_: Literal["Normal", "Warning"], reason: str,
              message: str) -> None:
        """An Event on the source, once per message (a refusal is not repeated on every resync)."""
        if self._said.get(key) == message:
            return
        self._said[key] = message
        LOG.info("%s: %s: %s", key, reason, message)
        self.objects.event(kind_of(kind), src, type_, reason, message[:1024])



def setup(manager: Manager, *, kinds: Iterable[SourceKind], related: Iterable[SourceKind],
          source: Callable[[SourceKind], Source], cache: Cache, desired: DesiredView,
          objects: Objects) -> Sources | None:
    """The sources controller on `manager` (None: no source kind is watched): an informer per source and
    infrastructure kind (`source(kind)`: how to list it), and its watches: a source object, an infrastructure object
    its sources reference, the HubCluster a source controls, a namespace (its owner account, its policy), the
    HubConfig (spec.sources)."""
    kinds, related = list(kinds), list(related)
    if not kinds:
        return None
    stores = {kind.qualified: manager.source(source(kind)) for kind in (*kinds, *related)}
    sources = Sources(kinds=kinds, stores=stores, cache=cache, desired=desired, objects=objects)
    controller = manager.controller("sources", sources.reconcile)
    for kind in kinds:
        controller.watches(kind.qualified, sources.keys_of_source(kind))
    for kind in related:
        controller.watches(kind.qualified, sources.keys_of_related(kind))
    controller.watches("clusters", sources.keys_of_cluster)
    controller.watches("namespaces", sources.keys_of_namespace)
    controller.watches("hubconfigs", sources.keys_of_hub)
    LOG.info("watching cluster sources: %s", ", ".join(k.qualified for k in kinds))
    return sources
