"""Runners (automation/runner/) against the real kube-apiserver with the HubStackRun CRD (tests/envtest.py), the
engine double for the runs (doubles/engine.py), N runners in threads (doubles/runners.py).

The attacks first: a run a tenant forged, or edited after creation, never reaches the engine (the shared test
apiserver has no admission policy, so nothing but the runner's own check stands in the way). Then the claim: two
runners never execute a run twice, nor two runs of one stack at once; a runner whose API calls stall kills its run
before its claim lapses, and only then does another runner start it; a draining runner hands its run back; fair
between namespaces; and a runner process SIGKILLed mid-run (uid 65532, read-only root, its own host name) is
taken over.
"""
from __future__ import annotations

import base64
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

from automation.adapters.engine import PolicyViolation, RunResult
from automation.adapters.engine.pool import WorkerPool
from automation.runner.runner import Runner
from doubles.engine import RecordingEngine
from doubles.envtest import next_second
from doubles.factories import cluster, resolve_one
from doubles.runners import SERVICE_NAMESPACE, create_run, phase, run_objects, run_status, running_runners
from doubles.pulumi_programs import HELD, PASSPHRASE, engine_settings
from doubles.service_env import ServiceEnv, wait_until
from doubles.stall_proxy import StallProxy
from stacks.names import GROUP, STACKRUNS, VERSION
from stacks.runs.model import RESULT_KEY
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


# --------------------------------------------------------------------------- attacks: forged and edited runs

def test_a_forged_or_edited_run_is_refused_and_never_reaches_the_engine(api):
    """An admin without the admission policy stands in for a tenant that could create or edit runs: every forged
    run ends Refused (reason RunRefused, the message says why) and the engine never hears of its stack."""
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    legit = create_run(api, "up", inputs("legit"))
    # 1. no Secret at all
    run, _ = run_objects("up", namespace="runs-a", stack="runs-a.nosecret", cluster="nosecret",
                         inputs=inputs("nosecret"))
    no_secret = raw_create(api, run)
    # 2. a run that points at another run's Secret (the legit run's)
    run, _ = run_objects("up", namespace="runs-a", stack="runs-a.legit", cluster="legit", inputs=inputs("legit"))
    run["spec"]["inputsSecret"] = custom.get_namespaced_custom_object(
        GROUP, VERSION, "runs-a", STACKRUNS, legit.partition("/")[2])["spec"]["inputsSecret"]
    borrowed = raw_create(api, run)
    # 3. a Secret whose recorded digest is not the run's (the run claims other inputs than the service recorded)
    run, secret = run_objects("up", namespace="runs-a", stack="runs-a.digest", cluster="digest",
                              inputs=inputs("digest"))
    run["spec"]["inputsDigest"] = "0" * 64
    core.create_namespaced_secret(SERVICE_NAMESPACE, secret)
    wrong_digest = raw_create(api, run)
    # 4. a tenant's run for another namespace's stack (its own Secret, all consistent, but not its stack)
    run, secret = run_objects("up", namespace="runs-evil", stack="runs-a.victim", cluster="victim",
                              inputs=inputs("victim"))
    core.create_namespaced_secret(SERVICE_NAMESPACE, secret)
    foreign = raw_create(api, run)
    # 5. a run the service made, edited afterwards (metadata.generation 2)
    edited = create_run(api, "up", inputs("edited"))
    namespace, _, name = edited.partition("/")
    custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, STACKRUNS, name,
                                          {"spec": {"message": "edited by a tenant"}})
    # 6. a consistent run whose deadline passed before any runner took it: Cancelled, not run
    late = create_run(api, "up", inputs("late"), timeout=-5)
    engine = RecordingEngine()
    with running_runners(api, engine, n=2, claim_ttl=TTL, cancel_grace=GRACE):
        finished(api, [legit])
        finished(api, [no_secret, borrowed, wrong_digest, foreign, edited], phases=("Refused",))
        finished(api, [late], phases=("Cancelled",))
    messages = {key: run_status(api, key).get("message", "") for key in (no_secret, borrowed, wrong_digest, foreign,
                                                                         edited)}
    assert all(run_status(api, k)["reason"] == "RunRefused" for k in messages), messages
    assert "does not exist" in messages[no_secret]
    assert f"not {borrowed}" in messages[borrowed]
    assert "not the digest the service recorded" in messages[wrong_digest]
    assert "is not the stack of cluster runs-evil/victim" in messages[foreign]
    assert "generation 2" in messages[edited]
    assert run_status(api, late)["reason"] == "RunCancelled" and "deadline" in run_status(api, late)["message"]
    # only the legit run reached the engine, once
    assert [(c.operation, c.stack) for c in engine.calls] == [("up", "runs-a.legit")]
    assert engine.calls[0].message == "test"


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


