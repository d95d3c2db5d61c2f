"""The run history's store (stacks/runs/record.py): each stack's records and each run's detail (its diff and its
engine log), kept outside etcd, in the state backend's own object store or one named by --history-store.

    <root>/<stack>/index.json               the stack's last --history-keep records, oldest first (RunRecord JSON)
    <root>/<stack>/runs/<run id>.json.gz    one run's detail (stacks.runs.record.detail_body), hashed in its record

<root> is `.hubwright/history` beside the backend's `.pulumi/`: `file://<dir>` → `<dir>/.hubwright/history`,
`s3://bucket/prefix?endpoint=…` → the same bucket, `<prefix>/.hubwright/history`.

Only one writer per stack at a time: the service (a run's record, after the run) and the runner that executes the
run (its detail, before it reports the run finished), so the index's read-modify-write needs no lock.
"""
from __future__ import annotations

from typing import Protocol

from stacks.runs.record import DetailRef, RunRecord, detail_body


class HistoryStore(Protocol):
    location: str  # where, for people: "file:///state/.hubwright/history", "s3://bucket/.hubwright/history"

    def put_detail(self, stack: str, run_id: str, body: bytes) -> DetailRef:
        """Store a run's detail (stacks.runs.record.detail_body) at detail_key(stack, run_id)."""

    def append(self, record: RunRecord, *, keep: int) -> list[RunRecord]:
        """Add `record` to its stack's index (replacing one of the same id), keep the newest `keep`, delete the
        details of those dropped; returns the dropped records."""

    def records(self, stack: str) -> list[RunRecord]:
        """The stack's records, oldest first ([] when it has none)."""

    def detail(self, record: RunRecord) -> dict | None:
        """The record's detail, checked against its hash (stacks.runs.record.read_detail); None when it has none.
        A missing object or a wrong hash raises HistoryError."""


class HistoryError(Exception):
    """The history store failed or holds something that does not check out; names the key."""


def detail_key(stack: str, run_id: str) -> str:
    """A run's detail key, derived from its stack and id only (so no reference a record carries can point at
    another stack's)."""
    return f"{stack}/runs/{run_id}.json.gz"


def index_key(stack: str) -> str:
    return f"{stack}/index.json"


def put_run_detail(store: HistoryStore, stack: str, run_id: str, diff: dict | None, log: str, *,
                   dropped: int = 0) -> DetailRef:
    """Store what the engine did in one run (its diff, the end of its log) as the run's detail: the one way both the
    service (the local executor) and a runner do it."""
    body = detail_body(diff or {"stack": stack, "change": "unchanged", "resources": []}, log, dropped=dropped)
    return store.put_detail(stack, run_id, body)
