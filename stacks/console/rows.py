"""One cluster as the fleet page shows it: a Row made from the HubCluster object as the API server holds it and
its namespace's tenant. Pure; built once per change of the object (the console's cache), never per request. A Row
keeps plain strings only (the parsed status is a cluster page's, made when one is asked for: at 10,000 clusters the
models would double the cache and a full garbage collection)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from pydantic import ValidationError

from stacks.conditions import state_of
from stacks.hub_state import RECORDS
from stacks.mesh.membership import asked_group
from stacks.model.loading import resolved_part
from stacks.names import TENANT_ANNOTATION, TENANT_LABEL, cluster_key
from stacks.status import DRIFT_CONDITION, ClusterStatus

DELETING = "Deleting"
STATES = ("Ready", "Reconciling", "Stalled", "Unknown", DELETING)  # stacks.conditions.state_of's words, then ours


@dataclass(frozen=True)
class Row:
    namespace: str
    name: str
    tenant: str
    state: str  # one of STATES
    reason: str  # the Ready (or Stalled) condition's reason
    message: str
    account: str
    region: str
    group: str  # the mesh group it asks to be in ("" none)
    last_time: str  # the last run's end (or start), RFC 3339; "" none
    last_operation: str
    last_result: str
    last_cause: str
    changes: str  # "2 create, 1 update"
    drift: str  # "Drifted", "No drift" or "" (never checked)

    @property
    def key(self) -> str:
        return cluster_key(self.namespace, self.name)


def tenant_of(namespace: str, annotations: Mapping[str, str] | None, labels: Mapping[str, str] | None) -> str:
    """A namespace's tenant: the registry's annotation or label on it, else the namespace itself."""
    return (annotations or {}).get(TENANT_ANNOTATION) or (labels or {}).get(TENANT_LABEL) or namespace


def status_of(raw: Mapping[str, Any]) -> ClusterStatus:
    """The object's status as the model reads it; one the model refuses (an older service's) reads as empty."""
    try:
        return ClusterStatus.model_validate(raw.get("status") or {})
    except ValidationError:
        return ClusterStatus()


def fleet_part(raw: Mapping[str, Any]) -> tuple:
    """What the fleet's resolution reads of a HubCluster object: its resolved part (stacks.model.loading, the part
    the service watches for change), its records (stacks.hub_state.RECORDS) and whether it has a stack. A change
    elsewhere (its conditions, its last update) moves no stack's inputs and no mesh."""
    found = raw.get("status")
    status: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    return (resolved_part(raw), {key: status.get(key) for key in RECORDS}, bool(status.get("stack")))


def changes_text(changes: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {op}" for op, n in sorted(changes.items()) if op != "same" and n)


def row_of(raw: Mapping[str, Any], tenant: str) -> Row:
    meta = raw.get("metadata") or {}
    status = status_of(raw)
    state = DELETING if meta.get("deletionTimestamp") else state_of(status)
    shown = status.condition("Stalled") if state == "Stalled" else status.condition("Ready")
    last = status.last_update
    drift = status.condition(DRIFT_CONDITION)
    return Row(
        namespace=str(meta.get("namespace") or ""), name=str(meta.get("name") or ""), tenant=tenant, state=state,
        reason=(shown.reason or "") if shown else "", message=(shown.message or "") if shown else "",
        account=status.account or "", region=status.region or "", group=asked_group(meta.get("labels") or {}, meta.get("annotations") or {},
                                                                 bool(meta.get("deletionTimestamp"))) or "",
        last_time=(last.end_time or last.start_time or "") if last else "",
        last_operation=last.operation if last else "", last_result=last.result if last else "",
        last_cause=(last.cause or "") if last else "", changes=changes_text(last.changes) if last else "",
        drift=("Drifted" if drift.status == "True" else "No drift") if drift else "")
