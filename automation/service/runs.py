"""Every engine run of the service goes through one gate (`Runs.run`): the clusters' and the transit stacks'.

It owns the halt check (after `halt()` no run starts: a lost Lease, a shutdown), the count of runs in flight
(the Pipeline cancels them), the run metrics, the failures by reason, and the run's one log line
(`hubwright.run`: cluster, stack, operation, result, duration, changes, reason; automation/adapters/logs.py).
"""
from __future__ import annotations

import dataclasses
import functools
import threading
import time
from typing import Callable, Protocol

from automation.adapters import logs
from automation.adapters.engine import EngineError, RunCancelled, RunResult, StackLocked
from automation.adapters.logs import FIELDS
from stacks import status as reasons
from stacks.disclosure import Known, redact
from stacks.errors import Failure

RUN_LOG = logs.RUN_LOG  # one line per engine run, and per refusal (automation/adapters/logs.py)


class Metrics(Protocol):
    def observe_run(self, operation: str, result: str, seconds: float) -> None: ...

    def run_failed(self, operation: str, reason: str) -> None: ...

    def refused(self, reason: str) -> None: ...


class Runs:
    """The gate every engine call passes: halt, count, measure, log."""

    def __init__(self, metrics: Metrics | None = None):
        self.metrics = metrics
        self._lock = threading.Lock()
        self._halted = False  # halt(): no engine run starts any more
        self._active = 0  # engine calls in progress

    def halt(self) -> None:
        """No engine run starts after this returns; `active()` counts the ones that had (Pipeline cancels them)."""
        with self._lock:
            self._halted = True

    def active(self) -> int:
        """Engine calls in progress: started, or about to reach the engine."""
        with self._lock:
            return self._active

    def run(self, operation: str, call: Callable[[], RunResult], *, stack: str = "", cluster: str = "",
            shown_to: Known | None = None) -> RunResult:
        """Run `call` unless halted; an up or destroy that did not succeed raises EngineError (UpdateFailed,
        DestroyFailed), so every caller reports it the same way (automation/service/outcomes.py).

        `shown_to`: the IDs the cluster's tenant may read (stacks.disclosure.known_to; a function is asked once, and
        only when the text has an ID). The run's log line keeps the engine's whole text (the hub administrator's);
        what comes back, the message and drifted names of the result or a failure's message, is redacted for the
        tenant (stacks.disclosure.redact): the callers write it into the cluster's status and Events."""
        if shown_to is None:
            return self._run(operation, call, stack=stack, cluster=cluster)
        known = functools.cache(shown_to) if callable(shown_to) else shown_to
        try:
            out = self._run(operation, call, stack=stack, cluster=cluster)
        except EngineError as exc:
            text = redact(str(exc), known)
            if text == str(exc):
                raise
            raise type(exc)(text, reason=exc.reason) from None
        return dataclasses.replace(out, message=redact(out.message, known),
                                   drifted=[redact(name, known) for name in out.drifted])

    def _run(self, operation: str, call: Callable[[], RunResult], *, stack: str, cluster: str) -> RunResult:
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

    def refused(self, cluster: str, stack: str, operation: str, reason: str, message: str) -> None:
        """A refusal (Stalled: InvalidSpec, NeedsAttention): counted by reason, and its run log line."""
        if self.metrics is not None:
            self.metrics.refused(reason)
        RUN_LOG.warning("%s %s: %s refused (%s)", cluster, stack, operation, reason, extra={FIELDS: {
            "cluster": cluster, "stack": stack, "operation": operation, "result": "refused",
            "duration": 0.0, "reason": reason, "error": message[:2048]}})


def changes_text(changes: dict[str, int]) -> str:
    return ", ".join(f"{n} to {op}" for op, n in sorted(changes.items()) if op != "same" and n)


def summary(result: RunResult) -> str:
    return changes_text(result.changes) or result.message or "no changes"


def log_run(operation: str, result: str, seconds: float, out: RunResult | None, *, reason: str, error: str,
            stack: str, cluster: str) -> None:
    """The run's one log line (automation/adapters/logs.py owns its format, which the runners' lines share)."""
    logs.log_run(operation, result, seconds, changes=None if out is None else out.changes,
                 drifted=[] if out is None else list(out.drifted), reason=reason, error=error, stack=stack,
                 cluster=cluster)
