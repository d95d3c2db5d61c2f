"""The registry API's figures (docs/registry.md): `python -m bench.registry [--clusters 1000] [--installs 200]`.

Against a real kube-apiserver (doubles/envtest.py) and the real `python -m automation api` process:

  list_p50_ms / list_p99_ms        GET /clusters over the whole fleet (--clusters Clusters in 10 tenants),
                                   one page of 100 (`?limit=100`) and every cluster at once (`?limit=1000`)
  install_per_s                    GET /install/agent.json with 8 client threads, each call a fresh token:
                                   find the cluster, mark the token used, grant the agent, TokenRequest
  install_p50_ms / install_p99_ms  the same calls' latency

The rate limits are raised out of the way for the throughput figure (--install-rate, and --caller-rate for the
admin's own calls); the API runs with the admin's kubeconfig. Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from doubles.envtest import EnvTest, free_port, missing_binaries, project_crds, start_envtest
from stacks.names import CLUSTERS, TENANTS

ROOT = Path(__file__).resolve().parent.parent
TENANTS = 10


def _call(base: str, method: str, path: str, token: str | None = None, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    request = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return (round(statistics.median(ordered) * 1000, 1),
            round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 1))


def _fleet(env: EnvTest, clusters: int) -> list[tuple[str, str]]:
    """Tenants t-bench-0..9 (their namespaces made directly: no service runs here) and `clusters` Clusters."""
    from kubernetes import client
    with env.api_client() as api:
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        for i in range(TENANTS):
            core.create_namespace({"metadata": {"name": f"t-bench-{i}"}})
            custom.create_cluster_custom_object("hubwright.io", "v1alpha1", TENANTS, {
                "apiVersion": "hubwright.io/v1alpha1", "kind": "HubTenant", "metadata": {"name": f"t-bench-{i}"},
                "spec": {"displayName": f"Bench {i}"}})
        names = [(f"t-bench-{i % TENANTS}", f"c-bench-{i:05d}") for i in range(clusters)]

        def create(pair: tuple[str, str]) -> None:
            namespace, name = pair
            custom.create_namespaced_custom_object("hubwright.io", "v1alpha1", namespace, CLUSTERS, {
                "apiVersion": "hubwright.io/v1alpha1", "kind": "HubCluster",
                "metadata": {"name": name, "namespace": namespace, "labels": {"tier": "bench"}},
                "spec": {"displayName": name, "facts": {"cloud": "aws", "index": str(int(name[-5:]) % 7)},
                         "tokenLifetime": "1h"}})

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(create, names))
    return names


def start_api(env: EnvTest, workdir: Path, *flags: str) -> tuple[subprocess.Popen, str]:
    """The real `python -m automation api` process against `env` on a free port, with `flags` (its log in
    workdir/api.log, in a session of its own); returns it and its base URL once /healthz answers."""
    port = free_port()
    environ = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("KUBERNETES_SERVICE_HOST", "HUBWRIGHT_FACTS_DB", "KUBECONFIG"):
        environ.pop(name, None)
    process = subprocess.Popen(
        [sys.executable, "-m", "automation", "api", "--kubeconfig", str(env.kubeconfig()),
         "--bind", f"127.0.0.1:{port}", *flags],
        cwd=ROOT, env=environ, stdout=subprocess.DEVNULL, stderr=open(workdir / "api.log", "wb"),
        start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if _call(base, "GET", "/healthz")[0] == 200:
                return process, base
        except OSError:
            pass
        if process.poll() is not None:
            raise RuntimeError(f"the API exited: {(workdir / 'api.log').read_text()[-2000:]}")
        time.sleep(0.2)
    raise RuntimeError("the API did not come up in 60 s")


def measure(env: EnvTest, clusters: int, installs: int, rate: float) -> dict[str, Any]:
    names = _fleet(env, clusters)
    with tempfile.TemporaryDirectory(prefix="bench-registry-") as tmp:
        workdir = Path(tmp)
        process, base = start_api(env, workdir, "--facts-db", f"sqlite:///{workdir / 'facts.db'}",
                                  "--install-rate", f"{rate:g}", "--install-burst", f"{int(rate)}",
                                  # the admin's own calls: not the limit
                                  "--caller-rate", f"{rate:g}", "--caller-burst", f"{int(rate)}")
        try:
            result: dict[str, Any] = {"clusters": clusters}
            for limit in (100, 1000):
                status, body = _call(base, "GET", f"/clusters?limit={limit}", env.token)
                assert status == 200, (status, body)
                samples = []
                for _ in range(60):
                    started = time.perf_counter()
                    status, _ = _call(base, "GET", f"/clusters?limit={limit}", env.token)
                    samples.append(time.perf_counter() - started)
                    assert status == 200
                result[f"list_limit_{limit}_p50_ms"], result[f"list_limit_{limit}_p99_ms"] = percentiles(samples)

            tokens = []
            for namespace, name in names[:installs]:
                status, body = _call(base, "POST", f"/tenants/{namespace}/clusters/{name}/bootstrap-token", env.token)
                assert status == 201, (status, body)
                tokens.append(body["token"])

            def install(token: str) -> float:
                started = time.perf_counter()
                status, body = _call(base, "GET", f"/install/agent.json?token={token}")
                assert status == 200, (status, body)
                return time.perf_counter() - started

            started = time.perf_counter()
            with ThreadPoolExecutor(8) as pool:
                latencies = list(pool.map(install, tokens))
            wall = time.perf_counter() - started
            result["installs"] = len(tokens)
            result["install_per_s"] = round(len(tokens) / wall, 1)
            result["install_p50_ms"], result["install_p99_ms"] = percentiles(latencies)
            return result
        finally:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(15)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.registry", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--installs", type=int, default=200)
    parser.add_argument("--install-rate", type=float, default=10000.0,
                        help="the API's --install-rate for the run (the default 1/s would measure the limit)")
    args = parser.parse_args(argv)
    missing = missing_binaries("etcd", "kube-apiserver")
    if missing:
        parser.error(f"{', '.join(missing)} not found in .tools/bin or on PATH (scripts/tools.sh builds them)")
    with start_envtest(crds=project_crds()) as env:
        print(json.dumps(measure(env, args.clusters, min(args.installs, args.clusters), args.install_rate), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
