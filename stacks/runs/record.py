"""A stack's run history: one record per engine run, on either executor and every backend. Pure.

    record (small, in the stack's index)          detail (one object per run, gzip JSON, capped)
    id, stack, cluster, operation, refresh,  ──►  diff: the run's changes (stacks.plandiff's StackDiff)
    cause, executor, started, ended, result,      log:  the engine's output, its last --history-log-kib
    reason, message, changes, permalink,
    detail {key, sha256, bytes}, known

Both live in the history store (automation/adapters/history: the state backend's object store, S3 or the file
backend), never in etcd: a HubStackRun keeps only the detail's reference (status.detail). The store keeps a stack's
last `keep` records (--history-keep); a record's detail goes with it.

Who reads what: the hub administrator reads the whole record and detail (`python -m automation history`, with the
backend's credentials). A tenant reads `tenant_view`: the one rule of stacks.disclosure applied to every text of it
(message, diff, log), with the IDs the run's own inputs hold of its own side (`known`, kept in the record for it and
never shown).
"""
from __future__ import annotations

import gzip
import hashlib
import json
from typing import Any, Iterable, Literal, Mapping, Sequence

from pydantic import Field

from stacks.disclosure import redact
from stacks.plandiff.compare import StackDiff, summary
from stacks.runs.cause import Cause
from stacks.runs.model import DetailRef, Operation
from stacks.status import StatusModel, Time
from stacks.times import parse_seconds

Result = Literal["Succeeded", "Drifted", "Failed", "Cancelled", "Locked", "Refused"]
Executor = Literal["local", "runners"]
DETAIL_BYTES = 1024 * 1024  # a detail's most bytes, uncompressed: past it the diff's resources are cut (and counted)
MESSAGE_MAX = 32768


class RunRecord(StatusModel):
    """One engine run of one stack (module docstring)."""

    id: str = Field(max_length=253, description="The run: its HubStackRun's name with runners, the same form locally.")
    stack: str = Field(max_length=253)
    cluster: str | None = Field(None, max_length=320, description="namespace/name; none for a transit stack.")
    operation: Operation
    refresh: bool = False
    cause: Cause
    executor: Executor
    started: Time
    ended: Time
    result: Result
    reason: str | None = Field(None, max_length=128)
    message: str = Field("", max_length=MESSAGE_MAX)
    changes: dict[str, int] = Field(default_factory=dict)
    permalink: str | None = Field(None, max_length=2048)
    detail: DetailRef | None = None
    known: tuple[str, ...] = Field((), description="The IDs the cluster's tenant may read (never shown).")

    @property
    def duration(self) -> float | None:
        start, end = parse_seconds(self.started), parse_seconds(self.ended)
        return None if start is None or end is None else max(0.0, end - start)


def tail(text: str, limit: int) -> tuple[str, int]:
    """The last `limit` bytes of `text` from a line's start (one line longer than `limit`: its end), and how many
    bytes were dropped before them."""
    data = text.encode()
    if len(data) <= limit:
        return text, 0
    cut = len(data) - limit
    newline = data.find(b"\n", cut)
    start = newline + 1 if 0 <= newline < len(data) - 1 else cut
    return data[start:].decode(errors="replace"), start


