"""The console's pages: the fleet, a cluster, one run, the mesh and the runs. Each shows only what the viewer's
SubjectAccessReviews allow (access.py), read from the informer cache (cache.py) and the run history's store.

A cluster the viewer may not see answers exactly as one that does not exist: the same 404, naming nothing.
"""
from __future__ import annotations

from collections import Counter
from urllib.parse import urlencode

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse

from automation.adapters.history import HistoryError
from automation.console.access import Session
from automation.console.app import LOG, Console, console, page, session
from automation.console.mesh import mesh_pictures
from stacks.console.query import FILTERS, SORTS, Query, answer
from stacks.console.rows import Row, status_of
from stacks.names import CLUSTERS, STACKRUNS, stack_name
from stacks.plandiff.render import render_diff
from stacks.runs.record import RunRecord, diff_document, newest_first, record_json, tenant_view
from stacks.status import ClusterStatus

router = APIRouter()
NOT_FOUND = "There is no such cluster, or you may not see it."
RUNS_SHOWN = 50


def seen_namespaces(c: Console, signed: Session, resource: str = CLUSTERS) -> list[str] | None:
    """The namespaces the viewer may list `resource` in, among those holding clusters (None: every one)."""
    return c.access.namespaces(signed.viewer, c.cache.namespaces_with_clusters(), resource)


def may_see(c: Console, signed: Session, namespace: str, resource: str = CLUSTERS) -> bool:
    return c.access.administrator(signed.viewer) or c.access.allowed(signed.viewer, namespace, resource, "list")


@router.get("/", response_class=HTMLResponse)
def fleet(request: Request) -> HTMLResponse:
    c, signed = console(request), session(request)
    query = Query.of(dict(request.query_params))
    found = answer(c.cache.rows_in(seen_namespaces(c, signed)), query, c.settings.page_size)
    links = {"page": lambda n: "/?" + urlencode(query.params(page=n)),
             "sort": lambda s: "/?" + urlencode(query.params(sort=s, order="desc" if query.sort == s and
                                                             not query.descending else "", page=1))}
    return page(request, "fleet.html", "Fleet", {"answer": found, "query": query, "filters": FILTERS,
                                                 "sorts": SORTS, "links": links}, live="fleet")


def _visible_cluster(c: Console, signed: Session, namespace: str, name: str) -> Row:
    row = c.cache.row(namespace, name)
    if row is None or not may_see(c, signed, namespace):
        raise HTTPException(404, NOT_FOUND)
    return row


def _records(c: Console, namespace: str, name: str) -> tuple[list[RunRecord], str]:
    """The cluster's runs, newest first, and why there are none to show ("" when the store answered)."""
    if c.history is None:
        return [], "The run history is off on this hub (--history-store off)."
    stack = stack_name(namespace, name)
    try:
        found = c.history.records(stack)
    except HistoryError as exc:
        LOG.error("run history of %s in %s: %s", stack, c.history.location, exc)
        return [], "The run history cannot be read now; the console's log says why."
    return newest_first(found, stack), ""


def _shown(c: Console, signed: Session, record: RunRecord, detail: dict | None) -> tuple[dict, dict | None]:
    """A hub administrator reads a run's whole text; anyone else the tenant's view (stacks.disclosure)."""
    if c.access.administrator(signed.viewer):
        return record_json(record), detail
    return tenant_view(record, detail)


@router.get("/clusters/{namespace}/{name}", response_class=HTMLResponse)
def cluster(request: Request, namespace: str, name: str) -> HTMLResponse:
    c, signed = console(request), session(request)
    row = _visible_cluster(c, signed, namespace, name)
    records, why = _records(c, namespace, name)
    runs = [(_shown(c, signed, r, None)[0], r.duration) for r in records[:RUNS_SHOWN]]
    rights = {action: c.access.allowed(signed.viewer, namespace, CLUSTERS, "patch")
              for action in ("reconcile", "drift")}
    tree, no_tree = c.model.resources(row.key, whole=c.access.administrator(signed.viewer))
    status = status_of(c.cache.cluster(namespace, name) or {})
    return page(request, "cluster.html", f"{namespace}/{name}", {
        "row": row, "status": status, "events": c.cache.events_of(namespace, name), "runs": runs,
        "history_note": why, "rights": rights,
        "csrf": signed.csrf, "pairs": _pairs(c, signed, row, status), "tree": tree, "no_tree": no_tree},
        live=f"cluster:{namespace}/{name}")


