"""The tenant controller: each Tenant becomes a Namespace its admins may run Clusters in (docs/registry.md).

    Manager: Informer(hubtenants) ─► TenantStore      ─┐
             Informer(clusters)   ─► ClusterCounts    ─┼─► WorkQueue ──► one worker ──► reconcile(tenant)
             Informer(namespaces) ─► NamespaceMarks   ─┘   (+ a resync of every Tenant each `resync` seconds)

`setup(manager, objects=, source=, hub_account=)` declares its watches on the runtime (automation/kit/runtime.py):
the Tenants' source (their informer keeps them in a TenantStore), and handlers of the Clusters' and Namespaces'
informers, shared with the stacks controller (so Clusters are watched once, in --watch-namespace when set), that
keep only what a Tenant's reconcile reads (ClusterCounts, NamespaceMarks).
Only the leader runs it (automation/service/serve.py calls setup on the pipeline's Manager).
What it makes of a Tenant is decided in stacks.admission; here it is read from and written to the API server,
through the object port (automation.kit.objects.Objects) only:

- the finalizer stacks.names.TENANT_FINALIZER, before anything is made;
- the namespace (Tenant.namespace): created when missing, or adopted when stacks.admission.adoption_refusal
  allows it; labelled and annotated with the tenant, and with its owner account and default region when set;
- the RoleBinding `hubwright-tenant-admins` there: spec.admins get the ClusterRole hubwright-tenant-admin
  (none when there are no admins);
- the ClusterRole and ClusterRoleBinding `hubwright-tenant-admin:<tenant>` (stacks.admission.tenant_reader), owned
  by the Tenant (the garbage collector removes them with it): spec.admins may get and watch that one HubTenant
  (cluster-scoped: the RoleBinding cannot grant it);
- the ResourceQuota `hubwright-tenant-quota` there from spec.quota (stacks.admission.tenant_quota), owned by the
  Tenant: the API server itself refuses a Cluster beyond it (none when the Tenant sets no quota);
- status (the status subresource): namespace, clusters (how many Clusters the namespace holds, which the
  deletion policy reads) and message (why nothing was made, or what a deletion waits for).

Deleting a Tenant: while its namespace holds Clusters (counted live, not from the watch) the finalizer stays
and status.message says so. Then the RoleBinding goes and the namespace loses the tenant label and annotation,
and the finalizer is removed. The namespace itself is kept: it may hold what the hub administrator put there
(Secrets, quotas, other teams' objects), which deleting it would lose; a cluster administrator deletes it.
(A Cluster created in the instant between the last count and the finalizer's removal outlives its Tenant in
that kept namespace: nothing is lost, and its stack still follows the namespace's annotations.)

An invalid Tenant, or one stacks.admission.tenant_refusal refuses (the hub account as its account, a namespace
that belongs to someone else or is owned by another account), gets a status.message (and, when refused, a
Stalled condition naming the reason) and nothing else.
API errors (ApiError) are logged and the Tenant retried with backoff (the work queue's); a conflict (409) of a
finalizer edit is retried at once on a fresh read (automation/kit/finalizers.py), any other by the queue.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from typing import Any, Callable, Mapping

from automation.adapters.backoff import Backoff
from automation.adapters.kube.informer import DictStore, Raw, Source
from automation.adapters.loop import Every
from automation.kit.finalizers import ensure_finalizer, release_finalizer
from automation.kit.objects import (CLUSTERROLEBINDINGS, CLUSTERROLES, HUBCLUSTERS, HUBTENANTS, NAMESPACES,
                                    RESOURCEQUOTAS, ROLEBINDINGS, Conflict, Obj, Objects)
from automation.kit.queue import Outcome, WorkQueue
from automation.kit.runtime import Controller, Manager
from automation.kit.status import StatusWriter
from stacks.admission import (HUB_ACCOUNT_UNKNOWN, MESSAGE_MAX, TENANT_ADMINS_ROLEBINDING, TENANT_QUOTA,
                              admins_rolebinding, namespace_metadata, released_metadata, parse_tenant,
                              tenant_quota, tenant_reader, tenant_refusal)
from stacks.names import GROUP, TENANT_FINALIZER, TENANT_LABEL
from stacks.registry import Tenant
from stacks.times import rfc3339_seconds

LOG = logging.getLogger("hubwright.tenants")


# --------------------------------------------------------------------------- what the watches keep

class TenantStore(DictStore):
    """The Tenants, and which namespaces each one is about (its namespace, and the one its status names), so a
    Cluster's change finds the Tenants to look at again."""

    def __init__(self, changed: Callable[[str], None]):
        super().__init__(self._changed)
        self._notify = changed
        self._namespaces: dict[str, set[str]] = {}  # tenant -> namespaces
        self._index_lock = threading.Lock()

    def _changed(self, kind: str, raw: Raw) -> None:
        name = Obj(raw).name
        with self._index_lock:
            if kind == "DELETED":
                self._namespaces.pop(name, None)
            else:
                self._namespaces[name] = _namespaces_of(raw)
        self._notify(name)

    def in_namespace(self, namespace: str) -> list[str]:
        with self._index_lock:
            return [name for name, namespaces in self._namespaces.items() if namespace in namespaces]


