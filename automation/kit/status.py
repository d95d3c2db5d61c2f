"""The one status writer: merge patches of an object's status subresource, through the object port, for any kind.

    writer = StatusWriter(objects, HUBCLUSTERS, exclude=OTHER_WRITERS_STATUS_FIELDS)
    writer.write(raw, doc, previous=before)         the whole status now (False: the object is gone)
    writer.write_later(raw, doc, previous=before)   the whole status, recorded now, patched from the background
    writer.current(raw)                             the whole status as this writer last wrote it, else raw's
    writer.write_entries(raw, {("mesh", "transit", stack): entry, ("networkError",): None})
                                                    named entries, each written whole (None removes one); the
                                                    others are left as they are
    writer.forget(key), writer.close()

Every write is complete: the patch (stacks.conditions.status_patch) carries the whole new document and a null for
every field, at any depth, that a document before it had and the new one lacks: as `previous` says, as the copy
handed in (the informer's) has it, and as this writer last sent it (by uid), so no stale nested field survives (a
Running mark keeping the last run's endTime, outputs.endpointVPC outliving PrivateLink, a region gone from a transit
stack's outputs). A write that failed may or may not have landed: the next write of that document nulls what either
had ("what I sent, and what a failed write may have left"). Lists are replaced whole by a merge patch; only
objects need the nulls.

A whole-status write carries none of the `exclude`d top-level fields (other writers' fields: the registry's, the
discovery's) and never nulls them; `write_entries` writes any path. `write_later` records the document at once (so
`current` reads it) and patches it from a background thread (`background=False`: on the caller's thread, for
tests): writes of one object stay in order, a newer write supersedes a pending older one and waits for one in
flight; a failed background write is retried with backoff, then left to the next write, which carries it anyway.

Why not server-side apply: it would need managedFields on every object (bigger objects in every watch event and in
the cache, field-set work on each write); fields written before by merge patches belong to no applier, so an apply
would not remove exactly the stale fields this fixes; and the kmock double has no field ownership, so tests and
bench would not see what production does. The merge patch costs a dict walk on the client and nothing more on the
server.
"""
from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable, Mapping

from automation.adapters.backoff import Backoff
from automation.kit.objects import Kind, Obj, Objects
from stacks.conditions import status_patch, union

LOG = logging.getLogger("hubwright.status")
RETRY = Backoff(0.2, 5.0)  # between attempts at one background write
ATTEMPTS = 6  # background attempts at one write before it is left to the next

Raw = dict[str, Any]
Path = tuple[str, ...]  # where an entry sits in the status: ("network",), ("mesh", "transit", "_tgw_1111")
WHOLE: Path = ()  # the whole status (less the excluded fields)


def _at(doc: Mapping[str, Any], path: Path) -> Any:
    for name in path:
        if not isinstance(doc, Mapping):
            return None
        doc = doc.get(name)  # type: ignore[assignment]
    return doc


def _put(body: Raw, path: Path, value: Any) -> None:
    for name in path[:-1]:
        body = body.setdefault(name, {})
    body[path[-1]] = value


