"""How the service behaves under load: `python -m bench.reconcile --json`.

Drives the real watch -> queue -> reconcile path (automation.service.serve.Service)
against a mock Kubernetes API server (kmock's emulator, doubles.MockKubeAPI,
in its own process so that its memory is not counted) over real HTTP, with the
recording engine double (doubles.RecordingEngine) taking --run-ms per run.
Prints one JSON object:

  restart_noop_runs         engine runs when the service restarts over --clusters applied clusters (must be 0)
  burst_runs                runs caused by --burst updates to one cluster within one second (target <= 2)
  mesh_join_runs            runs when one cluster joins a mesh group of --mesh (stacks.mesh promises 1)
  tgw_join_runs             runs when one cluster joins a Transit Gateway group of --mesh with summaryCIDRs: its own
                            stack and the transit stack's (docs/mesh.md); _no_summary: the same without them
  fanout_wall_ratio         --fanout new clusters, --workers workers, --run-ms runs: wall time from service
                            start to the last run's end / (ceil(fanout / workers) * run time) (target <= 1.1)
  service_cpu_ms_per_reconcile  the same fan-out: this process's CPU time (the service's threads; the engine
                            double only sleeps, the API server is another process) per reconcile that ran `up`
  event_to_run_ms_p50/p99_at_N  a spec change (client PATCH sent) to its engine run starting, over a settled
                            fleet of N clusters (--fleet, repeatable; target p99 < 50 ms at 1,000 and 10,000)
  event_to_run_p99_ratio    p99 at the largest --fleet / p99 at the smallest (target <= 1.5)
  rss_mb_per_1000_clusters  the restarted service's resident memory growth, per 1,000 clusters

With --apiserver real, every scenario runs against a real kube-apiserver and etcd (doubles/envtest.py, the
project's CRDs installed, as tests/envtest.py starts it) instead of kmock's emulator, and the latency scenario
also measures the floor in the same run, over the same settled fleet, before the service starts:

  watch_floor_ms_p50/p99_at_N     the same spec edit (PATCH sent) to its MODIFIED event arriving on a bare watch
                                  of HubClusters in this process (kubernetes.watch, nothing else running)
  watch_create_floor_ms_p50/p99_at_N  a HubCluster create sent to its ADDED event on that watch
  event_to_run_floor_ratio_p50/p99_at_N  event_to_run / watch_floor: the service's own share (goal p99 <= 1.5)
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Iterator

from kubernetes import client, config, watch

from automation.service.options import ServiceOptions
from automation.service.serve import Service
from bench.fleets import ACCOUNTS, REGIONS
from doubles.engine import RecordingEngine
from doubles.envtest import missing_binaries, project_crds, start_envtest
from stacks.names import CLUSTERS, HUBCONFIGS, GROUP, OWNER_ACCOUNT_ANNOTATION, VERSION

SYSTEM = "hubwright-system"


# --------------------------------------------------------------------------- the API server

@contextmanager
def api_server(kind: str = "kmock") -> Iterator[str]:
    """Yields where the API server is, for api_client(): kmock's URL (a MockKubeAPI in a child process), or the
    kubeconfig of a real etcd + kube-apiserver with the project's CRDs (kind "real")."""
    if kind == "real":
        with start_envtest(crds=project_crds()) as env:
            yield str(env.kubeconfig())
        return
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "doubles", "1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env)
    try:
        url = proc.stdout.readline().strip()
        if not url.startswith("http"):
            raise RuntimeError(f"the mock API server did not start (said {url!r})")
        yield url
    finally:
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def api_client(where: str) -> client.ApiClient:
    """A client of api_server()'s server: `where` is a URL (kmock) or a kubeconfig path (the real one)."""
    cfg = client.Configuration()
    if where.startswith("http"):
        cfg.host = where
    else:
        config.load_kube_config(config_file=where, client_configuration=cfg)
    cfg.connection_pool_maxsize = 32
    return client.ApiClient(cfg)


# --------------------------------------------------------------------------- the fleet

