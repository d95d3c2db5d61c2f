"""A cluster's dynamic facts: pushed by its agent, versioned in the FactsStore, the latest mirrored to status.

    POST /tenants/{t}/clusters/{id}/facts            {"facts": {...}} -> a new version (201)
    GET  /tenants/{t}/clusters/{id}/facts            the latest version
    GET  /tenants/{t}/clusters/{id}/facts/history    what changed and when (?since=RFC 3339&limit=)

Writing status.facts needs `hubclusters/status`, which feeds resolution and belongs to the service; nobody else
gets it. So a push is authorised on a virtual subresource instead: a SelfSubjectAccessReview, made as the
caller, for `create` on `hubclusters/facts` of that one Cluster (an agent's Role names its cluster in
resourceNames); an agent must also be the one granted for the Cluster of that name now, by uid
(automation.api.agents). Only then does the API write, with its own client: the history, and the latest facts into
status.facts for kubectl users. Reading facts needs the right to read the Cluster (checked by reading it as the
caller).
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Any, Mapping

from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from kubernetes import client
from kubernetes.client.rest import ApiException

from automation.adapters.kube.calls import error_text
from automation.api.agents import refuse_stale_agent
from automation.api.app import LOG, Registry, caller, registry
from automation.api.kube import CONFLICT_ATTEMPTS, authorize, custom, namespace_of_tenant, own_cluster
from automation.api.models import ERRORS, FactsHistory, FactsPush, FactsView
from automation.api.tenants import ClusterId, TenantId
from stacks.names import CLUSTERS, FACTS_SUBRESOURCE, GROUP, VERSION

Caller = Annotated[client.ApiClient, Depends(caller)]
Reg = Annotated[Registry, Depends(registry)]
SUBRESOURCE = FACTS_SUBRESOURCE.split("/")[1]  # "facts"


def _moment(text: Any) -> datetime | None:
    """An RFC 3339 time (one without an offset is taken as UTC), or None."""
    try:
        moment = datetime.fromisoformat(str(text))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def _newer(version: Any, stored: Mapping[str, Any]) -> bool:
    """Is this pushed version newer than what status.facts holds? By time first: a history database started
    afresh counts versions from 1 again, but its times are still later."""
    mine, theirs = _moment(version.time), _moment(stored.get("time"))
    if theirs is None or mine is None:
        return True
    return (mine, version.version) > (theirs, int(stored.get("version") or 0))


def mirror(own: client.CustomObjectsApi, current: dict[str, Any], version: Any) -> None:
    """Write `version` into status.facts (a status merge patch, removed keys set to null), unless a newer push
    got there first; the resourceVersion precondition makes "read, compare, write" safe between replicas."""
    namespace, name = current["metadata"]["namespace"], current["metadata"]["name"]
    for attempt in range(1, CONFLICT_ATTEMPTS + 1):
        stored = (current.get("status") or {}).get("facts") or {}
        if not _newer(version, stored):
            return
        facts: dict[str, Any] = {key: None for key in stored.get("facts") or {} if key not in version.facts}
        facts.update(version.facts)
        body = {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                "status": {"facts": {"version": version.version, "time": version.time, "facts": facts}}}
        try:
            own.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, CLUSTERS, name, body)
            return
        except ApiException as exc:
            if exc.status != 409 or attempt == CONFLICT_ATTEMPTS:
                raise
        current = own.get_namespaced_custom_object(GROUP, VERSION, namespace, CLUSTERS, name)


def _store(reg: Registry) -> Any:
    if reg.facts is None:
        raise HTTPException(503, "this API runs without a facts store")
    return reg.facts


def _view(version: Any) -> dict[str, Any]:
    return {"version": version.version, "time": version.time, "facts": dict(version.facts)}


FACTS_PATH = "/tenants/{tenant}/clusters/{cluster}/facts"
router = APIRouter(tags=["facts"], responses=ERRORS)


@router.post(FACTS_PATH, response_model=FactsView, status_code=201, summary="Push a cluster's dynamic facts")
def push(tenant: TenantId, cluster: ClusterId, body: FactsPush, api: Caller, reg: Reg) -> JSONResponse:
    store = _store(reg)
    namespace = namespace_of_tenant(reg, tenant, api)
    authorize(api, SUBRESOURCE, namespace, cluster, "push facts to")
    own = custom(reg.own)
    current = own_cluster(reg, namespace, tenant, cluster)
    refuse_stale_agent(reg, api, current)  # the names match; is it this Cluster's agent, by uid?
    version = store.push(namespace, cluster, dict(body.facts))
    try:
        mirror(own, current, version)
    except ApiException as exc:
        LOG.error("facts of %s/%s stored as version %d but not mirrored to status.facts: %s",
                  namespace, cluster, version.version, error_text(exc))
        raise HTTPException(502, f"facts stored as version {version.version}, but writing status.facts "
                                 f"failed ({exc.status} {exc.reason})") from None
    return JSONResponse(_view(version), status_code=201)


@router.get(FACTS_PATH, response_model=FactsView, summary="Read a cluster's latest dynamic facts")
def latest(tenant: TenantId, cluster: ClusterId, api: Caller, reg: Reg) -> JSONResponse:
    store = _store(reg)
    namespace = namespace_of_tenant(reg, tenant, api)
    custom(api).get_namespaced_custom_object(GROUP, VERSION, namespace, CLUSTERS, cluster)  # may they read it?
    found = store.latest(namespace, cluster)
    if found is None:
        raise HTTPException(404, f"cluster {cluster} of tenant {tenant} has no facts pushed yet")
    return JSONResponse(_view(found))


@router.get(FACTS_PATH + "/history", response_model=FactsHistory, summary="What changed in a cluster's dynamic facts")
def history(tenant: TenantId, cluster: ClusterId, api: Caller, reg: Reg,
            since: Annotated[str | None, Query(description="only versions after this RFC 3339 time, e.g. "
                                                           "2024-05-01T12:00:00Z")] = None,
            limit: Annotated[int, Query(ge=1, le=1000, description="at most this many versions")] = 100,
            ) -> JSONResponse:
    store = _store(reg)
    if since is not None:
        since = since.replace(" ", "+")  # an unencoded '+' of an offset arrives as a space
        if _moment(since) is None:
            raise RequestValidationError([{"loc": ("query", "since"), "type": "value_error",
                                           "msg": f"{since!r} is not an RFC 3339 time such as "
                                                  "2024-05-01T12:00:00Z"}])
    namespace = namespace_of_tenant(reg, tenant, api)
    custom(api).get_namespaced_custom_object(GROUP, VERSION, namespace, CLUSTERS, cluster)
    return JSONResponse({"items": store.history(namespace, cluster, since=since, limit=limit)})
