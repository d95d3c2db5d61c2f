"""The condition `hubwright.io/SourceHeld` on a source object (a Cluster API Cluster, a Hive ClusterDeployment, a
HyperShift HostedCluster) that our finalizer holds: True while it waits (its message names what for, as the WaitingForPeers Event does),
False once released, so `kubectl get cluster web-1 -o yaml` shows why the object has not gone. Pure.

It is written only once a hold was said (a source released at once never gets one), and removed when the source
is taken again. The condition carries the fields both projects' condition schemas accept (type, status, reason,
message, lastTransitionTime): Cluster API v1beta2's metav1.Condition and Hive's ClusterDeploymentCondition.
Their lists differ (Cluster API's is a map keyed by type, Hive's is atomic and rewritten by Hive), so the list is
written whole, with the resourceVersion it was read at (automation/adapters/kube/sources.py): a concurrent writer
is never overwritten, only raced, and the queue retries against the next copy.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any, Mapping

from stacks.names import GROUP
from stacks.times import rfc3339_seconds

HELD_CONDITION = f"{GROUP}/SourceHeld"  # "type of condition in CamelCase or in foo.example.com/CamelCase"
MESSAGE_MAX = 32768  # metav1.Condition's message maxLength


def conditions_of(raw: Mapping[str, Any]) -> list[dict[str, Any]]:
    status = raw.get("status")
    found = status.get("conditions") if isinstance(status, dict) else None
    return [c for c in found if isinstance(c, dict)] if isinstance(found, list) else []


def held_condition(raw: Mapping[str, Any]) -> dict[str, Any] | None:
    return next((c for c in conditions_of(raw) if c.get("type") == HELD_CONDITION), None)


def with_held(raw: Mapping[str, Any], *, held: bool, reason: str, message: str, now: datetime
              ) -> list[dict[str, Any]] | None:
    """The source's conditions with ours saying `held` for `reason`, or None when that is said already. A release
    (held False) is said only where a hold was: a source never held gets no condition."""
    old = held_condition(raw) or {}
    status = "True" if held else "False"
    if not old and not held:
        return None
    message = message[:MESSAGE_MAX]
    if (old.get("status"), old.get("reason"), old.get("message")) == (status, reason, message):
        return None
    kept = old.get("lastTransitionTime") if old.get("status") == status else None  # moves only when it flips
    return _others(raw) + [{"type": HELD_CONDITION, "status": status, "reason": reason, "message": message,
                            "lastTransitionTime": kept or rfc3339_seconds(now)}]


def without_held(raw: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The source's conditions without ours (it is taken again), or None when it has none."""
    return None if held_condition(raw) is None else _others(raw)


def _others(raw: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [c for c in conditions_of(raw) if c.get("type") != HELD_CONDITION]
