"""Failover when the leader's API connection stalls: `python -m bench.failover [--runs 3]`.

Two replicas of the service (automation.service.serve.Service) against a real kube-apiserver
(doubles/envtest.py), sharing one engine double (doubles.RecordingEngine) so that runs of one stack by both
replicas would show as overlapping. Replica A leads and talks to the API server through a TCP proxy
(doubles/stall_proxy.py); while A's `up` of a Cluster is in flight, the proxy stops forwarding without closing
anything (issue #13). Replica B, directly connected, takes over and runs the stack.

Prints one JSON object with, for the deployed Lease timings (ServiceOptions' defaults) and the fast ones of
the tests, over --runs repetitions:

  stall_to_stopped_leading_s  the stall to A's on_lost_leadership (its runs cancelled; the CLI exits there)
  stall_to_new_leader_run_s   the stall to B's first run of the stack
  stopped_before_new_leader   in how many repetitions A had stopped before B started to lead (must be all)
  max_concurrent_per_stack    the most runs of one stack at once, over every repetition (must be 1)

The scenario is doubles/failover.py's `failover`, which tests/test_leader_stall.py runs once and asserts on.
"""
from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

from doubles.envtest import EnvTest, missing_binaries, project_crds, start_envtest
from doubles.failover import DEPLOYED, FAST, failover

def spread(values: list[float | None]) -> dict[str, float | None]:
    seen = [v for v in values if v is not None]
    if not seen:
        return {"min": None, "median": None, "max": None, "missing": len(values)}
    return {"min": round(min(seen), 2), "median": round(statistics.median(seen), 2), "max": round(max(seen), 2),
            **({"missing": len(values) - len(seen)} if len(seen) < len(values) else {})}


def measure(api_server: EnvTest, timings: dict[str, float], runs: int) -> dict[str, Any]:
    records = [failover(api_server, **timings) for _ in range(runs)]
    return {
        **timings,
        "runs": runs,
        "stall_to_stopped_leading_s": spread([r.stall_to_stopped_leading() for r in records]),
        "stall_to_new_leader_run_s": spread([r.stall_to_new_leader_run() for r in records]),
        "stopped_before_new_leader": sum(r.lost_at is not None and r.leading_at is not None
                                         and r.lost_at < r.leading_at for r in records),
        "max_concurrent_per_stack": max(r.max_concurrent_per_stack for r in records),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.failover", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="repetitions per timing set")
    parser.add_argument("--only", choices=["deployed", "fast"], action="append",
                        help="run only these timing sets (repeatable)")
    args = parser.parse_args(argv)
    missing = missing_binaries("etcd", "kube-apiserver")
    if missing:
        parser.error(f"{', '.join(missing)} not found in .tools/bin or on PATH (scripts/tools.sh builds them)")
    chosen = args.only or ["deployed", "fast"]
    with start_envtest(crds=project_crds()) as api_server:
        result = {name: measure(api_server, timings, args.runs)
                  for name, timings in (("deployed", DEPLOYED), ("fast", FAST)) if name in chosen}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
