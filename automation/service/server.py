"""/healthz, /readyz and Prometheus /metrics, on one small HTTP server.

/healthz  200 while the service's threads are alive (liveness: restart me when not).
/readyz   200 when this replica does what it should: a leader whose watches have
          synced, or a follower (which runs nothing, and says so in the body);
          503 while a leader is still syncing or its watches are down. Followers
          stay ready so that a rolling update is never blocked on them.
/metrics  hubwright_queue_depth, hubwright_runs_total{operation,result},
          hubwright_run_duration_seconds{operation}, hubwright_clusters{condition},
          hubwright_drifted_stacks, hubwright_leader, hubwright_watch_restarts_total{source,reason},
          hubwright_run_failures_total{operation,reason}, hubwright_cluster_refusals_total{reason},
          hubwright_stalled_clusters{reason}, hubwright_stackruns_pending, hubwright_stackruns_running (with
          --executor runners: the runners' scaling signals), ... (the names: stacks.monitoring, which alerts on them)
The registry is the service's own (no process-global collectors).
"""
from __future__ import annotations

import logging
from typing import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

from automation.adapters.probes import Probe, ProbeServer  # noqa: F401 - the service's probes (shared with the runners)
from stacks import monitoring

LOG = logging.getLogger("hubwright.server")

RUN_BUCKETS = (0.1, 0.5, 1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600)


class Metrics:
    """The service's metrics; callbacks read live numbers at scrape time."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.runs = Counter("hubwright_runs", "Engine runs by operation and result "
                            "(succeeded, failed, locked, error).", ["operation", "result"], registry=self.registry)
        self.run_seconds = Histogram("hubwright_run_duration_seconds", "Engine run duration.", ["operation"],
                                     buckets=RUN_BUCKETS, registry=self.registry)
        self.watch_restarts = Counter("hubwright_watch_restarts", "Watches restarted, by source and reason "
                                      "(dropped, gone = 410 relist, httpNNN).", ["source", "reason"],
                                      registry=self.registry)
        self.queue_depth = Gauge("hubwright_queue_depth", "Cluster keys waiting for a worker.",
                                 registry=self.registry)
        self.in_flight = Gauge("hubwright_queue_in_flight", "Cluster keys being reconciled.",
                               registry=self.registry)
        self.scheduled = Gauge("hubwright_queue_scheduled", "Cluster keys waiting for a timer (retry, drift).",
                               registry=self.registry)
        self.leader = Gauge("hubwright_leader", "1 when this replica holds the Lease.", registry=self.registry)
        self.run_failures = Counter(monitoring.RUN_FAILURES.removesuffix("_total"),
                                    "Engine runs that failed, by operation and condition reason (StackLocked is "
                                    "not a failure).", ["operation", "reason"], registry=self.registry)
        self.refusals = Counter(monitoring.REFUSALS.removesuffix("_total"),
                                "HubClusters refused (Stalled: InvalidSpec, AssumeRoleFailed, QuotaExceeded, ...), "
                                "by condition reason, each time the service refuses one.", ["reason"],
                                registry=self.registry)
        self.stackruns_pending = Gauge("hubwright_stackruns_pending", "HubStackRuns waiting for a runner (Pending, or "
                                       "their runner's claim lapsed); 0 with --executor local.", registry=self.registry)
        self.stackruns_running = Gauge("hubwright_stackruns_running", "HubStackRuns a runner holds now; 0 with "
                                       "--executor local.", registry=self.registry)
        self.history_failures = Counter("hubwright_history_write_failures_total", "Runs whose record, diff or log "
                                        "could not be written to the history store (the run itself stands).",
                                        registry=self.registry)
        self._clusters: Callable[[], ClusterCounts] = lambda: ({}, 0, {})
        self.registry.register(_Clusters(lambda: self._clusters()))

    def observe_run(self, operation: str, result: str, seconds: float) -> None:
        self.runs.labels(operation, result).inc()
        self.run_seconds.labels(operation).observe(seconds)

    def history_failed(self) -> None:
        self.history_failures.inc()

    def run_failed(self, operation: str, reason: str) -> None:
        self.run_failures.labels(operation, monitoring.metric_reason(reason)).inc()

    def refused(self, reason: str) -> None:
        self.refusals.labels(monitoring.metric_reason(reason)).inc()

    def watch_restarted(self, source: str, reason: str) -> None:
        self.watch_restarts.labels(source, reason).inc()

    def track_queue(self, depth: Callable[[], int], in_flight: Callable[[], int], scheduled: Callable[[], int]):
        self.queue_depth.set_function(depth)
        self.in_flight.set_function(in_flight)
        self.scheduled.set_function(scheduled)

    def track_clusters(self, counts: Callable[[], ClusterCounts]) -> None:
        """`counts()`: the clusters by condition, the drifted stacks and the Stalled clusters by reason, from one
        pass over the clusters."""
        self._clusters = counts

    def track_stackruns(self, counts: Callable[[], tuple[int, int]]) -> None:
        """`counts()`: (pending, running) HubStackRuns, from the executor's informer (one pass per scrape each)."""
        self.stackruns_pending.set_function(lambda: float(counts()[0]))
        self.stackruns_running.set_function(lambda: float(counts()[1]))

    def track_leader(self, leading: Callable[[], bool]) -> None:
        self.leader.set_function(lambda: 1.0 if leading() else 0.0)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _Clusters:
    """hubwright_clusters{condition}, hubwright_drifted_stacks and hubwright_stalled_clusters{reason}, from one
    count per scrape."""

    def __init__(self, counts: Callable[[], ClusterCounts]):
        self._counts = counts

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = GaugeMetricFamily("hubwright_clusters", "Clusters by condition (Ready, Reconciling, Stalled, "
                                   "Unknown).", labels=["condition"])
        stalled: dict[str, int] = {}
        counts, drifted = {"Ready": 0, "Reconciling": 0, "Stalled": 0, "Unknown": 0}, 0
        try:
            by_condition, drifted, stalled = self._counts()
            counts.update(by_condition)
        except Exception:  # noqa: BLE001 - a scrape must not fail
            LOG.exception("counting clusters failed")
        for condition, count in sorted(counts.items()):
            family.add_metric([condition], count)
        yield family
        yield GaugeMetricFamily("hubwright_drifted_stacks", "Stacks whose last drift check found the cloud changed "
                                "behind them (condition DriftDetected=True).", value=drifted)
        by_reason = GaugeMetricFamily(monitoring.STALLED, "HubClusters Stalled now, by the Stalled condition's "
                                      "reason.", labels=["reason"])
        for reason, count in sorted(stalled.items()):
            by_reason.add_metric([monitoring.metric_reason(reason)], count)
        yield by_reason

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return []


ClusterCounts = tuple[dict[str, int], int, dict[str, int]]  # by condition (Ready, ...), drifted, Stalled by reason
