"""Tenants and their clusters over REST: /tenants, /tenants/{t}/clusters and the fleet-wide /clusters.

Every call to Kubernetes is made as the caller (`caller`: their bearer token), so RBAC alone decides who sees
and changes what, and Kubernetes' 401/403/404/409/422 come back as they are. The one exception is finding a
tenant's namespace, read from its Tenant with the API's own client (automation.api.kube.namespace_of_tenant).

    POST   /tenants                         create (id generated when left out: t-adjective-noun-digits)
    PATCH  /tenants/{t}                     JSON merge patch of spec and labels, validated as a whole
    PUT    /tenants/{t}                     replace the spec (resourceVersion: optimistic concurrency)
    ...    /tenants/{t}/clusters[/{id}]     the same for the Clusters in the tenant's namespace (c-...)
    GET    /clusters                        every cluster the caller may list across namespaces, filtered by
                                            tenant, labelSelector and fact=key=value, page by page
"""
from __future__ import annotations

from typing import Annotated, Any, Callable, Mapping

from fastapi import APIRouter, Depends, Path, Query
from fastapi.responses import JSONResponse
from kubernetes import client
from kubernetes.client.rest import ApiException

from automation.api.app import Registry, caller, registry
from automation.api.kube import (CONFLICT_ATTEMPTS, check_labels, conflict, create_named, custom,
                                 merge_patch, namespace_of_tenant, relabel, tenant_index, validated, wire)
from automation.api.listing import fingerprint, has_facts, page, parse_facts
from automation.api.models import (CONFLICT, ERRORS, ClusterCreate, ClusterList, ClusterReplace, ClusterView,
                                   Deleted, Patch, TenantCreate, TenantList, TenantReplace, TenantView, cluster_view,
                                   tenant_view)
from stacks.conditions import changes_patch
from stacks.model.cluster import ClusterSpec
from stacks.names import CLUSTERS, TENANTS, API_VERSION, GROUP, VERSION
from stacks.registry import TenantSpec

NAME = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
TenantId = Annotated[str, Path(description="the Tenant's name", pattern=NAME, max_length=253)]
ClusterId = Annotated[str, Path(description="the Cluster's name in its tenant's namespace", pattern=NAME,
                                max_length=253)]
Caller = Annotated[client.ApiClient, Depends(caller)]
Reg = Annotated[Registry, Depends(registry)]
LabelSelector = Annotated[str | None, Query(alias="labelSelector", description="a Kubernetes label selector")]
Limit = Annotated[int | None, Query(ge=1, le=10_000, description="at most this many items (default: all)")]
Continue = Annotated[str | None, Query(alias="continue", description="the previous page's `continue`")]
FactFilter = Annotated[list[str], Query(description="key=value: a static (spec.facts) or latest dynamic "
                                                    "(status.facts) fact; repeat to require several")]


def _created(view: dict[str, Any]) -> JSONResponse:
    return JSONResponse(view, status_code=201)


def _deleted(name: str, result: Mapping[str, Any]) -> JSONResponse:
    """Kubernetes answers a delete with the object while finalizers hold it, else with the object or a Status."""
    pending = bool((result.get("metadata") or {}).get("finalizers")) and result.get("kind") != "Status"
    return JSONResponse({"id": name, "finished": not pending})


def _update(read: Callable[[], dict[str, Any]], write: Callable[[dict[str, Any]], dict[str, Any]],
            change: Callable[[dict[str, Any]], dict[str, Any]], given_version: str | None,
            kind: str, name: str) -> dict[str, Any]:
    """Read, change, write with the resourceVersion read: on 409 read again and retry, unless the client gave
    its own resourceVersion (then the 409 is its answer)."""
    for attempt in range(1, CONFLICT_ATTEMPTS + 1):
        current = read()
        version = current["metadata"].get("resourceVersion")
        if given_version is not None and given_version != version:
            raise conflict(kind, name, given_version, version)
        try:
            return write(change(current))
        except ApiException as exc:
            if exc.status != 409 or given_version is not None or attempt == CONFLICT_ATTEMPTS:
                raise
    raise AssertionError("unreachable")


def _patch_body(current: Mapping[str, Any], body: Patch, model: type) -> dict[str, Any]:
    """The merge patch Kubernetes gets: the spec patch applied and validated here (422 naming the field), sent
    as the difference to the stored spec in camelCase, with the resourceVersion it was computed from."""
    check_labels(body.labels)
    stored = current.get("spec") or {}
    spec = validated(model, merge_patch(stored, body.spec or {}), "body", "spec")
    patch: dict[str, Any] = {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]}}
    if body.labels:
        patch["metadata"]["labels"] = body.labels
    diff = changes_patch(stored, wire(spec))
    if diff:
        patch["spec"] = diff
    return patch


def _replacement(current: Mapping[str, Any], labels: Mapping[str, str] | None, spec: Any) -> dict[str, Any]:
    """The object with a new spec (and labels, when given), at the resourceVersion read."""
    check_labels(labels)
    meta = {key: value for key, value in current["metadata"].items() if key != "managedFields"}
    meta["labels"] = relabel(meta.get("labels"), labels)
    return {"apiVersion": current.get("apiVersion", API_VERSION), "kind": current.get("kind"), "metadata": meta,
            "spec": wire(spec)}


