"""Reporting on the Cluster: kstatus conditions, the status subresource, Events.

Conditions (kstatus): exactly one story at a time -
  ready        Ready=True                       Reconciling=False  Stalled=False
  progressing  Ready=Unknown  (Progressing...)  Reconciling=True   Stalled=False
  retrying     Ready=False    (UpdateFailed...) Reconciling=True   Stalled=False   (a retry is scheduled)
  stalled      Ready=False    (InvalidSpec...)  Reconciling=False  Stalled=True    (nothing runs until the input changes)
Every condition carries observedGeneration; lastTransitionTime only moves when the status flips.

`StatusWriter` patches `status` (merge patch on the status subresource) and keeps
what it wrote: the reconciler reads its own last write instead of a watch cache
that may lag behind it, so a re-queued key never re-runs a stack it just applied.
Every write is complete: the patch (`status_patch`) carries the whole new status
and a null for every field, at any depth, that the status had before (as this
service last wrote it, as it may still be on the server, and as the cache saw
it) and the new one lacks, so no stale nested field survives (a Running mark
keeping the last run's endTime, outputs.endpointVPC outliving PrivateLink).
Lists are replaced whole by a merge patch; only objects need the nulls.
Why not server-side apply: it would need managedFields on every Cluster (bigger
objects in every watch event and in the cache, field-set work on each write);
fields written before by merge patches belong to no applier, so an apply would
not remove exactly the stale fields this fixes; and the kmock double has no
field ownership, so tests and bench would not see what production does. The
merge patch costs a dict walk on the client and nothing more on the server.
`EventRecorder` writes core/v1 Events (what `kubectl describe hubcluster` shows), off the workers' path.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Literal, Protocol

from kubernetes import client
from kubernetes.client.rest import ApiException

from automation.adapters.backoff import Backoff
from stacks.names import CLUSTERS, GROUP, VERSION
from stacks.conditions import status_patch, union as union_of
from stacks.status import OTHER_WRITERS_STATUS_FIELDS, ClusterStatus, RunProgress
from stacks.times import rfc3339_seconds

LOG = logging.getLogger("hubwright.status")
_RETRY = Backoff(0.2, 5.0)  # between attempts at one status write
COMPONENT = "hubwright"

def _service_part(status: dict[str, Any]) -> dict[str, Any]:
    """The status without the fields other writers own (the registry's, the discovery's): the reconciler's patches
    never carry or null them."""
    return {key: value for key, value in status.items() if key not in OTHER_WRITERS_STATUS_FIELDS}


class StatusWriter:
    """Writes Cluster status and remembers the last status per cluster (by uid).

    `write` patches now; `write_later` records the status at once (so the next
    reconcile of the key reads it) and patches from a background thread, so a
    worker does not wait for the report of a finished run. Writes of one key stay
    in order: a newer write supersedes a pending older one, and waits for one in flight.
    """

    def __init__(self, api_client: client.ApiClient, *, threads: int = 2):
        self._api = client.CustomObjectsApi(api_client)
        self._lock = threading.Lock()
        self._written: dict[str, tuple[str | None, dict[str, Any]]] = {}
        # What may be on the server per key (by uid): the last status it confirmed, or after a failed write
        # every field it or the status before it had. The next patch nulls what it drops of these.
        self._sent: dict[str, tuple[str | None, dict[str, Any]]] = {}
        self._key_locks: dict[str, threading.Lock] = {}
        self._seq: dict[str, int] = {}
        self._threads = threads
        self._pool: ThreadPoolExecutor | None = None

    def current(self, key: str, raw: dict[str, Any]) -> ClusterStatus:
        """The status as this service last wrote it, else as the cache has it."""
        uid = (raw.get("metadata") or {}).get("uid")
        with self._lock:
            mine = self._written.get(key)
        doc = mine[1] if mine is not None and mine[0] == uid else raw.get("status") or {}
        try:
            return ClusterStatus.model_validate(doc)
        except ValueError:  # someone wrote garbage into our status: start over
            LOG.warning("%s: unreadable status, starting from an empty one", key)
            return ClusterStatus()

    def write(self, raw: dict[str, Any], status: ClusterStatus, *, previous: ClusterStatus) -> bool:
        """Patch the status subresource now; False when the Cluster is gone."""
        key, seq = self._next(raw)
        with self._key_lock(key):
            ok = self._patch(raw, status, previous)
        if ok:
            self._remember(raw, status)
        return ok

    def write_later(self, raw: dict[str, Any], status: ClusterStatus, *, previous: ClusterStatus) -> None:
        """Record the status now; patch it from the background (retried, superseded by newer writes)."""
        key, seq = self._next(raw)
        self._remember(raw, status)
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="status")
            pool = self._pool
        pool.submit(self._flush, key, seq, raw, status, previous)

    def _flush(self, key: str, seq: int, raw: dict[str, Any], status: ClusterStatus,
               previous: ClusterStatus) -> None:
        for attempt in range(6):
            with self._key_lock(key):
                if self._seq.get(key) != seq:
                    return  # a newer status supersedes this one
                try:
                    self._patch(raw, status, previous)
                    return
                except Exception as exc:  # noqa: BLE001 - retried; the next write carries it anyway
                    LOG.warning("%s: status write failed (%s); attempt %d", key, exc, attempt + 1)
            time.sleep(_RETRY.delay(attempt))
        LOG.error("%s: status not written after retries; the next write of this cluster carries it", key)

    def _patch(self, raw: dict[str, Any], status: ClusterStatus, previous: ClusterStatus) -> bool:
        meta = raw["metadata"]
        key, uid = f"{meta.get('namespace')}/{meta['name']}", meta.get("uid")
        new, old, server = (_service_part(doc) for doc in (
            status.model_dump(by_alias=True, exclude_none=True, mode="json"),
            previous.model_dump(by_alias=True, exclude_none=True, mode="json"),
            raw.get("status") or {}))
        with self._lock:
            sent = self._sent.get(key)
        sent_doc = sent[1] if sent is not None and sent[0] == uid else {}
        if new == old and server == new and sent_doc in ({}, new):
            return True
        patch = status_patch(new, old, server, sent_doc)
        try:
            self._api.patch_namespaced_custom_object_status(
                GROUP, VERSION, meta["namespace"], CLUSTERS, meta["name"], {"status": patch})
        except Exception as exc:
            if isinstance(exc, ApiException) and exc.status == 404:
                return False
            self._maybe_sent(key, uid, sent_doc, old, server, new)
            raise
        with self._lock:
            self._sent[key] = (uid, new)
        return True

    def _maybe_sent(self, key: str, uid: str | None, *docs: dict[str, Any]) -> None:
        """A write failed: the server has what it had (any of the documents before it) or, if the write
        landed, the new one. The next write nulls whatever of all of them it drops."""
        merged: dict[str, Any] = {}
        for doc in docs:
            merged = union_of(merged, doc)
        with self._lock:
            self._sent[key] = (uid, merged)

    def _next(self, raw: dict[str, Any]) -> tuple[str, int]:
        meta = raw["metadata"]
        key = f"{meta.get('namespace')}/{meta['name']}"
        with self._lock:
            self._seq[key] = self._seq.get(key, 0) + 1
            return key, self._seq[key]

    def _remember(self, raw: dict[str, Any], status: ClusterStatus) -> None:
        meta = raw["metadata"]
        key = f"{meta.get('namespace')}/{meta['name']}"
        with self._lock:
            self._written[key] = (meta.get("uid"), status.model_dump(by_alias=True, exclude_none=True, mode="json"))

    def _key_lock(self, key: str) -> threading.Lock:
        with self._lock:
            return self._key_locks.setdefault(key, threading.Lock())

    def forget(self, key: str) -> None:
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


class EventRecorder:
    """core/v1 Events on Clusters (and the HubConfig), sent by a background thread (like client-go's broadcaster)
    so that a worker never waits on one. Best effort: a failure to record is logged, never raised."""

    def __init__(self, api_client: client.ApiClient, *, instance: str = "",
                 clock: Callable[[], float] = time.time, pending: int = 1000):
        self._api = client.CoreV1Api(api_client)
        self._instance = instance
        self._clock = clock
        self._queue: queue.Queue = queue.Queue(maxsize=pending)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.dropped = 0

    def event(self, raw: dict[str, Any], type_: Literal["Normal", "Warning"], reason: str, message: str, *,
              kind: str = "HubCluster", api_version: str = f"{GROUP}/{VERSION}") -> None:
        """An Event on `raw` (its metadata); a cluster-scoped object's (a HubConfig's) goes to `default`."""
        meta = raw.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        now = rfc3339_seconds(self._clock())
        body = {
            "metadata": {"name": f"{meta.get('name')}.{uuid.uuid4().hex[:12]}", "namespace": namespace},
            "involvedObject": {"apiVersion": api_version, "kind": kind, "name": meta.get("name"),
                               "namespace": meta.get("namespace"), "uid": meta.get("uid"),
                               "resourceVersion": meta.get("resourceVersion")},
            "type": type_, "reason": reason, "message": message[:1024],
            "source": {"component": COMPONENT}, "reportingComponent": f"{GROUP}/{COMPONENT}",
            "reportingInstance": self._instance, "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        self._start()
        try:
            self._queue.put_nowait(body)
        except queue.Full:
            self.dropped += 1
            if self.dropped % 100 == 1:
                LOG.warning("event backlog full: dropped %s on %s/%s (%d dropped so far)", reason, namespace,
                            meta.get("name"), self.dropped)

    def close(self, timeout: float = 5.0) -> None:
        """Send what is queued (up to `timeout`), then stop."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout)

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._send_all, name="events", daemon=True)
                self._thread.start()

    def _send_all(self) -> None:
        while (body := self._queue.get()) is not None:
            try:
                # The answer is not read: not turning it back into a V1Event saves most of the call's CPU.
                answer = self._api.create_namespaced_event(body["metadata"]["namespace"], body,
                                                           _preload_content=False)
                answer.read()  # drained, so that its connection goes back to the pool
                answer.release_conn()
            except Exception as exc:  # noqa: BLE001 - an Event is best effort
                LOG.warning("could not record event %s on %s/%s: %s", body["reason"],
                            body["metadata"]["namespace"], body["involvedObject"]["name"], exc)


