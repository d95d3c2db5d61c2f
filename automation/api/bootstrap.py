"""One-time bootstrap tokens and the install endpoint (docs/registry.md).

    POST /tenants/{t}/clusters/{id}/bootstrap-token   issue or reset: the token is returned once, stored as a hash
    GET  /install/agent.json?token=...                no bearer: the token is the credential, good once

Issuing is authorised on a virtual subresource: a SelfSubjectAccessReview made *as the caller* for `create`
on hubclusters/bootstraptoken of that Cluster. Only then does the API, with its own client, write
status.bootstrapToken {sha256, validUntil, used: false} and the label that finds the Cluster by the hash
(stacks.names.BOOTSTRAP_TOKEN_LABEL). The token itself is never stored and never logged; issuing again
replaces the hash, so the old token stops working. It also clears status.agentKey (a JSON merge patch null): the
key of the cluster's old agent leaves its catalog repository (the service's controller drops the deploy key), and
the next install's agent makes a new key pair (stacks.install: each install has its own ID).

Installing finds the Cluster by that label, compares the full SHA-256 in constant time, and refuses an
unknown, expired or used token with one and the same 401 (which one it was is not said). It marks the token
used with one JSON patch of the status subresource that first *tests* used == false and the hash: the API
server re-applies a patch on a write conflict, tests included, so of any number of concurrent requests with
one token exactly one succeeds. Then it makes the agent's hub identity (automation.adapters.kube.agent) and
answers with the manifests the cluster applies (stacks.install), as a Kubernetes List that `kubectl apply -f` takes. A shared-ingress cluster gets its node proxy's
config only when the central proxy routes its ID to it: the routes the service published in the shared-ingress
ConfigMap say so (else 409, with the reason its Stalled condition gives), so no config ever sends a cluster's
nodes to another cluster's backend. When the cluster's catalog repository (its HubGitRepo `cluster-<name>`, controlled
by this HubCluster) has an SSH URL, the answer carries it with the forge's host keys (`gitRepo`, and a ConfigMap
for the agent); each answer gives the agent a new install ID, so it makes a new key pair for the repository.

The install endpoint is rate-limited per client address (token buckets, ApiSettings.install_rate and
install_burst). The limit is per replica: with N replicas a client gets N times the rate.
"""
from __future__ import annotations

import hmac
import math
import secrets
import time
from typing import Annotated, Any, Mapping

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import JSONResponse
from kubernetes import client
from kubernetes.client.rest import ApiException
from pydantic import Field, ValidationError
import urllib3

from automation.adapters.kube.agent import AgentGone, grant_agent
from automation.adapters.kube.calls import error_text
from stacks.times import rfc3339_seconds, parse_seconds
from automation.api.app import LOG, Registry, caller, kube_unreachable, registry
from automation.api.kube import CONFLICT_ATTEMPTS, authorize, custom, namespace_of_tenant, own_cluster
from automation.api.models import ERRORS, Problem, View, controlled_by
from automation.api.ratelimit import RateLimiter, client_address
from automation.api.tenants import ClusterId, TenantId
from stacks.errors import InvalidSpec
from stacks.gitrepos.templates import cluster_repo_name
from stacks.install import catalog_repo, install_response, node_proxy_writer
from stacks.model.cluster import Cluster
from stacks.model.hub import HubConfig
from stacks.haproxy import published_routes
from stacks.names import (CLUSTER, CLUSTERS, GITREPOS, HUBCONFIGS, BOOTSTRAP_SUBRESOURCE, BOOTSTRAP_TOKEN_LABEL, GROUP, SHARED_INGRESS_CONFIGMAP,
                          VERSION)
from stacks.registry import agent_token_seconds, bootstrap_token_seconds, token_hash, token_label
from stacks.resolve import shared_ingress_inputs
from stacks.tenancy import namespace_tenant

Caller = Annotated[client.ApiClient, Depends(caller)]
Reg = Annotated[Registry, Depends(registry)]
SUBRESOURCE = BOOTSTRAP_SUBRESOURCE.split("/")[1]  # "bootstraptoken"
TOKEN_BYTES = 32  # 256 bits of randomness: secrets.token_urlsafe gives 43 characters
MAX_TOKEN = 256  # anything longer is not one of ours (and is not hashed)
INSTALL_ID_BYTES = 12  # an install's ID (the agent's catalog key pair is made per install): random, not secret
DENIED = "this bootstrap token is not valid: it is unknown, expired or used already; ask for a new one"
JSON_PATCH = "application/json-patch+json"


class IssuedToken(View):
    token: str = Field(description="the bootstrap token: shown this once, stored only as its SHA-256")
    valid_until: str = Field(description="RFC 3339: it cannot be used after this")