def _namespaces_of(raw: Raw) -> set[str]:
    obj = Obj(raw)
    found = {obj.spec.get("namespace") or obj.name, obj.status.get("namespace")}
    return {ns for ns in found if isinstance(ns, str)}


class ClusterCounts:
    """A handler of the Clusters' informer that keeps only where each Cluster is: counts per namespace, not
    copies of the Clusters (the informer's store, the pipeline's cache, holds those). `changed(namespace)` hears
    of arrivals and departures, not of edits, which change no count."""

    def __init__(self, changed: Callable[[str], None]):
        self._changed = changed
        self._where: dict[str, str] = {}  # namespace/name -> namespace
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __call__(self, kind: str, raw: Raw) -> None:
        obj = Obj(raw)
        key, namespace = obj.key, str(obj.namespace)
        with self._lock:
            if kind == "DELETED":
                if self._where.pop(key, None) is None:
                    return
                self._counts[namespace] -= 1
            else:
                if key in self._where:
                    return
                self._where[key] = namespace
                self._counts[namespace] += 1
        self._changed(namespace)

    def count(self, namespace: str) -> int:
        with self._lock:
            return self._counts[namespace]


class NamespaceMarks:
    """A handler of the Namespaces' informer that keeps only what a Tenant's reconcile reads of each namespace (its
    hubwright labels and annotations, whether it is being deleted), and says `changed(namespace)` when that moves:
    the hub administrator's annotation that lets a Tenant adopt its namespace takes effect at once, not at the
    next resync."""

    def __init__(self, changed: Callable[[str], None]):
        self._changed = changed
        self._marks: dict[str, Raw] = {}  # name -> {"metadata": {name, labels, annotations, deletionTimestamp}}
        self._lock = threading.Lock()

    def get(self, name: str) -> Raw | None:
        with self._lock:
            return self._marks.get(name)

    def __call__(self, kind: str, raw: Raw) -> None:
        obj = Obj(raw)
        name = obj.name
        marks = {"metadata": {"name": name, "labels": _ours(obj.labels), "annotations": _ours(obj.annotations),
                              "deletionTimestamp": obj.deletion_timestamp}}
        with self._lock:
            old = self._marks.pop(name, None) if kind == "DELETED" else self._marks.get(name)
            if kind != "DELETED":
                self._marks[name] = marks
        if kind == "DELETED" or old != marks:
            self._changed(name)


def _ours(values: Mapping[str, str] | None) -> dict[str, str]:
    return {key: value for key, value in (values or {}).items() if key.startswith(f"{GROUP}/")}


# --------------------------------------------------------------------------- the watches

