"""Shutdown and a lost Lease, against the real kube-apiserver: the runs in flight are cancelled through the
engine (with --cancel-grace on shutdown, at once on a lost Lease), and nothing new starts."""
from __future__ import annotations

import time

import pytest

from automation.adapters.engine import RunCancelled
from doubles.engine import RecordingEngine
from tests.envtest import kube_apiserver  # noqa: F401 - the fixture
from doubles.pulumi_programs import make_inputs
from doubles.service_env import ServiceEnv, wait_until


def test_stopping_cancels_the_run_in_flight_with_the_grace_period_and_returns(kube_apiserver):  # noqa: F811
    env = ServiceEnv.isolated(kube_apiserver.api_client())
    engine = RecordingEngine()
    gate = engine.gate(f"{env.ns}.prod-1")
    service = env.service(engine, watch_namespace=env.ns, cancel_grace=7.0)
    service.start()
    try:
        env.create("prod-1")
        wait_until(lambda: engine.count("up") == 1, 20, what="the run to start")
    finally:
        started = time.monotonic()
        service.stop()
    assert time.monotonic() - started < 10
    assert engine.cancels == [7.0]  # the engine was asked to cancel, with --cancel-grace
    run = engine.runs("up")[0]
    assert run.ok is False and run.ended  # the gated run was stopped, not waited for
    assert not gate.is_set()
    assert service.pipeline is None


def test_a_lost_lease_kills_the_runs_in_flight_at_once_and_starts_nothing_more(kube_apiserver):  # noqa: F811
    env = ServiceEnv.isolated(kube_apiserver.api_client())
    engine = RecordingEngine()
    engine.gate(f"{env.ns}.prod-1")
    lost = []
    service = env.service(engine, watch_namespace=env.ns)
    service.on_lost_leadership = lambda: lost.append(engine.count("up"))
    service.start()
    try:
        env.create("prod-1")
        env.create("prod-2")
        wait_until(lambda: engine.count("up") >= 1, 20, what="a run to start")
        pipeline = service.pipeline
        service._lost()  # what the elector calls when the Lease was not renewed by its deadline
        assert engine.cancels[0] == 0  # killed at once: no grace before another replica may lead
        runs = engine.count()
        assert lost == [engine.count("up")]  # the CLI's exit comes after the runs were killed
        assert all(call.ended for call in engine.runs())  # none is still in flight
        # A worker that had taken a key before the halt cannot reach the engine any more.
        with pytest.raises(RunCancelled, match="not started"):
            pipeline.runs.run("up", lambda: engine.up(make_inputs("prod-3", env.ns), message="late"))
        assert engine.count() == runs
    finally:
        service.stop()


def test_controllers_that_cannot_start_are_logged_before_the_lease_is_given_up(kube_apiserver, caplog, monkeypatch):  # noqa: F811
    """An error while the leader starts its controllers ends the term (the elector gives the Lease up and the CLI
    exits as "lost the Lease"): the log says why first, with the error, not only that the Lease was lost."""
    import automation.service.serve as serve

    env = ServiceEnv.isolated(kube_apiserver.api_client())
    service = env.service(RecordingEngine(), watch_namespace=env.ns)

    def broken(*args, **kwargs):
        raise RuntimeError("a controller's constructor failed")

    monkeypatch.setattr(serve, "Pipeline", broken)
    with caplog.at_level("ERROR", logger="hubwright.service"), pytest.raises(RuntimeError, match="constructor"):
        service._start_pipeline()  # what the elector calls once it leads
    record = next(r for r in caplog.records if "could not start the leader's controllers" in r.getMessage())
    assert record.exc_info is not None and "constructor failed" in str(record.exc_info[1])
    assert service.pipeline is None
