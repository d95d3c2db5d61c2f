"""The templates controller: a HubTenant's Git repository templates become HubGitRepos (docs/registry.md), as
Lieutenant's Tenant and Cluster templates make GitRepos.

    Manager: Informer(hubtenants)   ─► (the tenant controller's TenantStore) ─┐
             Informer(clusters)     ─► (the service's Cache)                 ─┼─► WorkQueue ──► one worker
             Informer(hubgitrepos)  ─► (the gitrepo controller's store)      ─┘   ("tenant:<name>", "cluster:<ns>/<name>")

It owns no informer: `setup(manager, objects=, tenants=)` has it read the runtime's Clusters from their store (no
request per Cluster) and hear its Tenants (their source is the tenant controller's: automation/service/tenants.py
setup, so it runs only beside the tenant controller), Clusters and HubGitRepos. It reads and writes HubGitRepos
through the object port (automation.kit.objects.Objects) only. What it makes is stacks.gitrepos.templates':

- a HubTenant with spec.gitRepoTemplate, once the tenant controller has made its namespace (status.namespace):
  HubGitRepo `tenant-<tenant>` there, owned by the HubTenant;
- each HubCluster in that namespace, when the HubTenant has spec.clusterTemplate.gitRepoTemplate: HubGitRepo
  `cluster-<cluster>` beside it, owned by the HubCluster, its deploy keys the template's and the agent's
  (status.agentKey, which the registry API writes: a new or cleared key changes them).

A HubGitRepo is written only when it is one of these: labelled with stacks.names.GITREPO_ROLE_LABEL and owned (its
controller ownerReference) by that HubTenant's or HubCluster's uid. A HubGitRepo of that name that is not (the
hub administrator's own) is left alone and the conflict logged. A template removed deletes the generated
HubGitRepo (only such a one); the owner deleted is the garbage collector's work. The spec is replaced whole (a
merge patch at the resourceVersion read that also removes what the template no longer has), so a key or a file
taken out of the template goes.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Mapping

from automation.adapters.backoff import Backoff
from automation.adapters.kube.informer import Raw, Store
from automation.adapters.loop import Every
from automation.kit.objects import HUBGITREPOS, HUBTENANTS, Conflict, Obj, Objects
from automation.kit.queue import Outcome, WorkQueue
from automation.kit.runtime import Controller, Manager
from automation.service.tenants import TenantStore
from stacks.conditions import status_patch
from stacks.admission import parse_tenant
from stacks.gitrepos.templates import (CLUSTER_ROLE, TENANT_ROLE, agent_key_of, cluster_repo, cluster_repo_name,
                                       tenant_repo, tenant_repo_name)
from stacks.names import GITREPO_ROLE_LABEL, GITREPOS, TENANTS
from stacks.registry import Tenant

LOG = logging.getLogger("hubwright.gitrepos")

TENANT_KEY, CLUSTER_KEY = "tenant:", "cluster:"


def setup(manager: Manager, *, objects: Objects, tenants: TenantStore, backoff: Backoff = Backoff(1.0, 60.0),
          resync: float = 300.0) -> GitRepoTemplates:
    """The templates controller on `manager`: handlers of its "hubtenants" (their source: the tenant controller's
    setup), "clusters" (whose store it reads) and "hubgitrepos" (the HubGitRepo controller's setup), one worker and
    the resync; started and stopped with the manager. `tenants`: the tenant controller's TenantStore."""
    controller = GitRepoTemplates(objects, tenants=tenants, clusters=_store_of(manager, "clusters"), backoff=backoff,
                                  resync=resync)
    controller.controller = manager.controller("gitrepo-templates", controller.reconcile, queue=controller.queue,
                                               workers=1)
    manager.watch(TENANTS, controller._tenant_changed)
    manager.watch("clusters", controller._cluster_changed)
    manager.watch(GITREPOS, controller._gitrepo_changed)
    manager.runnable(controller.resync)
    return controller


def _store_of(manager: Manager, kind: str) -> Callable[[], Store | None]:
    """The manager's store of `kind`, once its source is added (None before)."""
    return lambda: manager.store(kind) if kind in manager.informers else None


class GitRepoTemplates:
    """Keeps the HubGitRepos a HubTenant's templates make (module docstring)."""

    def __init__(self, objects: Objects, *, tenants: TenantStore,
                 clusters: Callable[[], Store | None] = lambda: None, backoff: Backoff = Backoff(1.0, 60.0),
                 resync: float = 300.0):
        """Registers nothing: `setup` does. `tenants`: the tenant controller's store of the HubTenants (the
        runtime's one informer of them); `clusters`: the runtime's store of the Clusters (None while it has none)."""
        self.objects = objects
        self.tenants = tenants
        self._clusters = clusters
        self.queue = WorkQueue(backoff)
        self._seen: dict[str, tuple] = {}  # cluster key -> what its catalog is made of (uid, agent key, name)
        self._seen_lock = threading.Lock()
        self.resync = Every("gitrepo-templates-resync", resync, self._resync)
        self.controller: Controller | None = None  # set by setup

    # -- what changed
    def _tenant_changed(self, kind: str, raw: Raw) -> None:
        obj = Obj(raw)
        self.queue.add(TENANT_KEY + obj.name)
        namespace = obj.status.get("namespace")
        for key in self._clusters_in(namespace):
            self.queue.add(CLUSTER_KEY + key)

    def _cluster_changed(self, kind: str, raw: Raw) -> None:
        """Only what the catalog is made of: a Cluster's status written by the stacks controller changes nothing."""
        obj = Obj(raw)
        key = obj.key
        made_of = (obj.uid, obj.deleting, agent_key_of(obj.status), obj.spec.get("displayName"))
        with self._seen_lock:
            if kind == "DELETED":
                self._seen.pop(key, None)
            elif self._seen.get(key) == made_of:
                return
            else:
                self._seen[key] = made_of
        self.queue.add(CLUSTER_KEY + key)

    def _gitrepo_changed(self, kind: str, raw: Raw) -> None:
        """One of ours edited or deleted by someone: its owner looked at again."""
        obj = Obj(raw)
        role = obj.labels.get(GITREPO_ROLE_LABEL)
        owner = next((ref for ref in obj.owner_references if ref.get("controller")), None)
        if owner is None:
            return
        if role == TENANT_ROLE:
            self.queue.add(TENANT_KEY + str(owner.get("name")))
        elif role == CLUSTER_ROLE:
            self.queue.add(f"{CLUSTER_KEY}{obj.namespace}/{owner.get('name')}")

    def _clusters_in(self, namespace: str | None) -> list[str]:
        store = self._cluster_store()
        if not namespace or store is None:
            return []
        return [key for key in store.keys() if key.startswith(f"{namespace}/")]

    def _cluster_store(self) -> Store | None:
        return self._clusters()

    def _resync(self) -> None:
        for name in self.tenants.keys():
            self.queue.add(TENANT_KEY + name)
        store = self._cluster_store()
        for key in store.keys() if store is not None else []:
            self.queue.add(CLUSTER_KEY + key)

    # -- reconcile
    def reconcile(self, key: str) -> Outcome:
        if key.startswith(TENANT_KEY):
            self._tenant(key[len(TENANT_KEY):])
        else:
            namespace, name = key[len(CLUSTER_KEY):].split("/", 1)
            self._cluster(namespace, name)
        return Outcome.done()

    def _tenant(self, name: str) -> None:
        raw = self.objects.get(HUBTENANTS, name)
        if raw is None or Obj(raw).deleting:
            return  # gone or going: the garbage collector takes its HubGitRepo
        tenant, _ = parse_tenant(raw)
        namespace = Obj(raw).status.get("namespace")
        if tenant is None or not namespace or namespace != tenant.namespace:
            return  # invalid, or its namespace not made yet (its status changes when it is)
        uid = str(Obj(raw).uid)
        template = tenant.spec.git_repo_template
        if template is None:
            self._remove(namespace, tenant_repo_name(name), TENANT_ROLE, uid)
            return
        self._ensure(tenant_repo(template, tenant=name, tenant_uid=uid, namespace=namespace,
                                 display_name=tenant.spec.display_name))

    def _cluster(self, namespace: str, name: str) -> None:
        store = self._cluster_store()
        raw = store.get(f"{namespace}/{name}") if store is not None else None  # the informer's copy: fed in order
        if raw is None or Obj(raw).deleting:
            return
        uid = str(Obj(raw).uid)
        tenant = self._tenant_of_namespace(namespace)
        template = tenant.spec.cluster_template.git_repo_template \
            if tenant is not None and tenant.spec.cluster_template is not None else None
        if tenant is None or template is None:
            self._remove(namespace, cluster_repo_name(name), CLUSTER_ROLE, uid)
            return
        display = Obj(raw).spec.get("displayName")
        self._ensure(cluster_repo(template, tenant=tenant.metadata.name, namespace=namespace, cluster=name,
                                  cluster_uid=uid, display_name=display if isinstance(display, str) else None,
                                  agent_key=agent_key_of(Obj(raw).status)))

    def _tenant_of_namespace(self, namespace: str) -> Tenant | None:
        """The valid HubTenant whose namespace (as the tenant controller made it: status.namespace) this is."""
        for name in self.tenants.in_namespace(namespace):
            raw = self.tenants.get(name)
            if raw is None or Obj(raw).status.get("namespace") != namespace:
                continue
            tenant, _ = parse_tenant(raw)
            if tenant is not None and tenant.namespace == namespace:
                return tenant
        return None

    # -- the pieces
    def _ensure(self, wanted: Raw) -> None:
        want = Obj(wanted)
        namespace, name = want.namespace, want.name
        have = self.objects.get(HUBGITREPOS, name, namespace)
        if have is None:
            try:
                self.objects.create(HUBGITREPOS, wanted, namespace)
            except Conflict:
                raise RuntimeError(f"HubGitRepo {namespace}/{name} was created meanwhile: looked at again") from None
            LOG.info("HubGitRepo %s/%s: made from the template (%s)", namespace, name, wanted["spec"]["path"])
            return
        if not _ours(have, want.labels[GITREPO_ROLE_LABEL], str(want.owner_references[0]["uid"])):
            LOG.warning("HubGitRepo %s/%s is not the template's (no %s label or another owner): left alone",
                        namespace, name, GITREPO_ROLE_LABEL)
            return
        held = Obj(have)
        labels = {**held.labels, **want.labels}
        if held.spec == wanted["spec"] and labels == held.labels:
            return
        # The whole spec, as an update would write it: a merge patch that also removes what `wanted` no longer has,
        # at the resourceVersion read (a 409 if it moved on: looked at again).
        self.objects.patch(HUBGITREPOS, name, {
            "metadata": {"labels": labels, "resourceVersion": held.resource_version},
            "spec": status_patch(wanted["spec"], dict(held.spec))}, namespace)
        LOG.info("HubGitRepo %s/%s: updated from the template", namespace, name)

    def _remove(self, namespace: str, name: str, role: str, owner_uid: str) -> None:
        """Delete the generated HubGitRepo `name` when the template is gone: only if it is the template's."""
        have = self.objects.get(HUBGITREPOS, name, namespace)
        if have is None or not _ours(have, role, owner_uid) or Obj(have).deleting:
            return
        # Only the one read (uid precondition): a HubGitRepo of that name made in the instant since is not deleted.
        self.objects.delete(HUBGITREPOS, name, namespace, uid=Obj(have).uid)
        LOG.info("HubGitRepo %s/%s: its template is gone; deleted", namespace, name)


def _ours(raw: Raw, role: str, owner_uid: str) -> bool:
    """Made by a template: the role label, and the owner's uid as its controller ownerReference."""
    obj = Obj(raw)
    if obj.labels.get(GITREPO_ROLE_LABEL) != role:
        return False
    return any(ref.get("controller") and ref.get("uid") == owner_uid for ref in obj.owner_references)
