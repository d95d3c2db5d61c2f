"""A facts agent's hub identity at the registry API: who the caller is, and its token's rotation (docs/registry.md).

    POST /tenants/{t}/clusters/{id}/agent-token   the agent's current token -> a fresh one (201)

An agent holds exactly one right on the hub: `create hubclusters/facts` on its own Cluster. It cannot ask the API
server for tokens: the registry rotates them. A caller is the agent of a Cluster when a SelfSubjectReview made
as the caller names the ServiceAccount `hubwright-agent-<cluster>` of the Cluster's namespace, *and* that
ServiceAccount records the uid of the Cluster of that name now (automation.adapters.kube.agent). A
SubjectAccessReview checks names, not uids: without the second check an agent left over from a deleted Cluster
would push facts to a later Cluster of the same name. The fresh token comes from the API's own client, with a
lifetime the API chooses (--agent-token-seconds, capped by HubConfig spec.registry.maxTokenLifetime) and the
API server's own audience; nothing the caller sends chooses either.
"""
from __future__ import annotations

from typing import Annotated, Any, Mapping

from fastapi import APIRouter, Depends, HTTPException
from fastapi.responses import JSONResponse
from kubernetes import client
from pydantic import Field

from automation.adapters.kube.agent import TIMEOUT, recorded_uid, request_token
from automation.api.app import FORBIDDEN, LOG, Registry, caller, registry
from automation.api.bootstrap import hub_config
from automation.api.kube import namespace_of_tenant, own_cluster
from automation.api.models import ERRORS, View
from automation.api.tenants import ClusterId, TenantId
from stacks.names import agent_name
from stacks.registry import agent_standing, agent_token_seconds

Caller = Annotated[client.ApiClient, Depends(caller)]
Reg = Annotated[Registry, Depends(registry)]
SERVICE_ACCOUNT = "system:serviceaccount:"


class AgentToken(View):
    token: str = Field(description="the agent's new hub token: shown this once")
    expires_at: str = Field(description="RFC 3339: when it expires (the agent rotates it before)")


def caller_name(api: client.ApiClient) -> str:
    """The caller's user name as the API server authenticates its token (a SelfSubjectReview, which every
    authenticated user may make; 401 for a token it refuses)."""
    review = client.AuthenticationV1Api(api).create_self_subject_review(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}, _request_timeout=TIMEOUT)
    return review.status.user_info.username or ""


def is_agent(username: str, namespace: str, cluster: str) -> bool:
    return username == f"{SERVICE_ACCOUNT}{namespace}:{agent_name(cluster)}"


def refuse_stale_agent(reg: Registry, api: client.ApiClient, current: Mapping[str, Any]) -> None:
    """403 when the caller is the agent of this Cluster's name but was granted for another Cluster of that name
    (its ServiceAccount records another uid, or none). Any other caller: RBAC has decided already."""
    namespace, cluster = current["metadata"]["namespace"], current["metadata"]["name"]
    if is_agent(caller_name(api), namespace, cluster):
        _same_cluster(reg, namespace, cluster, current)


def _same_cluster(reg: Registry, namespace: str, cluster: str, current: Mapping[str, Any]) -> None:
    recorded = recorded_uid(reg.own, namespace, cluster)
    if recorded is None or agent_standing(recorded, None, current["metadata"]["uid"], None) != "current":
        LOG.warning("refused the agent of Cluster %s/%s: it was granted for another Cluster of that name",
                    namespace, cluster)
        raise HTTPException(403, f"this agent was granted for an earlier HubCluster {namespace}/{cluster}, not the one "
                                 "of that name now; install the cluster again with a new bootstrap token")


def as_agent(reg: Registry, api: client.ApiClient, tenant: str, cluster: str) -> tuple[str, dict[str, Any]]:
    """The Cluster's namespace and the Cluster itself (read with the API's own client), when the caller is that
    Cluster's agent, granted for the Cluster of that name now; else 403 (the one FORBIDDEN body for anyone else)."""
    namespace = namespace_of_tenant(reg, tenant, api)
    if not is_agent(caller_name(api), namespace, cluster):
        raise HTTPException(403, FORBIDDEN)  # the one 403 body: names no namespace, tells no tenant exists
    current = own_cluster(reg, namespace, tenant, cluster)
    _same_cluster(reg, namespace, cluster, current)
    return namespace, current


router = APIRouter(tags=["bootstrap"], responses=ERRORS)


@router.post("/tenants/{tenant}/clusters/{cluster}/agent-token", response_model=AgentToken, status_code=201,
             summary="Rotate a facts agent's hub token (as that agent)")
def rotate(tenant: TenantId, cluster: ClusterId, api: Caller, reg: Reg) -> JSONResponse:
    namespace, _ = as_agent(reg, api, tenant, cluster)
    lifetime = agent_token_seconds(reg.settings.agent_token_seconds, hub_config(reg))
    token, expires_at = request_token(client.CoreV1Api(reg.own), namespace, agent_name(cluster), lifetime)
    LOG.info("rotated the agent token of Cluster %s/%s: valid until %s", namespace, cluster, expires_at)
    return JSONResponse({"token": token, "expiresAt": expires_at}, status_code=201,
                        headers={"Cache-Control": "no-store"})