# --------------------------------------------------------------------------- cluster lists

def cluster_page(api: client.ApiClient, namespace: str | None, *, label_selector: str | None, facts: list[str],
                 limit: int | None, token: str | None) -> tuple[list[dict[str, Any]], str | None]:
    """A page of Clusters of one namespace (or all, as the caller may) that have every wanted fact."""
    wanted = parse_facts(facts)
    objects = custom(api)

    def fetch(count: int, token_: str | None) -> Mapping[str, Any]:
        options = {"label_selector": label_selector, "limit": count or None, "_continue": token_}
        if namespace is None:
            return objects.list_cluster_custom_object(GROUP, VERSION, CLUSTERS, **options)
        return objects.list_namespaced_custom_object(GROUP, VERSION, namespace, CLUSTERS, **options)

    keep = (lambda doc: has_facts(doc, wanted)) if wanted else None
    found = page(fetch, limit=limit, token=token, keep=keep,
                 filters=fingerprint(namespace, label_selector, sorted(wanted)))
    return found.items, found.continue_


router = APIRouter(responses=ERRORS)


# --------------------------------------------------------------------------- tenants
@router.get("/tenants", response_model=TenantList, tags=["tenants"], summary="List tenants")
def list_tenants(api: Caller, label_selector: LabelSelector = None, limit: Limit = None,
                 continue_: Continue = None) -> JSONResponse:
    found = custom(api).list_cluster_custom_object(GROUP, VERSION, TENANTS, label_selector=label_selector,
                                                    limit=limit, _continue=continue_)
    return JSONResponse({"items": [tenant_view(doc) for doc in found.get("items") or []],
                         "continue": (found.get("metadata") or {}).get("continue") or None})


@router.post("/tenants", responses=CONFLICT, response_model=TenantView, status_code=201, tags=["tenants"],
             summary="Create a tenant")
def create_tenant(body: TenantCreate, api: Caller) -> JSONResponse:
    check_labels(body.labels)

    def create(name: str) -> dict[str, Any]:
        return custom(api).create_cluster_custom_object(GROUP, VERSION, TENANTS, {
            "apiVersion": API_VERSION, "kind": "HubTenant",
            "metadata": {"name": name, "labels": body.labels}, "spec": wire(body.spec)})
    return _created(tenant_view(create_named(create, body.id, "Tenant")))


@router.get("/tenants/{tenant}", response_model=TenantView, tags=["tenants"], summary="Read a tenant")
def read_tenant(tenant: TenantId, api: Caller) -> JSONResponse:
    return JSONResponse(tenant_view(custom(api).get_cluster_custom_object(GROUP, VERSION, TENANTS, tenant)))


def _tenant_rw(api: client.ApiClient, tenant: str):
    objects = custom(api)
    return (lambda: objects.get_cluster_custom_object(GROUP, VERSION, TENANTS, tenant),
            lambda body: objects.patch_cluster_custom_object(GROUP, VERSION, TENANTS, tenant, body),
            lambda body: objects.replace_cluster_custom_object(GROUP, VERSION, TENANTS, tenant, body))


@router.patch("/tenants/{tenant}", responses=CONFLICT, response_model=TenantView, tags=["tenants"],
              summary="Change a tenant (JSON merge patch of spec and labels)")
def patch_tenant(tenant: TenantId, body: Patch, api: Caller) -> JSONResponse:
    read, patch, _ = _tenant_rw(api, tenant)
    return JSONResponse(tenant_view(_update(read, patch, lambda doc: _patch_body(doc, body, TenantSpec),
                                            body.resource_version, "Tenant", tenant)))


@router.put("/tenants/{tenant}", responses=CONFLICT, response_model=TenantView, tags=["tenants"],
            summary="Replace a tenant's spec")
def replace_tenant(tenant: TenantId, body: TenantReplace, api: Caller) -> JSONResponse:
    read, _, replace = _tenant_rw(api, tenant)
    return JSONResponse(tenant_view(_update(
        read, replace, lambda doc: _replacement(doc, body.labels, body.spec),
        body.resource_version, "Tenant", tenant)))


@router.delete("/tenants/{tenant}", response_model=Deleted, tags=["tenants"],
               summary="Delete a tenant (refused while it has clusters)")
def delete_tenant(tenant: TenantId, api: Caller) -> JSONResponse:
    return _deleted(tenant, custom(api).delete_cluster_custom_object(GROUP, VERSION, TENANTS, tenant))


# --------------------------------------------------------------------------- clusters
@router.get("/clusters", response_model=ClusterList, tags=["clusters"],
            summary="List the fleet's clusters (needs the right to list clusters in every namespace, or tenant=)")
