"""The service's runner executor (automation/service/executor.py: RunnerEngine) against the REAL kube-apiserver
(tests/envtest.py), with the HubStackRun CRD and runners (doubles.service_env.ServiceEnv.runners) executing on
the engine double: a run is created with its Secret, waited on through the informer, and its status mapped back
to what the local engine returns; adoption, one unfinished run per stack, the deadline, retention and orphans."""
from __future__ import annotations

import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor
from collections import Counter
from datetime import datetime, timezone
from typing import Iterator

import pytest

from automation.adapters.engine import EngineError, PolicyViolation, RunCancelled, RunLimits, StackLocked
from automation.adapters.kube.informer import Informer
from automation.adapters.kube.stackruns import StackRunClient, stackrun_source
from automation.service.executor import RunnerEngine
from automation.kit.runtime import Manager
from doubles.engine import RecordingEngine
from doubles.engine import fake_outputs
from doubles.factories import cluster, resolve_one
from doubles.service_env import ServiceEnv, wait_until
from stacks.names import (GROUP, RUN_CLUSTER_LABEL, RUN_DIGEST_ANNOTATION, RUN_FOR_ANNOTATION, RUN_OPERATION_LABEL,
                          RUN_SECRET_LABEL, STACKRUNS, VERSION)
from stacks.runs.checks import refusal
from stacks.runs.claims import claimed, view
from stacks.runs.model import FINISHED, INPUTS_KEY, StackRunSpec, status_of
from tests.envtest import env, kube_apiserver  # noqa: F401 - the fixtures


@contextlib.contextmanager
def executor(env: ServiceEnv, engine: RecordingEngine, *, identity: str = "svc-a", timeout: float = 60.0,
             keep_runs: int = 10) -> Iterator[RunnerEngine]:
    """A RunnerEngine attached to a Manager of its own (as a leader term's Pipeline attaches it), synced."""
    runner_engine = RunnerEngine(env.api_client, local=engine, namespace=env.system_namespace,
                                 limits=RunLimits(timeout=timeout, grace=1.0), keep_runs=keep_runs)
    manager = Manager(watch_timeout=30)
    runner_engine.attach(manager, identity=identity)
    manager.start()
    try:
        wait_until(manager.started.is_set, 20, what="the runs' informer to sync")
        yield runner_engine
    finally:
        runner_engine.cancel(0)
        manager.stop()


@contextlib.contextmanager
def runner(env: ServiceEnv, engine: RecordingEngine) -> Iterator[object]:
    with env.runners(engine, count=1) as started:
        yield started[0]


class Unfinished:
    """The most unfinished runs of one stack seen at once by a watch of the test's namespace (events come in
    resourceVersion order: a run created before another finished is seen while that one is unfinished)."""

    def __init__(self) -> None:
        self.runs: dict[str, dict] = {}
        self.max_unfinished = 0

    def __call__(self, kind: str, raw: dict) -> None:
        key = raw["metadata"]["name"]
        if kind == "DELETED":
            self.runs.pop(key, None)
        else:
            self.runs[key] = raw
        by_stack = Counter(r["spec"]["stack"] for r in self.runs.values() if status_of(r).phase not in FINISHED)
        self.max_unfinished = max([self.max_unfinished, *by_stack.values()])


@contextlib.contextmanager
def watching(env: ServiceEnv) -> Iterator[Unfinished]:
    seen = Unfinished()
    informer = Informer(stackrun_source(env.api_client, env.ns), seen)
    informer.start()
    try:
        wait_until(informer.synced.is_set, 20, what="the test's watch to sync")
        yield seen
    finally:
        informer.stop()


def inputs(env: ServiceEnv, name: str = "prod-1", **spec):
    return resolve_one(cluster(name, env.ns, **spec))


def runs_of(env: ServiceEnv, namespace: str | None = None) -> list[dict]:
    found = env.custom.list_namespaced_custom_object(GROUP, VERSION, namespace or env.ns, STACKRUNS)["items"]
    return sorted(found, key=lambda r: r["metadata"]["creationTimestamp"] + r["metadata"]["name"])


def run_secrets(env: ServiceEnv) -> list[str]:
    found = env.core.list_namespaced_secret(env.system_namespace, label_selector=RUN_SECRET_LABEL).items
    return sorted(s.metadata.name for s in found)


def in_thread(call) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def run() -> None:
        try:
            out["result"] = call()
        except Exception as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


