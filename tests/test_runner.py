"""Runners (automation/runner/) against the real kube-apiserver with the HubStackRun CRD (tests/envtest.py), the
engine double for the runs (doubles/engine.py), N runners in threads (doubles/runners.py): what only the real API
server and the real watch show.

The claim under the real watch: two runners never execute a run twice, nor two runs of one stack at once; a runner
whose API calls stall (a partition) kills its run before its claim lapses, and only then does another runner start
it; fair between namespaces. The runner process as deployed: SIGKILLed mid-run (uid 65532, read-only root, its own
host name) it is taken over; SIGTERM drains it. And a crash with the real engine. The rules themselves (refusals,
phases, the result, the lease, the watchdog, hand-backs, deadlines, slots, claim expiry) are called directly over
the fake API server in tests/test_runner_direct.py.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Iterator, Mapping
from urllib.parse import urlparse

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from automation.adapters.engine import RunResult
from automation.adapters.engine.pool import WorkerPool
from doubles.engine import RecordingEngine
from doubles.envtest import next_second
from doubles.factories import cluster, resolve_one
from doubles.runners import SERVICE_NAMESPACE, create_run, phase, run_status, running_runners
from doubles.pulumi_programs import HELD, PASSPHRASE, engine_settings
from doubles.service_env import ServiceEnv, wait_until
from doubles.stall_proxy import StallProxy
from stacks.names import GROUP, STACKRUNS, VERSION
from tests import envtest
from stacks.options import default
from tests.deployed import Container
from tests.dockerfile import image

kube_apiserver = envtest.kube_apiserver  # the fixture, for this module's tests

ROOT = Path(__file__).resolve().parent.parent
BWRAP = "/usr/bin/bwrap"
TTL, GRACE = 6, 1.0  # a short claim (the watchdog kills at ttl - 2 s) and cancel grace


class LiveEngine(RecordingEngine):
    """The engine double that also records the live runners each recover() was given."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.recovered: list[Mapping[str, str] | None] = []

    def recover(self, stack: str, *, live_runners: Mapping[str, str] | None = None) -> RunResult:
        self.recovered.append(None if live_runners is None else dict(live_runners))
        return super().recover(stack, live_runners=live_runners)


@pytest.fixture
def api(kube_apiserver):
    with kube_apiserver.api_client() as api_client:
        core = client.CoreV1Api(api_client)
        for name in (SERVICE_NAMESPACE, "runs-a", "runs-b", "runs-evil"):
            try:
                core.create_namespace({"metadata": {"name": name}})
            except ApiException as exc:
                if exc.status != 409:
                    raise
        yield api_client
        custom = client.CustomObjectsApi(api_client)  # no run of one test is left for the next one's runners
        for item in custom.list_cluster_custom_object(GROUP, VERSION, STACKRUNS)["items"]:
            meta = item["metadata"]
            custom.delete_namespaced_custom_object(GROUP, VERSION, meta["namespace"], STACKRUNS, meta["name"])
        wait_until(lambda: not custom.list_cluster_custom_object(GROUP, VERSION, STACKRUNS)["items"], 20,
                   what="runs deleted")


def inputs(name: str, namespace: str = "runs-a"):
    return resolve_one(cluster(name, namespace))


def raw_create(api_client, run: dict) -> str:
    meta = run["metadata"]
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(GROUP, VERSION, meta["namespace"], STACKRUNS,
                                                                        run)
    return f"{meta['namespace']}/{meta['name']}"


def finished(api_client, keys, phases=("Succeeded",), timeout: float = 30.0) -> None:
    wait_until(lambda: all(phase(api_client, k) in phases for k in keys), timeout,
               what=f"runs {phases}: {[(k, phase(api_client, k)) for k in keys]}")


# --------------------------------------------------------------------------- the claim

def test_two_runners_race_for_twenty_runs_each_runs_once_one_per_stack_at_a_time(api):
    engine = RecordingEngine(run_seconds=0.2)
    keys = []
    for i in range(20):  # 5 stacks, 4 runs each, all pending at once
        key = create_run(api, "up", inputs(f"race-{i % 5}"), name=f"race-{i % 5}-up-{i}", message=f"run {i}")
        keys.append(key)
    with running_runners(api, engine, n=2, workers=2, claim_ttl=TTL, cancel_grace=GRACE) as runners:
        finished(api, keys, timeout=60)
    by_message = Counter(c.message for c in engine.calls)
    assert sorted(by_message) == sorted(f"run {i}" for i in range(20)) and set(by_message.values()) == {1}, by_message
    assert engine.max_concurrent_per_stack == 1
    ran_by = Counter(run_status(api, k)["runner"] for k in keys)
    assert set(ran_by) <= {r.identity for r in runners}, ran_by
    assert all(run_status(api, k)["claim"]["takeovers"] == 0 for k in keys)  # no run was taken from anyone


