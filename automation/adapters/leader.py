"""Leader election with a coordination.k8s.io/v1 Lease: two replicas never run the same stack.

client-go's algorithm: the leader renews the Lease every `retry_period`; a
candidate takes it over only when the record (holder, renewTime) has not changed
for `lease_duration` by its own clock (no clock sync needed); every write carries
the resourceVersion it read, so two candidates cannot both win. A leader that
cannot renew within `renew_deadline` stops leading (and the service stops its
workers) before anyone else may take over. On a clean shutdown the leader clears
the holder so a follower takes over at once.
"""
from __future__ import annotations

import logging
import socket
import threading
import time
import uuid
from datetime import datetime, timezone
from typing import Any, Callable

from kubernetes import client
from kubernetes.client.rest import ApiException

from automation.adapters.loop import Loop

LOG = logging.getLogger("clusternet.leader")


def default_identity() -> str:
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def _micro_time() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector(Loop):
    stop_timeout = 10.0  # a leader releases its Lease on the way out

    def __init__(self, api_client: client.ApiClient, *, name: str, namespace: str, identity: str | None = None,
                 lease_duration: float = 15.0, renew_deadline: float = 10.0, retry_period: float = 2.0,
                 on_started_leading: Callable[[], None] = lambda: None,
                 on_stopped_leading: Callable[[], None] = lambda: None,
                 clock: Callable[[], float] = time.monotonic):
        if not retry_period < renew_deadline < lease_duration:
            raise ValueError("leader election needs retry_period < renew_deadline < lease_duration "
                             f"(got {retry_period}, {renew_deadline}, {lease_duration})")
        super().__init__("leader-election")
        self._api = client.CoordinationV1Api(api_client)
        self.name, self.namespace = name, namespace
        self.identity = identity or default_identity()
        self.lease_duration, self.renew_deadline, self.retry_period = lease_duration, renew_deadline, retry_period
        self.on_started_leading, self.on_stopped_leading = on_started_leading, on_stopped_leading
        self._clock = clock
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._last_renew = 0.0
        self.holder: str | None = None
        self._leading = threading.Event()

    @property
    def is_leader(self) -> bool:
        return self._leading.is_set()

    def run(self) -> None:
        try:
            while not self._stop.is_set():
                ok = self._try()
                now = self._clock()
                if ok:
                    self._last_renew = now
                    if not self.is_leader:
                        LOG.info("%s: leading (Lease %s/%s)", self.identity, self.namespace, self.name)
                        self._leading.set()
                        self.on_started_leading()
                elif self.is_leader and now - self._last_renew >= self.renew_deadline:
                    LOG.warning("%s: could not renew Lease %s/%s for %.0fs; stopping", self.identity,
                                self.namespace, self.name, now - self._last_renew)
                    self._lose()
                self._stop.wait(self.retry_period)
        finally:
            if self.is_leader:
                self._lose()
                self._release()

    def _lose(self) -> None:
        self._leading.clear()
        self.on_stopped_leading()

    # -- one attempt to acquire or renew
    def _try(self) -> bool:
        try:
            lease = self._api.read_namespaced_lease(self.name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                LOG.info("reading Lease %s/%s failed: %s", self.namespace, self.name, exc.status)
                return False
            return self._create()
        except Exception as exc:  # noqa: BLE001 - API unreachable: not leading, try again
            LOG.info("reading Lease %s/%s failed: %s", self.namespace, self.name, exc)
            return False
        spec = lease.spec or client.V1LeaseSpec()
        record = (spec.holder_identity, spec.renew_time, spec.lease_transitions)
        now = self._clock()
        if record != self._observed:
            self._observed, self._observed_at = record, now
        self.holder = spec.holder_identity
        duration = spec.lease_duration_seconds or self.lease_duration
        if spec.holder_identity and spec.holder_identity != self.identity and now < self._observed_at + duration:
            return False  # someone else holds a live Lease
        mine = spec.holder_identity == self.identity
        body = self._body(lease, {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.lease_duration),
                                  "renewTime": _micro_time(),
                                  "acquireTime": spec.acquire_time.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
                                  if mine and spec.acquire_time else _micro_time(),
                                  "leaseTransitions": (spec.lease_transitions or 0) + (0 if mine else 1)})
        try:
            self._api.replace_namespaced_lease(self.name, self.namespace, body)
        except Exception as exc:  # noqa: BLE001 - conflict (someone else won) or API trouble
            LOG.info("%s: Lease %s/%s not taken/renewed: %s", self.identity, self.namespace, self.name,
                     getattr(exc, "status", exc))
            return False
        self.holder = self.identity
        return True

    def _body(self, lease: Any, spec: dict[str, Any]) -> dict[str, Any]:
        """A whole Lease for an update (verb `update`, as client-go): it carries the resourceVersion read,
        so of two candidates writing the same version only one succeeds."""
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace,
                             "resourceVersion": lease.metadata.resource_version},
                "spec": spec}

    def _create(self) -> bool:
        now = _micro_time()
        body = {"metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.lease_duration),
                         "acquireTime": now, "renewTime": now, "leaseTransitions": 0}}
        try:
            self._api.create_namespaced_lease(self.namespace, body)
        except Exception as exc:  # noqa: BLE001 - 409: another candidate created it first
            LOG.info("%s: creating Lease %s/%s failed: %s", self.identity, self.namespace, self.name,
                     getattr(exc, "status", exc))
            return False
        self.holder = self.identity
        return True

    def _release(self) -> None:
        try:
            lease = self._api.read_namespaced_lease(self.name, self.namespace)
            if lease.spec is None or lease.spec.holder_identity != self.identity:
                return
            self._api.replace_namespaced_lease(self.name, self.namespace, self._body(
                lease, {"holderIdentity": None, "leaseDurationSeconds": 1, "renewTime": _micro_time(),
                        "leaseTransitions": lease.spec.lease_transitions or 0}))
            LOG.info("%s: released Lease %s/%s", self.identity, self.namespace, self.name)
        except Exception as exc:  # noqa: BLE001 - the Lease expires by itself
            LOG.info("%s: releasing the Lease failed (%s); it expires by itself", self.identity, exc)