# --------------------------------------------------------------------------- one run

def test_an_up_is_a_run_with_its_secret_waited_on_and_mapped_back_with_its_progress(env):
    engine = RecordingEngine(progress=3, run_seconds=0.3)
    wanted = inputs(env)
    seen: list[tuple[int, int]] = []
    gate = engine.gate(wanted.stack)  # the run stays on its runner while the test reads its Secret
    with executor(env, engine) as runs, runner(env, engine):
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(runs.up, wanted, message="spec changed",
                                  on_progress=lambda done, planned: seen.append((done, planned)))
            wait_until(lambda: engine.count("up") == 1, 20, what="the runner to start the run")
            [run] = runs_of(env)
            meta, spec = run["metadata"], run["spec"]
            secret = StackRunClient(env.api_client, env.system_namespace).secret(spec["inputsSecret"])
            assert secret is not None
            assert secret["annotations"][RUN_FOR_ANNOTATION] == f"{env.ns}/{meta['name']}"
            assert secret["annotations"][RUN_DIGEST_ANNOTATION] == wanted.digest()
            assert secret["data"][INPUTS_KEY] == wanted.to_config()
            # What every runner checks before the engine: the run and its Secret agree, and the inputs hash to the
            # digest.
            assert refusal(f"{env.ns}/{meta['name']}", meta["generation"], StackRunSpec.model_validate(spec), secret,
                           service_namespace=env.system_namespace) is None
            gate.set()
            result = running.result(timeout=30)
        assert result.ok and result.operation == "up"
        assert result.outputs == fake_outputs(wanted)  # from the run's Secret, not from the run
        assert result.changes and result.started and result.ended
        assert seen and seen[-1] == (3, 3)  # the runner's progress writes, forwarded as they came
        assert runs.created == 1 and runs.adopted == 0
    [run] = runs_of(env)
    meta, spec = run["metadata"], run["spec"]
    assert meta["labels"] == {RUN_CLUSTER_LABEL: "prod-1", RUN_OPERATION_LABEL: "up"}
    assert spec["stack"] == wanted.stack and spec["cluster"] == "prod-1" and spec["operation"] == "up"
    assert spec["inputsDigest"] == wanted.digest() and spec["requestedBy"] == "svc-a" and spec["deadline"]
    assert status_of(run).phase == "Succeeded" and "outputs" not in run["status"]  # tenants read runs
    assert run_secrets(env) == []  # read once it finished, then gone: a kept run holds no inputs in etcd
    assert [(c.operation, c.stack, c.message) for c in engine.calls] == [("up", wanted.stack, "spec changed")]


def _fault(engine: RecordingEngine, kind: str) -> None:
    if kind == "failed":
        engine.fail("up", message="AccessDenied creating the endpoint service")
    elif kind == "locked":
        engine.lock(times=2)  # a runner may recover the stack and try once more
    elif kind == "policy":
        engine.fail("up", message="hubwright-no-public-ingress refused", reason="PolicyViolation",
                    error=PolicyViolation)
    elif kind == "cancelled":
        engine.fail("up", message="did not finish within 1800s", error=RunCancelled)


@pytest.mark.parametrize("kind, error, reason", [
    ("failed", EngineError, "UpdateFailed"),
    ("locked", StackLocked, "StackLocked"),
    ("policy", PolicyViolation, "PolicyViolation"),
    ("cancelled", RunCancelled, "RunCancelled"),
])
def test_each_failed_phase_raises_the_local_engines_exception(env, kind, error, reason):
    engine = RecordingEngine()
    _fault(engine, kind)
    with executor(env, engine) as runs, runner(env, engine):
        with pytest.raises(EngineError) as raised:
            runs.up(inputs(env), message="m")
    assert type(raised.value) is error and raised.value.reason == reason
    [run] = runs_of(env)
    assert status_of(run).phase == ("Cancelled" if kind == "cancelled" else "Failed")