class GitRepoInstall(View):
    url: str | None = Field(None, description="the catalog repository's HTTPS clone URL")
    ssh_url: str = Field(alias="sshURL", description="its SSH clone URL (the agent's key may clone it)")
    host_keys: list[str] = Field(description="the forge's SSH host keys (known_hosts lines)")


class InstallView(View):
    """A Kubernetes List (`kubectl apply -f` takes it as it is); kubectl ignores the other fields."""
    api_version: str = Field("v1", alias="apiVersion")
    kind: str = Field("List", description="a List: `curl ... | kubectl apply -f -` applies its items in order")
    cluster: str
    tenant: str
    api_url: str = Field(alias="apiURL", description="where the agent pushes its facts (this API)")
    expires_at: str = Field(description="RFC 3339: when the agent's hub token expires (it renews it before)")
    private_link_endpoint: str | None = Field(
        None, description="the DNS name of the hub's interface endpoint to the cluster's API, once it has one")
    git_repo: GitRepoInstall | None = Field(
        None, description="the cluster's catalog repository, once it has an SSH URL (also in ConfigMap "
                          "hubwright-agent/hubwright-catalog)")
    items: list[dict[str, Any]] = Field(description="Kubernetes objects to apply to the cluster, in order")


def _label(own: client.CustomObjectsApi, namespace: str, cluster: str, digest: str, current: Mapping) -> None:
    """Label the Cluster with the hash's prefix, but only while status holds this hash: of two concurrent
    resets, the label always ends up matching the one whose hash the status kept (the other gets 409)."""
    for _ in range(CONFLICT_ATTEMPTS):
        held = ((current.get("status") or {}).get("bootstrapToken") or {}).get("sha256")
        if held != digest:
            raise HTTPException(409, f"the bootstrap token of HubCluster {namespace}/{cluster} was reset again "
                                     "meanwhile; that newer token is the valid one (ask again for another)")
        try:
            own.patch_namespaced_custom_object(GROUP, VERSION, namespace, CLUSTERS, cluster, {"metadata": {
                "labels": {BOOTSTRAP_TOKEN_LABEL: token_label(digest)},
                "resourceVersion": current["metadata"]["resourceVersion"]}})
            return
        except ApiException as exc:
            if exc.status != 409:
                raise
        current = own.get_namespaced_custom_object(GROUP, VERSION, namespace, CLUSTERS, cluster)
    raise HTTPException(409, f"HubCluster {namespace}/{cluster} kept changing; try again")


def _find(own: client.CustomObjectsApi, digest: str) -> dict[str, Any] | None:
    """The Cluster whose status holds this hash, found by label and then compared in full, in constant time."""
    found = own.list_custom_object_for_all_namespaces(
        GROUP, VERSION, CLUSTERS, label_selector=f"{BOOTSTRAP_TOKEN_LABEL}={token_label(digest)}")
    for item in found.get("items") or []:
        held = ((item.get("status") or {}).get("bootstrapToken") or {}).get("sha256")
        if isinstance(held, str) and hmac.compare_digest(held.encode(), digest.encode()):
            return item
    return None


def _redeemable(doc: Mapping[str, Any]) -> bool:
    held = (doc.get("status") or {}).get("bootstrapToken") or {}
    until = parse_seconds(held.get("validUntil"))
    return held.get("used") is False and until is not None and time.time() < until


def _mark_used(own: client.CustomObjectsApi, namespace: str, name: str, digest: str) -> bool:
    """Atomically: used false -> true for this hash. False when another request (or a reset) got there first."""
    patch = [{"op": "test", "path": "/status/bootstrapToken/sha256", "value": digest},
             {"op": "test", "path": "/status/bootstrapToken/used", "value": False},
             {"op": "replace", "path": "/status/bootstrapToken/used", "value": True}]
    try:
        own.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, CLUSTERS, name, patch,
                                                  _content_type=JSON_PATCH)
    except ApiException as exc:
        if exc.status in (404, 409, 422):  # gone, or a test failed: not ours to redeem
            return False
        raise
    return True


def hub_config(reg: Registry) -> HubConfig | None:
    """The HubConfig the API reads (--hub-name), None when there is none; 409 when it does not validate."""
    name = reg.settings.hub_name
    try:
        return HubConfig.model_validate(custom(reg.own).get_cluster_custom_object(GROUP, VERSION, HUBCONFIGS, name))
    except ApiException as exc:
        if exc.status != 404:
            raise
        return None
    except ValidationError:
        raise HTTPException(409, f"HubConfig {name} is not valid; its administrator must fix it") from None


