"""The tenant controller: each Tenant becomes a Namespace its admins may run Clusters in (docs/registry.md).

    Manager: Informer(hubtenants) ─► TenantStore      ─┐
             Informer(clusters)   ─► ClusterCounts    ─┼─► WorkQueue ──► one worker ──► reconcile(tenant)
             Informer(namespaces) ─► NamespaceMarks   ─┘   (+ a resync of every Tenant each `resync` seconds)

It owns no informer: the runtime's (automation/kit/runtime.py) are shared with the stacks controller, so
Clusters are watched once, in --watch-namespace when set. The Tenants' informer keeps them in a TenantStore;
ClusterCounts and NamespaceMarks are handlers of the Clusters' and Namespaces' informers (whose stores are the
service's Cache) that keep only what a Tenant's reconcile reads.
Only the leader runs it (automation/service/serve.py registers it on the pipeline's Manager).
What it makes of a Tenant is decided in stacks.admission; here it is read from and written to the API server:

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
API errors are logged and the Tenant retried with backoff (the work queue's).
"""
from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from typing import Any, Callable, Mapping

from kubernetes import client
from kubernetes.client.rest import ApiException

from automation.adapters.backoff import Backoff
from automation.adapters.loop import Every
from automation.adapters.kube.calls import or_none
from stacks.times import rfc3339_seconds
from automation.adapters.kube.informer import DictStore, Raw, Source, object_key
from automation.kit.queue import Outcome, WorkQueue
from automation.kit.runtime import Manager
from stacks.admission import (HUB_ACCOUNT_UNKNOWN, MESSAGE_MAX, TENANT_ADMINS_ROLEBINDING, TENANT_QUOTA,
                              admins_rolebinding, namespace_metadata, released_metadata, tenant_of,
                              tenant_quota, tenant_reader, tenant_refusal)
from stacks.names import CLUSTERS, GROUP, TENANT_FINALIZER, TENANT_LABEL, TENANTS, VERSION
from stacks.registry import Tenant

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
        name = str((raw.get("metadata") or {}).get("name"))
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
    spec, status = raw.get("spec") or {}, raw.get("status") or {}
    found = {spec.get("namespace") or (raw.get("metadata") or {}).get("name"), status.get("namespace")}
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
        key, namespace = object_key(raw), str((raw.get("metadata") or {}).get("namespace"))
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
        meta = raw.get("metadata") or {}
        name = str(meta.get("name"))
        marks = {"metadata": {"name": name, "labels": _ours(meta.get("labels")),
                              "annotations": _ours(meta.get("annotations")),
                              "deletionTimestamp": meta.get("deletionTimestamp")}}
        with self._lock:
            old = self._marks.pop(name, None) if kind == "DELETED" else self._marks.get(name)
            if kind != "DELETED":
                self._marks[name] = marks
        if kind == "DELETED" or old != marks:
            self._changed(name)


def _ours(values: Mapping[str, str] | None) -> dict[str, str]:
    return {key: value for key, value in (values or {}).items() if key.startswith(f"{GROUP}/")}




# --------------------------------------------------------------------------- the controller

