"""What a Cluster's status says in each case, built from the current status and the facts (no I/O).

Each builder returns the whole new status; one equal to the current status means there is nothing to write
(the transition times of conditions that did not flip are kept).
"""
from __future__ import annotations

from typing import Any, Literal

from automation.adapters.engine import RunResult
from automation.adapters.kube.informer import Raw
from automation.kit.objects import Obj
from stacks.conditions import conditions, outputs_from
from stacks.times import rfc3339_seconds
from stacks import status as reasons
from stacks.errors import InvalidSpec
from stacks.network.merge import Pending
from stacks.inputs import StackInputs
from stacks.names import DRIFT_CHECK_REQUEST_ANNOTATION, RECONCILE_REQUEST_ANNOTATION, stack_name
from stacks.runs.cause import Cause
from stacks.status import ClaimsStatus, ClusterStatus, LastUpdate, MeshJoin, RunProgress, SharedIngressStatus


def stack_of(raw: Raw, status: ClusterStatus) -> str:
    """The cluster's stack name: as recorded, else as stacks.names.stack_name makes it."""
    obj = Obj(raw)
    return status.stack or stack_name(obj.namespace, obj.name)


def generation_of(raw: Raw) -> int | None:
    return Obj(raw).generation


def annotation(raw: Raw, name: str = RECONCILE_REQUEST_ANNOTATION) -> str | None:
    """The value of a request annotation (the reconcile request's unless `name` says another), if any: its first
    256 characters, as the status records it."""
    value = Obj(raw).annotations.get(name)
    return str(value)[:256] if value else None


def requested(raw: Raw, status: ClusterStatus) -> str | None:
    """A reconcile request not yet handled: its value, else None."""
    value = annotation(raw)
    return value if value is not None and value != status.last_handled_reconcile_request else None


def check_requested(raw: Raw, status: ClusterStatus) -> str | None:
    """A drift-check request (hubwright.io/drift-check-request) not yet handled: its value, else None."""
    value = annotation(raw, DRIFT_CHECK_REQUEST_ANNOTATION)
    return value if value is not None and value != status.last_handled_drift_check_request else None


def check_handled(raw: Raw, status: ClusterStatus) -> ClusterStatus:
    """`status` recording the drift-check request as handled (a drift check, or an up with refresh, runs for it)."""
    value = check_requested(raw, status)
    return status if value is None else status.model_copy(update={"last_handled_drift_check_request": value})


def ready(status: ClusterStatus) -> str | None:
    cond = status.condition("Ready")
    return cond.status if cond else None


def succeeded(result: RunResult, message: str, started: float, ended: float,
              progress: RunProgress | None = None, *, cause: Cause | None = None) -> LastUpdate:
    """status.lastUpdate of a run that succeeded: its history entry is `result.run_id`."""
    return LastUpdate(operation=result.operation, result="Succeeded", message=message, start_time=rfc3339_seconds(started),
                      end_time=rfc3339_seconds(ended), permalink=result.permalink, changes=result.changes, progress=progress,
                      cause=cause.kind if cause is not None else None, run=result.run_id)


def deletion_mark(status: ClusterStatus, raw: Raw, operation: Literal["up", "destroy"], reason: str, cause: Cause,
                  started: float) -> ClusterStatus:
    """A deleted cluster's run is about to start (its destroy, or the up that retains it): the Running mark, and
    Progressing with `reason` saying why."""
    why = cause.message
    return status.model_copy(update={
        "last_update": run_mark(operation, "Running", why, started, cause=cause),
        "conditions": conditions("progressing", reason, why, generation=generation_of(raw),
                                 previous=status.conditions, now=rfc3339_seconds(started)),
    })


def run_mark(operation: Literal["up", "destroy"], result: Literal["Running", "Failed"], message: str,
             started: float, ended: float | None = None, *, cause: Cause | str | None = None,
             run: str | None = None) -> LastUpdate:
    """status.lastUpdate of a run that starts (Running: what caused it) or failed (its cause and its history entry;
    nothing of an earlier run's end is kept)."""
    return LastUpdate(operation=operation, result=result, message=message, start_time=rfc3339_seconds(started),
                      end_time=rfc3339_seconds(ended) if ended is not None else None, permalink=None, progress=None,
                      cause=cause.kind if isinstance(cause, Cause) else cause, run=run)


