"""Events: core/v1 Events (what `kubectl describe` shows), written off the workers' path.

`EventRecorder` is what the object port's `event` sends through (automation/adapters/kube/objects.py KubeObjects);
a controller records an Event with `objects.event(kind, raw, type, reason, message)`. The status subresource is
written by the controller kit's one status writer (automation/kit/status.py).
"""
from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from typing import Any, Callable, Literal

from kubernetes import client

from stacks.names import GROUP, VERSION
from stacks.times import rfc3339_seconds

LOG = logging.getLogger("hubwright.status")
COMPONENT = "hubwright"


class EventRecorder:
    """core/v1 Events on any object (a HubCluster, the HubConfig, a source object), sent by a background thread
    (like client-go's broadcaster) so that a worker never waits on one. Best effort: a failure to record is logged,
    never raised."""

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
