"""The run history's store on a directory (the file backend's: `<state dir>/.hubwright/history`), and what every
store of objects shares: the protocol (automation.adapters.history) over three calls, read, write and remove a key.

Names become keys, and keys become paths or object keys: a stack's name and a run's id are checked first (STACK,
RUN), so neither can reach outside the root ("..", "/"), whatever a caller or an index holds. A write is whole or
nothing (automation.adapters.atomic): a reader sees the old index or the new one, never a part.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from automation.adapters.atomic import replacing
from automation.adapters.history import HistoryError, detail_key, index_key
from stacks.names import STACK_NAME_MAX
from stacks.runs.record import DetailRef, RunRecord, keep_last, read_detail, ref_of

STACK = re.compile(rf"[A-Za-z0-9_.-]{{1,{STACK_NAME_MAX}}}")  # a Pulumi stack name
RUN = re.compile(r"[a-z0-9.-]{1,240}")  # a HubStackRun's name (stacks.runs.model.run_name); its file name fits 255


def _segment(name: str, pattern: re.Pattern[str]) -> bool:
    return pattern.fullmatch(name) is not None and name not in (".", "..")


def checked(stack: str, run_id: str | None = None) -> None:
    """Refuse a stack name or run id that is not one path segment of the allowed characters."""
    if not _segment(stack, STACK):
        raise HistoryError(f"run history: {stack!r} is no stack name ([A-Za-z0-9_.-], not . or ..)")
    if run_id is not None and not _segment(run_id, RUN):
        raise HistoryError(f"run history of {stack}: {run_id!r} is no run id ([a-z0-9.-], not . or ..)")


class Keyed:
    """The protocol on a store of keyed objects; a subclass gives `location` and _read, _write, _remove."""

    location: str

    def _read(self, key: str) -> bytes | None:  # None: no such object
        raise NotImplementedError

    def _write(self, key: str, body: bytes, kind: str) -> None:
        raise NotImplementedError

    def _remove(self, key: str) -> None:  # no such object is no error
        raise NotImplementedError

    def put_detail(self, stack: str, run_id: str, body: bytes) -> DetailRef:
        checked(stack, run_id)
        key = detail_key(stack, run_id)
        self._write(key, body, "application/gzip")
        return ref_of(key, body)

    def append(self, record: RunRecord, *, keep: int) -> list[RunRecord]:
        """The index first, then the dropped details: a failure between leaves an orphan detail, never a record
        whose detail is gone."""
        checked(record.stack, record.id)
        others = [r for r in self.records(record.stack) if r.id != record.id]
        kept, dropped = keep_last([*others, record], keep)
        body = json.dumps([r.model_dump(mode="json", by_alias=True) for r in kept], separators=(",", ":"))
        self._write(index_key(record.stack), body.encode(), "application/json")
        for old in dropped:
            self._remove(detail_key(old.stack, old.id))
        return dropped

    def records(self, stack: str) -> list[RunRecord]:
        checked(stack)
        key = index_key(stack)
        raw = self._read(key)
        if raw is None:
            return []
        try:
            items: Any = json.loads(raw)
            records = [RunRecord.model_validate(item) for item in items]
        except (ValueError, TypeError) as exc:  # pydantic's ValidationError is a ValueError
            raise HistoryError(f"run index {self.location}/{key}: not a list of run records ({exc})") from None
        for r in records:  # a record of another stack would reach that stack's details (detail, append)
            if r.stack != stack or not _segment(r.id, RUN):
                raise HistoryError(f"run index {self.location}/{key}: holds run {r.id!r} of stack {r.stack!r}")
        return records

    def detail(self, record: RunRecord) -> dict | None:
        if record.detail is None:
            return None
        checked(record.stack, record.id)
        key = detail_key(record.stack, record.id)
        body = self._read(key)
        if body is None:
            raise HistoryError(f"run detail {self.location}/{key}: not in the store")
        try:
            return read_detail(body, record.detail)
        except (ValueError, OSError, EOFError) as exc:  # a wrong hash; bytes that hash right but do not unpack
            raise HistoryError(f"{self.location}: {exc}") from None


class FileHistory(Keyed):
    """The history in a directory: one file per key, written beside its final name and renamed into place."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).absolute()
        self.location = f"file://{self.root}"

    def _path(self, key: str) -> Path:
        return self.root / key

    def _read(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise HistoryError(f"run history {self.location}/{key}: {exc.strerror or exc}") from None

    def _write(self, key: str, body: bytes, kind: str) -> None:
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with replacing(path, binary=True) as out:
                out.write(body)
        except OSError as exc:
            raise HistoryError(f"run history {self.location}/{key}: {exc.strerror or exc}") from None

    def _remove(self, key: str) -> None:
        try:
            os.unlink(self._path(key))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise HistoryError(f"run history {self.location}/{key}: {exc.strerror or exc}") from None