def hub_doc(clusters: int, group: dict | None = None) -> dict:
    per_region = math.ceil(clusters / 50) + 1  # room for every cluster in either region, and one more
    inventory = [
        {"region": region, "vpcID": f"vpc-0hub{r}{i:03d}", "cidr": f"10.{200 + r}.{i}.0/24",
         "subnets": [{"subnetID": f"subnet-0{r}{i:03d}{z}", "availabilityZone": f"{region}{z}"} for z in "ab"]}
        for r, region in enumerate(REGIONS) for i in range(per_region)
    ]
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "HubConfig", "metadata": {"name": "default"},
        "spec": {"accountID": "111111111111", "region": "us-east-1",
                 "credentials": {"roleARN": "arn:aws:iam::111111111111:role/hubwright-hub"},
                 "roleAccountMap": {a: f"arn:aws:iam::{a}:role/hubwright" for a in ACCOUNTS},
                 "endpointVPCInventory": inventory,
                 # Ten team namespaces own two accounts: shared on purpose (else AccountShared refuses them).
                 "tenancy": {"sharedAccounts": list(ACCOUNTS)},
                 "associatedVPCs": [{"region": "us-east-1", "vpcID": "vpc-0mgmt", "cidr": "172.16.0.0/16"}],  # clear of the clusters
                 # The mesh scenario's group spans every team (a group is namespace-local unless listed).
                 "mesh": {"groups": {"payments": {"namespaces": [f"team-{k}" for k in range(10)], **(group or {})}}}},
    }


def cluster_doc(n: int, namespace: str, *, mesh: str | None = None, transit: bool = False) -> dict:
    meta: dict[str, Any] = {"name": f"c{n:04d}", "namespace": namespace}
    if mesh:
        meta["labels"] = {"hubwright.io/mesh": mesh}
        meta["annotations"] = {"hubwright.io/mesh-enabled": "true"}
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "HubCluster", "metadata": meta,
        "spec": {"accountID": ACCOUNTS[n % 2], "region": REGIONS[n % 2] if not mesh else "us-east-1",
                 "infraID": f"c{n:04d}-x7k2p", "apiURL": f"https://api.c{n:04d}.example.com:6443",
                 "network": {"vpcID": f"vpc-0c{n:04d}", "cidr": f"10.{n // 256}.{n % 256}.0/24",
                             "routeTableIDs": [f"rtb-0c{n:04d}"], "nodeSecurityGroupIDs": [f"sg-0c{n:04d}"],
                             **({"transitSubnets": [{"subnetID": f"subnet-0t{n:04d}", "availabilityZone": "us-east-1a"}]}
                                if transit else {})},
                 "privateLink": {"enabled": True}},
    }


def bench_namespace(n: int) -> str:
    return f"team-{n % 10}"


def populate(api: client.ApiClient, count: int, *, first: int = 0, mesh: str | None = None,
             hub: bool = True, group: dict | None = None) -> None:
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    if hub:
        for ns in {bench_namespace(n) for n in range(first, first + count)} | {SYSTEM}:
            owner = {OWNER_ACCOUNT_ANNOTATION: ACCOUNTS[int(ns.rsplit("-", 1)[1]) % 2]} if ns != SYSTEM else {}
            core.create_namespace({"metadata": {"name": ns, "annotations": owner}})
        custom.create_cluster_custom_object(GROUP, VERSION, HUBCONFIGS, hub_doc(count, group))
    transit = bool(group and group.get("topology") == "transitGateway")
    docs = [cluster_doc(n, bench_namespace(n), mesh=mesh, transit=transit) for n in range(first, first + count)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda d: custom.create_namespaced_custom_object(
            GROUP, VERSION, d["metadata"]["namespace"], CLUSTERS, d), docs))


# --------------------------------------------------------------------------- the service

def service(api: client.ApiClient, engine: RecordingEngine, workers: int) -> Service:
    options = ServiceOptions(namespace=SYSTEM, leader_election=False, metrics_bind="127.0.0.1", metrics_port=0,
                             workers=workers, drift_interval=3600)
    return Service(options, api_client=api, engine=engine)


def wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not done after {timeout:.0f}s")
        time.sleep(0.02)