def test_a_partitioned_runner_kills_its_run_before_its_claim_lapses_and_only_then_another_starts_it(
        api, kube_apiserver):
    """Runner A's API calls stall (a TCP proxy that stops forwarding): A cannot renew, its watchdog kills its run
    ttl - 2 s after its last renewal, before the claim lapses; B takes the run over only after the claim lapsed
    (plus the cancel grace), recovers the stack's lock knowing A holds no live claim, and completes it."""
    upstream = urlparse(kube_apiserver.host)
    proxy = StallProxy((upstream.hostname, upstream.port))
    configuration = kube_apiserver.configuration()
    configuration.host = f"https://127.0.0.1:{proxy.port}"
    a_engine, b_engine = LiveEngine(run_seconds=60), LiveEngine(run_seconds=0.5)
    try:
        with client.ApiClient(configuration) as a_client, \
                running_runners(a_client, a_engine, n=1, claim_ttl=TTL, cancel_grace=GRACE) as (a,):
            key = create_run(api, "up", inputs("cut"))
            wait_until(lambda: a_engine.count("up") == 1, 20, what="A runs it")
            with running_runners(api, b_engine, n=1, claim_ttl=TTL, cancel_grace=GRACE) as (b,):
                wait_until(lambda: b.picks >= 2, 20, what="B to look at the runs twice")
                assert b_engine.count() == 0 and b.jobs() == []  # A's claim is live: B leaves the run alone
                proxy.stall()
                stalled = time.monotonic()
                finished(api, [key], timeout=40)
            a_call, b_calls = a_engine.runs("up")[0], b_engine.runs()
    finally:
        proxy.close()
    assert a_call.ok is False and a_engine.cancels == [0]  # A killed its own run (engine.cancel(0))
    assert a_call.ended - stalled < TTL - 1.0  # before its claim lapsed
    assert [c.operation for c in b_calls] == ["recover", "up"]
    assert b_calls[0].started > a_call.ended  # B started only after A's run was gone
    assert b_calls[0].started - stalled >= TTL - 2.5  # and not before A's claim could have lapsed
    assert a.identity not in (b_engine.recovered[0] or {}) and b_engine.recovered[0] is not None
    status = run_status(api, key)
    assert status["runner"] == b.identity and status["phase"] == "Succeeded"
    assert status["claim"]["holder"] == b.identity and status["claim"]["takeovers"] == 1
    assert status["observedGeneration"] == 1


def test_fair_between_namespaces_one_run_of_b_starts_among_the_first_two(api):
    engine = RecordingEngine(run_seconds=0.2)
    keys = [create_run(api, "up", inputs(f"many-{i}", "runs-a")) for i in range(6)]
    next_second(api)  # B's run is the newest by more than the creation timestamp's second
    keys.append(create_run(api, "up", inputs("one", "runs-b")))
    with running_runners(api, engine, n=1, claim_ttl=TTL, cancel_grace=GRACE):
        finished(api, keys, timeout=40)
    order = [c.stack for c in sorted(engine.calls, key=lambda c: c.started)]
    assert "runs-b.one" in order[:2], order


# --------------------------------------------------------------------------- the command line

