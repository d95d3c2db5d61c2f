"""The sources controller: one HubCluster per opted-in Cluster API Cluster or Hive ClusterDeployment.

A controller on the shared runtime (automation/kit/runtime.py), keyed by source object ("<kind>|ns/name"). It
reads the source (and, for Cluster API, its infrastructure object, in the same namespace only) and asks
stacks.sources.derive, the one rule the offline plan uses too, what HubCluster it stands for:

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

Note: a finalizer keeps the source object visible; it cannot stop Cluster API's or Hive's own deletion, which
starts on the deletion timestamp. Cluster API deletes the machines and the control plane before the
infrastructure (the VPC), which in practice gives the stacks their time (docs/sources.md).
"""
from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any, Callable, Hashable, Iterable, Mapping

from automation.adapters.kube.informer import Raw, object_key
from automation.adapters.kube.sources import SourceClient
from automation.adapters.kube.status import EventRecorder
from automation.service.cache import Cache
from automation.service.clusters.reconciler import up_to_date
from automation.kit.queue import Outcome
from automation.service.snapshot import DesiredView
from stacks.inputs import StackInputs
from stacks.model.cluster import Cluster
from stacks.model.hub import HubConfig
from stacks.names import OVERRIDES_SOURCE_ANNOTATION, OWNER_ACCOUNT_ANNOTATION, SOURCE_FINALIZER
from stacks.sources.derive import derive
from stacks.sources.held import with_held, without_held
from stacks.sources.hold import held_since, hold
from stacks.sources.kinds import SourceKind
from stacks.sources.optin import overrides_source
from stacks.sources.outcome import Derived, Pending, Refused
from stacks.status import ClusterStatus

LOG = logging.getLogger("hubwright.sources")
RELEASED = (f"released by the {SOURCE_FINALIZER} finalizer: its HubCluster is gone and its mesh group's stacks no "
            "longer build toward it")
WAIT = 2.0  # seconds between looks while a released source waits for its HubCluster and its group's stacks


def source_key(kind: SourceKind, raw: Raw) -> str:
    return f"{kind.qualified}|{object_key(raw)}"


