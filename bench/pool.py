"""What running each Pulumi operation in a worker process costs: `python -m bench.pool --json`.

Needs the real `pulumi` CLI on PATH (scripts/tools.sh puts it in .tools/bin). The stack is the real program
(components.program) for a cluster with no AWS parts, so no provider plugin is involved: a no-op `up` is the
CLI's own floor. Prints one JSON object:

  worker_start_s_p50          starting one worker: process, `import pulumi`, setup, ready (paid ahead, not per run)
  ping_ms_p50/p99             a request/reply round trip to an idle worker (the pool's own per-run cost)
  up_noop_in_process_s_p50    a no-op `up` with PulumiEngine in this process
  up_noop_pool_s_p50          the same `up` through the WorkerPool
  pool_overhead_ms            the difference of the two medians
  run_without_idle_worker_s   an `up` when every worker is busy (it starts its own worker first)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

from automation.adapters.engine.pool import WorkerPool
from automation.adapters.engine.pulumi_engine import PulumiEngine
from automation.adapters.engine.settings import PulumiSettings
from stacks.inputs import AwsTarget, StackInputs

PASSPHRASE = "hubwright-bench"


def inputs(name: str) -> StackInputs:
    return StackInputs(stack=f"bench.{name}", namespace="bench", name=name, tenant="bench",
                       cluster=AwsTarget(account_id="222222222222", region="eu-west-1"),
                       hub=AwsTarget(account_id="111111111111", region="us-east-1"), tags={})


def timed(fn: Callable[[], object], times: int) -> list[float]:
    spans = []
    for _ in range(times):
        t0 = time.perf_counter()
        fn()
        spans.append(time.perf_counter() - t0)
    return spans


def measure(runs: int, pings: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="hubwright-bench-pool-") as tmp:
        settings = PulumiSettings(state_dir=Path(tmp) / "state", pulumi_home=Path(tmp) / "home",
                                  env={"PULUMI_CONFIG_PASSPHRASE": PASSPHRASE})
        in_process = PulumiEngine(settings)
        pool = WorkerPool(settings, size=1, max_runs=10 * (pings + runs))  # no recycling while measuring
        try:
            pool.ping()  # the worker has started
            ping = timed(pool.ping, pings)
            in_process.up(inputs("a"), message="bench: create")
            pool.up(inputs("b"), message="bench: create")
            local, pooled = [], []
            for _ in range(runs):  # interleaved, so that drift in the machine's load hits both alike
                local += timed(lambda: in_process.up(inputs("a"), message="bench: no-op"), 1)
                pooled += timed(lambda: pool.up(inputs("b"), message="bench: no-op"), 1)
            starts = []
            for _ in range(5):  # the cost the pool pays ahead of runs
                t0 = time.perf_counter()
                worker = pool._start()  # noqa: SLF001
                starts.append(time.perf_counter() - t0)
                worker.retire()
        finally:
            pool.close()
        # A second pool whose only worker is busy elsewhere: the run starts a worker of its own.
        busy = WorkerPool(settings, size=1)
        try:
            busy.ping()
            worker = busy._checkout()  # noqa: SLF001 - hold the only worker
            cold = timed(lambda: busy.up(inputs("a"), message="bench: no idle worker"), 1)[0]
            busy._checkin(worker, reusable=True)  # noqa: SLF001
        finally:
            busy.close()

    def p(values: list[float], q: float) -> float:
        return sorted(values)[min(len(values) - 1, int(q * len(values)))]

    return {
        "worker_start_s_p50": round(statistics.median(starts), 3),
        "ping_ms_p50": round(p(ping, 0.5) * 1000, 3),
        "ping_ms_p99": round(p(ping, 0.99) * 1000, 3),
        "up_noop_in_process_s_p50": round(statistics.median(local), 3),
        "up_noop_pool_s_p50": round(statistics.median(pooled), 3),
        "pool_overhead_ms": round((statistics.median(pooled) - statistics.median(local)) * 1000, 1),
        "run_without_idle_worker_s": round(cold, 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pool", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="no-op ups per engine")
    parser.add_argument("--pings", type=int, default=500)
    parser.add_argument("--json", action="store_true", help="print one JSON object (the default prints it indented)")
    args = parser.parse_args()
    os.environ.setdefault("PULUMI_SKIP_UPDATE_CHECK", "true")
    result = measure(args.runs, args.pings)
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