def _pairs(c: Console, signed: Session, row: Row, status: ClusterStatus) -> list[dict[str, str]]:
    """The cluster's mesh peerings whose other end the viewer may see (the others are not listed at all)."""
    out = []
    outputs = status.outputs
    own = stack_name(row.namespace, row.name)
    for peering in outputs.peerings if outputs is not None else ():
        peer = next((s for s in peering.name.split("+") if s != own), "")
        namespace, _, name = peer.partition(".")
        if namespace and name and may_see(c, signed, namespace):
            out.append({"peer": f"{namespace}/{name}", "id": peering.id or "", "state": peering.state or ""})
    return out


@router.get("/clusters/{namespace}/{name}/runs/{run}", response_class=HTMLResponse)
def run(request: Request, namespace: str, name: str, run: str) -> HTMLResponse:
    c, signed = console(request), session(request)
    _visible_cluster(c, signed, namespace, name)
    records, why = _records(c, namespace, name)
    record = next((r for r in records if r.id == run), None)
    if record is None:
        raise HTTPException(404, why or "There is no such run in this cluster's history.")
    try:
        detail = c.history.detail(record) if c.history is not None else None
    except HistoryError as exc:
        LOG.error("run detail %s of %s: %s", record.id, record.stack, exc)
        raise HTTPException(502, "The run's diff and log cannot be read now; the console's log says why.") from None
    shown, shown_detail = _shown(c, signed, record, detail)
    diff = render_diff(diff_document(shown_detail), color=False) if shown_detail else ""
    return page(request, "run.html", f"Run {record.id}", {
        "namespace": namespace, "name": name, "run": shown, "duration": record.duration, "diff": diff,
        "log": (shown_detail or {}).get("log", ""), "detail": shown_detail})


@router.get("/mesh", response_class=HTMLResponse)
def mesh(request: Request) -> HTMLResponse:
    c, signed = console(request), session(request)
    pictures = mesh_pictures(c.model, seen_namespaces(c, signed), c.access.administrator(signed.viewer))
    return page(request, "mesh.html", "Mesh", {"pictures": pictures}, live="mesh")


@router.get("/runs", response_class=HTMLResponse)
def runs(request: Request) -> HTMLResponse:
    c, signed = console(request), session(request)
    allowed = seen_namespaces(c, signed, STACKRUNS)
    shown = None if allowed is None else set(allowed)
    docs = c.cache.runs_where(lambda raw: shown is None or (raw.get("metadata") or {}).get("namespace") in shown)
    waiting = sorted((d for d in docs if (d.get("status") or {}).get("phase", "Pending") == "Pending"),
                     key=lambda d: str((d.get("metadata") or {}).get("creationTimestamp") or ""))
    running = [d for d in docs if (d.get("status") or {}).get("phase") == "Running"]
    failures = Counter(str((d.get("status") or {}).get("reason") or "Failed") for d in docs
                       if (d.get("status") or {}).get("phase") == "Failed")
    runners = Counter(str(((d.get("status") or {}).get("claim") or {}).get("holder")) for d in running
                      if ((d.get("status") or {}).get("claim") or {}).get("holder"))
    return page(request, "runs.html", "Runs", {"waiting": waiting, "running": running,
                                               "failures": sorted(failures.items()), "runners": sorted(runners.items()),
                                               "oldest": waiting[0] if waiting else None}, live="runs")
