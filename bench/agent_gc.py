"""How long until a Cluster deleted while no service runs loses its facts agent: `python -m bench.agent_gc`.

A real etcd, kube-apiserver and kube-controller-manager (garbage collector; doubles/envtest.py). Each run installs
a Cluster through the registry's install route, deletes the Cluster with no service running, and times the
garbage collector deleting the agent's ServiceAccount, Role and RoleBinding (their ownerReference to the
Cluster's uid) and the API server refusing the agent's token (its authentication cache: up to 10 s more).
The scenario is doubles/agent_orphans.py's `orphaned_agent`, which tests/test_registry_revoke.py runs once.

Prints one JSON object: gc_s and refused_s (min, median, max over --runs), and the first run's apart, since
it includes the collector's first discovery after its start.
"""
from __future__ import annotations

import argparse
import json
import statistics

from doubles.agent_orphans import orphaned_agent
from doubles.envtest import missing_binaries, project_crds, start_envtest


def spread(values: list[float]) -> dict[str, float]:
    return {"min": round(min(values), 2), "median": round(statistics.median(values), 2), "max": round(max(values), 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.agent_gc", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="Clusters deleted, one after the other")
    args = parser.parse_args(argv)
    missing = missing_binaries("etcd", "kube-apiserver", "kube-controller-manager")
    if missing:
        parser.error(f"{', '.join(missing)} not found in .tools/bin or on PATH (scripts/tools.sh builds them)")
    with start_envtest(crds=project_crds(), controller_manager=True) as api_server:
        runs = [orphaned_agent(api_server) for _ in range(max(1, args.runs))]
    print(json.dumps({"runs": len(runs),
                      "first": {"gc_s": round(runs[0].gc_s, 2), "refused_s": round(runs[0].refused_s, 2)},
                      "gc_s": spread([r.gc_s for r in runs]), "refused_s": spread([r.refused_s for r in runs])}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