def _lifetime(reg: Registry, namespace: str, cluster: str, doc: Mapping[str, Any]) -> int:
    """Seconds the bootstrap token of this Cluster lives: 409 naming both when its spec.tokenLifetime is longer
    than the hub's maxTokenLifetime (stacks.registry.bootstrap_token_seconds)."""
    try:
        return bootstrap_token_seconds(f"HubCluster {namespace}/{cluster}", (doc.get("spec") or {}).get("tokenLifetime"),
                                       hub_config(reg))
    except InvalidSpec as exc:
        raise HTTPException(409, "; ".join(str(err) for err in exc.errors)) from None


def _node_proxy(reg: Registry, cluster: Cluster, doc: Mapping[str, Any], annotations: Mapping[str, str],
                hub: HubConfig | None) -> Any:
    """The shared-ingress node proxy's inputs when the cluster uses the shared ingress (409 when it cannot); None
    when another writes its guests' proxy (a HostedCluster's: HyperShift)."""
    if not cluster.spec.shared_ingress.enabled or cluster.spec.shared_ingress.node_proxy == "External":
        return None
    if hub is None:
        raise HTTPException(409, f"{cluster.ref} uses the shared ingress, but HubConfig {reg.settings.hub_name} "
                                 "does not exist")
    try:
        guest = shared_ingress_inputs(cluster, hub, annotations)
    except InvalidSpec as exc:
        raise HTTPException(409, f"{cluster.ref} cannot use the shared ingress: "
                                 f"{'; '.join(str(err) for err in exc.errors)}") from None
    if guest is None:  # not opted in: checked above
        return None
    routed = _published(reg, hub).get(cluster.key)
    if routed != guest.cluster_id:  # the central proxy would send its ID elsewhere, or nowhere
        raise HTTPException(409, f"{cluster.ref} is not routed by the shared ingress (yet): {_why_not(cluster)}")
    return guest


def _published(reg: Registry, hub: HubConfig) -> Mapping[str, str]:
    """Cluster -> the ID the central proxy routes to it: the routes the service publishes in the shared-ingress
    ConfigMap (automation.adapters.kube.ingress_sync), read as the proxy reads them. The fleet is never re-resolved
    here: what the service routes is the only answer."""
    central = hub.spec.shared_ingress
    assert central is not None  # shared_ingress_inputs refused a hub without one
    try:
        found = client.CoreV1Api(reg.own).read_namespaced_config_map(SHARED_INGRESS_CONFIGMAP, central.namespace)
    except ApiException as exc:
        if exc.status != 404:
            raise
        return {}
    return published_routes(found.data or {})