def controller_ref(raw: Raw | None) -> dict[str, Any] | None:
    for ref in ((raw or {}).get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None


class Sources:
    """The controller's reconcile and what maps events to its keys."""

    def __init__(self, *, kinds: Iterable[SourceKind], stores: Mapping[str, Any], cache: Cache, desired: DesiredView,
                 kube: SourceClient, events: EventRecorder):
        self.kinds = {k.qualified: k for k in kinds}
        # Kind.group -> Store (the runtime's, one informer per kind): the sources' and the infrastructure kinds'
        self.stores = stores
        self.cache, self.desired, self.kube, self.events = cache, desired, kube, events
        self._said: dict[str, str] = {}  # key -> the last refusal or wait an Event told (told once)
        self._held: dict[str, datetime] = {}  # key -> when this service first held it (a source not deleted)

    # ------------------------------------------------------------------ event -> keys
    def keys_of_source(self, kind: SourceKind) -> Callable[[str, Raw], list[Hashable]]:
        return lambda event, raw: [source_key(kind, raw)]

    def keys_of_related(self, related: SourceKind) -> Callable[[str, Raw], list[Hashable]]:
        """An infrastructure object changed: the sources in its namespace that reference it."""
        def keys(event: str, raw: Raw) -> list[Hashable]:
            meta = raw.get("metadata") or {}
            return [key for key in self._all_keys(meta.get("namespace"))
                    if self._references(key, related, meta.get("name"))]
        return keys

    def keys_of_cluster(self, event: str, raw: Raw) -> list[Hashable]:
        """A HubCluster changed: the source that controls it (a released source waits for it to go)."""
        ref = controller_ref(raw)
        ns = (raw.get("metadata") or {}).get("namespace")
        if ref is None:
            return [k for k in self._all_keys(ns) if str(k).split("|", 1)[1] == object_key(raw)]
        return [f"{kind.qualified}|{ns}/{ref.get('name')}" for kind in self.kinds.values()
                if kind.kind == ref.get("kind") and str(ref.get("apiVersion", "")).startswith(f"{kind.group}/")]

    def keys_of_namespace(self, event: str, raw: Raw) -> list[Hashable]:
        return self._all_keys((raw.get("metadata") or {}).get("name"))

    def keys_of_hub(self, event: str, raw: Raw) -> list[Hashable]:
        return self._all_keys(None)

    def _all_keys(self, namespace: str | None) -> list[Hashable]:
        out: list[Hashable] = []
        for kind in self.kinds.values():
            out += [f"{kind.qualified}|{k}" for k in self.stores[kind.qualified].keys()
                    if namespace is None or k.split("/", 1)[0] == namespace]
        return out

    def _references(self, key: Hashable, related: SourceKind, name: str | None) -> bool:
        kind_name, obj = str(key).split("|", 1)
        raw = self.stores[kind_name].get(obj) or {}
        spec = raw.get("spec") or {}
        return any((ref or {}).get("name") == name and (ref or {}).get("kind") == related.kind
                   for ref in (spec.get("infrastructureRef"), spec.get("controlPlaneRef")))

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
        meta = src.get("metadata") or {}
        ns = str(meta.get("namespace"))
        current = self.cache.get(obj)
        deleting = bool(meta.get("deletionTimestamp"))
        result = None if deleting else derive(
            src, self._related(ns), owner_account=self.cache.annotations_of(ns).get(OWNER_ACCOUNT_ANNOTATION),
            hub=hub)
        if result is None:
            return self._release(kind, key, src, current, hub)
        self._held.pop(key, None)
        if isinstance(result, (Refused, Pending)):
            self._tell(key, src, "Warning" if isinstance(result, Refused) else "Normal", result.reason, str(result))
            return Outcome.done()
        return self._keep(kind, key, src, current, result)

    __call__ = reconcile

    def _related(self, namespace: str) -> Callable[[SourceKind, str, str], Raw | None]:
        """The infrastructure objects a source may read: in its own namespace only (derive refuses any other)."""
        def get(kind: SourceKind, ref_namespace: str, name: str) -> Raw | None:
            store = self.stores.get(kind.qualified)
            if ref_namespace != namespace or store is None:
                return None
            return store.get(f"{namespace}/{name}")
        return get

    def _keep(self, kind: SourceKind, key: str, src: Raw, current: Raw | None, derived: Derived) -> Outcome:
        ref = controller_ref(current)
        uid = (src.get("metadata") or {}).get("uid")
        if current is not None and ref is not None and ref.get("uid") != uid:
            self._tell(key, src, "Warning", "NameTaken",
                       f"HubCluster {object_key(current)} is kept for {ref.get('kind')} {ref.get('name')} already: "
                       "rename one of them")
            return Outcome.done()
        if current is not None and ref is None and \
                overrides_source((current.get("metadata") or {}).get("annotations") or {}):
            self._tell(key, src, "Normal", "Overridden",
                       f"HubCluster {object_key(current)} is hand-written with {OVERRIDES_SOURCE_ANNOTATION}: "
                       "\"true\" and is kept as written")
            return self._release_finalizer(kind, src)
        cleared = without_held(src)  # taken again: the hold it said is over
        if cleared is not None:
            written = self.kube.set_conditions(kind, src, cleared)
            if written is None:
                return Outcome.done()
            src = written
        if not self.kube.set_finalizer(kind, src, True):
            return Outcome.done()
        if current is None:
            if self.kube.create_cluster(derived.doc):
                self._tell(key, src, "Normal", "HubClusterCreated", f"HubCluster {derived.key} created")
            return Outcome.done()
        patch = derived.merge_patch(current)
        if patch is not None:
            adopted = ref is None
            if self.kube.patch_cluster(current, patch) and adopted:
                self._tell(key, src, "Normal", "HubClusterAdopted",
                           f"hand-written HubCluster {object_key(current)} now follows this object (its stack is "
                           f"kept); annotate it {OVERRIDES_SOURCE_ANNOTATION}: \"true\" to keep it as written")
        self._said.pop(key, None)
        return Outcome.done()

    def _release(self, kind: SourceKind, key: str, src: Raw, current: Raw | None, hub: HubConfig) -> Outcome:
        """Not taken (any more): the HubCluster it controls goes, then, once its group converged (or at the bound),
        our finalizer."""
        meta = src.get("metadata") or {}
        ref = controller_ref(current)
        own: list[str] = []
        if current is not None and ref is not None and ref.get("uid") == meta.get("uid"):
            if not (current.get("metadata") or {}).get("deletionTimestamp"):
                self.kube.delete_cluster(current)
                self._tell(key, src, "Normal", "HubClusterDeleted",
                           f"HubCluster {object_key(current)} deleted: its stack is destroyed first")
            own.append(f"HubCluster {object_key(current)}")
        elif self.desired.inputs(object_key(src)) is not None:
            own.append(f"the stack of {object_key(src)}")  # the mapper has not resolved the fleet without it yet
        if SOURCE_FINALIZER not in (meta.get("finalizers") or []):
            return Outcome.done(WAIT) if own else Outcome.done()
        now = datetime.now(timezone.utc)
        decided = hold(own=own, namespace=str(meta.get("namespace")), labels=meta.get("labels") or {},
                       shares=self._shares(), converged=self._converged, hub=hub,
                       since=held_since(meta.get("deletionTimestamp"), self._held.setdefault(key, now)), now=now)
        if not decided.release:
            # Said once per fact (what it waits for), on the source itself, not a log line every WAIT: an Event, and
            # the condition `kubectl get -o yaml` shows for as long as it holds.
            waiting = decided.waiting_message()
            self._tell(key, src, "Normal", "WaitingForPeers", waiting)
            self._show_hold(kind, src, True, "WaitingForPeers", waiting, now)
            return Outcome.done(WAIT)
        if decided.expired:
            self._tell(key, src, "Warning", "ReleasedUnconverged", decided.message())
        shown = self._show_hold(kind, src, False, "ReleasedUnconverged" if decided.expired else "Released",
                                decided.message() if decided.expired else RELEASED, now)
        return self._release_finalizer(kind, shown) if shown is not None else Outcome.done()

    def _show_hold(self, kind: SourceKind, src: Raw, held: bool, reason: str, message: str, now: datetime
                   ) -> Raw | None:
        """The condition on the source saying whether our finalizer holds it (stacks.sources.held), written when it
        changes; the source as it is now (None: gone). A release is not written on an object that goes with it."""
        meta = src.get("metadata") or {}
        if not held and meta.get("deletionTimestamp") and (meta.get("finalizers") or []) == [SOURCE_FINALIZER]:
            return src
        conditions = with_held(src, held=held, reason=reason, message=message, now=now)
        return src if conditions is None else self.kube.set_conditions(kind, src, conditions)

    def _release_finalizer(self, kind: SourceKind, src: Raw) -> Outcome:
        self.kube.set_finalizer(kind, src, False)
        return Outcome.done()

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
            status = ClusterStatus.model_validate(entry.raw.get("status") or {})
        except ValueError:
            return True
        return up_to_date(status, desired.digest())

    def _tell(self, key: str, src: Raw, type_: str, reason: str, message: str) -> None:
        """An Event on the source, once per message (a refusal is not repeated on every resync)."""
        if self._said.get(key) == message:
            return
        self._said[key] = message
        LOG.info("%s: %s: %s", key, reason, message)
        self.events.event(src, "Warning" if type_ == "Warning" else "Normal", reason, message[:1024])

