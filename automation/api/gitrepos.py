"""The Git repositories of tenants and clusters (HubGitRepo, docs/registry.md), and the key a cluster's agent pushes.

    GET /tenants/{t}/gitrepo                         the tenant's repository
    GET /tenants/{t}/clusters/{id}/gitrepo           the cluster's catalog repository
    PUT /tenants/{t}/clusters/{id}/deploy-key        {"publicKey": "ssh-ed25519 ..."}: the agent's key (as that agent)

The GETs read the HubGitRepo (`tenant-<t>`, `cluster-<id>`: stacks.gitrepos.templates) *as the caller*, so RBAC
decides who sees a repository, and answer with what its status says: URLs, the forge's host keys, the phase, the
Ready condition, and the deploy keys hubwright keeps, by name, fingerprint and write access, never more. Only a
HubGitRepo a template made for that tenant or that cluster counts (its labels, and its controller the HubTenant or
HubCluster of that name now, by uid); a tenant without one answers with its spec.gitRepoURL, used as is.

The PUT is the agent's alone: the caller must be the Cluster's agent, granted for the Cluster of that name now
(automation.api.agents.as_agent). The key is parsed (stacks.gitrepos.keys: one line, no options, a known type whose
data names that type, RSA from 3072 bits) and stored rebuilt from its parts, with its fingerprint, in HubCluster
status.agentKey by the API's own client; the service's Git repository controller makes it the catalog's read-only
deploy key. The same key again changes nothing. Issuing a new bootstrap token clears status.agentKey
(automation.api.bootstrap), so the old key leaves the repository.
"""
from __future__ import annotations

import time
from typing import Annotated, Any, Mapping

from fastapi import APIRouter, Depends, HTTPException
from fastapi.responses import JSONResponse
from kubernetes import client
from kubernetes.client.rest import ApiException

from stacks.times import rfc3339_seconds
from automation.api.agents import as_agent
from automation.api.app import LOG, Registry, caller, registry
from automation.api.kube import CONFLICT_ATTEMPTS, custom, namespace_of_tenant, own_cluster
from automation.api.models import ERRORS, AgentKeyPut, AgentKeyView, GitRepoView, controlled_by, section
from automation.api.tenants import ClusterId, TenantId
from stacks.gitrepos import keys
from stacks.gitrepos.templates import CLUSTER_ROLE, TENANT_ROLE, cluster_repo_name, tenant_repo_name
from stacks.names import (AGENT_CLUSTER_LABEL, CLUSTER, CLUSTERS, GITREPO_ROLE_LABEL, GITREPOS, GROUP, TENANT,
                          TENANT_LABEL, TENANTS, VERSION)

Caller = Annotated[client.ApiClient, Depends(caller)]
Reg = Annotated[Registry, Depends(registry)]


