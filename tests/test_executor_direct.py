"""The service's runner executor (automation/service/executor.py: RunnerEngine) and a runner over one in-memory API
server (doubles.objects.FakeObjects), each on its own Manager, no kube-apiserver: what the executor creates, a
runner claims and executes, and the executor maps back, all through the object port.
tests/test_executor_envtest.py keeps the real API server's side (the Secret's rights, adoption by a new leader, a
late claim that loses to the service's Cancelled)."""
from __future__ import annotations

from automation.adapters.engine import RunLimits
from automation.kit.objects import HUBSTACKRUNS, SECRETS
from automation.kit.runtime import Manager
from automation.service.executor import RunnerEngine
from doubles.engine import RecordingEngine
from doubles.objects import FakeObjects
from doubles.runners import SERVICE_NAMESPACE
from tests.test_runner_direct import World, inputs, wait_until


def test_an_up_is_a_run_a_runner_executes_and_its_result_comes_back_through_the_port():
    kube = FakeObjects()
    service = RunnerEngine(kube, local=RecordingEngine(), namespace=SERVICE_NAMESPACE, limits=RunLimits(timeout=60),
                           keep_runs=1)
    manager = Manager()
    store = service.attach(manager, identity="hubwright-0")
    kube.watch(HUBSTACKRUNS, store.apply)  # what the service's informer would deliver
    runner = World(kube=kube)
    manager.start()
    runner.runner.start()
    try:
        wait_until(lambda: manager.started.is_set() and runner.runner.ready()[0], 10, what="both started")
        first = service.up(inputs("one"), message="first")
        second = service.up(inputs("one"), message="second")
    finally:
        runner.runner.stop(timeout=5)
        manager.stop()
    assert first.ok and first.outputs["cluster"] == "runs-a/one" and first.changes == {"same": 1}
    assert second.ok and service.created == 2
    assert [(c.operation, c.message) for c in runner.engine.calls] == [("up", "first"), ("up", "second")]
    [kept] = kube.objects_of(HUBSTACKRUNS).values()  # --keep-runs 1: the first run went
    assert kept["spec"]["message"] == "second" and kept["status"]["phase"] == "Succeeded"
    assert list(kube.objects_of(SECRETS).values()) == []  # each Secret went once its run's result was read