def quiet(svc: Service, engine: RecordingEngine, seconds: float, timeout: float = 120) -> None:
    """Until the queue is idle and no run has started for `seconds`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pipeline = svc.pipeline
        last = max((c.started for c in engine.calls), default=0.0)
        if pipeline is not None and pipeline.queue.idle() and time.monotonic() - last > seconds \
                and pipeline.mapper.enqueued >= 0 and all(pipeline.synced().values()):
            time.sleep(seconds)
            if pipeline.queue.idle() and max((c.started for c in engine.calls), default=0.0) == last:
                return
        time.sleep(0.05)
    raise TimeoutError("the service did not go quiet")


def rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


# --------------------------------------------------------------------------- scenarios

def restart(clusters: int, workers: int, apiserver: str = "kmock") -> dict[str, float]:
    with api_server(apiserver) as url:
        api = api_client(url)
        populate(api, clusters)
        first = RecordingEngine()
        svc = service(api, first, max(workers, 16))
        svc.start()
        try:
            wait(lambda: first.count("up") >= clusters, 600, f"applying {clusters} clusters")
            quiet(svc, first, 1.0)
        finally:
            svc.stop()
        # The restart runs in a fresh process, so its memory growth is the service's alone.
        out = subprocess.run([sys.executable, "-m", "bench.reconcile", "--restart-child", url,
                              "--clusters", str(clusters), "--workers", str(workers)],
                             check=True, capture_output=True, text=True)
        return json.loads(out.stdout)


def restart_child(url: str, clusters: int, workers: int) -> None:
    api = api_client(url)
    engine = RecordingEngine()
    before = rss_mb()
    started = time.monotonic()
    svc = service(api, engine, workers)
    svc.start()
    try:
        wait(lambda: svc.ready()[0], 120, "sync")
        synced = time.monotonic() - started
        wait(lambda: svc.pipeline.desired.resolves > 0, 60, "the first resolution")
        quiet(svc, engine, 2.0)
        after = rss_mb()
        cached = len(svc.pipeline.cache.entries())
    finally:
        svc.stop()
    print(json.dumps({"restart_noop_runs": engine.count(), "restart_sync_s": round(synced, 2),
                      "restart_clusters_seen": cached,
                      "rss_mb_per_1000_clusters": round((after - before) * 1000 / max(cached, 1), 1)}))


def burst(updates: int, run_ms: float, apiserver: str = "kmock") -> dict[str, float]:
    with api_server(apiserver) as url:
        api = api_client(url)
        populate(api, 1)
        engine = RecordingEngine(run_ms / 1000)
        svc = service(api, engine, 4)
        svc.start()
        custom = client.CustomObjectsApi(api)
        try:
            wait(lambda: engine.count("up") == 1, 60, "the first run")
            quiet(svc, engine, 0.5)
            before = engine.count()
            gap = 1.0 / updates
            for i in range(updates):
                started = time.monotonic()
                custom.patch_namespaced_custom_object(GROUP, VERSION, bench_namespace(0), CLUSTERS, "c0000",
                                                      {"spec": {"apiURL": f"https://api.burst-{i}.example.com"}})
                time.sleep(max(0.0, gap - (time.monotonic() - started)))
            quiet(svc, engine, 2.0)
            last = engine.runs("up")[-1].inputs.private_link.api_host
        finally:
            svc.stop()
    return {"burst_runs": engine.count() - before,
            "burst_final_state_applied": last == f"api.burst-{updates - 1}.example.com"}


def join_runs(members: int, group: dict | None = None, apiserver: str = "kmock") -> int:
    """Engine runs when one cluster joins a settled mesh group of `members` (HubConfig settings `group`)."""
    with api_server(apiserver) as url:
        api = api_client(url)
        populate(api, members, mesh="payments", group=group)
        engine = RecordingEngine()
        svc = service(api, engine, 8)
        svc.start()
        try:
            wait(lambda: engine.count("up") >= members, 120, "the group")
            quiet(svc, engine, 1.0)  # a Transit Gateway group: its transit stack ran and every member is attached
            before = engine.count()
            populate(api, 1, first=members, mesh="payments", hub=False, group=group)
            wait(lambda: engine.count() > before, 60, "the joiner's run")
            quiet(svc, engine, 1.5)
        finally:
            svc.stop()
    return engine.count() - before


def mesh_join(members: int, apiserver: str = "kmock") -> dict[str, float]:
    return {"mesh_join_runs": join_runs(members, apiserver=apiserver), "mesh_join_promised": 1, "mesh_group_size": members}


def tgw_join(members: int, apiserver: str = "kmock") -> dict[str, float]:
    """A Transit Gateway group: with summaryCIDRs, and without them."""
    runs = {summary: join_runs(members, {"topology": "transitGateway",
                                         "summaryCIDRs": ["10.0.0.0/8"] if summary else []}, apiserver)
            for summary in (True, False)}
    return {"tgw_join_runs": runs[True], "tgw_join_runs_no_summary": runs[False], "tgw_join_promised": 2,
            "tgw_group_size": members}


class Runs:
    """Counts the engine double's runs as they start and end (polling engine.calls would cost O(runs) a look)."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self.started: dict[str, list[float]] = {}  # stack -> start times of its `up` runs
        self.ups = self.ended = 0
        self.last_end = 0.0

    def on_start(self, call: Any) -> None:
        if call.operation != "up":
            return
        with self._lock:
            self.started.setdefault(call.stack, []).append(call.started)
            self.ups += 1
            self._lock.notify_all()

    def on_end(self, call: Any) -> None:
        if call.operation != "up":
            return
        with self._lock:
            self.ended += 1
            self.last_end = max(self.last_end, call.ended)
            self._lock.notify_all()

    def wait(self, predicate, timeout: float, what: str) -> None:
        with self._lock:
            if not self._lock.wait_for(predicate, timeout):
                raise TimeoutError(f"{what}: not done after {timeout:.0f}s")


