"""The service's own work before a key is queued, per create and per edit: `python -m bench.mapper --fleet 1000
--fleet 5000`.

In one process, with no API server: the cache takes the watch event (Cache.apply) and the mapper makes its pass
(Mapper.map_once: FleetPublisher.get resolves what changed, the Snapshot is published, the key is queued), over a settled
fleet of N clusters (bench.reconcile's fleet: two regions, ten namespaces). That work must not grow with the fleet
(issue 33: 5.1 ms at 1,000 clusters, 17.8 ms at 5,000 when a create placed its whole region again). Prints one JSON
object:

  create_ms_p50/p99_at_N   a new cluster: apply + the mapper's pass until its key is queued
  edit_ms_p50/p99_at_N     a spec edit of a settled cluster: the same
  create_p50_ratio         p50 at the largest --fleet / p50 at the smallest (flat: about 1)
  retention_ms_p50_at_N    a HubRetainedStack written or deleted (a retain, a release, an adoption): the mapper's pass,
                           which looks again at the record's key, claims and (only if it has a cap) namespace
                           (stacks.incremental.FleetResolver.set_retention)
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

from automation.service.cache import Cache
from automation.service.mapper import FleetPublisher, Mapper
from bench.fleets import ACCOUNTS
from bench.reconcile import cluster_doc, hub_doc, bench_namespace, percentile
from stacks.names import OWNER_ACCOUNT_ANNOTATION, ROLE_MAP_CONFIGMAP
from stacks.retention import record_of


def _doc(n: int, created: str) -> dict:
    doc = cluster_doc(n, bench_namespace(n))
    doc["metadata"].update(uid=f"u-{n}", generation=1, creationTimestamp=created)
    return doc


def measure(fleet: int, samples: int) -> dict[str, float]:
    cache = Cache(hub_name="default", role_map_name=ROLE_MAP_CONFIGMAP, role_map_namespace="hubwright-system",
                  parse_role_map=lambda raw: {})
    cache.on_hub("ADDED", hub_doc(fleet + samples))
    for k in range(10):
        cache.on_namespace("ADDED", {"metadata": {"name": f"team-{k}",
                                                  "annotations": {OWNER_ACCOUNT_ANNOTATION: ACCOUNTS[k % 2]}}})
    for n in range(fleet):
        cache.apply("ADDED", _doc(n, "2025-01-01T00:00:00Z"))
    queued: list[str] = []
    mapper = Mapper(cache, FleetPublisher(cache), add=queued.append, add_after=lambda key, due: None,
                    triage=lambda key, raw, desired: 0)
    mapper.map_once()  # the fleet settled: every placement decided
    creates, edits = [], []
    for i in range(samples):
        n = fleet + i
        doc = _doc(n, "2025-01-02T00:00:00Z")
        queued.clear()
        started = time.perf_counter()
        cache.apply("ADDED", doc)
        mapper.map_once()
        creates.append((time.perf_counter() - started) * 1000)
        assert queued == [f"{bench_namespace(n)}/c{n:04d}"], queued
        edited = _doc(i, "2025-01-01T00:00:00Z")
        edited["spec"]["apiURL"] = f"https://api.sample-{i}.c{i:04d}.example.com"
        edited["metadata"]["generation"] = 2
        queued.clear()
        started = time.perf_counter()
        cache.apply("MODIFIED", edited)
        mapper.map_once()
        edits.append((time.perf_counter() - started) * 1000)
        assert queued == [f"{bench_namespace(i)}/c{i:04d}"], queued
    retention = []
    for i in range(5):  # a record of a settled cluster's key appears, then goes
        raw = record_of(f"{bench_namespace(i)}/c{i:04d}", "uid", ACCOUNTS[0], "us-east-1", {}, [], "2026-01-01T00:00:00Z")
        raw["metadata"]["uid"] = f"r-{i}"
        for event in ("ADDED", "DELETED"):
            started = time.perf_counter()
            cache.on_retained(event, raw)
            mapper.map_once()
            retention.append((time.perf_counter() - started) * 1000)
    return {f"create_ms_p50_at_{fleet}": round(statistics.median(creates), 2),
            f"retention_ms_p50_at_{fleet}": round(statistics.median(retention), 1),
            f"create_ms_p99_at_{fleet}": round(percentile(creates, 0.99), 2),
            f"edit_ms_p50_at_{fleet}": round(statistics.median(edits), 2),
            f"edit_ms_p99_at_{fleet}": round(percentile(edits, 0.99), 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.mapper", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fleet", type=int, action="append", help="settled clusters (repeatable; default 1000)")
    parser.add_argument("--samples", type=int, default=200, help="creates (and as many edits) timed per fleet")
    args = parser.parse_args(argv)
    fleets = sorted(args.fleet or [1000])
    out: dict[str, float] = {}
    for fleet in fleets:
        out.update(measure(fleet, args.samples))
    if len(fleets) > 1:
        out["create_p50_ratio"] = round(out[f"create_ms_p50_at_{fleets[-1]}"] / out[f"create_ms_p50_at_{fleets[0]}"], 2)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
