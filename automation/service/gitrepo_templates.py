"""The templates controller: a HubTenant's Git repository templates become HubGitRepos (docs/registry.md), as
Lieutenant's Tenant and Cluster templates make GitRepos.

    Manager: Informer(hubtenants)   ─► (the tenant controller's TenantStore) ─┐
             Informer(clusters)     ─► (the service's Cache)                 ─┼─► WorkQueue ──► one worker
             Informer(hubgitrepos)  ─► (the gitrepo controller's store)      ─┘   ("tenant:<name>", "cluster:<ns>/<name>")

It owns no informer: it reads the runtime's Clusters from their store (no request per Cluster) and hears its Tenants (registered by automation/service/tenants.py, so it runs only
beside the tenant controller), Clusters and HubGitRepos. What it makes is stacks.gitrepos.templates':

- a HubTenant with spec.gitRepoTemplate, once the tenant controller has made its namespace (status.namespace):
  HubGitRepo `tenant-<tenant>` there, owned by the HubTenant;
- each HubCluster in that namespace, when the HubTenant has spec.clusterTemplate.gitRepoTemplate: HubGitRepo
  `cluster-<cluster>` beside it, owned by the HubCluster, its deploy keys the template's and the agent's
  (status.agentKey, which the registry API writes: a new or cleared key changes them).

A HubGitRepo is written only when it is one of these: labelled with stacks.names.GITREPO_ROLE_LABEL and owned (its
controller ownerReference) by that HubTenant's or HubCluster's uid. A HubGitRepo of that name that is not (the
hub administrator's own) is left alone and the conflict logged. A template removed deletes the generated
HubGitRepo (only such a one); the owner deleted is the garbage collector's work. The spec is replaced whole
(update with the resourceVersion read), so a key or a file taken out of the template goes.
"""
from __future__ import annotations

import logging
import threading

from kubernetes import client
from kubernetes.client.rest import ApiException

from automation.adapters.backoff import Backoff
from automation.adapters.kube.calls import or_none
from automation.adapters.kube.informer import Raw, object_key
from automation.adapters.loop import Every
from automation.kit.queue import Outcome, WorkQueue
from automation.kit.runtime import Manager
from automation.service.tenants import TenantStore
from stacks.admission import tenant_of
from stacks.gitrepos.templates import (CLUSTER_ROLE, TENANT_ROLE, agent_key_of, cluster_repo, cluster_repo_name,
                                       tenant_repo, tenant_repo_name)
from stacks.names import GITREPO_ROLE_LABEL, GITREPOS, GROUP, TENANTS, VERSION
from stacks.registry import Tenant

LOG = logging.getLogger("hubwright.gitrepos")

TENANT_KEY, CLUSTER_KEY = "tenant:", "cluster:"


