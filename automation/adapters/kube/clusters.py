"""What the clusters' reconciler does to the API server, and nothing more: `ClusterClient`.

    status        the Cluster's status as this service last wrote it, else as the cache has it
    write         patch the status subresource now (False: the Cluster is gone)
    write_later   record the status now, patch it from the background (a finished run's report)
    forget        drop what is remembered of a Cluster that is gone
    event         a core/v1 Event on the Cluster (best effort, off the caller's thread)
    edit_finalizers  change metadata.finalizers, written with the resourceVersion it was read at (409: read again)
    revoke_agent  delete the Cluster's facts agent identity (automation/adapters/kube/agent.py)
    close         wait for the writes still in flight

`KubeClusters` is the real one, over the official client (StatusWriter, EventRecorder, CustomObjectsApi: every
call with a timeout); doubles.clusters.FakeClusters is the in-memory one the reconciler's unit tests use.
"""
from __future__ import annotations

from typing import Any, Callable, Literal, Protocol

from kubernetes import client
from kubernetes.client.rest import ApiException

from automation.adapters.kube.agent import revoke_agent
from automation.adapters.kube.status import EventRecorder, StatusWriter
from stacks.errors import Failure
from stacks.names import CLUSTERS, GROUP, VERSION
from stacks.status import UPDATE_FAILED, ClusterStatus

TIMEOUT = (5, 30)  # (connect, read) seconds of every call here
FINALIZER_ATTEMPTS = 5  # conflicts (409) in a row before an edit of the finalizers gives up

Raw = dict[str, Any]


class FinalizerConflict(Failure):
    """The finalizers could not be written: another writer won every one of FINALIZER_ATTEMPTS tries (transient:
    retried with backoff, reported like a failed run)."""

    reason = UPDATE_FAILED


class ClusterClient(Protocol):
    def status(self, key: str, raw: Raw) -> ClusterStatus:
        """The status as this service last wrote it (its uid matching), else as `raw` (the cache's copy) has it."""

    def write(self, raw: Raw, status: ClusterStatus, *, previous: ClusterStatus) -> bool:
        """Patch the status subresource now; False when the Cluster is gone."""

    def write_later(self, raw: Raw, status: ClusterStatus, *, previous: ClusterStatus) -> None:
        """Record the status now (the next `status` reads it); patch it from the background."""

    def forget(self, key: str) -> None:
        """The Cluster is gone: drop what is remembered of it."""

    def event(self, raw: Raw, type_: Literal["Normal", "Warning"], reason: str, message: str) -> None:
        """A core/v1 Event on the Cluster; never raises."""

    def edit_finalizers(self, raw: Raw, change: Callable[[list[str]], list[str]]) -> bool:
        """Apply `change` to the live finalizers and write them with the resourceVersion they were read at, reading
        again after a 409; False when the Cluster is gone; FinalizerConflict after too many conflicts."""

    def revoke_agent(self, namespace: str, name: str) -> None:
        """Delete the facts agent's ServiceAccount, Role and RoleBinding of the Cluster (gone already is fine)."""

    def close(self) -> None:
        """Wait for the writes still in flight."""


class KubeClusters:
    """ClusterClient over the official client."""

    def __init__(self, api_client: client.ApiClient, *, status: StatusWriter | None = None,
                 events: EventRecorder | None = None):
        self._api_client = api_client
        self._custom = client.CustomObjectsApi(api_client)
        self.writer = status or StatusWriter(api_client)
        self.events = events or EventRecorder(api_client)

    def status(self, key: str, raw: Raw) -> ClusterStatus:
        return self.writer.current(key, raw)

    def write(self, raw: Raw, status: ClusterStatus, *, previous: ClusterStatus) -> bool:
        return self.writer.write(raw, status, previous=previous)

    def write_later(self, raw: Raw, status: ClusterStatus, *, previous: ClusterStatus) -> None:
        self.writer.write_later(raw, status, previous=previous)

    def forget(self, key: str) -> None:
        self.writer.forget(key)

    def event(self, raw: Raw, type_: Literal["Normal", "Warning"], reason: str, message: str) -> None:
        self.events.event(raw, type_, reason, message)

    def edit_finalizers(self, raw: Raw, change: Callable[[list[str]], list[str]]) -> bool:
        meta = raw["metadata"]
        live = raw  # the cached copy first: usually current, and a conflict costs one read
        for _ in range(FINALIZER_ATTEMPTS):
            try:
                names = list((live.get("metadata") or {}).get("finalizers") or [])
                wanted = change(names)
                if wanted == names:
                    return True
                self._custom.patch_namespaced_custom_object(
                    GROUP, VERSION, meta["namespace"], CLUSTERS, meta["name"],
                    {"metadata": {"finalizers": wanted or None,
                                  "resourceVersion": live["metadata"].get("resourceVersion")}},
                    _request_timeout=TIMEOUT)
                return True
            except ApiException as exc:
                if exc.status == 404:
                    return False
                if exc.status != 409:
                    raise
            try:
                live = self._custom.get_namespaced_custom_object(GROUP, VERSION, meta["namespace"], CLUSTERS,
                                                                 meta["name"], _request_timeout=TIMEOUT)
            except ApiException as exc:
                if exc.status == 404:
                    return False
                raise
        raise FinalizerConflict(f"could not update the finalizers of {meta.get('namespace')}/{meta['name']}: "
                                f"{FINALIZER_ATTEMPTS} conflicts")

    def revoke_agent(self, namespace: str, name: str) -> None:
        revoke_agent(self._api_client, namespace, name)

    def close(self) -> None:
        """The status writer's background writes (the Events are the EventRecorder owner's to close)."""
        self.writer.close()
