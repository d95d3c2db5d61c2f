"""What the clusters' reconciler does to the API server, and nothing more: `ClusterClient`, over the object port.

    status        the HubCluster's status as this service last wrote it, else as the cache has it
    write         patch the status subresource now (False: the HubCluster is gone)
    write_later   record the status now, patch it from the background (a finished run's report)
    forget        drop what is remembered of a HubCluster that is gone
    event         a core/v1 Event on the HubCluster (best effort, off the caller's thread)
    ensure_finalizer / edit_finalizers  metadata.finalizers, written at the resourceVersion it was read at (409:
                  read again)
    revoke_agent  delete the HubCluster's facts agent identity (its RoleBinding, Role and ServiceAccount)
    close         wait for the writes still in flight

One implementation, a composition of the controller kit's parts: the status writer (automation/kit/status.py),
the finalizer helper (automation/kit/finalizers.py) and the object port (automation/kit/objects.py). The same class
runs in production over automation.adapters.kube.objects.KubeObjects and in the direct tests over
doubles.objects.FakeObjects (doubles.clusters.FakeClusters). `ProgressReport` writes a running up's progress
through it.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Literal

from automation.kit.finalizers import edit_finalizers, ensure_finalizer
from automation.adapters.kube.agent import revoke_identity
from automation.kit.objects import HUBCLUSTERS, Objects
from automation.kit.status import StatusWriter
from stacks.status import OTHER_WRITERS_STATUS_FIELDS, ClusterStatus, RunProgress

LOG = logging.getLogger("hubwright.status")
PROGRESS_EVERY = 2.0  # seconds between two writes of a run's progress (status.lastUpdate.progress) per cluster

Raw = dict[str, Any]


def cluster_writer(objects: Objects, *, background: bool = True) -> StatusWriter:
    """The status writer of HubClusters' own status: never the fields other writers own (the registry's, the
    discovery's status.network)."""
    return StatusWriter(objects, HUBCLUSTERS, exclude=OTHER_WRITERS_STATUS_FIELDS, background=background)


def _doc(status: ClusterStatus) -> Raw:
    return status.model_dump(by_alias=True, exclude_none=True, mode="json")


class ClusterClient:
    """The reconciler's side of the API server (module docstring)."""

    def __init__(self, objects: Objects, *, writer: StatusWriter | None = None):
        self.objects = objects
        self.writer = writer if writer is not None else cluster_writer(objects)

    def status(self, key: str, raw: Raw) -> ClusterStatus:
        """The status as this service last wrote it (its uid matching), else as `raw` (the cache's copy) has it."""
        try:
            return ClusterStatus.model_validate(self.writer.current(raw))
        except ValueError:  # someone wrote garbage into our status: start over
            LOG.warning("%s: unreadable status, starting from an empty one", key)
            return ClusterStatus()

    def write(self, raw: Raw, status: ClusterStatus, *, previous: ClusterStatus) -> bool:
        """Patch the status subresource now; False when the HubCluster is gone."""
        return self.writer.write(raw, _doc(status), previous=_doc(previous))

    def write_later(self, raw: Raw, status: ClusterStatus, *, previous: ClusterStatus) -> None:
        """Record the status now (the next `status` reads it); patch it from the background."""
        self.writer.write_later(raw, _doc(status), previous=_doc(previous))

    def forget(self, key: str) -> None:
        """The HubCluster is gone: drop what is remembered of it."""
        self.writer.forget(key)

    def event(self, raw: Raw, type_: Literal["Normal", "Warning"], reason: str, message: str) -> None:
        """A core/v1 Event on the HubCluster; never raises."""
        self.objects.event(HUBCLUSTERS, raw, type_, reason, message)

    def ensure_finalizer(self, raw: Raw, name: str) -> bool:
        """`name` among the HubCluster's finalizers (added last when missing); False when it is gone."""
        return ensure_finalizer(self.objects, HUBCLUSTERS, raw, name) is not None

    def edit_finalizers(self, raw: Raw, change: Callable[[list[str]], list[str]]) -> bool:
        """Apply `change` to the live finalizers and write them at the resourceVersion they were read at, reading
        again after a 409; False when the HubCluster is gone; FinalizerConflict after too many conflicts."""
        return edit_finalizers(self.objects, HUBCLUSTERS, raw, change) is not None

    def revoke_agent(self, namespace: str, name: str) -> None:
        """Delete the facts agent's RoleBinding, Role and ServiceAccount of the HubCluster (and so its tokens);
        gone already is fine."""
        revoke_identity(self.objects, namespace, name)

    def close(self) -> None:
        """Wait for the status writer's background writes (the Events are the port owner's to close)."""
        self.writer.close()


class ProgressReport:
    """A running up's progress (done, planned: the engine's on_progress) into status.lastUpdate.progress, through the
    client's background writes, at most every `every` seconds. `status` is the last status written (the run's
    result is written over it); `latest` the last count heard, written or not."""

    def __init__(self, client: ClusterClient, raw: Raw, running: ClusterStatus, *, every: float = PROGRESS_EVERY,
                 clock: Callable[[], float] = time.monotonic):
        self._client, self._raw, self._every, self._clock = client, raw, every, clock
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
        self._client.write_later(self._raw, self.status, previous=before)