def test_a_drifted_preview_returns_the_drifted_resources_and_a_destroy_and_recover_succeed(env):
    engine = RecordingEngine()
    wanted = inputs(env)
    with executor(env, engine) as runs, runner(env, engine):
        assert runs.up(wanted, message="create").ok
        assert runs.preview(wanted).ok
        engine.drifted.add(wanted.stack)
        drift = runs.preview(wanted)
        assert not drift.ok and drift.operation == "preview" and drift.drifted  # names from the run's Secret
        assert runs.recover(wanted.stack).ok
        assert runs.destroy(wanted.stack, message="deleted").ok
        assert runs.applied(wanted.stack) is None  # the local read (the engine double's own state)
    phases = {r["metadata"]["labels"][RUN_OPERATION_LABEL]: [] for r in runs_of(env)}
    for run in runs_of(env):
        phases[run["metadata"]["labels"][RUN_OPERATION_LABEL]].append(status_of(run).phase)
    assert {op: sorted(p) for op, p in phases.items()} == {
        "up": ["Succeeded"], "preview": ["Drifted", "Succeeded"], "recover": ["Succeeded"], "destroy": ["Succeeded"]}
    assert [c.operation for c in engine.calls] == ["up", "preview", "preview", "recover", "destroy"]


def test_inputs_edited_in_the_secret_after_creation_never_reach_the_engine(env):
    """The attack: someone rewrites a run's inputs (e.g. the peer's role) between the service's create and a
    runner's claim. The runner refuses it (Refused, RunRefused); the service raises; the engine never ran."""
    engine = RecordingEngine()
    wanted = inputs(env)
    with executor(env, engine) as runs:
        thread, out = in_thread(lambda: runs.up(wanted, message="m"))
        run = wait_until(lambda: runs_of(env), 20, what="the run")[0]
        forged = inputs(env, apiURL="https://api.evil.example.com").to_config()
        env.core.patch_namespaced_secret(run["spec"]["inputsSecret"], env.system_namespace,
                                         {"stringData": {INPUTS_KEY: forged}})
        with runner(env, engine):
            thread.join(20)
    assert isinstance(out.get("error"), EngineError) and out["error"].reason == "RunRefused"
    assert "do not match the recorded digest" in str(out["error"])
    assert engine.calls == []


# --------------------------------------------------------------------------- adoption, one run per stack

def test_a_second_engine_adopts_the_unfinished_run_instead_of_creating_one(env):
    engine = RecordingEngine()
    wanted = inputs(env)
    gate = engine.gate(wanted.stack)
    with runner(env, engine):
        with executor(env, engine, identity="svc-a") as first:
            thread, out = in_thread(lambda: first.up(wanted, message="m"))
            wait_until(lambda: engine.count("up") == 1, 20, what="the runner to start the run")
            first.cancel(0)  # the leader stops waiting (lost Lease): the run goes on on its runner
            thread.join(10)
            assert isinstance(out.get("error"), RunCancelled) and "the next leader adopts it" in str(out["error"])
        with executor(env, engine, identity="svc-b") as second:
            thread, out = in_thread(lambda: second.up(wanted, message="m"))
            wait_until(lambda: second.adopted == 1, 20, what="the second engine to adopt the run")
            gate.set()
            thread.join(20)
            assert out["result"].ok and second.created == 0
    [run] = runs_of(env)
    assert run["spec"]["requestedBy"] == "svc-a" and status_of(run).phase == "Succeeded"
    assert engine.count("up") == 1


def test_a_forged_run_of_the_stack_is_never_adopted_and_its_status_never_becomes_the_result(env):
    """The attack (where the admission policy is missing): someone creates a run of a tenant's stack with the
    operation and digest the service is about to ask for, hoping the service adopts it, then writes it Succeeded.
    The service adopts only runs whose Secret in its own namespace names them: it makes its own, which a runner
    executes; the forged one is refused by the runner."""
    engine = RecordingEngine()
    wanted = inputs(env)
    forged = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "HubStackRun",
              "metadata": {"name": "forged-up", "namespace": env.ns},
              "spec": {"stack": wanted.stack, "cluster": "prod-1", "operation": "up", "inputsDigest": wanted.digest(),
                       "inputsSecret": "hubwright-run-forged", "deadline": "2999-01-01T00:00:00Z",
                       "requestedBy": "svc-a"}}
    env.custom.create_namespaced_custom_object(GROUP, VERSION, env.ns, STACKRUNS, forged)
    with executor(env, engine) as runs:
        thread, out = in_thread(lambda: runs.up(wanted, message="m"))
        wait_until(lambda: runs.created == 1, 20, what="the service to create its own run")
        env.custom.patch_namespaced_custom_object_status(GROUP, VERSION, env.ns, STACKRUNS, "forged-up",
                                                         {"status": {"phase": "Succeeded"}})
        with runner(env, engine):
            thread.join(20)
        assert out["result"].ok and runs.adopted == 0
    assert engine.count("up") == 1  # the service's own run reached the engine, once
    by_name = {r["metadata"]["name"]: status_of(r).phase for r in runs_of(env)}
    assert by_name.pop("forged-up") == "Succeeded" and list(by_name.values()) == ["Succeeded"]