def setup(manager: Manager, *, objects: Objects, source: Source, hub_account: Callable[[], str | None],
          backoff: Backoff = Backoff(1.0, 60.0), resync: float = 300.0) -> TenantController:
    """The tenant controller on `manager`: the Tenants' informer (`source`: automation.adapters.kube.kit_sources.
    tenant_source) into its TenantStore, handlers of the manager's "clusters" and "namespaces" (every namespace:
    automation.adapters.kube.informer.sources(..., every_namespace=True)), one worker and the resync; started and stopped
    with the manager. `hub_account`: the valid HubConfig's spec.accountID, None while there is none."""
    controller = TenantController(objects, hub_account=hub_account, backoff=backoff, resync=resync)
    controller.controller = manager.controller("tenant", controller.reconcile, queue=controller.queue, workers=1)
    manager.source(source, controller.tenants)
    manager.watch("clusters", controller.clusters)
    manager.watch("namespaces", controller.namespaces)
    manager.runnable(controller.resync)
    return controller


# --------------------------------------------------------------------------- the controller

class TenantController:
    """Reconciles one Tenant at a time over the Manager's Tenants, Clusters and Namespaces (module docstring)."""

    def __init__(self, objects: Objects, *, hub_account: Callable[[], str | None],
                 backoff: Backoff = Backoff(1.0, 60.0), resync: float = 300.0):
        """Registers nothing: `setup` does."""
        self.objects = objects
        self.status = StatusWriter(objects, HUBTENANTS)
        self.hub_account = hub_account
        self.queue = WorkQueue(backoff)
        self.tenants = TenantStore(self.queue.add)
        self.clusters = ClusterCounts(self._namespace_changed)
        self.namespaces = NamespaceMarks(self._namespace_changed)
        self.resync = Every("tenant-resync", resync, self._resync)
        self.controller: Controller | None = None  # set by setup

    def _resync(self) -> None:
        for name in self.tenants.keys():
            self.queue.add(name)

    def _namespace_changed(self, namespace: str) -> None:
        for name in self.tenants.in_namespace(namespace):
            self.queue.add(name)

    # -- reconcile
    def reconcile(self, name: str) -> Outcome:
        """Level-triggered: reads the Tenant afresh and brings its namespace, RoleBinding and status in line.
        An ApiError propagates: the worker logs it and the Tenant comes back with backoff."""
        raw = self.objects.get(HUBTENANTS, name)
        if raw is None:
            return Outcome.done()
        if Obj(raw).deleting:
            return self._finalize(raw)
        tenant, problem = parse_tenant(raw)
        if tenant is None:
            self._status(raw, message=f"invalid: {problem}")
            return Outcome.done()
        namespace = tenant.namespace
        previous = Obj(raw).status.get("namespace")
        if previous and previous != namespace:  # a cluster administrator moved the tenant: let the old one go
            held = self._live_count(previous)
            if held:
                self._status(raw, message=f"cannot move from namespace {previous} to {namespace} while {previous} "
                                          f"holds {held} cluster(s): delete or move them first")
                return Outcome.done()
        current = self._read_namespace(namespace)
        refusal = tenant_refusal(tenant, current, self.hub_account())
        if refusal is not None:
            self._status(raw, message=refusal[1], conditions=[_stalled(*refusal, raw)])
            # Looked at again soon: the HubConfig (at once while it is unknown) or the namespace may change.
            return Outcome.done(2.0 if refusal[0] == HUB_ACCOUNT_UNKNOWN else min(30.0, self.resync.interval))

        held_raw = ensure_finalizer(self.objects, HUBTENANTS, raw, TENANT_FINALIZER)
        if held_raw is None:
            return Outcome.done()  # gone meanwhile
        raw = held_raw
        if previous and previous != namespace:
            self._release(name, previous)
        uid = str(Obj(raw).uid)
        self._ensure_namespace(tenant, current)
        self._ensure_admins(tenant)
        self._ensure_quota(tenant, uid)
        self._ensure_reader(tenant, uid)
        self._status(raw, namespace=namespace, clusters=self.clusters.count(namespace), message=None, conditions=None)
        return Outcome.done()

    def _finalize(self, raw: Raw) -> Outcome:
        obj = Obj(raw)
        name = obj.name
        if TENANT_FINALIZER not in obj.finalizers:
            return Outcome.done()
        # The namespace it made is the one its status names (its spec may have changed or turned invalid since);
        # without one (it stopped between making the namespace and writing the status), the spec's if marked ours.
        namespace = obj.status.get("namespace")
        if namespace is None:
            tenant, _ = parse_tenant(raw)
            if tenant is not None and self._labelled(name, self._read_namespace(tenant.namespace)):
                namespace = tenant.namespace
        if namespace:
            held = self._live_count(namespace)
            if held:
                self._status(raw, namespace=namespace, clusters=held,
                             message=f"being deleted: waiting for the {held} cluster(s) in namespace {namespace} "
                                     "to be deleted")
                return Outcome.done()  # each Cluster's deletion brings the Tenant back
            self._release(name, namespace)
        release_finalizer(self.objects, HUBTENANTS, raw, TENANT_FINALIZER)
        LOG.info("Tenant %s: released namespace %s; finalizer removed", name, namespace)
        return Outcome.done()

    # -- the pieces
    def _read_namespace(self, namespace: str) -> Raw | None:
        return self.objects.get(NAMESPACES, namespace)

    def _ensure_namespace(self, tenant: Tenant, current: Raw | None) -> None:
        wanted = namespace_metadata(tenant)
        if current is None:
            # A namespace made meanwhile fails this (409): the retry judges it as an existing one.
            self.objects.create(NAMESPACES, {"metadata": {"name": tenant.namespace, **wanted}})
            LOG.info("Tenant %s: created namespace %s", tenant.metadata.name, tenant.namespace)
            return
        meta = Obj(current).meta
        if any(_differs(meta.get(part), values) for part, values in wanted.items()):
            self.objects.patch(NAMESPACES, tenant.namespace, {"metadata": wanted})
            adopted = not self._labelled(tenant.metadata.name, current)
            LOG.info("Tenant %s: %s namespace %s", tenant.metadata.name, "adopted" if adopted else "updated",
                     tenant.namespace)

    def _ensure_admins(self, tenant: Tenant) -> None:
        wanted = admins_rolebinding(tenant)
        namespace = tenant.namespace
        have = self.objects.get(ROLEBINDINGS, TENANT_ADMINS_ROLEBINDING, namespace)
        if wanted is None:
            if have is not None:
                self.objects.delete(ROLEBINDINGS, TENANT_ADMINS_ROLEBINDING, namespace)
            return
        if have is None:
            self.objects.create(ROLEBINDINGS, wanted, namespace)
            return
        if have.get("roleRef") != wanted["roleRef"]:  # immutable: replace the binding
            self.objects.delete(ROLEBINDINGS, TENANT_ADMINS_ROLEBINDING, namespace)
            self.objects.create(ROLEBINDINGS, wanted, namespace)
        elif _subjects(have.get("subjects")) != _subjects(wanted["subjects"]) or \
                _differs(Obj(have).labels, Obj(wanted).labels):
            self.objects.patch(ROLEBINDINGS, TENANT_ADMINS_ROLEBINDING, {
                "metadata": {"labels": dict(Obj(wanted).labels), "resourceVersion": Obj(have).resource_version},
                "subjects": wanted["subjects"]}, namespace)

    def _ensure_quota(self, tenant: Tenant, uid: str) -> None:
        wanted = tenant_quota(tenant, uid)
        namespace = tenant.namespace
        have = self.objects.get(RESOURCEQUOTAS, TENANT_QUOTA, namespace)
        if wanted is None:
            if have is not None:
                self.objects.delete(RESOURCEQUOTAS, TENANT_QUOTA, namespace)
            return
        if have is None:
            self.objects.create(RESOURCEQUOTAS, wanted, namespace)
            LOG.info("Tenant %s: quota %s in namespace %s", tenant.metadata.name, wanted["spec"]["hard"], namespace)
            return
        obj, want = Obj(have), Obj(wanted)
        if obj.spec.get("hard") != want.spec["hard"] or obj.meta.get("ownerReferences") != want.owner_references:
            self.objects.patch(RESOURCEQUOTAS, TENANT_QUOTA, {
                "metadata": {"labels": dict(want.labels), "ownerReferences": want.owner_references,
                             "resourceVersion": obj.resource_version},
                "spec": {"hard": want.spec["hard"]}}, namespace)

    def _ensure_reader(self, tenant: Tenant, uid: str) -> None:
        """The admins' read of their own HubTenant (stacks.admission.tenant_reader): a ClusterRole, created once,
        and its binding, whose subjects follow spec.admins (none: it grants nobody). Never deleted here: both are
        owned by the Tenant, and the garbage collector removes them with it."""
        role, binding = tenant_reader(tenant, uid)
        name = Obj(role).name
        for attempt in range(3):  # a 409 is another writer (a second reconcile of the Tenant) first: read again
            try:
                have = self.objects.get(CLUSTERROLEBINDINGS, name)
                if have is None:
                    if not binding["subjects"]:
                        return  # nobody to grant it to: nothing is made
                    if self.objects.get(CLUSTERROLES, name) is None:
                        self.objects.create(CLUSTERROLES, role)
                    self.objects.create(CLUSTERROLEBINDINGS, binding)
                    return
                if _subjects(have.get("subjects")) != _subjects(binding["subjects"]):
                    self.objects.patch(CLUSTERROLEBINDINGS, name, {
                        "metadata": {"resourceVersion": Obj(have).resource_version},
                        "subjects": binding["subjects"] or None})
                return
            except Conflict:
                if attempt == 2:
                    raise

    def _release(self, name: str, namespace: str) -> None:
        """Let a namespace this Tenant made or adopted go: its RoleBinding and tenant marks; the namespace stays."""
        if not self._labelled(name, self._read_namespace(namespace)):
            return  # not ours (never was, or another Tenant's now): leave it alone
        self.objects.delete(ROLEBINDINGS, TENANT_ADMINS_ROLEBINDING, namespace)
        self.objects.delete(RESOURCEQUOTAS, TENANT_QUOTA, namespace)
        self.objects.patch(NAMESPACES, namespace, {"metadata": released_metadata()})

    @staticmethod
    def _labelled(name: str, namespace: Raw | None) -> bool:
        return namespace is not None and Obj(namespace).labels.get(TENANT_LABEL) == name

    def _live_count(self, namespace: str) -> int:
        """How many Clusters the namespace holds, asked of the API server (the watch may lag a creation)."""
        page = self.objects.list(HUBCLUSTERS, namespace, limit=1)
        meta = Obj(page).meta  # the list's: remainingItemCount, continue
        remaining = meta.get("remainingItemCount") or (1 if meta.get("continue") else 0)
        return len(page.get("items") or []) + int(remaining)

    def _status(self, raw: Raw, **fields: Any) -> None:
        """Write the status fields given (a None removes one) unless they already read so."""
        if "message" in fields and fields["message"] is not None:
            fields["message"] = fields["message"][:MESSAGE_MAX]
        obj = Obj(raw)
        if all(obj.status.get(key) == value for key, value in fields.items()):
            return
        if fields.get("message"):  # once per new message, not on every resync
            LOG.info("Tenant %s: %s", obj.name, fields["message"])
        self.status.write_entries(raw, {(key,): value for key, value in fields.items()})


def _stalled(reason: str, message: str, raw: Raw) -> dict[str, Any]:
    """The Stalled condition of a refused Tenant (kstatus; Ready is absent while it is refused)."""
    obj = Obj(raw)
    old: Mapping[str, Any] = next((c for c in obj.status.get("conditions") or [] if c.get("type") == "Stalled"), {})
    now = old.get("lastTransitionTime") if old.get("reason") == reason else None
    return {"type": "Stalled", "status": "True", "reason": reason, "message": message[:MESSAGE_MAX],
            "lastTransitionTime": now or rfc3339_seconds(time.time()), "observedGeneration": obj.generation}


def _subjects(subjects: list[Mapping[str, Any]] | None) -> list[tuple]:
    """Subjects as compared: the server fills in apiGroup where it was left out."""
    return [(s.get("kind"), s.get("name"), s.get("namespace")) for s in subjects or []]


def _differs(have: Mapping[str, str] | None, want: Mapping[str, str]) -> bool:
    have = have or {}
    return any(have.get(key) != value for key, value in want.items())