class StatusWriter:
    """Writes the status subresource of one kind's objects and keeps, per object (its uid), what it sent and what a
    failed write may have left (module docstring)."""

    def __init__(self, objects: Objects, kind: Kind, *, exclude: Iterable[str] = (), threads: int = 2,
                 background: bool = True, retry: Backoff = RETRY):
        self.objects, self.kind = objects, kind
        self.exclude = frozenset(exclude)
        self._background, self._threads, self._retry = background, threads, retry
        self._lock = threading.Lock()
        self._written: dict[str, tuple[str | None, Raw]] = {}  # key -> (uid, the whole status last written)
        # key -> path -> (uid, what may be on the server): the document it confirmed, or after a failed write every
        # field it or the documents before it had. The next write of the path nulls what it drops of these.
        self._sent: dict[str, dict[Path, tuple[str | None, Raw]]] = {}
        self._key_locks: dict[str, threading.Lock] = {}
        self._seq: dict[str, int] = {}
        self._pool: ThreadPoolExecutor | None = None

    # -- the whole status
    def current(self, raw: Mapping[str, Any]) -> Raw:
        """The whole status as this writer last wrote it (the object's uid matching), else as `raw` has it."""
        obj = Obj(raw)
        with self._lock:
            mine = self._written.get(obj.key)
        return mine[1] if mine is not None and mine[0] == obj.uid else dict(obj.status)

    def write(self, raw: Raw, doc: Raw, *, previous: Raw | None = None) -> bool:
        """Patch the whole status to `doc` now (`previous`: what the caller last knew it as); False when the object
        is gone. A refusal raises (automation.kit.objects.ApiError), and the next write nulls what it may have left."""
        key, _ = self._next(raw)
        with self._key_lock(key):
            ok = self._patch(raw, doc, previous or {})
        if ok:
            self._remember(raw, doc)
        return ok

    def write_later(self, raw: Raw, doc: Raw, *, previous: Raw | None = None) -> None:
        """Record `doc` now (`current` reads it); patch it from the background (retried, superseded by newer writes)."""
        key, seq = self._next(raw)
        self._remember(raw, doc)
        if not self._background:
            self._flush(key, seq, raw, doc, previous or {})
            return
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="status")
            pool = self._pool
        pool.submit(self._flush, key, seq, raw, doc, previous or {})

    def _flush(self, key: str, seq: int, raw: Raw, doc: Raw, previous: Raw) -> None:
        for attempt in range(ATTEMPTS):
            with self._key_lock(key):
                with self._lock:
                    if self._seq.get(key) != seq:
                        return  # a newer status supersedes this one
                try:
                    self._patch(raw, doc, previous)
                    return
                except Exception as exc:  # noqa: BLE001 - retried; the next write carries it anyway
                    LOG.warning("%s %s: status write failed (%s); attempt %d", self.kind.kind, key, exc, attempt + 1)
            time.sleep(self._retry.delay(attempt))
        LOG.error("%s %s: status not written after retries; the next write carries it", self.kind.kind, key)

    def _patch(self, raw: Raw, doc: Raw, previous: Raw) -> bool:
        obj = Obj(raw)
        new, old, server = (self._part(d) for d in (doc, previous, obj.status))
        sent = self._sent_doc(obj.key, WHOLE, obj.uid)
        if new == old and server == new and sent in ({}, new):
            return True
        patch = status_patch(new, old, server, sent)
        try:
            written = self.objects.patch_status(self.kind, obj.name, patch, obj.namespace)
        except Exception:
            self._maybe_sent(obj.key, WHOLE, obj.uid, sent, old, server, new)
            raise
        if written is None:
            return False
        self._set_sent(obj.key, WHOLE, obj.uid, new)
        return True

    def _part(self, doc: Mapping[str, Any]) -> Raw:
        return {key: value for key, value in doc.items() if key not in self.exclude}

    # -- named entries
    def write_entries(self, raw: Raw, entries: Mapping[Path, Any], *, at_version: bool = False) -> Raw | None:
        """One merge patch of the named entries, each written whole (None: removed; a list or a value replaces what
        was there); the others left as they are. With `at_version`, at the resourceVersion `raw` was read at
        (automation.kit.objects.Conflict if the object moved on since). The object as written (`raw` when there is
        nothing to write), None when it is gone; a refusal raises, and the next write of an entry nulls what it may
        have left."""
        if not entries:
            return raw
        if not all(entries):
            raise ValueError("an entry is named by its path in the status: the whole status is write()'s")
        obj = Obj(raw)
        with self._key_lock(obj.key):
            body: Raw = {}
            befores: dict[Path, Raw] = {}
            for path, entry in entries.items():
                if entry is None:
                    _put(body, path, None)
                    continue
                before = _at(obj.status, path)
                befores[path] = before if isinstance(before, dict) else {}
                olds = [d for d in (befores[path], self._sent_doc(obj.key, path, obj.uid)) if d]
                _put(body, path, status_patch(entry, *olds) if isinstance(entry, dict) else entry)
            try:
                written = self.objects.patch_status(self.kind, obj.name, body, obj.namespace,
                                                    resource_version=obj.resource_version if at_version else None)
            except Exception:
                for path, entry in entries.items():
                    if isinstance(entry, dict):
                        self._maybe_sent(obj.key, path, obj.uid, self._sent_doc(obj.key, path, obj.uid),
                                         befores[path], entry)
                raise
            if written is None:
                return None
            for path, entry in entries.items():
                self._set_sent(obj.key, path, obj.uid, entry if isinstance(entry, dict) else None)
            return written

    # -- what it keeps
    def _sent_doc(self, key: str, path: Path, uid: str | None) -> Raw:
        with self._lock:
            sent = self._sent.get(key, {}).get(path)
        return sent[1] if sent is not None and sent[0] == uid else {}

    def _set_sent(self, key: str, path: Path, uid: str | None, doc: Raw | None) -> None:
        with self._lock:
            if doc is None:
                self._sent.get(key, {}).pop(path, None)
            else:
                self._sent.setdefault(key, {})[path] = (uid, doc)

    def _maybe_sent(self, key: str, path: Path, uid: str | None, *docs: Raw) -> None:
        """A write failed: the server has what it had (any of the documents before it) or, if the write landed,
        the new one. The next write nulls whatever of all of them it drops."""
        merged: Raw = {}
        for doc in docs:
            merged = union(merged, doc)
        self._set_sent(key, path, uid, merged)

    def _next(self, raw: Mapping[str, Any]) -> tuple[str, int]:
        key = Obj(raw).key
        with self._lock:
            self._seq[key] = self._seq.get(key, 0) + 1
            return key, self._seq[key]

    def _remember(self, raw: Mapping[str, Any], doc: Raw) -> None:
        obj = Obj(raw)
        with self._lock:
            self._written[obj.key] = (obj.uid, doc)

    def _key_lock(self, key: str) -> threading.Lock:
        with self._lock:
            return self._key_locks.setdefault(key, threading.Lock())

    def forget(self, key: str) -> None:
        """The object is gone: drop what is kept of it."""
        with self._lock:
            self._written.pop(key, None)
            self._sent.pop(key, None)
            self._key_locks.pop(key, None)
            self._seq.pop(key, None)

    def close(self) -> None:
        """Wait for the background writes."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
