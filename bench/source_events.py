"""What one watch event on an object sources read costs the sources controller before it queues a key:
`python -m bench.source_events --sources 1000 --sources 10000`.

In one process, with no API server: N Cluster API Clusters, all in one namespace (the worst case of a scan by
namespace), each with its AWSCluster; then an AWSCluster status update (CAPA writes them as it reconciles) is mapped
to the source keys that read it (Sources.keys_of_related). Prints one JSON object:

  related_event_us_p50/p99_at_N   microseconds to map one AWSCluster event to its Cluster's key
  queued_at_N                     how many keys it queued (1: only the Cluster that reads it)
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from automation.adapters.kube.informer import DictStore
from automation.service.cache import Cache
from automation.service.sources import Sources
from doubles.sources import aws_cluster_doc, capi_cluster_doc
from stacks.sources.kinds import AWS_CLUSTER, AWS_MANAGED_CONTROL_PLANE, CAPI_CLUSTER


def measure(n: int, samples: int) -> dict[str, Any]:
    stores = {k.qualified: DictStore(lambda event, raw: None) for k in (CAPI_CLUSTER, AWS_CLUSTER,
                                                                        AWS_MANAGED_CONTROL_PLANE)}
    cache = Cache(hub_name="default", role_map_name="roles", role_map_namespace="hubwright-system",
                  parse_role_map=lambda raw: {})
    sources = Sources(kinds=[CAPI_CLUSTER], stores=stores, cache=cache, desired=None,  # type: ignore[arg-type]
                      objects=None)  # type: ignore[arg-type]
    on_source = sources.keys_of_source(CAPI_CLUSTER)
    for i in range(n):
        doc = capi_cluster_doc(f"web-{i}", "fleet")
        stores[CAPI_CLUSTER.qualified].apply("ADDED", doc)
        on_source("ADDED", doc)
        stores[AWS_CLUSTER.qualified].apply("ADDED", aws_cluster_doc(f"web-{i}", "fleet"))
    on_related = sources.keys_of_related(AWS_CLUSTER)
    times, queued = [], 0
    for s in range(samples):
        infra = aws_cluster_doc(f"web-{(s * 7919) % n}", "fleet")
        start = time.perf_counter()
        keys = on_related("MODIFIED", infra)
        times.append((time.perf_counter() - start) * 1e6)
        queued = len(keys)
    times.sort()
    return {f"related_event_us_p50_at_{n}": round(statistics.median(times), 1),
            f"related_event_us_p99_at_{n}": round(times[int(len(times) * 0.99) - 1], 1),
            f"queued_at_{n}": queued}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, action="append", help="sources in the namespace (repeatable)")
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()
    out: dict[str, Any] = {}
    for n in args.sources or [1000, 10000]:
        out.update(measure(n, args.samples))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
