"""A cluster's run history (stacks/runs/record.py): each engine run of its stack, and one run's diff and engine log,
read from the history store (automation/adapters/history), never from etcd.

    GET /tenants/{t}/clusters/{id}/runs          the runs, newest first (?limit=)
    GET /tenants/{t}/clusters/{id}/runs/{run}    one run and its detail: its diff and the end of its engine log

Who may read: whoever may `get` the HubCluster, checked by reading it as the caller (as the facts routes do), so
RBAC decides and a tenant of another namespace gets the one FORBIDDEN body (app.FORBIDDEN), which names nothing of
the cluster or its tenant. The store itself is read with the API's own credentials (--history-store, --backend).

What they read: `tenant_view`, every time (the record's own names and its detail's reference whole: no engine
text). The run's message, its diff (URNs, types, values) and its log with every
account ID, ARN and resource ID its own inputs do not hold of its own side redacted (stacks.disclosure): a pair
run's text names the peer's account, role, route tables and security groups, which the tenant may not learn. The
API has no notion of a hub administrator beyond RBAC, and RBAC grants a right, not a view, so nobody gets more here:
the whole text is the hub administrator's through `python -m automation history` (the backend's credentials) and
the `hubwright.run` log lines. `known` (what a record allows) is never shown.

A store that fails answers 502 without its reason (a bucket or a path is the hub's, not the tenant's); the
reason is logged. With --history-store off the routes answer 404 saying so.
"""
from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Path, Query
from fastapi.responses import JSONResponse
from kubernetes import client
from pydantic import Field

from automation.adapters.history import HistoryError, HistoryStore
from automation.api.app import LOG, Registry, caller, registry
from automation.api.kube import custom, namespace_of_tenant
from automation.api.models import ERRORS, Problem, View
from automation.api.tenants import ClusterId, TenantId
from stacks.names import CLUSTERS, GROUP, VERSION, stack_name
from stacks.runs.cause import Cause
from stacks.runs.model import DetailRef, Operation
from stacks.runs.record import Executor, Result, RunRecord, newest_first, tenant_view

Caller = Annotated[client.ApiClient, Depends(caller)]
Reg = Annotated[Registry, Depends(registry)]
RunId = Annotated[str, Path(description="the run's id (its HubStackRun's name)", pattern=r"^[a-z0-9.-]+$",
                            max_length=253)]
RUNS_PATH = "/tenants/{tenant}/clusters/{cluster}/runs"
OFF = "the run history is off on this hub (the registry API runs with --history-store off)"
UNREADABLE = "the run history cannot be read now; the hub administrator's logs say why"


# --------------------------------------------------------------------------- response bodies

class RunView(View):
    """One engine run of the cluster's stack, as its tenant reads it (IDs not its own redacted)."""

    id: str = Field(description="the run: its HubStackRun's name with runners, the same form locally")
    stack: str = Field(description="the cluster's stack: namespace.name")
    cluster: str | None = Field(None, description="namespace/name")
    operation: Operation
    refresh: bool = False
    cause: Cause
    executor: Executor
    started: str = Field(description="RFC 3339")
    ended: str = Field(description="RFC 3339")
    result: Result
    reason: str | None = Field(None, description="why it failed or was refused (a condition reason)")
    message: str = ""
    changes: dict[str, int] = Field(default_factory=dict, description="resources by operation: create, update, "
                                                                        "delete, replace, same")
    permalink: str | None = Field(None, description="the update in the backend's console (Pulumi Cloud)")
    detail: DetailRef | None = Field(None, description="where its diff and log are kept (null: none were)")


class RunList(View):
    stack: str
    items: list[RunView] = Field(description="newest first")


class PropertyChangeView(View):
    old: Any = None
    new: Any = None


class ResourceChangeView(View):
    urn: str
    type: str
    change: str = Field(description="add, update, replace or remove")
    properties: dict[str, PropertyChangeView] = Field(default_factory=dict)


class RunDiffView(View):
    stack: str
    change: str = Field(description="changed, new, removed or unchanged")
    resources: list[ResourceChangeView] = Field(default_factory=list)


class RunDetailView(View):
    diff: RunDiffView | None = None
    log: str = Field("", description="the end of the engine's output")
    log_dropped: int = Field(0, description="bytes of the log before `log` that were not kept")
    resources_dropped: int = Field(0, description="changed resources past the detail's size limit, not kept")


class RunDetail(View):
    run: RunView
    detail: RunDetailView | None = Field(description="null: the run kept no diff or log")


# --------------------------------------------------------------------------- the routes


def _store(reg: Registry) -> HistoryStore:
    if reg.history is None:
        raise HTTPException(404, OFF)
    return reg.history


def _records(reg: Registry, tenant: str, cluster: str, api: client.ApiClient) -> tuple[HistoryStore, str,
                                                                                      list[RunRecord]]:
    """The store, the stack and its records newest first, once the caller may read the HubCluster."""
    store = _store(reg)
    namespace = namespace_of_tenant(reg, tenant, api)
    custom(api).get_namespaced_custom_object(GROUP, VERSION, namespace, CLUSTERS, cluster)  # may they read it?
    stack = stack_name(namespace, cluster)
    try:
        found = store.records(stack)
    except HistoryError as exc:
        LOG.error("run history of %s in %s: %s", stack, store.location, exc)
        raise HTTPException(502, UNREADABLE) from None
    ordered = newest_first(found, stack)
    return store, stack, ordered


router = APIRouter(tags=["runs"], responses={**ERRORS, 502: {"model": Problem,
                                                             "description": "the history store cannot be read"}})


@router.get(RUNS_PATH, response_model=RunList, summary="A cluster's run history: its stack's runs, newest first")
def list_runs(tenant: TenantId, cluster: ClusterId, api: Caller, reg: Reg,
              limit: Annotated[int, Query(ge=1, le=1000, description="at most this many runs")] = 100) -> JSONResponse:
    _, stack, records = _records(reg, tenant, cluster, api)
    return JSONResponse({"stack": stack, "items": [tenant_view(r, None)[0] for r in records[:limit]]})


@router.get(RUNS_PATH + "/{run}", response_model=RunDetail,
            summary="One run of a cluster's stack, with its diff and the end of its engine log")
def read_run(tenant: TenantId, cluster: ClusterId, run: RunId, api: Caller, reg: Reg) -> JSONResponse:
    store, stack, records = _records(reg, tenant, cluster, api)
    record = next((r for r in records if r.id == run), None)
    if record is None:
        raise HTTPException(404, f"run {run} is not in the history of cluster {cluster} of tenant {tenant}")
    try:
        detail = store.detail(record)
    except HistoryError as exc:
        LOG.error("run detail %s of %s in %s: %s", record.id, stack, store.location, exc)
        raise HTTPException(502, UNREADABLE) from None
    view, shown_detail = tenant_view(record, detail)
    return JSONResponse({"run": view, "detail": shown_detail})
