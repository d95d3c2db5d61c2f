"""PulumiEngine against the real `pulumi` CLI and the S3 backend, on moto's S3 in server mode: the shared state
runners on different nodes need (docs/service.md).

The backend URL is `s3://<bucket>?endpoint=127.0.0.1:PORT&disableSSL=true&s3ForcePathStyle=true&region=us-east-1`,
with test credentials in the CLI's environment. The stack programs are dynamic resources
(doubles/pulumi_programs.py, and the gated one below), so no provider plugin and no cloud account are involved;
what lives in the bucket is read back with boto3.

What the tests establish about the lock (pulumi/pkg/backend/diy/lock.go, as this CLI runs it):
- a run in flight holds one object `.pulumi/locks/organization/hubwright/<stack>/<uuid>.json` ({pid, username,
  hostname, timestamp}); recovery removes a runner's (--runner-hosts) only once that runner holds no live claim;
- taking the lock is check, write, check again: both of two runs can pass the first check and write their lock
  (test_two_runs_both_pass_the_lock_check...). On a store whose listing sees every completed write (moto's S3, and
  AWS S3 since its strong consistency) the second check then refuses one or both, never admits both; but nothing
  makes the write atomic, the store's listing is all the exclusion rests on, and the lock is no lease: removed
  under a run in flight (a stale-lock recovery, `pulumi cancel`), it lets a second run in beside the first
  (test_a_lock_removed_under_a_run_in_flight...). So only the claim (a runner kills its run before its claim
  expires, and a lock is judged stale only after it did) excludes a second run of a stack.
"""
from __future__ import annotations

import dataclasses
import json
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

import pytest
from pulumi.dynamic import Resource

from automation.adapters.engine import StackLocked
from automation.adapters.engine.pulumi_engine import PulumiEngine
from stacks.inputs import StackInputs
from stacks.options import default
from doubles.pulumi_programs import (
    change_cloud, cloudy, engine_settings, human_stack, make_inputs, sleepy_program,
)
from doubles.providers import GateProvider
from doubles.s3_gate import S3Gate
from doubles.service_env import wait_until
from tests.moto_server import CREDENTIALS, s3_bucket

BUCKET = "hubwright-state"
RUNNER = "hubwright-runner-abc12-x1y2z"  # a runner pod's host name, as --runner-hosts' default matches it
DYNAMIC = "pulumi-python:dynamic:Resource"


def backend_url(port: int | str, bucket: str = BUCKET) -> str:
    return f"s3://{bucket}?endpoint=127.0.0.1:{port}&disableSSL=true&s3ForcePathStyle=true&region=us-east-1"


@pytest.fixture
def s3(moto, monkeypatch) -> Any:
    """boto3's S3 client on moto, the state bucket made; the credentials also in this process's environment (the
    CLI a test runs by hand, human_stack, inherits them)."""
    return s3_bucket(moto, monkeypatch, BUCKET)


def s3_engine(tmp: Path, name: str, backend: str, program: Any = None) -> PulumiEngine:
    """One runner's engine: its own state dir and PULUMI_HOME (as a runner pod has), the shared S3 backend."""
    settings = engine_settings(tmp / name, backend_url=backend, home=tmp / f"home-{name}")
    settings = dataclasses.replace(settings, env={**settings.env, **CREDENTIALS},
                                   runner_hosts=default("runner-hosts"))
    factory: Any = program or sleepy_program()  # a program of StackInputs (the tests' stacks are clusters')
    return PulumiEngine(settings, program_factory=factory)


