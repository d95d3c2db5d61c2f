"""Leader election with a coordination.k8s.io/v1 Lease: two replicas never run the same stack.

client-go's algorithm: the leader renews the Lease every `retry_period`; a
candidate takes it over only when the record (holder, renewTime) has not changed
for `lease_duration` by its own clock (no clock sync needed); every write carries
the resourceVersion it read, so two candidates cannot both win. A leader that
cannot renew within `renew_deadline` stops leading (and the service kills its
runs and exits) before anyone else may take over. On a clean shutdown the leader
clears the holder so a follower takes over at once.

Why that holds even when the API connection stalls (issue #13):

- A follower's clock for a record starts when it sees the record, so after the
  write was sent. The leader therefore counts its deadline from the moment it
  SENT its last successful write, not from the answer: a late answer cannot
  push its deadline past the follower's takeover.
- A watchdog thread ends the leadership at that deadline whatever the Lease calls
  are doing; a call that hangs cannot delay it. An answer that arrives after its
  deadline does not count.
- Every Lease call is one HTTP request bounded by `request_timeout` (a quarter of
  `renew_deadline`), so the loop keeps trying and a stop is bounded too.
"""
from __future__ import annotations

import copy
import logging
import math
import socket
import threading
import time
import uuid
from datetime import datetime, timezone
from typing import Any, Callable

from kubernetes import client
from kubernetes.client.rest import ApiException

from automation.adapters.kube.objects import error_text
from automation.adapters.loop import Loop
from stacks.times import rfc3339_micro

LOG = logging.getLogger("hubwright.leader")

# lease_duration - renew_deadline: after its deadline the leader halts its workers, kills its runs' process trees
# (engine.cancel(0)) and exits, all before a follower may take the Lease (lease_duration after the leader's last
# renewal). That takes milliseconds on a healthy node; 2 s covers the watchdog's tick, a starved CPU or a GC pause,
# and the drift between the two replicas' clock rates.
MIN_MARGIN = 2.0
WATCHDOG_TICK = 0.05  # how late after its deadline a leader may notice it


def default_identity() -> str:
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def _micro_time() -> str:
    return rfc3339_micro(datetime.now(timezone.utc))


