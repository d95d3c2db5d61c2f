"""Why a run ran: the one decision, made before the engine starts, and recorded with the run (its history entry,
its HubStackRun's spec.cause, the cluster's lastUpdate). Pure.

| kind       | what caused it                                                                      |
|------------|-------------------------------------------------------------------------------------|
| Create     | the stack's first up                                                               |
| Spec       | the cluster's spec changed (its generation)                                         |
| Mesh       | a member joined or left its mesh group, or the group's phase moved                  |
| Hub        | the hub changed (its HubConfig: the hub account, the endpoint VPCs, shared ingress)  |
| Fleet      | another input moved (discovery, the namespace's annotations, the role map)           |
| DriftCheck | a drift check (preview with refresh), periodic or asked for (drift-check-request)  |
| Drift      | correcting drift the check found (up with refresh)                                  |
| Request    | the reconcile-request annotation                                                    |
| Retry      | the last run failed                                                                 |
| Leader     | a run that did not finish (the service restarted or lost its Lease): re-run, recovered |
| Delete     | the cluster was deleted: its destroy                                                |
| Retain     | the cluster was deleted with deletionPolicy Retain                                  |
| Release    | the hub administrator released a retained stack                                     |
| Transit    | a transit network stack's change (a Transit Gateway account's)                      |

`message` is the words people read (the update's message in the backend's history, the Event, lastUpdate).
"""
from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field

from stacks.inputs import StackInputs
from stacks.status import ClusterStatus, StatusModel

CauseKind = Literal["Create", "Spec", "Mesh", "Hub", "Fleet", "DriftCheck", "Drift", "Request", "Retry", "Leader",
                    "Delete", "Retain", "Release", "Transit"]
CAUSES: tuple[CauseKind, ...] = get_args(CauseKind)
MESSAGE_MAX = 512


class Cause(StatusModel):
    """What caused a run (module docstring)."""

    kind: CauseKind = Field(description="Create, Spec, Mesh, Hub, Fleet, DriftCheck, Drift, Request, Retry, Leader, "
                                        "Delete, Retain, Release or Transit.")
    message: str = Field("", max_length=MESSAGE_MAX, description="The cause in words.")
    generation: int | None = Field(None, ge=0, le=2**31 - 1, description="The cluster's generation the run was for.")

    @classmethod
    def of(cls, kind: CauseKind, message: str, generation: int | None = None) -> "Cause":
        text = " ".join(message.split())
        return cls(kind=kind, message=text if len(text) <= MESSAGE_MAX else text[:MESSAGE_MAX - 1] + "…",
                   generation=generation)


def _peer(pair: str, stack: str) -> str:
    """The other member of a pair `a.x+b.y`, as namespace/name."""
    one, _, two = pair.partition("+")
    other = two if one == stack else one
    namespace, _, name = other.partition(".")
    return f"{namespace}/{name}"


def _mesh_change(was: StackInputs, desired: StackInputs) -> str | None:
    """The mesh's share of what moved between two inputs, in words; None when it did not move."""
    before, after = was.mesh, desired.mesh
    if before == after:
        return None
    if before is None or after is None:
        group = (after or before).group if (after or before) is not None else "?"  # type: ignore[union-attr]
        return f"{'joined' if before is None else 'left'} mesh group {group}"
    old = {pair.name for pair in before.pairs}
    new = {pair.name for pair in after.pairs}
    parts = []
    if new - old:
        parts.append("joined by " + ", ".join(sorted(_peer(p, desired.stack) for p in new - old)))
    if old - new:
        parts.append("left by " + ", ".join(sorted(_peer(p, desired.stack) for p in old - new)))
    if not parts and (before.peerings, before.routes_via, before.attachment) != \
            (after.peerings, after.routes_via, after.attachment):
        parts.append(f"phase {before.routes_via} -> {after.routes_via}")
    if not parts:
        parts.append("its members or rules changed")
    return f"mesh group {after.group}: " + "; ".join(parts)


def _hub_change(was: StackInputs, desired: StackInputs) -> bool:
    """Whether what the hub's HubConfig decides for this stack moved: the hub account, the endpoint's hub side, the
    shared ingress's central address."""
    link_before, link_after = was.private_link, desired.private_link
    hub_side = (lambda link: None if link is None else (link.endpoint_vpc, link.associated_vpcs))
    ingress = (lambda s: None if s is None else (s.central_address, s.wire_mode, s.tlv_type, s.image))
    return (was.hub != desired.hub or hub_side(link_before) != hub_side(link_after)
            or ingress(was.shared_ingress) != ingress(desired.shared_ingress))


def up_cause(status: ClusterStatus, was: StackInputs | None, desired: StackInputs,
             generation: int | None) -> Cause:
    """Why an up of `desired` runs now, from the cluster's status (what ran last, at which inputs and generation) and
    the inputs its stack last applied (`was`, None: none yet). A request or a drift correction is the caller's."""
    last, digest = status.last_update, desired.digest()
    if status.inputs_hash is None:
        if last is not None and last.result == "Failed":
            return Cause.of("Retry", f"retrying the stack's first {last.operation}", generation)
        return Cause.of("Create", "first update of the stack", generation)
    if status.inputs_hash != digest:
        moved = f"{status.inputs_hash[:8]} -> {digest[:8]}"
        if generation != status.observed_generation:
            return Cause.of("Spec", f"inputs changed (generation {generation}): {moved}", generation)
        mesh = _mesh_change(was, desired) if was is not None else None
        if mesh is not None:
            return Cause.of("Mesh", f"inputs changed ({mesh}): {moved}", generation)
        if was is not None and _hub_change(was, desired):
            return Cause.of("Hub", f"inputs changed (the hub): {moved}", generation)
        return Cause.of("Fleet", f"inputs changed (the fleet): {moved}", generation)
    if last is not None and last.result == "Failed":
        return Cause.of("Retry", f"retrying after a failed {last.operation}", generation)
    if last is not None and last.result == "Running":
        return Cause.of("Leader", "re-running an update that did not finish", generation)
    return Cause.of("Fleet", "bringing the stack up to date", generation)