def counting_engine(run_ms: float) -> tuple[RecordingEngine, Runs]:
    runs = Runs()
    return RecordingEngine(run_ms / 1000, on_start=runs.on_start, on_end=runs.on_end), runs


def fanout(clusters: int, workers: int, run_ms: float, apiserver: str = "kmock") -> dict[str, float]:
    with api_server(apiserver) as url:
        api = api_client(url)
        populate(api, clusters)
        engine, runs = counting_engine(run_ms)
        svc = service(api, engine, workers)
        cpu, start = time.process_time(), time.monotonic()
        svc.start()
        try:
            runs.wait(lambda: runs.ended >= clusters, 300, "the fan-out")
            cpu = time.process_time() - cpu
            wall = runs.last_end - start
        finally:
            svc.stop()
    ideal = math.ceil(clusters / workers) * run_ms / 1000
    return {"fanout_wall_ratio": round(wall / ideal, 3), "fanout_wall_s": round(wall, 3),
            "fanout_ideal_s": round(ideal, 3), "service_cpu_ms_per_reconcile": round(cpu * 1000 / runs.ups, 2)}


def latency(fleet: int, workers: int, samples: int, apiserver: str = "kmock") -> dict[str, float]:
    """event_to_run over a settled fleet of `fleet` clusters (applied at once: runs take no time); over the real
    API server, the bare watch's floor first, on the same fleet."""
    floor: dict[str, float] = {}
    with api_server(apiserver) as url:
        api = api_client(url)
        populate(api, fleet)
        if apiserver == "real":
            edits, creates = watch_floor(api, samples)
            floor = {f"watch_floor_ms_p50_at_{fleet}": round(statistics.median(edits), 1),
                     f"watch_floor_ms_p99_at_{fleet}": round(percentile(edits, 0.99), 1),
                     f"watch_create_floor_ms_p50_at_{fleet}": round(statistics.median(creates), 1),
                     f"watch_create_floor_ms_p99_at_{fleet}": round(percentile(creates, 0.99), 1)}
        engine, runs = counting_engine(0)
        svc = service(api, engine, max(workers, 16))
        svc.start()
        try:
            runs.wait(lambda: runs.ended >= fleet, 1800, f"applying {fleet} clusters")
            quiet(svc, engine, 1.0, timeout=600)
            latencies = event_to_run(api, runs, samples)
        finally:
            svc.stop()
    result = {f"event_to_run_ms_p50_at_{fleet}": round(statistics.median(latencies), 1),
              f"event_to_run_ms_p99_at_{fleet}": round(percentile(latencies, 0.99), 1), **floor}
    if floor:
        for q in ("p50", "p99"):
            result[f"event_to_run_floor_ratio_{q}_at_{fleet}"] = round(
                result[f"event_to_run_ms_{q}_at_{fleet}"] / max(floor[f"watch_floor_ms_{q}_at_{fleet}"], 0.1), 2)
    return result


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def event_to_run(api: client.ApiClient, runs: Runs, samples: int) -> list[float]:
    """Sequential single edits on an idle service: PATCH sent -> the engine run for it starts (ms)."""
    custom = client.CustomObjectsApi(api)
    latencies = []
    for i in range(samples):
        n = i % 50
        stack = f"{bench_namespace(n)}.c{n:04d}"
        before = len(runs.started.get(stack, ()))
        ended = runs.ended
        sent = time.monotonic()
        custom.patch_namespaced_custom_object(GROUP, VERSION, bench_namespace(n), CLUSTERS, f"c{n:04d}",
                                              {"spec": {"apiURL": f"https://api.sample-{i}.c{n:04d}.example.com"}})
        runs.wait(lambda: len(runs.started.get(stack, ())) > before, 30, "an edit's run")
        latencies.append((runs.started[stack][-1] - sent) * 1000)
        runs.wait(lambda: runs.ended > ended, 30, "the run to end")
    return latencies