def test_a_run_handed_back_is_recovered_first_and_counts_no_takeover(api):
    """A drained runner gives its claim up (no takeover); the next runner recovers the stack first."""
    a_engine, b_engine = RecordingEngine(run_seconds=60), RecordingEngine()
    gate = b_engine.gate("runs-a.over")
    key = create_run(api, "up", inputs("over"))
    with running_runners(api, a_engine, n=1, claim_ttl=TTL, cancel_grace=GRACE) as (a,):
        wait_until(lambda: a_engine.count("up") == 1, 20, what="A runs it")
        a.drain(0.5)  # hands it back at once
    wait_until(lambda: phase(api, key) == "Pending", 10, what="handed back")
    assert run_status(api, key)["runner"] == a.identity and "handed back" in run_status(api, key)["message"]
    with running_runners(api, b_engine, n=1, claim_ttl=TTL, cancel_grace=GRACE):
        wait_until(lambda: b_engine.count("up") == 1, 20, what="B runs it")
        claim = run_status(api, key)["claim"]
        assert claim["takeovers"] == 0  # a hand-back is no takeover: the claim was given up, not lost
        gate.set()
        finished(api, [key])
    assert [c.operation for c in b_engine.calls] == ["recover", "up"]  # A's lock (if any) is recovered first


def test_a_draining_runner_hands_back_a_run_longer_than_its_grace_and_another_completes_it(api):
    a_engine, b_engine = LiveEngine(run_seconds=60), LiveEngine(run_seconds=0.3)
    key = create_run(api, "up", inputs("drain"))
    with running_runners(api, a_engine, n=1, claim_ttl=TTL, cancel_grace=GRACE) as (a,):
        wait_until(lambda: a_engine.count("up") == 1, 20, what="A runs it")
        with running_runners(api, b_engine, n=1, claim_ttl=TTL, cancel_grace=GRACE) as (b,):
            started = time.monotonic()
            assert a.drain(1.0) is True  # nothing left in A's hands
            assert 0.9 <= time.monotonic() - started < 10
            finished(api, [key])
    assert a_engine.runs("up")[0].ok is False and a_engine.cancels == [0]
    assert [c.operation for c in b_engine.calls] == ["recover", "up"]
    assert a.identity not in (b_engine.recovered[0] or {})
    status = run_status(api, key)
    assert status["runner"] == b.identity and status["claim"]["takeovers"] == 0  # handed back: no takeover


def test_phases_locked_once_drift_policy_destroy_and_a_deadline_passed_mid_run(api, caplog):
    """The contract's phase rules, one run each: a lock is recovered and the run tried once more; a preview that
    finds drift is Drifted (the names go into the Secret); a policy refusal is Failed with its reason; a destroy
    succeeds; a run still going at its deadline is cancelled."""
    engine = LiveEngine()
    engine.lock("runs-a.locked", times=1)
    engine.drifted.add("runs-a.drift")
    engine.fail("up", "runs-a.policy", message="rule no-public-endpoint", error=PolicyViolation)
    engine.gate("runs-a.slow")  # never opened: only its deadline ends it
    locked = create_run(api, "up", inputs("locked"))
    drift = create_run(api, "preview", inputs("drift"))
    policy = create_run(api, "up", inputs("policy"))
    gone = create_run(api, "destroy", cluster="gone", namespace="runs-a", stack="runs-a.gone")
    slow = create_run(api, "up", inputs("slow"), timeout=3)
    refreshed = create_run(api, "up", inputs("refreshed"), refresh=True)
    recovered = create_run(api, "recover", cluster="recovered", namespace="runs-a", stack="runs-a.recovered")
    caplog.set_level("INFO", logger="hubwright.run")
    with running_runners(api, engine, n=1, claim_ttl=TTL, cancel_grace=GRACE) as (runner,):
        finished(api, [locked, gone, refreshed, recovered], timeout=30)
        finished(api, [drift], phases=("Drifted",))
        finished(api, [policy], phases=("Failed",))
        finished(api, [slow], phases=("Cancelled",), timeout=30)
        # the status is written first, then the run counted and let go: the count is read once nothing is held
        wait_until(lambda: not runner.jobs(), what="the runner to let its last run go")
        metrics = runner.metrics.exposition().decode()
    assert [c.operation for c in engine.runs(stack="runs-a.locked")] == ["up", "recover", "up"]
    assert len(engine.recovered) == 2 and all(set(live or {"-": ""}) <= {runner.identity}  # its own claim only
                                              for live in engine.recovered)
    assert engine.runs("up", "runs-a.refreshed")[0].refresh is True
    assert [c.operation for c in engine.runs(stack="runs-a.recovered")] == ["recover"]
    lines = {r.fields["run"]: r.fields for r in caplog.records if r.name == "hubwright.run"}  # one line per run
    assert lines[drift]["result"] == "drifted" and lines[drift]["runner"] == runner.identity
    assert lines[policy]["reason"] == "PolicyViolation" and lines[locked]["phase"] == "Succeeded"
    status = run_status(api, drift)
    assert status["drifted"] == 1 and status["summary"] == "1 to update"
    secret = client.CoreV1Api(api).read_namespaced_secret(
        client.CustomObjectsApi(api).get_namespaced_custom_object(
            GROUP, VERSION, "runs-a", STACKRUNS, drift.partition("/")[2])["spec"]["inputsSecret"], SERVICE_NAMESPACE)
    assert json.loads(base64.b64decode(secret.data[RESULT_KEY]))["drifted"] == ["runs-a.drift (test:Drifted)"]
    assert run_status(api, policy)["reason"] == "PolicyViolation"
    assert "no-public-endpoint" in run_status(api, policy)["message"]
    assert run_status(api, slow)["reason"] == "RunCancelled" and "deadline" in run_status(api, slow)["message"]
    assert 'hubwright_runner_runs_total{operation="preview",phase="Drifted"} 1.0' in metrics
    assert 'hubwright_runner_runs_total{operation="up",phase="Cancelled"} 1.0' in metrics
    assert "hubwright_runner_busy 0.0" in metrics