class LeaderElector(Loop):
    stop_timeout = 10.0  # a leader releases its Lease on the way out

    def __init__(self, api_client: client.ApiClient, *, name: str, namespace: str, identity: str | None = None,
                 lease_duration: float = 15.0, renew_deadline: float = 10.0, retry_period: float = 2.0,
                 on_started_leading: Callable[[], None] = lambda: None,
                 on_stopped_leading: Callable[[], None] = lambda: None,
                 clock: Callable[[], float] = time.monotonic):
        if not 0 < retry_period < renew_deadline:
            raise ValueError(f"leader election needs 0 < retry_period < renew_deadline (got {retry_period}, "
                             f"{renew_deadline})")
        if lease_duration - renew_deadline < MIN_MARGIN:
            raise ValueError(f"leader election needs lease_duration - renew_deadline >= {MIN_MARGIN:g}s, the time "
                             f"a leader has to kill its runs and exit before a follower may take over (got "
                             f"{lease_duration} - {renew_deadline})")
        super().__init__("leader-election")
        # A client of its own without urllib3's retries (3 by default, each with a fresh timeout): one Lease call
        # is one request, bounded by request_timeout.
        configuration = copy.copy(api_client.configuration)
        configuration.retries = False
        self._api = client.CoordinationV1Api(client.ApiClient(configuration))
        # An attempt in flight (2 calls) and the release (2 calls) take at most renew_deadline: with the
        # defaults, the 10 s that stop() waits.
        self.request_timeout = renew_deadline / 4
        self.name, self.namespace = name, namespace
        self.identity = identity or default_identity()
        self.lease_duration, self.renew_deadline, self.retry_period = lease_duration, renew_deadline, retry_period
        self.on_started_leading, self.on_stopped_leading = on_started_leading, on_stopped_leading
        self._clock = clock
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._last_renew = 0.0  # when the last successful write was sent (self._clock)
        self.holder: str | None = None
        self._leading = threading.Event()
        self._transition = threading.Lock()  # one leadership change at a time, callbacks included
        self._refused: str | None = None  # the last refusal of a Lease call said (a WARNING once, not every try)

    @property
    def is_leader(self) -> bool:
        return self._leading.is_set()

    def run(self) -> None:
        done = threading.Event()
        threading.Thread(target=self._watchdog, args=(done,), name="leader-deadline", daemon=True).start()
        try:
            while not self._stop.is_set():
                sent = self._try()
                if sent is not None:
                    self._renewed(sent)
                self._stop.wait(self.retry_period)
        finally:
            done.set()
            with self._transition:
                if self.is_leader:
                    self._lose()
            if self.holder == self.identity:
                self._release()

    def _renewed(self, sent: float) -> None:
        with self._transition:
            if self._stop.is_set():
                return  # stopping: run() releases the Lease
            late = self._clock() - sent
            if late >= self.renew_deadline:
                LOG.warning("%s: Lease %s/%s written, but the answer took %.1fs: not counted", self.identity,
                            self.namespace, self.name, late)
                return
            self._last_renew = sent
            if not self.is_leader:
                LOG.info("%s: leading (Lease %s/%s)", self.identity, self.namespace, self.name)
                self._leading.set()
                self.on_started_leading()

    def _watchdog(self, done: threading.Event) -> None:
        """Stop leading `renew_deadline` after the last successful renewal was sent, whatever the calls do."""
        while not done.wait(WATCHDOG_TICK):
            with self._transition:
                overdue = self._clock() - self._last_renew
                if self.is_leader and overdue >= self.renew_deadline:
                    LOG.warning("%s: could not renew Lease %s/%s for %.1fs; stopping", self.identity,
                                self.namespace, self.name, overdue)
                    self._lose()

    def _lose(self) -> None:
        self._leading.clear()
        self.on_stopped_leading()

    # -- one attempt to acquire or renew: when the successful write was sent, or None
    def _try(self) -> float | None:
        try:
            lease = self._api.read_namespaced_lease(self.name, self.namespace, _request_timeout=self.request_timeout)
        except ApiException as exc:
            if exc.status != 404:
                self._said(f"reading Lease {self.namespace}/{self.name} failed: {error_text(exc)}",
                           refused=exc.status in (401, 403))
                return None
            return self._create()
        except Exception as exc:  # noqa: BLE001 - API unreachable or too slow: try again
            LOG.info("reading Lease %s/%s failed: %s", self.namespace, self.name, exc)
            return None
        spec = lease.spec or client.V1LeaseSpec()
        record = (spec.holder_identity, spec.renew_time, spec.lease_transitions)
        now = self._clock()
        if record != self._observed:
            self._observed, self._observed_at = record, now
        self.holder = spec.holder_identity
        duration = spec.lease_duration_seconds or self.lease_duration
        if spec.holder_identity and spec.holder_identity != self.identity and now < self._observed_at + duration:
            return None  # someone else holds a live Lease
        mine = spec.holder_identity == self.identity
        body = self._body(lease, {"holderIdentity": self.identity, "leaseDurationSeconds": self._duration_seconds(),
                                  "renewTime": _micro_time(),
                                  "acquireTime": rfc3339_micro(spec.acquire_time)
                                  if mine and spec.acquire_time else _micro_time(),
                                  "leaseTransitions": (spec.lease_transitions or 0) + (0 if mine else 1)})
        return self._write("taking/renewing", lambda: self._api.replace_namespaced_lease(
            self.name, self.namespace, body, _request_timeout=self.request_timeout))

    def _write(self, what: str, call: Callable[[], Any]) -> float | None:
        """One write that makes this replica the holder: when it was sent (the deadline counts from then), or
        None when it failed (a conflict: someone else won; or API trouble)."""
        sent = self._clock()
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - not the holder this round; try again
            self._said(f"{self.identity}: {what} Lease {self.namespace}/{self.name} failed: {error_text(exc)}",
                       refused=getattr(exc, "status", None) in (401, 403))
            return None
        self.holder = self.identity
        return sent

    def _said(self, text: str, *, refused: bool) -> None:
        """A failed Lease call: a refusal (401, 403: a person must give this identity its Role) is a WARNING the
        first time it reads so, then DEBUG while it stays the same; anything else (a conflict, the API away) INFO."""
        if not refused:
            LOG.info("%s", text)
        elif text != self._refused:
            LOG.warning("%s; retrying every %gs, said again only when it changes", text, self.retry_period)
        else:
            LOG.debug("%s", text)
        self._refused = text if refused else None

    def _duration_seconds(self) -> int:
        """Followers wait this long; rounded up, never down, so the margin over renew_deadline stays."""
        return math.ceil(self.lease_duration)

    def _body(self, lease: Any, spec: dict[str, Any]) -> dict[str, Any]:
        """A whole Lease for an update (verb `update`, as client-go): it carries the resourceVersion read,
        so of two candidates writing the same version only one succeeds."""
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace,
                             "resourceVersion": lease.metadata.resource_version},
                "spec": spec}

    def _create(self) -> float | None:
        now = _micro_time()
        body = {"metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": self._duration_seconds(),
                         "acquireTime": now, "renewTime": now, "leaseTransitions": 0}}
        return self._write("creating", lambda: self._api.create_namespaced_lease(
            self.namespace, body, _request_timeout=self.request_timeout))

    def _release(self) -> None:
        try:
            lease = self._api.read_namespaced_lease(self.name, self.namespace, _request_timeout=self.request_timeout)
            if lease.spec is None or lease.spec.holder_identity != self.identity:
                return
            self._api.replace_namespaced_lease(self.name, self.namespace, self._body(
                lease, {"holderIdentity": None, "leaseDurationSeconds": 1, "renewTime": _micro_time(),
                        "leaseTransitions": lease.spec.lease_transitions or 0}), _request_timeout=self.request_timeout)
            self.holder = None
            LOG.info("%s: released Lease %s/%s", self.identity, self.namespace, self.name)
        except Exception as exc:  # noqa: BLE001 - the Lease expires by itself
            LOG.info("%s: releasing the Lease failed (%s); it expires by itself", self.identity, exc)
