"""The failover scenario: a leader whose API connection stalls, and the replica that takes over.

Two replicas of the service (automation.service.serve.Service) against a real kube-apiserver
(doubles/envtest.py), sharing one engine double (doubles.RecordingEngine) so that runs of one stack by both
replicas would show as overlapping. Replica A leads and talks to the API server through a TCP proxy
(doubles/stall_proxy.py); while A's `up` of a Cluster is in flight, the proxy stops forwarding without closing
anything. Replica B, directly connected, takes over and runs the stack.

tests/test_leader_stall.py runs it once and asserts on it; `python -m bench.failover` repeats it and prints
the figures.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import urlparse

from kubernetes import client

from automation.service.options import ServiceOptions
from doubles.engine import RecordingEngine
from doubles.engine import Call
from doubles.envtest import EnvTest
from doubles.service_env import ServiceEnv, wait_until
from doubles.stall_proxy import StallProxy

DEPLOYED = {name: ServiceOptions.__dataclass_fields__[name].default
            for name in ("lease_duration", "renew_deadline", "retry_period")}
FAST = {"lease_duration": 4.0, "renew_deadline": 2.0, "retry_period": 0.5}  # the 2 s margin leader.py requires


@dataclass
class Failover:
    """What one run of the scenario saw; times are time.monotonic()."""

    stack: str
    stalled_at: float = 0.0
    lost_at: float | None = None  # A's on_lost_leadership (after the halt and engine.cancel)
    cancels_when_lost: list[float] = field(default_factory=list)  # engine.cancel graces by then
    leading_at: float | None = None  # B's on_started_leading
    calls: list[Call] = field(default_factory=list)  # every run of both replicas, in start order
    max_concurrent_per_stack: int = 0

    def old_leader_runs(self) -> list[Call]:
        return [c for c in self.calls if self.leading_at is None or c.started < self.leading_at]

    def new_leader_runs(self) -> list[Call]:
        return [c for c in self.calls if self.leading_at is not None and c.started >= self.leading_at]

    def stall_to_stopped_leading(self) -> float | None:
        return None if self.lost_at is None else self.lost_at - self.stalled_at

    def stall_to_new_leader_run(self) -> float | None:
        runs = self.new_leader_runs()
        return runs[0].started - self.stalled_at if runs else None


def wait(predicate: Callable[[], Any], timeout: float) -> bool:
    """wait_until, saying whether it happened: the scenario records what did not, the bench counts it."""
    try:
        wait_until(predicate, timeout)
    except AssertionError:
        return False
    return True


def failover(api_server: EnvTest, *, lease_duration: float, renew_deadline: float,
             retry_period: float) -> Failover:
    """A leads and runs a gated `up`; the proxy in front of A stalls; B takes over. Returns what happened
    (the gate opens when A says it lost the Lease, so that B's `up` can finish)."""
    env = ServiceEnv.isolated(api_server.api_client())
    record = Failover(stack=f"{env.ns}.prod-1")
    engine = RecordingEngine()
    gate = engine.gate(record.stack)
    upstream = urlparse(api_server.host)
    proxy = StallProxy((upstream.hostname, upstream.port))
    configuration = api_server.configuration()
    configuration.host = f"https://127.0.0.1:{proxy.port}"  # the serving certificate is for 127.0.0.1
    a_client = client.ApiClient(configuration)
    options = dict(leader_election=True, leader_election_id="hubwright", lease_duration=lease_duration,
                   renew_deadline=renew_deadline, retry_period=retry_period, watch_namespace=env.ns)
    a = ServiceEnv(a_client, namespace=env.ns, system_namespace=env.system_namespace,
                   hub_name=env.hub_name).service(engine, identity="replica-a", **options)
    b = env.service(engine, identity="replica-b", **options)

    def a_lost() -> None:  # where the CLI calls os._exit(1)
        record.lost_at = time.monotonic()
        record.cancels_when_lost = list(engine.cancels)
        gate.set()

    a.on_lost_leadership = a_lost
    b_starts = b.elector.on_started_leading

    def b_leads() -> None:
        record.leading_at = record.leading_at or time.monotonic()
        b_starts()

    b.elector.on_started_leading = b_leads
    try:
        a.start()
        if not wait(lambda: a.leading() and a.ready()[0], 30):
            raise TimeoutError("replica A did not lead and sync")
        b.start()
        if not wait(lambda: b.elector.holder == "replica-a", 30):
            raise TimeoutError("replica B did not see A's Lease")
        env.create("prod-1")
        if not wait(lambda: engine.count("up", record.stack), 30):
            raise TimeoutError("replica A did not start the up")
        record.stalled_at = time.monotonic()
        proxy.stall()
        takeover = math.ceil(lease_duration) + 2 * retry_period + 10
        wait(lambda: record.leading_at and engine.runs("up", record.stack)[-1].started >= record.leading_at,
             takeover)
        if record.lost_at is not None:  # the gate is open: B's up finishes
            wait(lambda: all(c.ended for c in engine.runs(stack=record.stack)), 10)
        record.calls = engine.runs(stack=record.stack)
        record.max_concurrent_per_stack = engine.max_concurrent_per_stack
    finally:
        # A (stopped first, so that it cannot take the Lease B releases) finishes its calls once the bytes flow.
        proxy.resume()
        a.stop()
        b.stop()
        proxy.close()
        a_client.close()
        env.api_client.close()
    return record
