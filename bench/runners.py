"""The runner pool (docs/service.md, "Runners"): `python -m bench.runners --json`.

A real kube-apiserver (doubles/envtest.py); the service side is the service's own executor
(automation.service.executor.RunnerEngine, on a runtime Manager as a leader term has it); the runners are real
processes, `python -m doubles.runners runner ...` (automation.runner with the engine double: every run takes
--run-seconds, long enough that these 2 cores are not the bound). Every byte between them and the API server goes
through a counting proxy (doubles/stall_proxy.py), and the API server's own request counter is read before and
after.

Prints one JSON object:
  runs_per_s_1, _2, _4     --runs runs (distinct stacks, over several namespaces) awaited at once, with 1, 2 and
                           4 runner processes: runs / (first created .. last seen finished)
  scaling_4_over_1         runs_per_s_4 / runs_per_s_1 (the issue asks >= 3.2)
  claim_overhead_ms_p50/99 one run at a time, one runner: the time a run takes end to end, as the service sees it
                           (create, claim, the engine's --run-seconds, the result written, the status seen through
                           the informer), minus --run-seconds
  takeover_s               a runner SIGKILLed while it holds a run: the kill to another runner's claim, against
                           --claim-ttl (`takeover_claim_ttl_s`)
  api_requests_per_run     API requests per run (the API server's apiserver_request_total, every verb, over the
                           throughput runs), and api_bytes_per_run (both directions, through the proxy); the
                           local executor makes none: its engine is in the service's process
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator

from kubernetes import client

from automation.adapters.engine import RunLimits
from automation.service.executor import RunnerEngine
from automation.kit.runtime import Manager
from doubles.engine import RecordingEngine
from doubles.envtest import EnvTest, missing_binaries, project_crds, start_envtest
from doubles.factories import cluster, resolve_one
from doubles.stall_proxy import StallProxy
from stacks.names import GROUP, STACKRUNS, VERSION

ROOT = Path(__file__).resolve().parent.parent
SYSTEM = "hubwright-system"
NAMESPACES = [f"bench-{i}" for i in range(5)]


def kubeconfig(api: EnvTest, port: int, where: Path) -> Path:
    """A kubeconfig for the API server, through the proxy on `port` (TLS passes through it)."""
    path = where / f"kubeconfig-{port}"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "bench",
        "clusters": [{"name": "bench", "cluster": {"server": f"https://127.0.0.1:{port}",
                                                    "certificate-authority": api.ca_file}}],
        "users": [{"name": "admin", "user": {"token": api.token}}],
        "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "admin"}}]}))
    return path


def requests_served(api: EnvTest) -> float:
    """The API server's apiserver_request_total, summed over every verb and resource."""
    status, text = api.request("GET", "/metrics", timeout=30)
    if status != 200:
        raise RuntimeError(f"GET /metrics: {status}")
    return sum(float(m.group(1)) for m in re.finditer(r"^apiserver_request_total\{[^}]*\} (\S+)$", str(text), re.M))


class Runners:
    """`n` runner processes (the engine double), through `proxy`."""

    def __init__(self, config: Path, n: int, *, run_seconds: float, claim_ttl: float, tag: str):
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs = config.parent / f"runners-{tag}.log"
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
        for i in range(n):
            name = f"hubwright-runner-{tag}-r{i}"
            # Each in a UTS namespace of its own: a runner's --identity is its host name (the one its stack locks
            # carry), as in a pod of the runners' Deployment.
            sandbox = ["bwrap", "--dev-bind", "/", "/", "--unshare-uts", "--hostname", name, "--die-with-parent"]
            self.procs[name] = subprocess.Popen(
                [*sandbox, sys.executable, "-m", "doubles.runners", "--run-seconds", str(run_seconds), "runner", "--kubeconfig", str(config), "--namespace", SYSTEM,
                 "--claim-ttl", str(claim_ttl), "--metrics-port", "0", "--metrics-bind", "127.0.0.1",
                 "--identity", name, "--log-level", "WARNING"],
                cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=self.logs.open("ab"))

    def kill(self, name: str) -> None:
        self.procs[name].send_signal(signal.SIGKILL)
        self.procs[name].wait()

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


class Service:
    """The service's executor over its own runtime Manager, as a leader term runs it."""

    def __init__(self, config: Path):
        from automation.adapters.kube.kubeconfig import kube_client
        self.api_client = kube_client(str(config), None)
        self.engine = RunnerEngine(self.api_client, local=RecordingEngine(), namespace=SYSTEM,
                                   limits=RunLimits(timeout=300, grace=5), keep_runs=1000)
        self.manager = Manager(watch_timeout=300)
        self.engine.attach(self.manager, identity="bench")
        self.manager.start()
        if not self.manager.started.wait(60):
            raise RuntimeError("the runs' informer did not sync")

    def stop(self) -> None:
        self.manager.stop()


def stacks(count: int, tag: str) -> Iterator[Any]:
    for i in range(count):
        yield resolve_one(cluster(f"{tag}-{i}", NAMESPACES[i % len(NAMESPACES)]))


def clear(api_client: client.ApiClient) -> None:
    """Delete every run (a finished one's stack would wait for nothing, but keep each case on its own)."""
    custom = client.CustomObjectsApi(api_client)
    for namespace in [SYSTEM, *NAMESPACES]:
        custom.delete_collection_namespaced_custom_object(GROUP, VERSION, namespace, STACKRUNS)


