"""kstatus conditions and the status documents a controller writes: pure, no client (the writers are in
automation/kit/status.py).

Conditions (kstatus): exactly one story at a time -
  ready        Ready=True                       Reconciling=False  Stalled=False
  progressing  Ready=Unknown  (Progressing...)  Reconciling=True   Stalled=False
  retrying     Ready=False    (UpdateFailed...) Reconciling=True   Stalled=False   (a retry is scheduled)
  stalled      Ready=False    (InvalidSpec...)  Reconciling=False  Stalled=True    (nothing runs until the input changes)
Every condition carries observedGeneration; lastTransitionTime only moves when the status flips.

`status_patch` is the merge patch every status write sends: all of the new status and a null for each field, at any
depth, that a document before it had and it lacks (automation/kit/status.py says why not server-side apply).
"""
from __future__ import annotations

from typing import Any, Literal, Mapping

from stacks.status import CONDITION_TYPES, DRIFT_CONDITION, ClusterStatus, Condition, Peering, StackOutputs

State = Literal["ready", "progressing", "retrying", "stalled"]
_SHAPES: dict[str, tuple[str, str, str]] = {  # state -> (Ready, Reconciling, Stalled)
    "ready": ("True", "False", "False"),
    "progressing": ("Unknown", "True", "False"),
    "retrying": ("False", "True", "False"),
    "stalled": ("False", "False", "True"),
}


def conditions(state: State, reason: str, message: str, *, generation: int | None,
               previous: list[Condition], now: str) -> list[Condition]:
    """The three kstatus conditions for `state`; transition times kept where the status did not flip. Other
    conditions (DriftDetected) are carried over as they were."""
    before = {c.type: c for c in previous}
    out = []
    for type_, status in zip(("Ready", "Reconciling", "Stalled"), _SHAPES[state]):
        active = status != "False" or type_ == "Ready"
        old = before.get(type_)
        out.append(Condition(
            type=type_, status=status,
            reason=reason if active else ("Succeeded" if state == "ready" else reason),
            message=message if active else "",
            last_transition_time=_transition(old, status, now),
            observed_generation=generation,
        ))
    return out + [c for c in previous if c.type not in CONDITION_TYPES]


def with_drift(previous: list[Condition], drifted: bool, reason: str, message: str, *, generation: int | None,
               now: str) -> list[Condition]:
    """`previous` with the DriftDetected condition set (beside the kstatus three, which stay as they are)."""
    status = "True" if drifted else "False"
    old = next((c for c in previous if c.type == DRIFT_CONDITION), None)
    drift = Condition(type=DRIFT_CONDITION, status=status, reason=reason, message=message[:32768],
                      last_transition_time=_transition(old, status, now), observed_generation=generation)
    return [c for c in previous if c.type != DRIFT_CONDITION] + [drift]


def with_warning(previous: list[Condition], type_: str, message: str | None, *, generation: int | None,
                 now: str) -> list[Condition]:
    """`previous` with the Warning condition `type_` True saying `message`, or gone (None): beside the kstatus three,
    which stay as they are."""
    kept = [c for c in previous if c.type != type_]
    if message is None:
        return kept
    old = next((c for c in previous if c.type == type_), None)
    return kept + [Condition(type=type_, status="True", reason=type_, message=message[:32768],
                             last_transition_time=_transition(old, "True", now), observed_generation=generation)]


def _transition(old: Condition | None, status: str, now: str) -> str:
    """A condition's lastTransitionTime: kept while its status stays the same, `now` when it flips."""
    return old.last_transition_time if old and old.status == status and old.last_transition_time else now


def outputs_from(stack_outputs: dict[str, Any]) -> StackOutputs:
    """The outputs the status shows, from the stack outputs of components.program."""
    link = stack_outputs.get("privateLink") or {}
    mesh = stack_outputs.get("mesh") or {}
    peerings = [Peering(name=str(p.get("name")), id=p.get("id"), state=p.get("state"))
                for p in (mesh.get("peerings") or []) if isinstance(p, dict)]
    return StackOutputs(
        endpoint=link.get("endpointDnsName"),
        endpoint_id=link.get("endpointId"),
        endpoint_vpc=link.get("endpointVpcId"),
        service_name=link.get("serviceName"),
        zone_id=link.get("zoneId"),
        infra_id=link.get("infraID"),
        peerings=peerings,
        transit_attachment=mesh.get("transitAttachment") if isinstance(mesh.get("transitAttachment"), str) else None,
    )


def state_of(status: ClusterStatus) -> str:
    """One word per cluster for the metrics: Ready, Reconciling, Stalled or Unknown."""
    for type_ in ("Stalled", "Reconciling", "Ready"):
        cond = status.condition(type_)
        if cond is not None and cond.status == "True":
            return type_
    return "Unknown"


def status_patch(new: dict[str, Any], *before: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch (RFC 7386) that turns any of the `before` documents into `new`.

    It carries all of `new` (so it also corrects a server copy that differs from every
    `before`) and null for each key, at any depth, that a `before` has and `new` lacks.
    A None in `new` means "absent" (null). Lists and scalars are replaced whole.
    """
    patch: dict[str, Any] = {}
    for old in before:
        for key, value in old.items():
            if value is not None and new.get(key) is None:
                patch[key] = None
    for key, value in new.items():
        if isinstance(value, dict):
            nested = [old[key] for old in before if isinstance(old.get(key), dict)]
            patch[key] = status_patch(value, *nested) if nested else value
        else:
            patch[key] = value
    return patch


def union(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Every key of either document, at any depth; an object wins over a scalar (its keys may need nulls)."""
    out = {**a, **b}
    for key, value in a.items():
        other = b.get(key)
        if isinstance(value, dict):
            out[key] = union(value, other) if isinstance(other, dict) else value
    return out


def changes_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The smallest JSON merge patch (RFC 7386) that turns `old` into `new`: objects merged key by key, None for
    what went (an object emptied too: merging {} would keep it), lists and values replaced whole. The one diff of
    every writer that knows what the server holds: a runner's writes to its run (at a resourceVersion), a source's
    HubCluster, the registry's Tenant edits; status_patch is for a writer that cannot know, and so carries the whole
    document."""
    patch: dict[str, Any] = {name: None for name in old if name not in new}
    for name, value in new.items():
        before = old.get(name)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            inner = changes_patch(before, value)
            if inner:
                patch[name] = inner
        elif name not in old or before != value:
            patch[name] = value
    return patch