class LateEngine(LiveEngine):
    """Its first cancel() stops nothing: what the engine sees of a cancel that lands after the runner's last check
    and before the engine has started the run (CI, 2026-11-30: the run stayed Running past its deadline)."""

    def cancel(self, grace: float) -> None:
        if not self.cancels:
            self.cancels.append(grace)
            return
        super().cancel(grace)


def test_a_deadline_whose_cancel_found_no_run_yet_is_cancelled_again_not_lost(api):
    engine = LateEngine()
    engine.gate("runs-a.late")  # never opened: only its deadline ends it
    late = create_run(api, "up", inputs("late"), timeout=2)
    with running_runners(api, engine, n=1, claim_ttl=TTL, cancel_grace=GRACE):
        finished(api, [late], phases=("Cancelled",), timeout=60)
    assert len(engine.cancels) == 2, "cancelled once more after the grace"
    assert run_status(api, late)["reason"] == "RunCancelled" and "deadline" in run_status(api, late)["message"]


def test_with_two_workers_a_deadline_cancels_one_run_and_hands_the_other_back(api):
    """engine.cancel stops every run of the runner's engine: the run whose deadline passed is Cancelled, the
    other one is handed back (not failed) and runs again."""
    engine = RecordingEngine()
    engine.gate("runs-a.late")  # never opened
    other_gate = engine.gate("runs-a.bystander")
    late = create_run(api, "up", inputs("late"), timeout=3)
    bystander = create_run(api, "up", inputs("bystander"))
    with running_runners(api, engine, n=1, workers=2, claim_ttl=TTL, cancel_grace=GRACE):
        wait_until(lambda: engine.count("up") == 2, 20, what="both run")
        finished(api, [late], phases=("Cancelled",), timeout=20)
        wait_until(lambda: engine.count("up", "runs-a.bystander") == 2, 20, what="the bystander runs again")
        other_gate.set()
        finished(api, [bystander], timeout=20)
    assert [c.operation for c in engine.runs(stack="runs-a.bystander")] == ["up", "recover", "up"]
    assert run_status(api, bystander)["claim"]["takeovers"] == 0


def test_a_runner_whose_name_its_peers_would_not_recognise_does_not_start():
    with pytest.raises(ValueError, match="does not match --runner-hosts"):
        Runner(client.ApiClient(), RecordingEngine(), namespace=SERVICE_NAMESPACE, identity="laptop",
               runner_hosts="hubwright-runner-[a-z0-9]+-[a-z0-9]+")


def test_fair_between_namespaces_one_run_of_b_starts_among_the_first_two(api):
    engine = RecordingEngine(run_seconds=0.2)
    keys = [create_run(api, "up", inputs(f"many-{i}", "runs-a")) for i in range(6)]
    next_second(api)  # B's run is the newest by more than the creation timestamp's second
    keys.append(create_run(api, "up", inputs("one", "runs-b")))
    with running_runners(api, engine, n=1, claim_ttl=TTL, cancel_grace=GRACE):
        finished(api, keys, timeout=40)
    order = [c.stack for c in sorted(engine.calls, key=lambda c: c.started)]
    assert "runs-b.one" in order[:2], order


def test_the_result_goes_into_the_runs_secret_and_the_status_says_what_changed(api):
    engine = RecordingEngine(progress=3, run_seconds=1.5)
    key = create_run(api, "up", inputs("result"))
    seen_progress = []
    with running_runners(api, engine, n=1, claim_ttl=TTL, cancel_grace=GRACE):
        def progressed():
            progress = run_status(api, key).get("progress")
            if progress:
                seen_progress.append(progress)
            return phase(api, key) == "Succeeded"
        wait_until(progressed, 20, what="succeeded")
    status = run_status(api, key)
    assert status["summary"] == "no changes" and status["changes"] == {"same": 1}
    assert status["startTime"] <= status["endTime"]
    assert seen_progress and seen_progress[-1]["planned"] == 3
    run = client.CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, "runs-a", STACKRUNS,
                                                                    key.partition("/")[2])
    secret = client.CoreV1Api(api).read_namespaced_secret(run["spec"]["inputsSecret"], SERVICE_NAMESPACE)
    result = json.loads(base64.b64decode(secret.data[RESULT_KEY]))
    assert result["outputs"]["cluster"] == "runs-a/result" and result["drifted"] == []
    assert "outputs" not in status and "cluster" not in json.dumps(status)  # tenants read the run, not the outputs


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