class Seen:
    """A bare watch of every HubCluster (kubernetes.watch on this process's client, nothing else): when each
    (name, spec.apiURL) was first seen, by event type."""

    def __init__(self, api: client.ApiClient) -> None:
        self._lock = threading.Condition()
        self.at: dict[tuple[str, str, str], float] = {}  # (event type, name, apiURL) -> monotonic time seen
        self._watch = watch.Watch()
        custom = client.CustomObjectsApi(api)
        listed = custom.list_cluster_custom_object(GROUP, VERSION, CLUSTERS, limit=1, _request_timeout=30)
        self._stream = self._watch.stream(custom.list_cluster_custom_object, GROUP, VERSION, CLUSTERS,
                                          resource_version=listed["metadata"]["resourceVersion"],
                                          allow_watch_bookmarks=False, timeout_seconds=3600,
                                          _request_timeout=(10, 3700))
        self._thread = threading.Thread(target=self._run, name="bare-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for event in self._stream:
                now = time.monotonic()
                obj = event["object"]
                key = (event["type"], obj["metadata"]["name"], obj.get("spec", {}).get("apiURL", ""))
                with self._lock:
                    self.at.setdefault(key, now)
                    self._lock.notify_all()
        except Exception as exc:  # noqa: BLE001 - the server going away after stop() is the normal end
            with self._lock:
                self.error = exc
                self._lock.notify_all()

    error: Exception | None = None

    def wait(self, key: tuple[str, str, str], timeout: float = 30) -> float:
        with self._lock:
            if not self._lock.wait_for(lambda: key in self.at or self.error is not None, timeout):
                raise TimeoutError(f"the bare watch did not see {key} within {timeout:.0f}s")
            if key not in self.at:
                raise RuntimeError(f"the bare watch ended before {key}: {self.error!r}")
            return self.at[key]

    def stop(self) -> None:
        self._watch.stop()  # the stream ends at its next event, or when the server goes (the thread is a daemon)


FLOOR_NAMESPACE = "bench-floor"


def watch_floor(api: client.ApiClient, samples: int) -> tuple[list[float], list[float]]:
    """The bare watch's delivery (ms from the call sent), before any service runs: `samples` spec edits like
    event_to_run's (PATCH of c0000..c0049's apiURL) to their MODIFIED event, and `samples` creates of a HubCluster
    (in FLOOR_NAMESPACE, deleted afterwards, so the service never sees them) to their ADDED event."""
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    seen = Seen(api)
    edits, creates = [], []
    try:
        for i in range(samples):
            n = i % 50
            url = f"https://api.floor-{i}.c{n:04d}.example.com"
            sent = time.monotonic()
            custom.patch_namespaced_custom_object(GROUP, VERSION, bench_namespace(n), CLUSTERS, f"c{n:04d}",
                                                  {"spec": {"apiURL": url}}, _request_timeout=30)
            edits.append((seen.wait(("MODIFIED", f"c{n:04d}", url)) - sent) * 1000)
        core.create_namespace({"metadata": {"name": FLOOR_NAMESPACE}}, _request_timeout=30)
        for i in range(samples):
            doc = cluster_doc(9000 + i % 1000, FLOOR_NAMESPACE)
            doc["metadata"]["name"] = f"floor-{i:04d}"
            sent = time.monotonic()
            custom.create_namespaced_custom_object(GROUP, VERSION, FLOOR_NAMESPACE, CLUSTERS, doc, _request_timeout=30)
            creates.append((seen.wait(("ADDED", doc["metadata"]["name"], doc["spec"]["apiURL"])) - sent) * 1000)
        for i in range(samples):
            custom.delete_namespaced_custom_object(GROUP, VERSION, FLOOR_NAMESPACE, CLUSTERS, f"floor-{i:04d}",
                                                   _request_timeout=30)
    finally:
        seen.stop()
    return edits, creates


# --------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.reconcile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object (the default output)")
    parser.add_argument("--clusters", type=int, default=1000, help="applied clusters for the restart")
    parser.add_argument("--burst", type=int, default=100, help="updates to one cluster within one second")
    parser.add_argument("--mesh", type=int, default=50, help="members of the mesh group one cluster joins")
    parser.add_argument("--fanout", type=int, default=200, help="new clusters for the fan-out")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--run-ms", type=float, default=100.0, help="how long the engine double takes per run")
    parser.add_argument("--samples", type=int, default=200, help="edits timed for event_to_run, per fleet")
    parser.add_argument("--fleet", type=int, action="append",
                        help="settled fleet size for event_to_run (repeatable; default 1000)")
    parser.add_argument("--only", choices=["restart", "burst", "mesh", "tgw", "fanout", "latency"],
                        action="append",
                        help="run only these scenarios (repeatable)")
    parser.add_argument("--apiserver", choices=["kmock", "real"], default="kmock",
                        help="kmock's emulator (default), or a real kube-apiserver and etcd (.tools/bin, "
                             "scripts/tools.sh); with real, latency also measures the bare watch's floor")
    parser.add_argument("--restart-child", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.restart_child:
        restart_child(args.restart_child, args.clusters, args.workers)
        return 0
    if args.apiserver == "real":
        missing = missing_binaries("etcd", "kube-apiserver")
        if missing:
            parser.error(f"{', '.join(missing)} not found in .tools/bin or on PATH (scripts/tools.sh builds them)")

    chosen = set(args.only or ["restart", "burst", "mesh", "tgw", "fanout", "latency"])
    result: dict[str, Any] = {"apiserver": args.apiserver, "clusters": args.clusters, "workers": args.workers,
                              "run_ms": args.run_ms}
    if "restart" in chosen:
        result.update(restart(args.clusters, args.workers, args.apiserver))
    if "burst" in chosen:
        result.update(burst(args.burst, args.run_ms, args.apiserver))
    if "mesh" in chosen:
        result.update(mesh_join(args.mesh, args.apiserver))
    if "tgw" in chosen:
        result.update(tgw_join(args.mesh, args.apiserver))
    if "fanout" in chosen:
        result.update(fanout(args.fanout, args.workers, args.run_ms, args.apiserver))
    if "latency" in chosen:
        fleets = sorted(set(args.fleet or [1000]))
        for size in fleets:
            result.update(latency(size, args.workers, args.samples, args.apiserver))
        if len(fleets) > 1:
            result["event_to_run_p99_ratio"] = round(result[f"event_to_run_ms_p99_at_{fleets[-1]}"]
                                                     / result[f"event_to_run_ms_p99_at_{fleets[0]}"], 2)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