def throughput(api: EnvTest, proxy: StallProxy, where: Path, runners: int, runs: int, run_seconds: float
               ) -> dict[str, float]:
    config = kubeconfig(api, proxy.port, where)
    service = Service(config)
    pool = Runners(config, runners, run_seconds=run_seconds, claim_ttl=30, tag=f"t{runners}")
    try:
        time.sleep(2.0)  # the runners list and watch before the first run exists (as a running pool has)
        before_requests, before_bytes = requests_served(api), sum(proxy.sent.values())
        started = time.monotonic()
        with ThreadPoolExecutor(runs) as threads:
            results = list(threads.map(lambda inputs: service.engine.up(inputs, message="bench"),
                                       stacks(runs, f"t{runners}")))
        elapsed = time.monotonic() - started
        assert all(r.ok for r in results), [r.message for r in results if not r.ok]
        return {"runs_per_s": runs / elapsed, "elapsed_s": elapsed,
                "requests_per_run": (requests_served(api) - before_requests) / runs,
                "bytes_per_run": (sum(proxy.sent.values()) - before_bytes) / runs}
    finally:
        pool.stop()
        service.stop()
        clear(service.api_client)


def overhead(api: EnvTest, proxy: StallProxy, where: Path, runs: int, run_seconds: float) -> list[float]:
    config = kubeconfig(api, proxy.port, where)
    service = Service(config)
    pool = Runners(config, 1, run_seconds=run_seconds, claim_ttl=30, tag="o")
    try:
        time.sleep(2.0)
        spent = []
        for inputs in stacks(runs, "o"):
            started = time.monotonic()
            service.engine.up(inputs, message="bench")
            spent.append((time.monotonic() - started - run_seconds) * 1000)
        return spent
    finally:
        pool.stop()
        service.stop()
        clear(service.api_client)


def takeover(api: EnvTest, proxy: StallProxy, where: Path, claim_ttl: float) -> float:
    """Two runners; the one that claims a long run is SIGKILLed; seconds from the kill to the other's claim."""
    config = kubeconfig(api, proxy.port, where)
    service = Service(config)
    pool = Runners(config, 2, run_seconds=claim_ttl * 3, claim_ttl=claim_ttl, tag="k")
    custom = client.CustomObjectsApi(service.api_client)
    [inputs] = list(stacks(1, "k"))
    namespace = inputs.namespace
    try:
        time.sleep(2.0)
        waiter = threading.Thread(target=lambda: service.engine.up(inputs, message="bench"), daemon=True)
        waiter.start()

        def holder() -> str | None:
            for run in custom.list_namespaced_custom_object(GROUP, VERSION, namespace, STACKRUNS)["items"]:
                claim = (run.get("status") or {}).get("claim") or {}
                if claim.get("holder"):
                    return str(claim["holder"])
            return None

        first = None
        while first is None:
            first = holder()
            time.sleep(0.05)
        pool.kill(first)
        killed = time.monotonic()
        while holder() in (first, None):
            time.sleep(0.05)
        return time.monotonic() - killed
    finally:
        pool.stop()
        service.stop()
        clear(service.api_client)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.runners", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print only the JSON object (the default prints it too)")
    parser.add_argument("--runs", type=int, default=100, help="runs per throughput case")
    parser.add_argument("--run-seconds", type=float, default=1.0, help="how long the engine double takes per run")
    parser.add_argument("--overhead-runs", type=int, default=30, help="runs, one at a time, for the overhead")
    parser.add_argument("--claim-ttl", type=float, default=10.0, help="the takeover case's --claim-ttl")
    args = parser.parse_args(argv)
    missing = missing_binaries("etcd", "kube-apiserver", "bwrap")
    if missing:
        parser.error(f"{', '.join(missing)} not found in .tools/bin or on PATH (scripts/tools.sh builds them)")
    out: dict[str, Any] = {"runs": args.runs, "run_seconds": args.run_seconds}
    with tempfile.TemporaryDirectory() as tmp, start_envtest(crds=project_crds()) as api:
        with api.api_client() as admin:
            core = client.CoreV1Api(admin)
            for name in [SYSTEM, *NAMESPACES]:
                core.create_namespace({"metadata": {"name": name}})
        upstream = api.host.removeprefix("https://").rsplit(":", 1)
        with StallProxy((upstream[0], int(upstream[1]))) as proxy:
            cases = {n: throughput(api, proxy, Path(tmp), n, args.runs, args.run_seconds) for n in (1, 2, 4)}
            for n, case in cases.items():
                out[f"runs_per_s_{n}"] = round(case["runs_per_s"], 3)
            out["scaling_4_over_1"] = round(cases[4]["runs_per_s"] / cases[1]["runs_per_s"], 2)
            spent = overhead(api, proxy, Path(tmp), args.overhead_runs, args.run_seconds)
            out["claim_overhead_ms_p50"] = round(statistics.median(spent), 1)
            out["claim_overhead_ms_p99"] = round(percentile(spent, 0.99), 1)
            out["takeover_s"] = round(takeover(api, proxy, Path(tmp), args.claim_ttl), 2)
            out["takeover_claim_ttl_s"] = args.claim_ttl
            out["api_requests_per_run"] = round(statistics.median(c["requests_per_run"] for c in cases.values()), 1)
            out["api_bytes_per_run"] = round(statistics.median(c["bytes_per_run"] for c in cases.values()))
            out["local_executor_api_requests_per_run"] = 0
    print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
