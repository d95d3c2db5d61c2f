"""Drift, end to end: the service with its real engine (a WorkerPool running the real `pulumi` CLI, file backend)
keeps a stack whose "cloud" a test changes behind Pulumi's back (doubles.pulumi_programs.cloudy: a dynamic
resource whose cloud is a file). The API server is kmock's emulator; the drift check is the service's own.

Problem 2 of issue #14: the drift check ran `preview` without refresh, compared the program with the state
only, and said "no changes" after the cloud had changed.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

import pytest

from automation.adapters.engine.pool import WorkerPool
from stacks.names import RECONCILE_REQUEST_ANNOTATION
from doubles.pulumi_programs import CLOUDY, change_cloud, cloud_value, engine_settings
from doubles.service_env import ENGINE_RUN, ServiceEnv, on_kmock, wait_until

THING = "prod-1-thing-0"  # the one resource of cloudy() for the Cluster prod-1


@pytest.fixture
def world(tmp_path: Path, pulumi_cli) -> Iterator[tuple[ServiceEnv, WorkerPool, Path]]:
    cloud = tmp_path / "cloud"
    pool = WorkerPool(engine_settings(tmp_path / "state"), program=CLOUDY, program_options={"cloud": str(cloud)},
                      size=1)
    try:
        with on_kmock() as env:
            env.create("prod-1")
            yield env, pool, cloud
    finally:
        pool.close()


def drift(env: ServiceEnv, status: str) -> dict | None:
    cond = env.condition("prod-1", "DriftDetected")
    return cond if cond and cond["status"] == status else None


@contextlib.contextmanager
def serving(env: ServiceEnv, pool: WorkerPool, policy: str) -> Iterator[None]:
    with env.running(pool, drift_interval=1.0, drift_jitter=0, drift_policy=policy):
        wait_until(lambda: env.ready("prod-1"), ENGINE_RUN, what="the first up")
        yield


def test_drift_is_reported_by_name_left_alone_under_report_and_corrected_on_request(world):
    env, pool, cloud = world
    with serving(env, pool, "report"):
        assert cloud_value(cloud, THING) == "v1"
        wait_until(lambda: drift(env, "False"), ENGINE_RUN, what="a clean drift check")
        change_cloud(cloud, THING, "changed-by-hand")

        found = wait_until(lambda: drift(env, "True"), ENGINE_RUN, what="DriftDetected")
        assert THING in found["message"] and "not corrected" in found["message"]
        assert env.ready("prod-1") and cloud_value(cloud, THING) == "changed-by-hand"

        env.patch("prod-1", {"metadata": {"annotations": {RECONCILE_REQUEST_ANNOTATION: "fix-it"}}})
        wait_until(lambda: drift(env, "False"), ENGINE_RUN, what="the drift corrected")
    assert cloud_value(cloud, THING) == "v1", "the requested up --refresh put the cloud back"
    assert env.condition("prod-1", "DriftDetected")["reason"] == "DriftCorrected"
    assert env.get("prod-1")["status"]["lastHandledReconcileRequest"] == "fix-it"


def test_drift_is_corrected_by_an_up_with_refresh_under_correct(world):
    env, pool, cloud = world
    with serving(env, pool, "correct"):
        change_cloud(cloud, THING, "changed-by-hand")
        wait_until(lambda: cloud_value(cloud, THING) == "v1", ENGINE_RUN, what="the cloud put back")
        wait_until(lambda: drift(env, "False") and env.ready("prod-1"), ENGINE_RUN, what="DriftDetected False, Ready")
    events = [(t, r) for t, r, _ in env.events(name="prod-1")]
    assert ("Warning", "DriftDetected") in events and events.count(("Normal", "UpdateSucceeded")) == 2
