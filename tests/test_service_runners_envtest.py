"""The service with --executor runners against the REAL kube-apiserver (tests/envtest.py): leader failover while
a run is in flight. The new leader adopts the HubStackRun its predecessor left running instead of starting
another one (automation/service/executor.py); the runners (doubles.service_env) execute on the engine double."""
from __future__ import annotations

from automation.service.executor import RunnerEngine
from doubles.engine import RecordingEngine
from doubles.envtest import take_lease
from doubles.service_env import ServiceEnv, wait_until
from stacks.names import GROUP, STACKRUNS, VERSION
from stacks.runs.model import status_of
from tests.envtest import env, kube_apiserver  # noqa: F401 - the fixtures


def runs_of(env: ServiceEnv) -> list[dict]:
    return env.custom.list_namespaced_custom_object(GROUP, VERSION, env.ns, STACKRUNS)["items"]


def test_a_new_leader_adopts_the_run_in_flight_instead_of_starting_another(env):
    engine = RecordingEngine()
    stack = f"{env.ns}.prod-1"
    gate = engine.gate(stack)  # the run stays on its runner until the test lets it go
    options = dict(leader_election=True, leader_election_id="hubwright", lease_duration=4, renew_deadline=2,
                   retry_period=0.3, watch_namespace=env.ns, executor="runners")
    with env.runners(engine, count=2):
        first = env.service(engine, identity="replica-1", **options)
        second = env.service(engine, identity="replica-2", **options)
        first.start()
        try:
            wait_until(lambda: first.leading() and first.ready()[0], 20, what="replica-1 to lead")
            second.start()
            env.create("prod-1")
            wait_until(lambda: engine.count("up") == 1, 20, what="a runner to start replica-1's run")
            [run] = runs_of(env)
            assert run["spec"]["requestedBy"] == "replica-1" and status_of(run).phase == "Running"

            # replica-1 loses its Lease (a partition): it stops waiting; the run goes on on its runner.
            take_lease(env.api_client, "hubwright", env.system_namespace, "intruder", 2)
            wait_until(lambda: first.pipeline is None, 20, what="replica-1 to stop leading")
            first.stop()  # as the serve command exits on a lost Lease (on_lost_leadership)
            wait_until(lambda: second.leading() and second.ready()[0], 30, what="replica-2 to take over")
            adopter = second.engine
            assert isinstance(adopter, RunnerEngine)
            wait_until(lambda: adopter.adopted == 1, 20, what="replica-2 to adopt the run in flight")
            assert len(runs_of(env)) == 1  # adopted, not started again
            gate.set()
            wait_until(lambda: env.ready("prod-1"), 20, what="the cluster to be Ready")
        finally:
            gate.set()
            first.stop()
            second.stop()
    assert engine.count("up") == 1 and engine.max_concurrent_per_stack == 1
    assert [(r["spec"]["operation"], status_of(r).phase) for r in runs_of(env)] == [("up", "Succeeded")]
    assert env.get("prod-1")["status"]["inputsHash"] == engine.stacks[stack].digest()


def gauges(service) -> dict[str, float]:
    text = service.metrics.exposition().decode()
    return {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
            if line.startswith("hubwright_stackruns_")}


def test_the_scaling_gauges_count_runs_waiting_for_a_runner_and_held_by_one(env):
    engine = RecordingEngine()
    stack = f"{env.ns}.prod-1"
    gate = engine.gate(stack)
    with env.running(engine, watch_namespace=env.ns, executor="runners", runners=0) as service:
        env.create("prod-1")
        wait_until(lambda: gauges(service) == {"hubwright_stackruns_pending": 1.0, "hubwright_stackruns_running": 0.0},
                   20, what="the run to wait for a runner")
        with env.runners(engine, count=1):
            wait_until(lambda: gauges(service)["hubwright_stackruns_running"] == 1.0, 20, what="a runner to hold it")
            assert gauges(service)["hubwright_stackruns_pending"] == 0.0
            gate.set()
            wait_until(lambda: env.ready("prod-1"), 20, what="the cluster to be Ready")
        assert gauges(service) == {"hubwright_stackruns_pending": 0.0, "hubwright_stackruns_running": 0.0}
