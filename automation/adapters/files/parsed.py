"""YAML files read before, kept by path, size and modification time: a plan of an unchanged folder parses nothing.

Reading YAML is most of what loading 10,000 cluster files costs (about 4 s of 5 here); the documents of a file
whose path, size and mtime are unchanged are the ones read last time. One file per folder read, under the plan's
cache directory (automation.adapters.engine.plan_cache.default_dir): files-v1/<sha256 of the folder's path>.
Only a file that read cleanly is kept; one with an error is read (and refused) every time.

The store is a pickle read back by an unpickler that builds only plain data (dicts, lists, strings, numbers, dates):
a planted file cannot run code. Still, whoever can write it decides what the plan reads, like the plan cache: share
it only among trusted writers. A store that cannot be read is ignored; one that cannot be written costs speed only.
"""
from __future__ import annotations

import datetime
import hashlib
import io
import os
import pickle
import time
from pathlib import Path
from typing import Any

from automation.adapters.atomic import replacing

VERSION = "files-v1"
_ALLOWED = {("datetime", "datetime"), ("datetime", "date"), ("datetime", "timezone"), ("datetime", "timedelta")}
Stamp = tuple[int, int]  # size, mtime in ns
RACY_NS = 2_000_000_000


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED:
            return getattr(datetime, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not plain data")


class ParsedFiles:
    """`get(path)`: the documents read from `path` last time, if it has not changed since; `put(path, docs)`;
    `save()` once the folder is read."""

    def __init__(self, cache_dir: Path, folder: str):
        name = hashlib.sha256(os.path.abspath(folder).encode()).hexdigest()
        self.path = Path(cache_dir) / VERSION / f"{name}.pickle"
        self._old: dict[str, tuple[Stamp, list[dict]]] = self._load()
        self._new: dict[str, tuple[Stamp, list[dict]]] = {}
        self.hits = 0

    def _load(self) -> dict[str, tuple[Stamp, list[dict]]]:
        try:
            with open(self.path, "rb") as fh:
                found = _PlainUnpickler(io.BytesIO(fh.read())).load()
        except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError):
            return {}
        return found if isinstance(found, dict) else {}

    @staticmethod
    def _stamp(path: str) -> Stamp | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        return st.st_size, st.st_mtime_ns

    def get(self, path: str) -> list[dict] | None:
        stamp = self._stamp(path)
        old = self._old.get(path)
        if stamp is None or old is None or tuple(old[0]) != stamp:
            return None
        self._new[path] = old
        self.hits += 1
        return old[1]

    def put(self, path: str, docs: list[dict]) -> None:
        """Kept unless written in the last RACY_NS: a second edit of the same size within the file system's
        timestamp granularity would otherwise read as unchanged (git's "racy clean" problem)."""
        stamp = self._stamp(path)
        if stamp is not None and stamp[1] < time.time_ns() - RACY_NS:
            self._new[path] = (stamp, docs)

    def save(self) -> None:
        if self._new == self._old:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with replacing(self.path, binary=True) as fh:
                pickle.dump(self._new, fh, protocol=pickle.HIGHEST_PROTOCOL)
        except OSError:
            pass
