"""Engine runs and failures, the same for every reconciler (the clusters' and the transit stacks').

    Runs        every engine run of the service goes through `Runs.run`: the halt check (a halted service starts
                no run, and `active()` counts the ones that had started), the run metrics, the failures by
                reason, and the run's one log line (`hubwright.run`; automation/adapters/logs.py). One object,
                given to each reconciler, so halting it halts them all.
    verdict     the one mapping of an error's class (stacks.errors) to what a reconciler reports and what comes
                next: StackLocked waits (not a failure), NeedsAttention stalls (looked at again every
                --stalled-recheck), any other Failure retries with backoff. Each reconciler writes the verdict
                into its own status (a Cluster's conditions, a transit stack's lastUpdate) and sends its Event.
"""
from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Literal, Protocol

from automation.adapters.engine import EngineError, RunCancelled, RunResult, StackLocked
from automation.adapters.logs import FIELDS
from automation.service.queue import Outcome
from stacks import status as reasons
from stacks.errors import Failure, NeedsAttention
from stacks.names import RECONCILE_REQUEST_ANNOTATION

RUN_LOG = logging.getLogger("hubwright.run")  # one line per engine run (automation/adapters/logs.py)

class RunMetrics(Protocol):
    def observe_run(self, operation: str, result: str, seconds: float) -> None: ...

    def run_failed(self, operation: str, reason: str) -> None: ...


class Runs:
    """The gate every engine run passes: halt(), active(), run(operation, call, stack=, cluster=)."""

    def __init__(self, metrics: RunMetrics | None = None):
        self.metrics = metrics
        self._lock = threading.Lock()
        self._halted = False
        self._active = 0

    def halt(self) -> None:
        """No engine run starts after this returns; `active()` counts the ones that had (the Pipeline cancels them)."""
        with self._lock:
            self._halted = True

    def active(self) -> int:
        """Engine calls in progress: started, or about to reach the engine."""
        with self._lock:
            return self._active

    def run(self, operation: str, call: Callable[[], RunResult], *, stack: str = "",
            cluster: str = "") -> RunResult:
        """Run `call` unless halted (RunCancelled); an up or destroy that did not succeed raises EngineError
        (UpdateFailed / DestroyFailed). Metrics and the one log line whatever happens."""
        started = time.monotonic()
        result, reason, out, error = "error", "Error", None, ""
        try:
            with self._lock:
                if self._halted:
                    raise RunCancelled(f"{operation}: not started, the service stopped leading or is stopping")
                self._active += 1
            try:
                out = call()
            finally:
                with self._lock:
                    self._active -= 1
            result, reason = ("succeeded", "") if out.ok else ("failed", "")
            if operation in ("up", "destroy") and not out.ok:
                raise EngineError(out.message or f"{operation} failed",
                                  reason=reasons.DESTROY_FAILED if operation == "destroy" else reasons.UPDATE_FAILED)
            return out
        except StackLocked as exc:
            result, reason, error = "locked", reasons.STACK_LOCKED, str(exc)
            raise
        except Failure as exc:
            result, reason, error = ("failed" if isinstance(exc, EngineError) else "error"), exc.reason, str(exc)
            raise
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            seconds = time.monotonic() - started
            if self.metrics is not None:
                self.metrics.observe_run(operation, result, seconds)
                if result in ("failed", "error") and reason:
                    self.metrics.run_failed(operation, reason)
            log_run(operation, result, seconds, out, reason=reason, error=error, stack=stack, cluster=cluster)


def log_run(operation: str, result: str, seconds: float, out: RunResult | None, *, reason: str, error: str,
            stack: str, cluster: str) -> None:
    """The run's one log line: INFO when it did what it should (a preview that found drift says `drifted`),
    WARNING when it failed."""
    if operation == "preview" and result == "failed":
        result = "drifted"  # the check ran; the cloud differs
    fields: dict[str, Any] = {"cluster": cluster or None, "stack": stack, "operation": operation, "result": result,
                              "duration": round(seconds, 3)}
    if out is not None:
        fields["changes"] = dict(out.changes)
        if out.drifted:
            fields["drifted"] = list(out.drifted)
    if result in ("failed", "error", "locked"):
        fields["reason"] = reason
        fields["error"] = error[:2048]
    level = logging.WARNING if result in ("failed", "error") else logging.INFO
    RUN_LOG.log(level, "%s %s: %s %s in %.1fs%s", cluster or "-", stack or "-", operation, result, seconds,
                f" ({reason})" if fields.get("reason") else "", extra={FIELDS: fields})


# --------------------------------------------------------------------------- an error's class -> what next

@dataclass(frozen=True)
class Verdict:
    """What a failed operation reports and what comes next."""

    state: Literal["locked", "stalled", "retrying"]  # locked: nothing ran, not a failure
    reason: str  # the condition's and the Event's reason (CamelCase)
    then: str  # what comes next, for people
    outcome: Outcome

    @property
    def failed(self) -> bool:
        """The operation ran and failed (its lastUpdate says Failed); a locked stack ran nothing."""
        return self.state != "locked"


def verdict(exc: Failure, operation: str, *, lock_retry: float, stalled_recheck: float) -> Verdict:
    """The one place an error's class becomes a reason and what comes next (both reconcilers report through it).
    A run's failure says which run: an engine error without a reason of its own is UpdateFailed/DestroyFailed."""
    if isinstance(exc, StackLocked):
        return Verdict("locked", reasons.STACK_LOCKED, "another update holds the stack; trying again shortly",
                       Outcome.done(lock_retry * random.uniform(0.5, 1.5)))
    reason = reasons.DESTROY_FAILED if operation == "destroy" and exc.reason == reasons.UPDATE_FAILED else exc.reason
    if isinstance(exc, NeedsAttention):
        return Verdict("stalled", reason,
                       f"needs attention; looked at again in {stalled_recheck:g}s, or at once when an input changes "
                       f"or {RECONCILE_REQUEST_ANNOTATION} is set", Outcome.done(stalled_recheck))
    return Verdict("retrying", reason, "retrying with backoff", Outcome.retry())
