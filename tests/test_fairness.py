"""Fair queueing per namespace, through the whole service (issue #14): a tenant whose clusters keep failing
must not make another tenant wait for its backlog.

The API server is kmock's Kubernetes emulator (doubles.MockKubeAPI), the engine the recording double whose
runs take RUN seconds; the service has FAST's 4 workers and short backoff (at most 0.5 s), so tenant A's 50
failing clusters come back faster than 4 workers can run them and A always has a backlog of ready keys.
"""
from __future__ import annotations

import time

import pytest
from kubernetes import client

from doubles.engine import RecordingEngine
from doubles.kube import MockKubeAPI
from doubles.service_env import FAST, ServiceEnv, wait_until

RUN = 1.0  # seconds per engine run: long against the API round trips below, so the wait measures the queue
# On top of the one run B may wait for: the watch event and the resolve that queue B's key, the failed run's
# status and Event writes before its worker is free, B's finalizer and status writes before `up`: a handful of
# round trips to an emulator busy with A's writes: B's whole wait measured 0.6-1.1 s on a loaded 2-core machine.
# The old FIFO queue made B wait for A's whole backlog instead (~45 keys / 4 workers, each run plus its
# writes): 23-25 s measured.
# A safety net: 2.8 s was seen beside a 2-worker suite, 8.5 s on a CI run of the whole suite (2026-11-29). The order
# of hand-outs below is the proof; the bound only has to stay well under the old queue's 23-25 s.
MARGIN = 10.0
TENANT_A, TENANT_B = "tenant-a", "tenant-b"


@pytest.fixture
def env():
    with MockKubeAPI() as api:
        env = ServiceEnv(client.ApiClient(api.configuration()), namespace=TENANT_A)
        env.namespace(TENANT_A, owner="222222222222")
        env.namespace(TENANT_B, owner="333333333333")
        env.hub(privateLink={"endpointsPerVPC": 100})  # room for A's 50 endpoints and B's in one VPC
        yield env


def test_a_tenant_with_50_failing_clusters_does_not_delay_another_tenants_run_beyond_one_run_time(env):
    engine = RecordingEngine(run_seconds=RUN)
    names = [f"c-{i:02d}" for i in range(50)]
    for name in names:
        engine.fail("up", f"{TENANT_A}.{name}", times=10**6, message="AccessDenied: not authorized")
        env.create(name, namespace=TENANT_A)
    workers = FAST["workers"]
    with env.running(engine) as service:
        queue = service.pipeline.queue
        # A holds every worker, its failed runs are coming back, and it has far more ready than 4 workers take.
        wait_until(lambda: queue.in_flight == workers and queue.depth >= 20
                   and sum(c.ok is False for c in engine.runs("up")) >= 2 * workers,
                   30, what="tenant A's failing runs to hold every worker, with a backlog")
        backlog = queue.depth
        handed: list[tuple[str, str]] = []  # ("push" | "pop", key), in the queue's own order (under its lock)
        ready = queue._ready
        push, pop = ready.push, ready.pop

        def pushed(key):
            handed.append(("push", key))
            push(key)

        def popped():
            key = pop()
            handed.append(("pop", key))
            return key

        ready.push, ready.pop = pushed, popped
        asked = time.monotonic()
        env.create("new", namespace=TENANT_B, accountID="333333333333")
        created = time.monotonic()  # the API server answers once B's Cluster exists (slowly: it is busy with A)
        up = wait_until(lambda: engine.runs("up", f"{TENANT_B}.new"), 60, what="tenant B's up")[0]
        waited = up.started - created
        # B took one worker, not the service: A's retries go on beside it.
        wait_until(lambda: any(c.started > up.started for c in engine.runs("up") if c.stack.startswith(TENANT_A)),
                   5, what="a run of tenant A after B's")
    print(f"\ntenant B: create answered in {created - asked:.2f}s; its up started {waited:.2f}s later "
          f"(tenant A: {backlog} keys ready, {workers} in flight; one run: {RUN}s)")
    # The fairness itself, whatever the machine's load: once B's key is ready, the next key handed to a worker is
    # B's, not one of A's backlog (the old FIFO queue handed out A's ~45 first).
    key_b = f"{TENANT_B}/new"
    since_ready = handed[handed.index(("push", key_b)):]
    first_pop = next(key for op, key in since_ready if op == "pop")
    assert first_pop == key_b, f"A's {first_pop} was handed out before B's ready key (A: {backlog} ready)"
    # And the time it comes to: one run of A's to end, plus a few round trips to a busy emulator.
    assert waited < RUN + MARGIN, f"tenant B waited {waited:.2f}s (A: {backlog} ready); bound {RUN + MARGIN}s"