# --------------------------------------------------------------------------- a run's progress

PROGRESS_EVERY = 2.0  # seconds between two writes of a run's progress (status.lastUpdate.progress) per cluster


class LaterWriter(Protocol):
    """What ProgressReport writes through: StatusWriter, or the reconciler's ClusterClient (kube/clusters.py)."""

    def write_later(self, raw: dict[str, Any], status: ClusterStatus, *, previous: ClusterStatus) -> None: ...


class ProgressReport:
    """A running up's progress (done, planned: the engine's on_progress) into status.lastUpdate.progress, through the
    status writer's background writes, at most every `every` seconds. `status` is the last status written (the
    run's result is written over it); `latest` the last count heard, written or not."""

    def __init__(self, writer: LaterWriter, raw: dict[str, Any], running: ClusterStatus, *,
                 every: float = PROGRESS_EVERY, clock: Callable[[], float] = time.monotonic):
        self._writer, self._raw, self._every, self._clock = writer, raw, every, clock
        self.status = running
        self.latest: RunProgress | None = None
        self._last = clock()  # the Running mark was just written: the first count waits `every` too

    def __call__(self, done: int, planned: int) -> None:
        self.latest = RunProgress(done=min(done, planned), planned=planned)
        now = self._clock()
        last = self.status.last_update
        if now - self._last < self._every or last is None:
            return
        self._last = now
        before, self.status = self.status, self.status.model_copy(update={
            "last_update": last.model_copy(update={"progress": self.latest})})
        self._writer.write_later(self._raw, self.status, previous=before)