def fleet(api: Caller, reg: Reg, tenant: Annotated[str | None, Query(description="only this tenant's", pattern=NAME)] = None,
          label_selector: LabelSelector = None, fact: FactFilter = [], limit: Limit = None,  # noqa: B006
          continue_: Continue = None) -> JSONResponse:
    namespace = namespace_of_tenant(reg, tenant, api) if tenant else None
    items, token = cluster_page(api, namespace, label_selector=label_selector, facts=fact, limit=limit,
                                token=continue_)
    owners = {namespace: tenant} if tenant else (tenant_index(reg) if items else {})
    return JSONResponse({"items": [cluster_view(doc, owners.get(doc["metadata"].get("namespace")))
                                   for doc in items], "continue": token})


@router.get("/tenants/{tenant}/clusters", response_model=ClusterList, tags=["clusters"],
            summary="List a tenant's clusters")
def list_clusters(tenant: TenantId, api: Caller, reg: Reg, label_selector: LabelSelector = None,
                  fact: FactFilter = [], limit: Limit = None,  # noqa: B006
                  continue_: Continue = None) -> JSONResponse:
    namespace = namespace_of_tenant(reg, tenant, api)
    items, token = cluster_page(api, namespace, label_selector=label_selector, facts=fact, limit=limit,
                                token=continue_)
    return JSONResponse({"items": [cluster_view(doc, tenant) for doc in items], "continue": token})


@router.post("/tenants/{tenant}/clusters", responses=CONFLICT, response_model=ClusterView, status_code=201,
             tags=["clusters"], summary="Register a cluster")
def create_cluster(tenant: TenantId, body: ClusterCreate, api: Caller, reg: Reg) -> JSONResponse:
    check_labels(body.labels)
    namespace = namespace_of_tenant(reg, tenant, api)

    def create(name: str) -> dict[str, Any]:
        return custom(api).create_namespaced_custom_object(GROUP, VERSION, namespace, CLUSTERS, {
            "apiVersion": API_VERSION, "kind": "HubCluster",
            "metadata": {"name": name, "namespace": namespace, "labels": body.labels},
            "spec": wire(body.spec)})
    made = create_named(create, body.id, "Cluster")
    if reg.facts is not None:  # a new cluster starts a new history, whatever an old one of its name left
        reg.facts.forget(namespace, made["metadata"]["name"])
    return _created(cluster_view(made, tenant))


def _cluster_rw(api: client.ApiClient, namespace: str, name: str):
    objects = custom(api)
    return (lambda: objects.get_namespaced_custom_object(GROUP, VERSION, namespace, CLUSTERS, name),
            lambda body: objects.patch_namespaced_custom_object(GROUP, VERSION, namespace, CLUSTERS, name,
                                                                body),
            lambda body: objects.replace_namespaced_custom_object(GROUP, VERSION, namespace, CLUSTERS, name,
                                                                  body))


@router.get("/tenants/{tenant}/clusters/{cluster}", response_model=ClusterView, tags=["clusters"],
            summary="Read a cluster")
def read_cluster(tenant: TenantId, cluster: ClusterId, api: Caller, reg: Reg) -> JSONResponse:
    read, _, _ = _cluster_rw(api, namespace_of_tenant(reg, tenant, api), cluster)
    return JSONResponse(cluster_view(read(), tenant))


@router.patch("/tenants/{tenant}/clusters/{cluster}", responses=CONFLICT, response_model=ClusterView,
              tags=["clusters"], summary="Change a cluster (JSON merge patch of spec and labels)")
def patch_cluster(tenant: TenantId, cluster: ClusterId, body: Patch, api: Caller, reg: Reg) -> JSONResponse:
    read, patch, _ = _cluster_rw(api, namespace_of_tenant(reg, tenant, api), cluster)
    return JSONResponse(cluster_view(_update(read, patch, lambda doc: _patch_body(doc, body, ClusterSpec),
                                             body.resource_version, "Cluster", cluster), tenant))


@router.put("/tenants/{tenant}/clusters/{cluster}", responses=CONFLICT, response_model=ClusterView,
            tags=["clusters"], summary="Replace a cluster's spec")
def replace_cluster(tenant: TenantId, cluster: ClusterId, body: ClusterReplace, api: Caller,
                    reg: Reg) -> JSONResponse:
    read, _, replace = _cluster_rw(api, namespace_of_tenant(reg, tenant, api), cluster)
    return JSONResponse(cluster_view(_update(
        read, replace, lambda doc: _replacement(doc, body.labels, body.spec),
        body.resource_version, "Cluster", cluster), tenant))


@router.delete("/tenants/{tenant}/clusters/{cluster}", response_model=Deleted, tags=["clusters"],
               summary="Delete a cluster (its stack is destroyed first; its facts history goes)")
def delete_cluster(tenant: TenantId, cluster: ClusterId, api: Caller, reg: Reg) -> JSONResponse:
    namespace = namespace_of_tenant(reg, tenant, api)
    result = custom(api).delete_namespaced_custom_object(GROUP, VERSION, namespace, CLUSTERS, cluster)
    if reg.facts is not None:
        reg.facts.forget(namespace, cluster)
    return _deleted(cluster, result)