@pytest.mark.live
def test_runner_help_lists_its_options_with_their_environment_variables():
    out = subprocess.run([sys.executable, "-m", "automation", "runner", "--help"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, env={**os.environ, "COLUMNS": "200"})
    assert out.returncode == 0, out.stderr
    for flag in ("--claim-ttl", "--runner-hosts", "--workers", "--cancel-grace", "--namespace", "--identity",
                 "--backend", "--metrics-port"):
        assert flag in out.stdout, flag
    for env in ("HUBWRIGHT_RUNNER_HOSTS", "POD_NAMESPACE", "POD_NAME", "PULUMI_BACKEND_URL", "KUBECONFIG"):
        assert f"env {env}" in out.stdout, env
    assert "[--executor" not in out.stdout and "[--keep-runs" not in out.stdout  # the service's, not a runner's


# --------------------------------------------------------------------------- crash and drain, as deployed

@contextlib.contextmanager
def runner_process(kube_apiserver, where: Path, hostname: str, *, namespace: str = SERVICE_NAMESPACE,
                   engine: tuple[str, ...] = ("--run-seconds", "120"), env: Mapping[str, str] | None = None,
                   ) -> Iterator[tuple[Container, int]]:
    """The runner as its Deployment runs it: its own process (pid 1 of its pid namespace), uid 65532, a read-only
    root with only its state and /tmp volumes writable, its own host name (the name its stack locks carry), and
    the engine double (`python -m doubles.runners`: 120 s per run; `engine`: its flags, e.g. the real worker pool
    on a test program). Yields the container and its probes' port."""
    if not os.path.exists(BWRAP):
        pytest.fail("bubblewrap (bwrap) is not installed: the runner process runs as the Deployment runs it")
    kubeconfig = kube_apiserver.kubeconfig()
    (where / "tmp").mkdir(exist_ok=True)  # its emptyDir at /tmp
    argv = [BWRAP, "--unshare-user", "--uid", "65532", "--gid", "65532", "--unshare-pid", "--as-pid-1",
            "--unshare-uts", "--hostname", hostname, "--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev",
            "--proc", "/proc", "--bind", str(where), str(where), "--remount-ro", "/", "--chdir", str(ROOT), "--",
            sys.executable, "-m", "doubles.runners", *engine, "runner", "--kubeconfig",
            str(kubeconfig), "--namespace", namespace, "--claim-ttl", str(TTL), "--cancel-grace",
            str(GRACE), "--metrics-bind", "127.0.0.1", "--metrics-port", "0", "--state-dir", str(where / "state"),
            "--pulumi-home", str(where / "home")]
    environ = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "TMPDIR": str(where / "tmp"), **(env or {})}
    environ.pop("POD_NAME", None)
    container = Container(argv, environ, where / "runner.log")
    try:
        found = wait_until(lambda: container.proc.poll() is not None
                           or re.search(r"probes and metrics on [\d.]+:(\d+)", container.tail()), 30,
                           what="the runner process says where it serves")
        assert container.proc.poll() is None, f"the runner process exited:\n{container.tail()}"
        yield container, int(found.group(1))
    finally:
        if container.proc.poll() is None:
            container.kill()