def _why_not(cluster: Cluster) -> str:
    """The reason the service gave on the cluster's own Stalled condition, else that it has not routed it yet."""
    for condition in (cluster.status or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == "Stalled" and condition.get("status") == "True":
            return f"{condition.get('reason')}: {condition.get('message')}"
    return "the service has not published a route for it; ask for a new bootstrap token once it has (see its status)"


def _catalog(reg: Registry, doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """The cluster's catalog repository for its install answer (stacks.install.catalog_repo), from the HubGitRepo
    the cluster's template made, only when this HubCluster (by uid) is its controller."""
    namespace, name, uid = doc["metadata"]["namespace"], doc["metadata"]["name"], doc["metadata"]["uid"]
    try:
        repo = custom(reg.own).get_namespaced_custom_object(GROUP, VERSION, namespace, GITREPOS, cluster_repo_name(name))
    except ApiException as exc:
        if exc.status != 404:
            raise
        return None
    return catalog_repo(repo.get("status")) if controlled_by(repo, CLUSTER.kind, uid) else None


def _limiter(reg: Registry) -> RateLimiter:
    key = f"{__name__}.limiter"
    found = reg.extra.get(key)
    if found is None:
        found = reg.extra.setdefault(key, RateLimiter(reg.settings.install_rate, reg.settings.install_burst))
    return found


router = APIRouter(tags=["bootstrap"])


@router.post("/tenants/{tenant}/clusters/{cluster}/bootstrap-token", response_model=IssuedToken, status_code=201,
             responses=ERRORS, summary="Issue or reset a cluster's one-time bootstrap token")
def issue(tenant: TenantId, cluster: ClusterId, api: Caller, reg: Reg) -> JSONResponse:
    """A new token replaces the last one, and clears the key of the cluster's agent (status.agentKey): it leaves
    the catalog repository's deploy keys, and the agent of the next install makes and pushes a new one."""
    namespace = namespace_of_tenant(reg, tenant, api)
    authorize(api, SUBRESOURCE, namespace, cluster, "issue a bootstrap token for")
    own = custom(reg.own)
    doc = own_cluster(reg, namespace, tenant, cluster)
    valid_until = rfc3339_seconds(time.time() + _lifetime(reg, namespace, cluster, doc))
    token = secrets.token_urlsafe(TOKEN_BYTES)
    digest = token_hash(token)
    written = own.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, CLUSTERS, cluster, {
        "status": {"bootstrapToken": {"sha256": digest, "validUntil": valid_until, "used": False},
                   "agentKey": None}})  # the old agent's key leaves the catalog repository
    _label(own, namespace, cluster, digest, written)
    LOG.info("bootstrap token issued for Cluster %s/%s, valid until %s", namespace, cluster, valid_until)
    return JSONResponse({"token": token, "validUntil": valid_until}, status_code=201,
                        headers={"Cache-Control": "no-store"})


@router.get("/install/agent.json", response_model=InstallView, summary="Redeem a bootstrap token: the manifests",
            responses={401: {"model": Problem, "description": "the token is unknown, expired or used already"},
                       409: {"model": Problem, "description": "the cluster's spec cannot be installed as it is"},
                       429: {"model": Problem, "description": "too many requests from this address (Retry-After)"}})
def install(request: Request, reg: Reg,
            token: Annotated[str | None, Query(description="the one-time bootstrap token")] = None,
            ) -> JSONResponse:
    wait = _limiter(reg).take(client_address(request, reg.settings.trust_forwarded_for))
    if wait > 0:
        retry = str(max(1, math.ceil(wait))) if math.isfinite(wait) else "3600"
        raise HTTPException(429, "too many install requests from your address; retry later",
                            headers={"Retry-After": retry})
    if not token or len(token) > MAX_TOKEN:
        raise HTTPException(401, DENIED)
    digest = token_hash(token)
    own = custom(reg.own)
    doc = _find(own, digest)
    if doc is None or not _redeemable(doc):
        raise HTTPException(401, DENIED)
    namespace, name = doc["metadata"]["namespace"], doc["metadata"]["name"]
    try:
        cluster = Cluster.model_validate(doc)
    except ValidationError:
        raise HTTPException(409, f"HubCluster {namespace}/{name} does not validate; fix its spec, then ask for a "
                                 "new bootstrap token") from None
    meta = client.CoreV1Api(reg.own).read_namespace(namespace).metadata
    annotations = meta.annotations or {}
    try:  # the one rule the stack's tags follow too: the agent pushes as the tenant the cloud is tagged with
        tenant = namespace_tenant(namespace, annotations)
    except InvalidSpec as exc:  # refused before the token is used up, as the service refuses the namespace
        raise HTTPException(409, "; ".join(str(err) for err in exc.errors)) from None
    hub = hub_config(reg)
    node_proxy = _node_proxy(reg, cluster, doc, annotations, hub)  # refused before the token is used up
    git_repo = _catalog(reg, doc)
    if not _mark_used(own, namespace, name, digest):
        raise HTTPException(401, DENIED)
    try:
        agent_token, expires_at = grant_agent(reg.own, namespace, name, doc["metadata"]["uid"],
                                              agent_token_seconds(reg.settings.agent_token_seconds, hub))
    except AgentGone:
        raise HTTPException(409, f"HubCluster {namespace}/{name} was deleted during the install; its agent was "
                                 "revoked") from None
    except ApiException as exc:
        LOG.error("Cluster %s/%s redeemed its bootstrap token, but making its agent failed: %s",
                  namespace, name, error_text(exc))
        raise HTTPException(502, f"the token was accepted, but creating the agent's credentials failed "
                                 f"({exc.status} {exc.reason}); ask for a new bootstrap token") from None
    except urllib3.exceptions.HTTPError as exc:  # no answer in time: the token is spent all the same
        err = kube_unreachable(exc)
        LOG.error("Cluster %s/%s redeemed its bootstrap token, but making its agent got no answer: %s",
                  namespace, name, type(exc).__name__)
        raise HTTPException(err.status_code, f"the token was accepted, but creating the agent's credentials "
                                             f"got no answer ({err.detail}); ask for a new bootstrap token") \
            from None
    LOG.info("Cluster %s/%s installed: agent token valid until %s", namespace, name, expires_at)
    body = install_response(cluster, tenant=tenant, api_url=reg.settings.public_url,
                            agent_image=reg.settings.agent_image, agent_token=agent_token,
                            expires_at=expires_at, node_proxy=node_proxy,
                            install_id=secrets.token_hex(INSTALL_ID_BYTES), git_repo=git_repo,
                            node_proxy_writer=node_proxy_writer(cluster, doc))
    return JSONResponse(body, headers={"Cache-Control": "no-store"})
