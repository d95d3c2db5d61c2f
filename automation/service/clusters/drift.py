"""Drift: when a stack is checked next, and the check (`preview` with refresh, no update, no history entry).

DriftDetected names what the cloud changed; --drift-policy correct runs an `up` with refresh to put it back,
report only sets the condition. Each stack's interval is stretched by a stable jitter (restarts keep it).
A new value of hubwright.io/drift-check-request runs the check now (the reconciler passes its cause); any check
that runs records that value in status.lastHandledDriftCheckRequest, whatever it finds.
"""
from __future__ import annotations

import hashlib
from typing import Any

from automation.adapters.engine import EngineError, StackLocked
from automation.adapters.kube.informer import Raw
from stacks.conditions import with_drift
from stacks.times import rfc3339_seconds, parse_seconds
from automation.service.clusters.context import Context, ReconcileOptions
from automation.service.clusters.status import check_handled, generation_of
from automation.kit.queue import Outcome
from automation.service.runs import changes_text
from stacks import status as reasons
from stacks.disclosure import known_to
from stacks.inputs import StackInputs
from stacks.names import RECONCILE_REQUEST_ANNOTATION
from stacks.runs.cause import Cause
from stacks.status import ClusterStatus


def jitter(key: str) -> float:
    """A stable number in [0, 1) per key, so restarts do not move a stack's drift schedule."""
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) / 0x100000000


def due_in(options: ReconcileOptions, key: str, status: ClusterStatus, now: float) -> float | None:
    """Seconds until the stack's next drift check (0: now; None: drift checks are off)."""
    if options.drift_interval <= 0:
        return None
    last = parse_seconds(status.last_drift_check) or parse_seconds(
        status.last_update.end_time if status.last_update else None)
    if last is None:
        return 0
    interval = options.drift_interval * (1 + options.drift_jitter * jitter(key))
    return max(0.0, last + interval - now)


def check(r: Context, key: str, raw: Raw, status: ClusterStatus, desired: StackInputs, *,
          cause: Cause | None = None) -> Outcome:
    """Preview with refresh; on drift, correct it (an up with refresh) or only report it, as --drift-policy says.

    `cause`: why it runs (None: the periodic check). A check that ran, whatever it found or however it failed,
    records the drift-check request as handled; a locked stack ran nothing: the request waits for the retry."""
    marked = check_handled(raw, status)  # what a check that ran writes over (the request handled)
    try:
        result = r.runs.run("preview", lambda: r.engine.preview(desired), stack=desired.stack, cluster=key,
                            shown_to=known_to(desired), cause=cause or Cause.of(
                                "DriftCheck", "drift check (preview with refresh)", generation_of(raw)))
    except StackLocked:
        return Outcome.done(r.options.lock_retry)
    except EngineError as exc:
        r.kube.event(raw, "Warning", "DriftCheckFailed", str(exc))
        checked = marked.model_copy(update={"last_drift_check": rfc3339_seconds(r.clock())})
        r.write(raw, status, checked)
        return Outcome.done(due_in(r.options, key, checked, r.clock()))
    now = r.clock()
    generation = generation_of(raw)
    before = status.condition(reasons.DRIFT_CONDITION)
    if result.ok:
        update: dict[str, Any] = {"last_drift_check": rfc3339_seconds(now)}
        if before is None or before.status != "False":
            update["conditions"] = with_drift(status.conditions, False, reasons.NO_DRIFT,
                                              f"the cloud matched the stack at {rfc3339_seconds(now)}",
                                              generation=generation, now=rfc3339_seconds(now))
        checked = marked.model_copy(update=update)
        r.write(raw, status, checked)
        return Outcome.done(due_in(r.options, key, checked, r.clock()))
    what = ", ".join(result.drifted) or changes_text(result.changes) or result.message or "changes expected"
    found = f"{len(result.drifted) or 'some'} resource(s) differ from the cloud: {what}"
    correct = r.options.drift_policy == "correct"
    checked = marked.model_copy(update={"last_drift_check": rfc3339_seconds(now), "conditions": with_drift(
        status.conditions, True, reasons.DRIFT_DETECTED,
        found + ("; correcting it (--drift-policy correct)" if correct else
                 f"; not corrected (--drift-policy report): annotate {RECONCILE_REQUEST_ANNOTATION} to correct it"),
        generation=generation, now=rfc3339_seconds(now))})
    r.kube.event(raw, "Warning", reasons.DRIFT_DETECTED, found)
    r.write(raw, status, checked)
    if not correct:
        return Outcome.done(due_in(r.options, key, checked, r.clock()))
    return r.run_up(key, raw, checked, desired, cause=Cause.of("Drift", f"correcting drift ({found})", generation),
                    refresh=True)
