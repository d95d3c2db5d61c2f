"""Recording each engine run into the run history (stacks/runs/record.py), for both executors: the gate
(automation/service/runs.py) calls `Recorder.record` once per run, after it finished or failed.

- The run's detail (its diff and the end of its log): with the local executor the engine hands it back (RunResult.trace,
  EngineError.trace) and it is stored here; with runners the runner that ran it stored it already (its HubStackRun's
  status.detail, RunResult.detail), and only the reference is taken.
- The record then joins its stack's index in the store; the store keeps the last --history-keep.
- `known`: the IDs the cluster's tenant may read (stacks.disclosure.known_to of the run's own inputs), kept with the
  record so every tenant read redacts by the one rule.

A store that fails never fails the run: it is said once per failure, in the log (with the stack and the store's
words) and counted (hubwright_history_write_failures_total).
"""
from __future__ import annotations

import logging
import uuid
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Protocol

from automation.adapters.engine import EngineError, RunResult, StackLocked, Trace
from automation.adapters.history import HistoryStore, detail_key, put_run_detail
from stacks.runs.cause import Cause
from stacks.runs.model import Operation, run_name
from stacks.runs.record import DetailRef, Executor, Result, RunRecord
from stacks.times import rfc3339_seconds

LOG = logging.getLogger("hubwright.history")


class Failures(Protocol):
    def history_failed(self) -> None: ...


@dataclass(frozen=True)
class Begun:
    """A run the gate started: its id (the local executor's; runners report their HubStackRun's) and when."""

    id: str
    operation: Operation
    stack: str
    cluster: str
    cause: Cause
    refresh: bool
    started: datetime


class Recorder:
    def __init__(self, store: HistoryStore | None, *, executor: Executor, keep: int = 100,
                 metrics: Failures | None = None,
                 clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)):
        self.store, self.executor, self.keep = store, executor, keep
        self.metrics, self.clock = metrics, clock

    def begin(self, operation: str, *, stack: str, cluster: str, cause: Cause, refresh: bool) -> Begun:
        now = self.clock()
        op: Operation = operation if operation in ("up", "destroy", "preview", "recover") else "up"  # type: ignore[assignment]
        return Begun(run_name(stack, op, now, uuid.uuid4().hex[:8]), op, stack, cluster, cause, refresh, now)

    def record(self, begun: Begun, out: RunResult | None, error: BaseException | None,
               known: Callable[[], Collection[str]]) -> RunRecord | None:
        """The run's record, stored (None: no store, or it failed: said in the log)."""
        if self.store is None:
            return None
        source: Any = out if out is not None else error
        run_id = getattr(source, "run_id", None) or begun.id
        try:
            detail = self._detail(begun, run_id, getattr(source, "trace", None), getattr(source, "detail", None))
            record = RunRecord(
                id=run_id, stack=begun.stack, cluster=begun.cluster or None, operation=begun.operation,
                refresh=begun.refresh, cause=begun.cause, executor=self.executor,
                started=(out.started if out is not None and out.started else rfc3339_seconds(begun.started)),
                ended=(out.ended if out is not None and out.ended else rfc3339_seconds(self.clock())),
                result=result_of(begun.operation, out, error), reason=getattr(error, "reason", None),
                message=(out.message if out is not None else str(error))[:32768],
                changes=dict(out.changes) if out is not None else {},
                permalink=out.permalink if out is not None else None, detail=detail,
                known=tuple(sorted(known())))
            self.store.append(record, keep=self.keep)
            return record
        except Exception as exc:  # noqa: BLE001 - the history is a record: it never fails the run
            LOG.warning("%s: run %s not recorded in the history store %s: %s", begun.stack, run_id,
                        self.store.location, exc)
            if self.metrics is not None:
                self.metrics.history_failed()
            return None

    def _detail(self, begun: Begun, run_id: str, trace: Trace | None,
                stored: dict[str, Any] | None) -> DetailRef | None:
        assert self.store is not None
        if stored is not None:  # a runner stored it: its key is derived, never taken from the status
            ref = DetailRef.model_validate(stored)
            return ref.model_copy(update={"key": detail_key(begun.stack, run_id)})
        if trace is None:
            return None
        return put_run_detail(self.store, begun.stack, run_id, trace.diff, trace.log, dropped=trace.dropped)


def result_of(operation: str, out: RunResult | None, error: BaseException | None) -> Result:
    if out is not None:
        return "Succeeded" if out.ok else ("Drifted" if operation == "preview" else "Failed")
    if isinstance(error, StackLocked):
        return "Locked"
    if isinstance(error, EngineError) and error.reason == "RunCancelled":
        return "Cancelled"
    if isinstance(error, EngineError) and error.reason == "RunRefused":
        return "Refused"
    return "Failed"