def keys(s3: Any, prefix: str = ".pulumi/") -> list[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


def lock_prefix(stack: str) -> str:
    return f".pulumi/locks/organization/hubwright/{stack}/"


# --------------------------------------------------------------------------- create, no-op, drift, destroy


def test_create_noop_drift_destroy_round_trip_through_the_bucket(pulumi_cli, moto, s3, tmp_path):
    cloud = tmp_path / "cloud"
    engine = s3_engine(tmp_path, "runner-a", backend_url(moto.url.rsplit(":", 1)[1]),
                       program=lambda inputs: cloudy(inputs, cloud=str(cloud), count=2))
    inputs = make_inputs()
    assert engine.applied(inputs.stack) is None

    created = engine.up(inputs, message="cluster acme/prod-1 created")
    assert created.ok and created.changes == {"create": 3}
    assert created.outputs["cluster"] == "acme/prod-1" and created.outputs["things"] == 2
    stored = keys(s3)
    assert ".pulumi/stacks/hubwright/acme.prod-1.json" in stored
    assert any(k.startswith(".pulumi/history/hubwright/acme.prod-1/") for k in stored)
    assert any(k.startswith(".pulumi/backups/hubwright/acme.prod-1/") for k in stored)
    assert not [k for k in stored if k.startswith(".pulumi/locks/")]  # released with the run
    stack_object = s3.get_object(Bucket=BUCKET, Key=".pulumi/stacks/hubwright/acme.prod-1.json")
    checkpoint = json.loads(stack_object["Body"].read())
    assert {r["urn"].rsplit("::", 1)[1] for r in checkpoint["checkpoint"]["latest"]["resources"]} >= \
        {"prod-1-thing-0", "prod-1-thing-1"}

    # Another runner (its own workspace and PULUMI_HOME) reads the same stack from the bucket.
    other = s3_engine(tmp_path, "runner-b", engine.settings.backend,
                      program=lambda i: cloudy(i, cloud=str(cloud), count=2))
    assert other.applied(inputs.stack) == inputs == engine.applied(inputs.stack)
    noop = other.up(inputs, message="periodic resync")
    assert noop.ok and noop.changes == {"same": 3}

    by_hand = human_stack(other, inputs.stack, tmp_path)
    history = by_hand.history(page_size=10)
    assert [(h.kind, h.result, h.message) for h in history] == [
        ("update", "succeeded", "hubwright: periodic resync"),
        ("update", "succeeded", "hubwright: cluster acme/prod-1 created")]
    assert by_hand.outputs()["things"].value == 2 and by_hand.outputs()["inputsDigest"].value == inputs.digest()

    change_cloud(cloud, "prod-1-thing-1", "changed-in-the-console")  # behind Pulumi's back
    drift = engine.preview(inputs)
    assert not drift.ok and drift.drifted == [f"prod-1-thing-1 ({DYNAMIC})"]
    assert len(by_hand.history(page_size=10)) == 2  # a preview writes no history

    gone = other.destroy(inputs.stack, message="cluster deleted")
    assert gone.ok and gone.changes == {"delete": 3}
    assert engine.applied(inputs.stack) is None
    assert ".pulumi/stacks/hubwright/acme.prod-1.json" not in keys(s3)
    assert not (cloud / "prod-1-thing-0").exists()


# --------------------------------------------------------------------------- locks


def test_a_run_in_flight_holds_a_lock_object_and_recovery_removes_a_runners_only_without_a_live_claim(
        pulumi_cli, moto, s3, tmp_path):
    backend = backend_url(moto.url.rsplit(":", 1)[1])
    marker = tmp_path / "create-started"
    slow = s3_engine(tmp_path, "runner-a", backend, program=sleepy_program(4, str(marker)))
    inputs = make_inputs()
    results: dict[str, Any] = {}
    run = threading.Thread(target=lambda: results.update(up=slow.up(inputs, message="slow create")))
    run.start()
    try:
        wait_until(marker.exists, timeout=120)
        [held] = keys(s3, lock_prefix(inputs.stack))
        real_lock = json.loads(s3.get_object(Bucket=BUCKET, Key=held)["Body"].read())
    finally:
        run.join(180)
    assert results["up"].ok and keys(s3, lock_prefix(inputs.stack)) == []
    assert set(real_lock) == {"pid", "username", "hostname", "timestamp"}

    # A runner pod's lock, written the way the CLI writes one: that runner died mid-run.
    runner_lock = f"{lock_prefix(inputs.stack)}0b5c7e52-runner-lock.json"
    s3.put_object(Bucket=BUCKET, Key=runner_lock, Body=json.dumps(
        {**real_lock, "pid": 4242, "hostname": RUNNER,
         "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds")}).encode())
    other = s3_engine(tmp_path, "runner-b", backend)
    with pytest.raises(StackLocked) as locked:
        other.up(inputs, message="blocked by the runner's lock")
    assert f"@{RUNNER} (pid 4242)" in str(locked.value)

    # Its claim still live (expiry, then the cancel grace): left alone.
    with pytest.raises(StackLocked) as live:
        other.recover(inputs.stack, live_runners={RUNNER: "2026-11-25T14:00:00Z"})
    assert "a runner whose claim on the stack is live" in str(live.value)
    assert keys(s3, lock_prefix(inputs.stack)) == [runner_lock]
    # Not known here (no live_runners: the local executor): left alone as well.
    with pytest.raises(StackLocked):
        other.recover(inputs.stack)
    assert keys(s3, lock_prefix(inputs.stack)) == [runner_lock]

    recovered = other.recover(inputs.stack, live_runners={})
    assert recovered.ok and "removed the stale lock" in recovered.message
    assert f"{RUNNER} (pid 4242)" in recovered.message
    assert keys(s3, lock_prefix(inputs.stack)) == []
    assert other.up(inputs, message="after recovery").ok  # the stack is free again