class TenantController:
    """Reconciles one Tenant at a time over the Manager's Tenants, Clusters and Namespaces (module docstring)."""

    def __init__(self, api_client: client.ApiClient, manager: Manager, *, hub_account: Callable[[], str | None],
                 backoff: Backoff = Backoff(1.0, 60.0), resync: float = 300.0, request_timeout: float = 30.0):
        """Registers on `manager` the Tenants' source and handlers of its "clusters" and "namespaces" (every
        namespace: automation.adapters.kube.informer.sources(..., tenants=True)); started and stopped with it.
        `hub_account`: the valid HubConfig's spec.accountID, None while there is none (the service's cache)."""
        self.api_client = api_client
        self.hub_account = hub_account
        self.request_timeout = request_timeout
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.rbac = client.RbacAuthorizationV1Api(api_client)
        self.queue = WorkQueue(backoff)
        self.tenants = TenantStore(self.queue.add)
        self.clusters = ClusterCounts(self._namespace_changed)
        self.namespaces = NamespaceMarks(self._namespace_changed)
        self.controller = manager.controller("tenant", self.reconcile, queue=self.queue, workers=1)
        manager.source(Source(TENANTS, self.custom.list_cluster_custom_object, (GROUP, VERSION, TENANTS)),
                       self.tenants)
        manager.watch("clusters", self.clusters)
        manager.watch("namespaces", self.namespaces)
        self.resync = Every("tenant-resync", resync, self._resync)
        manager.runnable(self.resync)

    def _resync(self) -> None:
        for name in self.tenants.keys():
            self.queue.add(name)

    def _namespace_changed(self, namespace: str) -> None:
        for name in self.tenants.in_namespace(namespace):
            self.queue.add(name)

    # -- reconcile
    def reconcile(self, name: str) -> Outcome:
        """Level-triggered: reads the Tenant afresh and brings its namespace, RoleBinding and status in line.
        An ApiException propagates: the worker logs it and the Tenant comes back with backoff."""
        try:
            raw = self.custom.get_cluster_custom_object(GROUP, VERSION, TENANTS, name)
        except ApiException as exc:
            if exc.status == 404:
                return Outcome.done()
            raise
        if (raw.get("metadata") or {}).get("deletionTimestamp"):
            return self._finalize(raw)
        tenant, problem = tenant_of(raw)
        if tenant is None:
            self._status(raw, message=f"invalid: {problem}")
            return Outcome.done()
        namespace = tenant.namespace
        previous = (raw.get("status") or {}).get("namespace")
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

        raw = self._add_finalizer(raw)
        if previous and previous != namespace:
            self._release(name, previous)
        self._ensure_namespace(tenant, current)
        self._ensure_admins(tenant)
        self._ensure_quota(tenant, raw["metadata"]["uid"])
        self._ensure_reader(tenant, raw["metadata"]["uid"])
        self._status(raw, namespace=namespace, clusters=self.clusters.count(namespace), message=None, conditions=None)
        return Outcome.done()

    def _finalize(self, raw: Raw) -> Outcome:
        meta = raw["metadata"]
        name = meta["name"]
        if TENANT_FINALIZER not in (meta.get("finalizers") or []):
            return Outcome.done()
        # The namespace it made is the one its status names (its spec may have changed or turned invalid since);
        # without one (it stopped between making the namespace and writing the status), the spec's if marked ours.
        namespace = (raw.get("status") or {}).get("namespace")
        if namespace is None:
            tenant, _ = tenant_of(raw)
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
        self._patch_tenant(name, {"metadata": {"finalizers": [f for f in meta["finalizers"] if f != TENANT_FINALIZER],
                                               "resourceVersion": meta["resourceVersion"]}})
        LOG.info("Tenant %s: released namespace %s; finalizer removed", name, namespace)
        return Outcome.done()

    # -- the pieces
    def _read_namespace(self, namespace: str) -> Raw | None:
        try:
            return self.api_client.sanitize_for_serialization(self.core.read_namespace(namespace))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _ensure_namespace(self, tenant: Tenant, current: Raw | None) -> None:
        wanted = namespace_metadata(tenant)
        if current is None:
            # A namespace made meanwhile fails this (409): the retry judges it as an existing one.
            self.core.create_namespace({"metadata": {"name": tenant.namespace, **wanted}})
            LOG.info("Tenant %s: created namespace %s", tenant.metadata.name, tenant.namespace)
            return
        meta = current.get("metadata") or {}
        if any(_differs(meta.get(part), values) for part, values in wanted.items()):
            self.core.patch_namespace(tenant.namespace, {"metadata": wanted})
            adopted = not self._labelled(tenant.metadata.name, current)
            LOG.info("Tenant %s: %s namespace %s", tenant.metadata.name, "adopted" if adopted else "updated",
                     tenant.namespace)

    def _ensure_admins(self, tenant: Tenant) -> None:
        wanted = admins_rolebinding(tenant)
        namespace = tenant.namespace
        current = or_none(lambda: self.rbac.read_namespaced_role_binding(TENANT_ADMINS_ROLEBINDING, namespace))
        if wanted is None:
            if current is not None:
                self._delete_rolebinding(namespace)
            return
        if current is None:
            self.rbac.create_namespaced_role_binding(namespace, wanted)
            return
        have = self.api_client.sanitize_for_serialization(current)
        if have.get("roleRef") != wanted["roleRef"]:  # immutable: replace the binding
            self._delete_rolebinding(namespace)
            self.rbac.create_namespaced_role_binding(namespace, wanted)
        elif _subjects(have.get("subjects")) != _subjects(wanted["subjects"]) or \
                _differs(have["metadata"].get("labels"), wanted["metadata"]["labels"]):
            self.rbac.patch_namespaced_role_binding(TENANT_ADMINS_ROLEBINDING, namespace, {
                "metadata": {"labels": wanted["metadata"]["labels"],
                             "resourceVersion": have["metadata"]["resourceVersion"]},
                "subjects": wanted["subjects"]})

    def _ensure_quota(self, tenant: Tenant, uid: str) -> None:
        wanted = tenant_quota(tenant, uid)
        namespace = tenant.namespace
        current = or_none(lambda: self.core.read_namespaced_resource_quota(TENANT_QUOTA, namespace,
                                                                            _request_timeout=self.request_timeout))
        if wanted is None:
            if current is not None:
                self._delete_quota(namespace)
            return
        if current is None:
            self.core.create_namespaced_resource_quota(namespace, wanted, _request_timeout=self.request_timeout)
            LOG.info("Tenant %s: quota %s in namespace %s", tenant.metadata.name, wanted["spec"]["hard"], namespace)
            return
        have = self.api_client.sanitize_for_serialization(current)
        if (have.get("spec") or {}).get("hard") != wanted["spec"]["hard"] or \
                have["metadata"].get("ownerReferences") != wanted["metadata"]["ownerReferences"]:
            self.core.patch_namespaced_resource_quota(TENANT_QUOTA, namespace, {
                "metadata": {"labels": wanted["metadata"]["labels"],
                             "ownerReferences": wanted["metadata"]["ownerReferences"],
                             "resourceVersion": have["metadata"]["resourceVersion"]},
                "spec": {"hard": wanted["spec"]["hard"]}}, _request_timeout=self.request_timeout)

    def _ensure_reader(self, tenant: Tenant, uid: str) -> None:
        """The admins' read of their own HubTenant (stacks.admission.tenant_reader): a ClusterRole, created once,
        and its binding, whose subjects follow spec.admins (none: it grants nobody). Never deleted here: both are
        owned by the Tenant, and the garbage collector removes them with it."""
        role, binding = tenant_reader(tenant, uid)
        name, timeout = role["metadata"]["name"], self.request_timeout
        for attempt in range(3):  # a 409 is another writer (a second reconcile of the Tenant) first: read again
            try:
                have = or_none(lambda: self.rbac.read_cluster_role_binding(name, _request_timeout=timeout))
                if have is None:
                    if not binding["subjects"]:
                        return  # nobody to grant it to: nothing is made
                    if or_none(lambda: self.rbac.read_cluster_role(name, _request_timeout=timeout)) is None:
                        self.rbac.create_cluster_role(role, _request_timeout=timeout)
                    self.rbac.create_cluster_role_binding(binding, _request_timeout=timeout)
                    return
                have = self.api_client.sanitize_for_serialization(have)
                if _subjects(have.get("subjects")) != _subjects(binding["subjects"]):
                    self.rbac.patch_cluster_role_binding(name, {
                        "metadata": {"resourceVersion": have["metadata"]["resourceVersion"]},
                        "subjects": binding["subjects"] or None}, _request_timeout=timeout)
                return
            except ApiException as exc:
                if exc.status != 409 or attempt == 2:
                    raise

    def _delete_quota(self, namespace: str) -> None:
        or_none(lambda: self.core.delete_namespaced_resource_quota(TENANT_QUOTA, namespace,
                                                                    _request_timeout=self.request_timeout))

    def _delete_rolebinding(self, namespace: str) -> None:
        or_none(lambda: self.rbac.delete_namespaced_role_binding(TENANT_ADMINS_ROLEBINDING, namespace))

    def _release(self, name: str, namespace: str) -> None:
        """Let a namespace this Tenant made or adopted go: its RoleBinding and tenant marks; the namespace stays."""
        if not self._labelled(name, self._read_namespace(namespace)):
            return  # not ours (never was, or another Tenant's now): leave it alone
        self._delete_rolebinding(namespace)
        self._delete_quota(namespace)
        self.core.patch_namespace(namespace, {"metadata": released_metadata()})

    @staticmethod
    def _labelled(name: str, namespace: Raw | None) -> bool:
        return namespace is not None and ((namespace.get("metadata") or {}).get("labels") or {}).get(TENANT_LABEL) == name

    def _live_count(self, namespace: str) -> int:
        """How many Clusters the namespace holds, asked of the API server (the watch may lag a creation)."""
        page = self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, CLUSTERS, limit=1)
        meta = page.get("metadata") or {}
        remaining = meta.get("remainingItemCount") or (1 if meta.get("continue") else 0)
        return len(page.get("items") or []) + int(remaining)

    def _add_finalizer(self, raw: Raw) -> Raw:
        meta = raw["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        if TENANT_FINALIZER in finalizers:
            return raw
        return self._patch_tenant(meta["name"], {"metadata": {"finalizers": [*finalizers, TENANT_FINALIZER],
                                                              "resourceVersion": meta["resourceVersion"]}})

    def _patch_tenant(self, name: str, patch: Mapping[str, Any]) -> Raw:
        """A merge patch carrying the resourceVersion it was computed from: a concurrent change fails it (409)."""
        return self.custom.patch_cluster_custom_object(GROUP, VERSION, TENANTS, name, patch)

    def _status(self, raw: Raw, **fields: Any) -> None:
        """Write the status fields given (a None removes one) unless they already read so."""
        if "message" in fields and fields["message"] is not None:
            fields["message"] = fields["message"][:MESSAGE_MAX]
        status = raw.get("status") or {}
        if all(status.get(key) == value for key, value in fields.items()):
            return
        if fields.get("message"):  # once per new message, not on every resync
            LOG.info("Tenant %s: %s", raw["metadata"]["name"], fields["message"])
        self.custom.patch_cluster_custom_object_status(GROUP, VERSION, TENANTS, raw["metadata"]["name"],
                                                       {"status": fields})


def _stalled(reason: str, message: str, raw: Raw) -> dict[str, Any]:
    """The Stalled condition of a refused Tenant (kstatus; Ready is absent while it is refused)."""
    old: Raw = next((c for c in ((raw.get("status") or {}).get("conditions") or []) if c.get("type") == "Stalled"),
                    {})
    now = old.get("lastTransitionTime") if old.get("reason") == reason else None
    return {"type": "Stalled", "status": "True", "reason": reason, "message": message[:MESSAGE_MAX],
            "lastTransitionTime": now or rfc3339_seconds(time.time()),
            "observedGeneration": (raw.get("metadata") or {}).get("generation")}


def _subjects(subjects: list[Mapping[str, Any]] | None) -> list[tuple]:
    """Subjects as compared: the server fills in apiGroup where it was left out."""
    return [(s.get("kind"), s.get("name"), s.get("namespace")) for s in subjects or []]


def _differs(have: Mapping[str, str] | None, want: Mapping[str, str]) -> bool:
    have = have or {}
    return any(have.get(key) != value for key, value in want.items())