def ready_status(status: ClusterStatus, generation: int | None, desired: StackInputs, last: LastUpdate | None, *,
                 mesh_join: MeshJoin | None, routed: SharedIngressStatus | None, now: float,
                 outputs: dict[str, Any] | None = None, checked: float | None = None,
                 claims: ClaimsStatus | None = None) -> ClusterStatus:
    """The stack is up to date with `desired`."""
    update: dict[str, Any] = {
        "observed_generation": generation, "stack": desired.stack, "inputs_hash": desired.digest(),
        "mesh_join": mesh_join, "shared_ingress": routed, "claims": claims or status.claims,
        "account": desired.cluster.account_id, "region": desired.cluster.region, "last_update": last,
        "conditions": conditions("ready", reasons.SUCCEEDED, f"stack {desired.stack} is up to date",
                                 generation=generation, previous=status.conditions, now=rfc3339_seconds(now))}
    if outputs is not None:
        update["outputs"] = outputs_from(outputs)
    if checked is not None:
        update["last_drift_check"] = rfc3339_seconds(checked)
    return status.model_copy(update=update)


def running_status(status: ClusterStatus, generation: int | None, desired: StackInputs, cause: Cause, *,
                   mesh_join: MeshJoin | None, routed: SharedIngressStatus | None, started: float,
                   claims: ClaimsStatus | None = None) -> ClusterStatus:
    """An up is about to start (the Running mark: a killed run is recognised by it). After a failed run the
    conditions keep its reason and say it until a run succeeds: `kubectl get hwc` shows UpdateFailed while the
    retry runs, not a bare Progressing that hides the failure."""
    why = cause.message
    reason, message = reasons.PROGRESSING, why
    failed = last_failure(status)
    if failed is not None:
        reason, message = failed[0], f"{why}; the last attempt failed: {failed[1]}"[:4096]
    return status.model_copy(update={
        "observed_generation": generation, "stack": desired.stack, "mesh_join": mesh_join, "shared_ingress": routed,
        "claims": claims or status.claims,
        "account": desired.cluster.account_id, "region": desired.cluster.region,
        "last_update": run_mark("up", "Running", why, started, cause=cause),
        "conditions": conditions("progressing", reason, message, generation=generation,
                                 previous=status.conditions, now=rfc3339_seconds(started)),
    })


def last_failure(status: ClusterStatus) -> tuple[str, str] | None:
    """(reason, message) of the last run when it failed: its lastUpdate, and the reason the Ready condition gave
    it (kept through the retries: a running retry's status keeps it too); None after a success."""
    last, ready_ = status.last_update, status.condition("Ready")
    if last is None or last.result != "Failed":
        return None
    return (ready_.reason if ready_ is not None and ready_.reason else "UpdateFailed"), last.message


def refused_status(raw: Raw, status: ClusterStatus, exc: InvalidSpec, *, placed: tuple[str | None, str | None],
                   mesh_join: MeshJoin | None, routed: SharedIngressStatus | None, now: float,
                   claims: ClaimsStatus | None = None) -> ClusterStatus:
    """What a refused cluster's status says, every field recomputed from the input."""
    generation = generation_of(raw)
    return with_placement(status, placed).model_copy(update={  # account and region: facts of the input
        "observed_generation": generation, "mesh_join": mesh_join,
        "last_handled_reconcile_request": annotation(raw) or status.last_handled_reconcile_request,
        "last_handled_drift_check_request": annotation(raw, DRIFT_CHECK_REQUEST_ANNOTATION)
        or status.last_handled_drift_check_request,
        "shared_ingress": routed, "claims": claims or status.claims,
        # Waiting for discovery is not a refusal: Progressing, until its status.network resolves the cluster again.
        "conditions": conditions("progressing" if isinstance(exc, Pending) else "stalled", exc.reason, str(exc),
                                 generation=generation, previous=status.conditions, now=rfc3339_seconds(now))})


def registered_status(status: ClusterStatus, generation: int | None, *, now: float) -> ClusterStatus:
    """What a registered-only cluster's status says: Ready with no stack, observedGeneration following the spec."""
    return status.model_copy(update={
        "observed_generation": generation, "account": None, "region": None,
        "conditions": conditions("ready", reasons.REGISTERED, "registered only (no accountID, infraID, apiURL "
                                 "or network): no stack to run", generation=generation,
                                 previous=status.conditions, now=rfc3339_seconds(now))})


def with_placement(status: ClusterStatus, placed: tuple[str | None, str | None]) -> ClusterStatus:
    """`status` with the account and region the cluster's input gives (DesiredView.placed_in), where known."""
    account, region = placed
    return status.model_copy(update={"account": account or status.account, "region": region or status.region})