def _read(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    """The HubGitRepo, read as `api` (the caller: Kubernetes' 403 passes on as the one FORBIDDEN body), or None."""
    try:
        return custom(api).get_namespaced_custom_object(GROUP, VERSION, namespace, GITREPOS, name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _made_for(doc: Mapping[str, Any], role: str, tenant: str, cluster: str | None = None) -> bool:
    """Whether a template made this HubGitRepo for this tenant (and cluster): anything else of that name is not it."""
    labels = section(section(doc, "metadata"), "labels")
    if labels.get(GITREPO_ROLE_LABEL) != role or labels.get(TENANT_LABEL) != tenant:
        return False
    return cluster is None or labels.get(AGENT_CLUSTER_LABEL) == cluster


def gitrepo_view(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A HubGitRepo as the API shows it (GitRepoView): what its status says, its deploy keys without their IDs."""
    status = section(doc, "status")
    ready = next((c for c in status.get("conditions") or () if isinstance(c, Mapping) and c.get("type") == "Ready"),
                 None)
    deploy_keys = [{"name": key.get("name"), "fingerprint": key.get("fingerprint"), "write": bool(key.get("write"))}
                   for key in status.get("deployKeys") or () if isinstance(key, Mapping)]
    return GitRepoView.model_validate({
        "name": section(doc, "metadata").get("name"), "managed": True, "path": section(doc, "spec").get("path"),
        "url": status.get("url"), "sshURL": status.get("sshURL"),
        "hostKeys": [line for line in status.get("hostKeys") or () if isinstance(line, str)],
        "phase": status.get("phase"),
        "ready": None if ready is None else {"status": ready.get("status", "Unknown"), "reason": ready.get("reason"),
                                             "message": ready.get("message"),
                                             "lastTransitionTime": ready.get("lastTransitionTime")},
        "deployKeys": deploy_keys,
    }).model_dump(mode="json", by_alias=True)


def _tenant(reg: Registry, tenant: str) -> Mapping[str, Any]:
    """The HubTenant, read with the API's own client (tenant users usually cannot read it); {} when it is gone."""
    try:
        return custom(reg.own).get_cluster_custom_object(GROUP, VERSION, TENANTS, tenant)
    except ApiException as exc:
        if exc.status == 404:
            return {}
        raise


def _agent_key(reg: Registry, namespace: str, tenant: str, cluster: str, current: dict[str, Any],
               public_key: str) -> dict[str, Any]:
    """Write status.agentKey (unless it holds this key already) on the HubCluster the agent was checked against:
    the resourceVersion read is the precondition, and a HubCluster replaced meanwhile (another uid) is refused."""
    parsed = keys.parse(public_key)
    uid = current["metadata"]["uid"]
    for attempt in range(1, CONFLICT_ATTEMPTS + 1):
        held = section(section(current, "status"), "agentKey")
        if held.get("publicKey") == parsed.canonical and held.get("fingerprint") and held.get("time"):
            return dict(held)
        wanted = {"publicKey": parsed.canonical, "fingerprint": parsed.fingerprint, "time": rfc3339_seconds(time.time())}
        try:
            custom(reg.own).patch_namespaced_custom_object_status(GROUP, VERSION, namespace, CLUSTERS, cluster, {
                "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                "status": {"agentKey": wanted}})
            LOG.info("took the agent key %s of Cluster %s/%s", parsed.fingerprint, namespace, cluster)
            return wanted
        except ApiException as exc:
            if exc.status != 409 or attempt == CONFLICT_ATTEMPTS:
                raise
        current = own_cluster(reg, namespace, tenant, cluster)
        if current["metadata"]["uid"] != uid:
            raise HTTPException(409, f"HubCluster {namespace}/{cluster} was replaced meanwhile; its agent is not "
                                     "this one")
    raise HTTPException(409, f"HubCluster {namespace}/{cluster} kept changing; try again")  # pragma: no cover


router = APIRouter(tags=["gitrepos"], responses=ERRORS)


@router.get("/tenants/{tenant}/gitrepo", response_model=GitRepoView, summary="A tenant's Git repository")
def tenant_repo(tenant: TenantId, api: Caller, reg: Reg) -> JSONResponse:
    namespace = namespace_of_tenant(reg, tenant, api)
    doc = _read(api, namespace, tenant_repo_name(tenant))  # as the caller: RBAC decides first
    found = _tenant(reg, tenant)
    if doc is not None and _made_for(doc, TENANT_ROLE, tenant) \
            and controlled_by(doc, TENANT.kind, section(found, "metadata").get("uid")):
        return JSONResponse(gitrepo_view(doc))
    url = section(found, "spec").get("gitRepoURL")
    if isinstance(url, str) and url:
        return JSONResponse(GitRepoView(managed=False, url=url).model_dump(mode="json", by_alias=True))
    raise HTTPException(404, f"tenant {tenant} has no Git repository")


@router.get("/tenants/{tenant}/clusters/{cluster}/gitrepo", response_model=GitRepoView,
            summary="A cluster's catalog repository")
def cluster_repo(tenant: TenantId, cluster: ClusterId, api: Caller, reg: Reg) -> JSONResponse:
    namespace = namespace_of_tenant(reg, tenant, api)
    doc = _read(api, namespace, cluster_repo_name(cluster))  # as the caller: RBAC decides first
    if doc is not None and _made_for(doc, CLUSTER_ROLE, tenant, cluster) \
            and controlled_by(doc, CLUSTER.kind, own_cluster(reg, namespace, tenant, cluster)["metadata"]["uid"]):
        return JSONResponse(gitrepo_view(doc))
    raise HTTPException(404, f"cluster {cluster} of tenant {tenant} has no catalog repository")


@router.put("/tenants/{tenant}/clusters/{cluster}/deploy-key", response_model=AgentKeyView, summary="Give the registry the SSH public key of a cluster's agent (as that agent)")
def deploy_key(tenant: TenantId, cluster: ClusterId, body: AgentKeyPut, api: Caller, reg: Reg) -> JSONResponse:
    """The agent's key becomes its catalog repository's read-only deploy key. Only the Cluster's own agent,
    granted for the HubCluster of that name now, may call this; the same key again changes nothing."""
    namespace, current = as_agent(reg, api, tenant, cluster)
    return JSONResponse(_agent_key(reg, namespace, tenant, cluster, current, body.public_key))