class GitRepoTemplates:
    """Keeps the HubGitRepos a HubTenant's templates make (module docstring)."""

    def __init__(self, api_client: client.ApiClient, manager: Manager, *, tenants: TenantStore,
                 backoff: Backoff = Backoff(1.0, 60.0), resync: float = 300.0, request_timeout: float = 30.0):
        """`tenants`: the tenant controller's store of the HubTenants (the runtime's one informer of them)."""
        self.tenants = tenants
        self.request_timeout = request_timeout
        self.custom = client.CustomObjectsApi(api_client)
        self.queue = WorkQueue(backoff)
        self.clusters = manager.store("clusters") if "clusters" in manager.informers else None
        self._manager = manager
        self.controller = manager.controller("gitrepo-templates", self.reconcile, queue=self.queue, workers=1)
        manager.watch(TENANTS, self._tenant_changed)
        self._seen: dict[str, tuple] = {}  # cluster key -> what its catalog is made of (uid, agent key, name)
        self._seen_lock = threading.Lock()
        manager.watch("clusters", self._cluster_changed)
        manager.watch(GITREPOS, self._gitrepo_changed)
        self.resync = Every("gitrepo-templates-resync", resync, self._resync)
        manager.runnable(self.resync)

    # -- what changed
    def _tenant_changed(self, kind: str, raw: Raw) -> None:
        name = str((raw.get("metadata") or {}).get("name"))
        self.queue.add(TENANT_KEY + name)
        namespace = (raw.get("status") or {}).get("namespace")
        for key in self._clusters_in(namespace):
            self.queue.add(CLUSTER_KEY + key)

    def _cluster_changed(self, kind: str, raw: Raw) -> None:
        """Only what the catalog is made of: a Cluster's status written by the stacks controller changes nothing."""
        key = object_key(raw)
        meta = raw.get("metadata") or {}
        made_of = (meta.get("uid"), meta.get("deletionTimestamp") is not None, agent_key_of(raw.get("status")),
                   (raw.get("spec") or {}).get("displayName"))
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
        meta = raw.get("metadata") or {}
        role = (meta.get("labels") or {}).get(GITREPO_ROLE_LABEL)
        owner = next((ref for ref in meta.get("ownerReferences") or [] if ref.get("controller")), None)
        if owner is None:
            return
        if role == TENANT_ROLE:
            self.queue.add(TENANT_KEY + str(owner.get("name")))
        elif role == CLUSTER_ROLE:
            self.queue.add(f"{CLUSTER_KEY}{meta.get('namespace')}/{owner.get('name')}")

    def _clusters_in(self, namespace: str | None) -> list[str]:
        store = self._cluster_store()
        if not namespace or store is None:
            return []
        return [key for key in store.keys() if key.startswith(f"{namespace}/")]

    def _cluster_store(self):
        if self.clusters is None and "clusters" in self._manager.informers:
            self.clusters = self._manager.store("clusters")
        return self.clusters

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
        raw = or_none(lambda: self.custom.get_cluster_custom_object(GROUP, VERSION, TENANTS, name,
                                                                      _request_timeout=self.request_timeout))
        if raw is None or (raw.get("metadata") or {}).get("deletionTimestamp"):
            return  # gone or going: the garbage collector takes its HubGitRepo
        tenant, _ = tenant_of(raw)
        namespace = (raw.get("status") or {}).get("namespace")
        if tenant is None or not namespace or namespace != tenant.namespace:
            return  # invalid, or its namespace not made yet (its status changes when it is)
        uid = raw["metadata"]["uid"]
        template = tenant.spec.git_repo_template
        if template is None:
            self._remove(namespace, tenant_repo_name(name), TENANT_ROLE, uid)
            return
        self._ensure(tenant_repo(template, tenant=name, tenant_uid=uid, namespace=namespace,
                                 display_name=tenant.spec.display_name))

    def _cluster(self, namespace: str, name: str) -> None:
        store = self._cluster_store()
        raw = store.get(f"{namespace}/{name}") if store is not None else None  # the informer's copy: fed in order
        if raw is None or (raw.get("metadata") or {}).get("deletionTimestamp"):
            return
        uid = raw["metadata"]["uid"]
        tenant = self._tenant_of_namespace(namespace)
        template = tenant.spec.cluster_template.git_repo_template \
            if tenant is not None and tenant.spec.cluster_template is not None else None
        if tenant is None or template is None:
            self._remove(namespace, cluster_repo_name(name), CLUSTER_ROLE, uid)
            return
        display = (raw.get("spec") or {}).get("displayName")
        self._ensure(cluster_repo(template, tenant=tenant.metadata.name, namespace=namespace, cluster=name,
                                  cluster_uid=uid, display_name=display if isinstance(display, str) else None,
                                  agent_key=agent_key_of(raw.get("status"))))

    def _tenant_of_namespace(self, namespace: str) -> Tenant | None:
        """The valid HubTenant whose namespace (as the tenant controller made it: status.namespace) this is."""
        for name in self.tenants.in_namespace(namespace):
            raw = self.tenants.get(name)
            if raw is None or (raw.get("status") or {}).get("namespace") != namespace:
                continue
            tenant, _ = tenant_of(raw)
            if tenant is not None and tenant.namespace == namespace:
                return tenant
        return None

    # -- the pieces
    def _ensure(self, wanted: Raw) -> None:
        meta = wanted["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        have = or_none(lambda: self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, GITREPOS, name,
                                                                          _request_timeout=self.request_timeout))
        if have is None:
            try:
                self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, GITREPOS, wanted,
                                                            _request_timeout=self.request_timeout)
            except ApiException as exc:
                if exc.status != 409:
                    raise
                raise RuntimeError(f"HubGitRepo {namespace}/{name} was created meanwhile: looked at again") from None
            LOG.info("HubGitRepo %s/%s: made from the template (%s)", namespace, name, wanted["spec"]["path"])
            return
        if not _ours(have, meta["labels"][GITREPO_ROLE_LABEL], meta["ownerReferences"][0]["uid"]):
            LOG.warning("HubGitRepo %s/%s is not the template's (no %s label or another owner): left alone",
                        namespace, name, GITREPO_ROLE_LABEL)
            return
        have_meta = have["metadata"]
        labels = {**(have_meta.get("labels") or {}), **meta["labels"]}
        if have.get("spec") == wanted["spec"] and labels == (have_meta.get("labels") or {}):
            return
        body = {**have, "metadata": {**have_meta, "labels": labels}, "spec": wanted["spec"]}
        body.pop("status", None)
        self.custom.replace_namespaced_custom_object(GROUP, VERSION, namespace, GITREPOS, name, body,
                                                     _request_timeout=self.request_timeout)
        LOG.info("HubGitRepo %s/%s: updated from the template", namespace, name)

    def _remove(self, namespace: str, name: str, role: str, owner_uid: str) -> None:
        """Delete the generated HubGitRepo `name` when the template is gone: only if it is the template's."""
        have = or_none(lambda: self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, GITREPOS, name,
                                                                          _request_timeout=self.request_timeout))
        if have is None or not _ours(have, role, owner_uid) or (have.get("metadata") or {}).get("deletionTimestamp"):
            return
        or_none(lambda: self.custom.delete_namespaced_custom_object(
            GROUP, VERSION, namespace, GITREPOS, name, _request_timeout=self.request_timeout,
            body={"preconditions": {"uid": have["metadata"]["uid"]}}))
        LOG.info("HubGitRepo %s/%s: its template is gone; deleted", namespace, name)


def _ours(raw: Raw, role: str, owner_uid: str) -> bool:
    """Made by a template: the role label, and the owner's uid as its controller ownerReference."""
    meta = raw.get("metadata") or {}
    if (meta.get("labels") or {}).get(GITREPO_ROLE_LABEL) != role:
        return False
    return any(ref.get("controller") and ref.get("uid") == owner_uid for ref in meta.get("ownerReferences") or [])