def test_two_runs_both_pass_the_lock_check_and_write_their_locks(pulumi_cli, moto, s3, tmp_path):
    """The lock is check-then-write, not atomic: an S3Gate holds each lock PUT until both runs have sent theirs,
    so both runs passed the first check (no lock yet) and both wrote a lock object: the interleaving any two
    runners may hit. The CLI's second check (after its write) then sees the other's lock, unless the other
    had already backed off and deleted its lock: at least one is refused (StackLocked), at most one runs, no lock
    is left. The store's listing is what saved it (here it sees every completed write); the write itself
    excluded nothing. (bench.run_cost --lock-race counts the outcomes without the gate.)"""
    moto_port = moto.url.rsplit(":", 1)[1]
    engine = s3_engine(tmp_path, "setup", backend_url(moto_port))
    inputs = make_inputs()
    assert engine.up(inputs, message="created").ok
    with S3Gate(moto.url, hold=rf"{BUCKET}/{lock_prefix(inputs.stack)}[^/]+\.json", until=2, timeout=120) as gate:
        runners = [s3_engine(tmp_path, f"runner-{n}", backend_url(gate.port)) for n in "ab"]
        outcomes: dict[str, Any] = {}

        def up(n: int) -> None:
            try:
                outcomes[f"runner-{n}"] = runners[n].up(inputs, message=f"runner {n}")
            except Exception as exc:  # what each run ended with is the test's subject
                outcomes[f"runner-{n}"] = exc

        threads = [threading.Thread(target=up, args=(n,)) for n in (0, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
        assert not gate.barrier_broken, "both runs reached the lock write: the barrier released them together"
        assert len(set(gate.held)) == 2  # two lock objects written: both runs were past the check
    # Each second check saw the other's lock, unless the other had already given its lock back (it saw this one's
    # first): so at least one is refused, and at most one runs; which, is the race's.
    refused = sorted(name for name, outcome in outcomes.items() if isinstance(outcome, StackLocked))
    ran = sorted(name for name, outcome in outcomes.items() if not isinstance(outcome, Exception) and outcome.ok)
    assert refused and len(refused) + len(ran) == 2, outcomes
    assert keys(s3, lock_prefix(inputs.stack)) == []  # each run deleted its own
    history = human_stack(engine, inputs.stack, tmp_path).history(page_size=10)
    assert [h.message for h in history] == [f"hubwright: runner {name[-1]}" for name in ran] + ["hubwright: created"]


# A program whose create waits until a file exists: a run held in flight for as long as the test needs.


class Gated(Resource):
    def __init__(self, name: str, props: Mapping[str, str]):
        super().__init__(GateProvider(), name, {"label": name, **props})


def gated(started: Path, release: Path | None):
    def program(inputs: StackInputs) -> Mapping[str, Any]:
        Gated(f"{inputs.name}-thing", {"started": str(started), "release": str(release) if release else ""})
        return {"cluster": inputs.key, "inputsDigest": inputs.digest(), "inputs": inputs.to_config()}
    return program


def test_a_lock_removed_under_a_run_in_flight_lets_a_second_run_in_beside_it(pulumi_cli, moto, s3, tmp_path):
    """The lock is no lease: nothing fences the run that took it. Removed while that run is in flight (what a
    recovery that judged it stale, or `pulumi cancel`, does), a second run of the stack starts and completes
    while the first still runs, and both then write the stack's state: two runs at once. Which is why a runner
    kills its run before its claim expires, and a runner's lock is stale only once its claim has."""
    backend = backend_url(moto.url.rsplit(":", 1)[1])
    started, release = tmp_path / "first-started", tmp_path / "release-first"
    first = s3_engine(tmp_path, "runner-a", backend, program=gated(started, release))
    second = s3_engine(tmp_path, "runner-b", backend, program=gated(tmp_path / "second-started", None))
    inputs = make_inputs()
    results: dict[str, Any] = {}
    run = threading.Thread(target=lambda: results.update(first=first.up(inputs, message="first run")))
    run.start()
    try:
        wait_until(started.exists, timeout=120)
        [lock] = keys(s3, lock_prefix(inputs.stack))
        s3.delete_object(Bucket=BUCKET, Key=lock)  # as a stale-lock recovery would
        results["second"] = second.up(inputs, message="second run")
        assert run.is_alive() and not release.exists()  # the first is still in its create
    finally:
        release.write_text("go")
        run.join(300)
    # The same resource created by both: the first's create of the stack and its thing; the second found the stack
    # the first had written, with the first's create pending in it, and created the thing again.
    assert results["first"].ok and results["first"].changes == {"create": 2}
    assert results["second"].ok and results["second"].changes == {"create": 1, "same": 1}
    assert "pending operations" in results["second"].message
    assert (tmp_path / "second-started").exists()
    history = human_stack(first, inputs.stack, tmp_path).history(page_size=10)
    # Newest (last ended) first: the second update began and ended inside the first, so they ran at once.
    assert [h.message for h in history] == ["hubwright: first run", "hubwright: second run"]
    first_run, second_run = history
    assert first_run.end_time is not None and second_run.end_time is not None
    assert first_run.start_time <= second_run.start_time and second_run.end_time <= first_run.end_time