def test_never_two_unfinished_runs_of_a_stack(env):
    engine = RecordingEngine()
    old, new = inputs(env), inputs(env, apiURL="https://api.blue.example.com")
    gate = engine.gate(old.stack)
    with watching(env) as watch, executor(env, engine) as runs, runner(env, engine):
        first, out_first = in_thread(lambda: runs.up(old, message="first"))
        wait_until(lambda: engine.count("up") == 1, 20, what="the first run to start")
        second, out_second = in_thread(lambda: runs.up(new, message="second"))  # other inputs: waits, then creates
        gate.set()
        first.join(20)
        second.join(20)
        assert out_first["result"].ok and out_second["result"].ok
    assert [r["spec"]["message"] for r in runs_of(env)] == ["first", "second"]
    assert watch.max_unfinished == 1  # the watch never saw the second run before the first finished
    assert [c.inputs.digest() for c in engine.runs("up")] == [old.digest(), new.digest()]


# --------------------------------------------------------------------------- nobody took it

def test_a_run_no_runner_took_by_its_deadline_is_cancelled_and_a_late_claim_loses(env):
    engine = RecordingEngine()
    with executor(env, engine, timeout=4.0) as runs:  # no runner at all
        thread, out = in_thread(lambda: runs.up(inputs(env), message="m"))
        pending = wait_until(lambda: runs_of(env), 20, what="the run")[0]
        assert status_of(pending).phase == "Pending"
        wait_until(lambda: runs.counts() == (1, 0), 5, what="hubwright_stackruns_pending to count it")
        thread.join(30)
        assert runs.counts() == (0, 0)
    assert isinstance(out.get("error"), RunCancelled) and "no runner took it" in str(out["error"])
    [run] = runs_of(env)
    status = status_of(run)
    assert status.phase == "Cancelled" and status.reason == "RunCancelled" and status.end_time
    # A runner that read the run while it was still Pending writes its claim at that version: it loses.
    take = claimed(view(pending), "runner-late",
                   datetime.now(timezone.utc), 30)
    late = StackRunClient(env.api_client, env.system_namespace).replace_status(
        pending, status_of(pending).model_copy(update={"phase": "Running", "claim": take}))
    assert late is None and status_of(runs_of(env)[0]).phase == "Cancelled"
    assert engine.calls == []


# --------------------------------------------------------------------------- retention, orphans

def test_a_stack_keeps_its_last_runs_and_their_secrets_only(env):
    engine = RecordingEngine()
    with executor(env, engine, keep_runs=2) as runs, runner(env, engine):
        for n in range(4):
            assert runs.up(inputs(env, apiURL=f"https://api.v{n}.example.com"), message=f"run {n}").ok
        wait_until(lambda: len(runs_of(env)) == 2, 20, what="the oldest runs to be deleted")
    kept = runs_of(env)
    assert [r["spec"]["message"] for r in kept] == ["run 2", "run 3"]
    assert run_secrets(env) == []  # each went once its run's result was read


def test_run_secrets_whose_run_is_gone_are_swept_once_synced(env):
    engine = RecordingEngine()
    with executor(env, engine) as runs, runner(env, engine):
        assert runs.up(inputs(env), message="m").ok
    assert run_secrets(env) == []  # the finished run's went once its result was read
    orphan = {"metadata": {"name": "hubwright-run-orphan", "labels": {RUN_SECRET_LABEL: "true"}},
              "stringData": {INPUTS_KEY: "{}"}}
    env.core.create_namespaced_secret(env.system_namespace, orphan)
    assert run_secrets(env) == ["hubwright-run-orphan"]
    with executor(env, engine):  # a new term: once its informer synced
        wait_until(lambda: run_secrets(env) == [], 20, what="the orphan Secret to go")


def test_a_transit_stacks_run_is_in_the_services_namespace(env):
    engine = RecordingEngine()
    with executor(env, engine) as runs, runner(env, engine):
        assert runs.recover("_tgw_111111111111").ok
    [run] = runs_of(env, env.system_namespace)
    assert "cluster" not in run["spec"] and RUN_CLUSTER_LABEL not in run["metadata"]["labels"]