def probe(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_a_runner_process_killed_mid_run_is_taken_over_after_its_claim_lapses(api, kube_apiserver, tmp_path):
    """SIGKILL a runner process mid-run (its whole pid namespace goes); a second runner takes the run over once
    the claim lapsed, recovers the lock knowing the dead runner holds no live claim, and completes it."""
    with runner_process(kube_apiserver, tmp_path, "hubwright-runner-a-1") as (container, port):
        key = create_run(api, "up", inputs("crash"))
        wait_until(lambda: run_status(api, key).get("startTime"), 30,
                   what=f"the runner process runs it ({container.tail()})")
        status = run_status(api, key)
        assert status["runner"] == "hubwright-runner-a-1" and status["phase"] == "Running"
        assert probe(port, "/healthz")[0] == 200 and probe(port, "/readyz")[0] == 200
        assert b"hubwright_runner_busy 1.0" in probe(port, "/metrics")[1]
        container.kill()
        killed = time.monotonic()
    engine = LiveEngine(run_seconds=0.3)
    with running_runners(api, engine, n=1, claim_ttl=TTL, cancel_grace=GRACE) as (b,):
        finished(api, [key], timeout=30)
    assert [c.operation for c in engine.calls] == ["recover", "up"]
    assert engine.calls[0].started - killed >= TTL - 3.0  # not before the dead runner's claim lapsed
    assert "hubwright-runner-a-1" not in (engine.recovered[0] or {}) and engine.recovered[0] is not None
    status = run_status(api, key)
    assert status["runner"] == b.identity and status["phase"] == "Succeeded"
    assert status["claim"]["holder"] == b.identity and status["claim"]["takeovers"] == 1


def test_a_runner_process_drains_on_sigterm_hands_its_run_back_and_exits_0(api, kube_apiserver, tmp_path):
    """SIGTERM (a rollout, a scale-down): the runner stops claiming, gives its run --cancel-grace, then hands it
    back and exits 0 well within the pod's grace; another runner takes it at once, without waiting for a claim
    to lapse."""
    with runner_process(kube_apiserver, tmp_path, "hubwright-runner-b-1") as (container, port):
        key = create_run(api, "up", inputs("sigterm"))
        wait_until(lambda: run_status(api, key).get("startTime"), 30,
                   what=f"the runner process runs it ({container.tail()})")
        code, seconds = container.stop(grace=20)
        handed = time.monotonic()
    assert code == 0 and GRACE <= seconds < 15, (code, seconds, container.tail())
    status = run_status(api, key)
    assert status["phase"] == "Pending" and "claim" not in status and status["runner"] == "hubwright-runner-b-1"
    assert "handed back" in status["message"]
    engine = LiveEngine(run_seconds=0.3)
    with running_runners(api, engine, n=1, claim_ttl=TTL, cancel_grace=GRACE):
        finished(api, [key], timeout=20)
    assert [c.operation for c in engine.calls] == ["recover", "up"]
    assert engine.calls[0].started - handed < TTL - 1  # at once: no claim to wait out
    assert engine.recovered[0] is not None and "hubwright-runner-b-1" not in engine.recovered[0]


# --------------------------------------------------------------------------- crash, with the real engine

@pytest.mark.live
def test_a_runner_killed_mid_up_is_taken_over_its_lock_recovered_nothing_created_twice_and_the_cluster_ready(
        kube_apiserver, pulumi_cli, tmp_path):
    """The issue's crash, end to end: the service (`--executor runners`) creates a HubCluster's `up` run; a runner
    process, as deployed, runs it with the real worker pool and `pulumi` (file backend on the shared state
    volume) and is SIGKILLed with one resource created and the next one's create in flight. Once its claim
    lapsed, another runner takes the run over: its recover removes the dead runner's lock (that runner holds no
    live claim) and the pending create, the `up` completes, the first resource is not created again, and the
    HubCluster ends Ready."""
    env = ServiceEnv.isolated(kube_apiserver.api_client())
    log, hold = tmp_path / "creates.log", tmp_path / "hold"
    hold.touch()
    program = {"log": str(log), "hold": str(hold)}
    state = tmp_path / "state"
    settings = dataclasses.replace(engine_settings(state, home=tmp_path / "home"),
                                   runner_hosts=default("runner-hosts"))
    reader = WorkerPool(settings, program=HELD, program_options=program, size=1)  # the service's applied()
    taker = WorkerPool(settings, program=HELD, program_options=program, size=1)
    try:
        with env.running(reader, executor="runners", runners=0, watch_namespace=env.ns, claim_ttl=TTL):
            with runner_process(kube_apiserver, tmp_path, "hubwright-runner-a-1", namespace=env.system_namespace,
                                engine=("--program", HELD, "--program-options", json.dumps(program)),
                                env={"PULUMI_CONFIG_PASSPHRASE": PASSPHRASE, "PYTHONPATH": str(ROOT),
                                     "USER": image().env["USER"]},  # the image's: uid 65532 has no passwd entry
                                ) as (container, _):
                env.create("prod-1")
                wait_until(lambda: log.exists() and "prod-1-held" in log.read_text(), 90,
                           what=f"the runner process in the second create ({container.tail()})")
                container.kill()
            locks = [json.loads(p.read_text()) for p in state.rglob(".pulumi/locks/**/*.json")]
            assert [lock["hostname"] for lock in locks] == ["hubwright-runner-a-1"]  # the dead runner's
            hold.unlink()
            with running_runners(env.api_client, taker, n=1, namespace=env.system_namespace, claim_ttl=TTL,
                                 cancel_grace=GRACE):
                wait_until(lambda: env.ready("prod-1"), 120, what="the HubCluster Ready after the takeover")
            [run] = client.CustomObjectsApi(env.api_client).list_namespaced_custom_object(
                GROUP, VERSION, env.ns, STACKRUNS)["items"]
    finally:
        reader.close()
        taker.close()
    assert run["status"]["phase"] == "Succeeded" and run["status"]["claim"]["takeovers"] == 1
    assert run["status"]["runner"] != "hubwright-runner-a-1"
    creates = Counter(log.read_text().split())
    assert creates == {"prod-1-first": 1, "prod-1-held": 2}  # the killed create, then the one that completed
    assert not list(state.rglob(".pulumi/locks/**/*.json"))  # the dead runner's lock was recovered
