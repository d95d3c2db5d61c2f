"""Every engine run of the service goes through one gate (`Runs.run`): the clusters' and the transit stacks'.

It owns the halt check (after `halt()` no run starts: a lost Lease, a shutdown), the count of runs in flight
(the Pipeline cancels them), the run metrics, the failures by reason, the run's one log line
(`hubwright.run`: cluster, stack, operation, result, duration, changes, reason; automation/adapters/logs.py), and
its history entry (automation/service/history.py: what caused it, its diff and its log).

While a run is in the gate, `current()` says which (its id and cause, a context variable of the calling thread):
the runners' engine names the HubStackRun it creates with that id and writes the cause into its spec.
"""
from __future__ import annotations

import contextvars
import dataclasses
import functools
import threading
import time
from typing import Callable, Collection, Protocol

from automation.adapters import logs
from automation.adapters.engine import EngineError, RunCancelled, RunResult, StackLocked
from automation.adapters.logs import FIELDS
from automation.service.history import Begun, Recorder
from stacks import status as reasons
from stacks.disclosure import Known, redact
from stacks.errors import Failure
from stacks.runs.cause import Cause

RUN_LOG = logs.RUN_LOG  # one line per engine run, and per refusal (automation/adapters/logs.py)
_CURRENT: contextvars.ContextVar[Begun | None] = contextvars.ContextVar("hubwright_run", default=None)


def current() -> Begun | None:
    """The run the calling thread is in the gate for (module docstring); None outside one."""
    return _CURRENT.get()


class Metrics(Protocol):
    def observe_run(self, operation: str, result: str, seconds: float) -> None: ...

    def run_failed(self, operation: str, reason: str) -> None: ...

    def refused(self, reason: str) -> None: ...


class Runs:
    """The gate every engine call passes: halt, count, measure, log."""

    def __init__(self, metrics: Metrics | None = None, recorder: Recorder | None = None):
        self.metrics = metrics
        self.recorder = recorder
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
            shown_to: Known | None = None, cause: Cause | None = None, refresh: bool = False) -> RunResult:
        """Run `call` unless halted; an up or destroy that did not succeed raises EngineError (UpdateFailed,
        DestroyFailed), so every caller reports it the same way (automation/service/outcomes.py).

        `cause`: why it runs (stacks/runs/cause.py): with one, the run is recorded in the history (its id comes back
        as the result's, or the error's, run_id); `refresh`: an up with refresh, as recorded.

        `shown_to`: the IDs the cluster's tenant may read (stacks.disclosure.known_to; a function is asked once, and
        only when the text has an ID). The run's log line keeps the engine's whole text (the hub administrator's);
        what comes back, the message and drifted names of the result or a failure's message, is redacted for the
        tenant (stacks.disclosure.redact): the callers write it into the cluster's status and Events."""
        known: Callable[[], Collection[str]] = (
            functools.cache(shown_to) if callable(shown_to) else (lambda: shown_to or ()))
        begun = None
        if cause is not None and self.recorder is not None:
            begun = self.recorder.begin(operation, stack=stack, cluster=cluster, cause=cause, refresh=refresh)
            known()  # asked before the run: a destroy removes the inputs it would be read from
        token = _CURRENT.set(begun)
        try:
            out = self._run(operation, call, stack=stack, cluster=cluster)
        except Exception as exc:
            record = self.recorder.record(begun, None, exc, known) if begun is not None and self.recorder else None
            if not isinstance(exc, EngineError):
                raise
            if record is not None:
                exc.run_id = record.id
            shown = _redacted(exc, known) if shown_to is not None else exc
            if shown is exc:
                raise
            raise shown from None
        finally:
            _CURRENT.reset(token)
        if begun is not None and self.recorder is not None:
            record = self.recorder.record(begun, out, None, known)
            out = dataclasses.replace(out, run_id=record.id if record is not None else out.run_id, trace=None)
        if shown_to is None:
            return out
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


def _redacted(exc: EngineError, known: Callable[[], Collection[str]]) -> EngineError:
    """The error as the tenant reads it (the same object when there was nothing to redact)."""
    text = redact(str(exc), known)
    if text == str(exc):
        return exc
    shown = type(exc)(text, reason=exc.reason)
    shown.run_id, shown.trace, shown.detail = exc.run_id, exc.trace, exc.detail
    return shown


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
