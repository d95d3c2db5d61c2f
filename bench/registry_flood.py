"""One tenant's list flood against another's list (#31, item 6): `python -m bench.registry_flood`.

Against a real kube-apiserver (doubles/envtest.py) and the real `python -m automation api` process, started with its
default flags (so the same command measures any version of the API):

  victim_alone_p50_ms / _p99_ms   tenant A lists its --victim-clusters clusters (GET /tenants/A/clusters),
                                  one request after another, nothing else running
  victim_flood_p50_ms / _p99_ms   the same while tenant B's --flooders threads each send, back to back,
                                  fact-filtered lists of its own --attacker-clusters clusters that match
                                  nothing (GET /tenants/B/clusters?fact=index=none): every one scans B's clusters
  p99_ratio                       victim_flood_p99_ms / victim_alone_p99_ms (goal: under 3)
  flood_answers                   B's answers by status (429: refused by the per-caller limits)

Each tenant acts as its own ServiceAccount, bound in its namespace to get/list Clusters. The flood runs in a
process of its own, so its client threads do not share the victim's interpreter. Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client

from bench.registry import percentiles, start_api
from doubles.envtest import EnvTest, missing_binaries, project_crds, start_envtest
from stacks.names import CLUSTERS, TENANTS, GROUP, VERSION


def _get(url: str, token: str, timeout: float = 120) -> int:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            answer.read()
            return answer.status
    except urllib.error.HTTPError as exc:
        exc.read()
        return exc.code


def _tenant(hub: EnvTest, name: str, clusters: int) -> str:
    """Tenant `name`, its namespace and clusters, and the token of a ServiceAccount that may get and list them."""
    with hub.api_client() as api:
        core, objects, rbac = client.CoreV1Api(api), client.CustomObjectsApi(api), client.RbacAuthorizationV1Api(api)
        core.create_namespace({"metadata": {"name": name}})
        objects.create_cluster_custom_object(GROUP, VERSION, TENANTS, {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "HubTenant", "metadata": {"name": name}, "spec": {}})

        def create(i: int) -> None:
            objects.create_namespaced_custom_object(GROUP, VERSION, name, CLUSTERS, {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "HubCluster",
                "metadata": {"name": f"c-{i:05d}", "namespace": name, "labels": {"tier": "bench"}},
                "spec": {"displayName": f"cluster {i}", "facts": {"cloud": "aws", "index": str(i)}}})
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(create, range(clusters)))
        core.create_namespaced_service_account(name, {"metadata": {"name": "user"}})
        rbac.create_namespaced_role(name, {"metadata": {"name": "user"}, "rules": [
            {"apiGroups": [GROUP], "resources": [CLUSTERS], "verbs": ["get", "list"]}]})
        rbac.create_namespaced_role_binding(name, {
            "metadata": {"name": "user"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                                      "name": "user"},
            "subjects": [{"kind": "ServiceAccount", "name": "user", "namespace": name}]})
        made = core.create_namespaced_service_account_token("user", name, {"spec": {"expirationSeconds": 7200}})
        return made.status.token


def _flood(url: str, token: str, flooders: int, stop: Any, counts: Any) -> None:
    """`flooders` threads sending `url` back to back (never waiting on Retry-After) until `stop`; their answers
    by status put on `counts`."""
    answers: Counter[int] = Counter()
    lock = threading.Lock()

    def loop() -> None:
        while not stop.is_set():
            status = _get(url, token)
            with lock:
                answers[status] += 1

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(flooders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    counts.put(dict(answers))


def measure(hub: EnvTest, *, victim_clusters: int, attacker_clusters: int, flooders: int, samples: int,
            pause: float) -> dict[str, Any]:
    victim = _tenant(hub, "t-victim", victim_clusters)
    attacker = _tenant(hub, "t-attacker", attacker_clusters)
    with tempfile.TemporaryDirectory(prefix="bench-flood-") as tmp:
        process, base = start_api(hub, Path(tmp), "--state-dir", tmp, "--log-level", "WARNING")
        try:
            victim_url = f"{base}/tenants/t-victim/clusters"
            flood_url = f"{base}/tenants/t-attacker/clusters?fact=index%3Dnone"

            def victim_lists() -> list[float]:
                taken = []
                for _ in range(samples):
                    started = time.perf_counter()
                    status = _get(victim_url, victim)
                    taken.append(time.perf_counter() - started)
                    if status != 200:
                        raise RuntimeError(f"the victim's list answered {status}")
                    time.sleep(pause)
                return taken

            for _ in range(5):
                _get(victim_url, victim)  # warm the victim's client and connection
            alone = victim_lists()

            context = multiprocessing.get_context("spawn")
            stop, counts = context.Event(), context.Queue()
            flood = context.Process(target=_flood, args=(flood_url, attacker, flooders, stop, counts), daemon=True)
            flood.start()
            try:
                time.sleep(5.0)  # the flood is under way, past the attacker's first burst
                under_flood = victim_lists()
            finally:
                stop.set()
                answers = counts.get(timeout=180)
                flood.join(30)
            result: dict[str, Any] = {"victim_clusters": victim_clusters, "attacker_clusters": attacker_clusters,
                                      "flooders": flooders, "samples": samples}
            result["victim_alone_p50_ms"], result["victim_alone_p99_ms"] = percentiles(alone)
            result["victim_flood_p50_ms"], result["victim_flood_p99_ms"] = percentiles(under_flood)
            result["p99_ratio"] = round(result["victim_flood_p99_ms"] / result["victim_alone_p99_ms"], 2)
            result["flood_answers"] = {str(status): count for status, count in sorted(answers.items())}
            result["flood_seconds"] = round(sum(under_flood) + samples * pause, 1)
            return result
        finally:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.registry_flood", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--victim-clusters", type=int, default=10)
    parser.add_argument("--attacker-clusters", type=int, default=2000)
    parser.add_argument("--flooders", type=int, default=40, help="the attacker's concurrent requests")
    parser.add_argument("--samples", type=int, default=200, help="victim lists per phase")
    parser.add_argument("--pause", type=float, default=0.05, help="seconds between two victim lists")
    args = parser.parse_args(argv)
    absent = missing_binaries("etcd", "kube-apiserver")
    if absent:
        parser.error(f"{', '.join(absent)} not found in .tools/bin or on PATH (scripts/tools.sh builds them)")
    with start_envtest(crds=project_crds()) as hub:
        print(json.dumps(measure(hub, victim_clusters=args.victim_clusters, attacker_clusters=args.attacker_clusters,
                                 flooders=args.flooders, samples=args.samples, pause=args.pause), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