def detail_body(diff: StackDiff | Mapping[str, Any], log: str, *, dropped: int = 0,
                limit: int = DETAIL_BYTES) -> bytes:
    """The detail object: {"diff", "log", "logDropped", "resourcesDropped"} as gzip JSON. `diff`: a StackDiff or its
    JSON; `log`: the end of the engine's output as the engine kept it (--history-log-kib), `dropped` the bytes
    before it. A diff past `limit` keeps its first resources, the rest counted."""
    whole = diff.to_json() if isinstance(diff, StackDiff) else dict(diff)
    resources = list(whole.get("resources") or ())
    cut = 0
    while True:
        document = {"diff": {**whole, "resources": resources}, "log": log, "logDropped": dropped,
                    "resourcesDropped": cut}
        raw = json.dumps(document, sort_keys=True, separators=(",", ":"), default=str).encode()
        if len(raw) <= limit or not resources:
            return gzip.compress(raw, mtime=0)
        half = max(1, len(resources) // 2) if len(resources) > 1 else 0
        cut += len(resources) - half
        resources = resources[:half]


def read_detail(body: bytes, ref: DetailRef) -> dict[str, Any]:
    """A stored detail back, checked against its reference: a body that does not hash to it is refused."""
    digest = hashlib.sha256(body).hexdigest()
    if digest != ref.sha256:
        raise ValueError(f"run detail {ref.key}: its SHA-256 is {digest[:12]}…, the record says {ref.sha256[:12]}…")
    return dict(json.loads(gzip.decompress(body)))


def ref_of(key: str, body: bytes) -> DetailRef:
    return DetailRef(key=key, sha256=hashlib.sha256(body).hexdigest(), bytes=len(body))


def diff_document(detail: Mapping[str, Any]) -> dict[str, Any]:
    """A detail's diff as the plan diff's renderers read it (stacks/plandiff/render.py)."""
    stack = detail.get("diff") or {"stack": "", "change": "unchanged", "resources": []}
    diff = StackDiff(stack["stack"], stack["change"], ())  # the counts: by the resources' kinds
    counts = summary([diff])
    for resource in stack["resources"]:
        counts["resources"][resource["change"]] += 1
    return {"stacks": [stack], "mesh": {}, "summary": counts}


def record_json(record: RunRecord) -> dict[str, Any]:
    """The record as people read it: `known` left out."""
    return record.model_dump(mode="json", by_alias=True, exclude={"known"}, exclude_none=True)


def tenant_view(record: RunRecord, detail: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(record, detail) as the cluster's tenant reads them: every ID the run's own inputs do not hold of its own side
    redacted in the engine's text (the message, the cause's words, the diff's URNs, types and values, the log:
    stacks.disclosure). The record's own names (its id, stack, cluster, the detail's reference: no engine text, and a
    hash may hold twelve digits in a row) stay as they are."""
    known = frozenset(record.known)
    shown = record_json(record)
    shown["message"] = redact(shown.get("message") or "", known)
    shown["cause"] = {**shown["cause"], "message": redact(shown["cause"].get("message") or "", known)}
    if shown.get("permalink"):
        shown["permalink"] = redact(shown["permalink"], known)
    return shown, None if detail is None else _redacted(dict(detail), known)


def _redacted(value: Any, known: frozenset[str]) -> Any:
    """Every string of a JSON value, keys too, redacted one by one (never the JSON text: an escape such as the
    `\\n` before an ID would hide it from the rule's word boundary)."""
    if isinstance(value, str):
        return redact(value, known)
    if isinstance(value, Mapping):
        return {redact(str(k), known): _redacted(v, known) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redacted(v, known) for v in value]
    return value


CLEAN_CHECKS = 10  # drift checks that found nothing, kept per stack whatever --history-keep says


def quiet(record: RunRecord) -> bool:
    """A drift check that found nothing: the clock's, not a change's (one an hour with the default interval)."""
    return record.operation == "preview" and record.result == "Succeeded"


def newest_first(records: Iterable[RunRecord], stack: str) -> list[RunRecord]:
    """A stack's records as readers list them: newest first, only the stack's own (an index holds no other's, but a
    reader does not take that on trust)."""
    return sorted((r for r in records if r.stack == stack), key=lambda r: (r.started, r.id), reverse=True)


def keep_last(records: Sequence[RunRecord], keep: int) -> tuple[list[RunRecord], list[RunRecord]]:
    """(kept, dropped): a stack's newest `keep` records and the others, each in the order they were recorded (a
    stack's runs are recorded one at a time, as they end). Drift checks that found nothing are kept apart, their
    newest CLEAN_CHECKS: an hourly check must not push a week's updates out of the history."""
    clean = [r for r in records if quiet(r)]
    stale = {id(r) for r in clean[:max(len(clean) - CLEAN_CHECKS, 0)]}
    rest = [r for r in records if not quiet(r)]
    cut = max(len(rest) - max(keep, 1), 0)
    gone = {id(r) for r in rest[:cut]} | stale
    return [r for r in records if id(r) not in gone], [r for r in records if id(r) in gone]
