"""What one engine run leaves in etcd with `--executor runners`: `python -m bench.history_etcd`.

A real etcd and kube-apiserver (doubles.envtest), the service's RunnerEngine and one runner in this process on the
engine double. `--runs` ups of one stack, each with new inputs (a cluster with PrivateLink:
doubles.factories: the resolved inputs of a HubCluster with PrivateLink), through the service's gate where it has one. Then the bytes etcd holds for the
stack's HubStackRuns and their Secrets, read from etcd itself (its v3 HTTP gateway: the stored values, as the API
server wrote them). Prints one JSON object:

  runs                   the runs kept (--keep-runs, 10)
  run_bytes_per_run      a HubStackRun's stored bytes, mean
  secret_bytes_per_run   its Secret's stored bytes, mean over the runs (a deleted Secret counts 0)
  etcd_bytes_per_run     the two together
  inputs_bytes           the inputs' config (what a Secret holds), for scale

The same file runs on an older checkout (no gate, no history): then the runs are made straight on the engine.
"""
from __future__ import annotations

import argparse
import base64
import json
import uuid
from typing import Any

from kubernetes import client

from automation.adapters.engine import RunLimits
from automation.kit.runtime import Manager
from automation.service.executor import RunnerEngine
from doubles.engine import RecordingEngine
from doubles.envtest import project_crds, start_envtest
from doubles.factories import cluster, resolve_one
from doubles.runners import running_runners
from doubles.service_env import wait_until
from stacks.names import GROUP, STACKRUNS, VERSION


def stored(env: Any, prefix: str) -> dict[str, int]:
    """{key: value bytes} of every etcd key under `prefix`."""
    start = prefix.encode()
    end = start[:-1] + bytes([start[-1] + 1])
    found = env._etcd("/v3/kv/range", {"key": base64.b64encode(start).decode(),
                                        "range_end": base64.b64encode(end).decode()})
    return {base64.b64decode(kv["key"]).decode(): len(base64.b64decode(kv["value"])) for kv in found.get("kvs", [])}


def gate() -> Any:
    """The service's gate with the run history recorded in memory; None on a checkout without one."""
    try:
        from automation.service.history import Recorder
        from automation.service.runs import Runs
        from doubles.history import MemoryHistory
    except ImportError:
        return None
    return Runs(recorder=Recorder(MemoryHistory(), executor="runners"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    with start_envtest(crds=project_crds()) as env:
        api = env.api_client()
        core = client.CoreV1Api(api)
        ns, system = f"bench-{uuid.uuid4().hex[:6]}", f"system-{uuid.uuid4().hex[:6]}"
        for name in (ns, system):
            core.create_namespace({"metadata": {"name": name}})
        engine = RecordingEngine()
        runners = RunnerEngine(api, local=engine, namespace=system, limits=RunLimits(timeout=60, grace=1))
        manager = Manager(watch_timeout=30)
        runners.attach(manager, identity="bench")
        manager.start()
        runs = gate()
        last = None
        with running_runners(api, engine, n=1, namespace=system, claim_ttl=10):
            wait_until(manager.started.is_set, 20, what="the runs' informer to sync")
            for n in range(args.runs):
                inputs = resolve_one(cluster("prod-1", ns, apiURL=f"https://api.v{n}.prod-1.example.com"))
                last = inputs
                if runs is None:
                    runners.up(inputs, message=f"run {n}")
                else:
                    from stacks.runs.cause import Cause
                    runs.run("up", lambda: runners.up(inputs, message=f"run {n}"), stack=inputs.stack,
                             cluster=f"{ns}/prod-1", cause=Cause.of("Spec", f"run {n}", n + 1))
        runners.cancel(0)
        manager.stop()
        kept = client.CustomObjectsApi(api).list_namespaced_custom_object(GROUP, VERSION, ns, STACKRUNS)["items"]
        run_bytes = stored(env, f"/registry/{GROUP}/{STACKRUNS}/{ns}/")
        secret_bytes = stored(env, f"/registry/secrets/{system}/")
        count = max(len(kept), 1)
        assert last is not None
        print(json.dumps({
            "runs": len(kept),
            "run_bytes_per_run": round(sum(run_bytes.values()) / count),
            "secret_bytes_per_run": round(sum(secret_bytes.values()) / count),
            "etcd_bytes_per_run": round((sum(run_bytes.values()) + sum(secret_bytes.values())) / count),
            "inputs_bytes": len(last.to_config().encode()),
        }, sort_keys=True))


if __name__ == "__main__":
    main()
