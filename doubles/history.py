"""MemoryHistory: the run history's store (automation.adapters.history.HistoryStore) in memory, for direct tests."""
from __future__ import annotations

import threading

from automation.adapters.history import HistoryError, detail_key
from stacks.runs.record import DetailRef, RunRecord, keep_last, read_detail, ref_of


class MemoryHistory:
    location = "memory://history"

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.index: dict[str, list[RunRecord]] = {}
        self._lock = threading.Lock()

    def put_detail(self, stack: str, run_id: str, body: bytes) -> DetailRef:
        key = detail_key(stack, run_id)
        with self._lock:
            self.objects[key] = body
        return ref_of(key, body)

    def append(self, record: RunRecord, *, keep: int) -> list[RunRecord]:
        with self._lock:
            others = [r for r in self.index.get(record.stack, []) if r.id != record.id]
            kept, dropped = keep_last([*others, record], keep)
            self.index[record.stack] = kept
            for old in dropped:
                self.objects.pop(detail_key(old.stack, old.id), None)
        return dropped

    def records(self, stack: str) -> list[RunRecord]:
        with self._lock:
            return list(self.index.get(stack, []))

    def detail(self, record: RunRecord) -> dict | None:
        if record.detail is None:
            return None
        key = detail_key(record.stack, record.id)
        with self._lock:
            body = self.objects.get(key)
        if body is None:
            raise HistoryError(f"run detail {key}: not in the store")
        try:
            return read_detail(body, record.detail)
        except ValueError as exc:
            raise HistoryError(str(exc)) from None

