"""Monitoring the service: the metric names it exposes, and what the Prometheus Operator and Grafana need to watch it.

    manifests(namespace, service_name=..., metrics_port_name=..., selector=...)
      ServiceMonitor (monitoring.coreos.com/v1)   scrapes the service's /metrics Service port
      PrometheusRule (monitoring.coreos.com/v1)   the alerts below
      ConfigMap labelled grafana_dashboard="1"    a Grafana dashboard (the sidecar's convention)

The alerts (docs/service.md, "Operating it"):

    HubwrightClustersStalled   clusters Stalled (by reason) for STALLED_FOR: a person must act
    HubwrightRunsFailing       runs failing (by operation and reason) for FAILING_FOR
    HubwrightNoLeader          no replica holds the Lease for LEADERLESS_FOR: nothing is reconciled
    HubwrightDriftUncorrected  stacks drifted from the cloud for DRIFT_FOR

Pure: plain dicts, rendered into the install (python -m automation install --render) beside the service's own
manifests. Every metric a rule or a panel names is one of the names below, which the service serves
(automation/service/server.py; tests/test_monitoring.py scrapes it to check).
"""
from __future__ import annotations

import json
import re
from typing import Any

# The service's metrics (automation/service/server.py registers them under these names).
RUNS = "hubwright_runs_total"  # {operation, result}
RUN_DURATION = "hubwright_run_duration_seconds"  # histogram {operation}
RUN_FAILURES = "hubwright_run_failures_total"  # {operation, reason}
REFUSALS = "hubwright_cluster_refusals_total"  # {reason}
CLUSTERS = "hubwright_clusters"  # {condition}
STALLED = "hubwright_stalled_clusters"  # {reason}
DRIFTED = "hubwright_drifted_stacks"
LEADER = "hubwright_leader"
QUEUE_DEPTH = "hubwright_queue_depth"
QUEUE_IN_FLIGHT = "hubwright_queue_in_flight"
WATCH_RESTARTS = "hubwright_watch_restarts_total"  # {source, reason}

# How long a condition lasts before its alert fires.
STALLED_FOR = "15m"
FAILING_FOR = "15m"
LEADERLESS_FOR = "5m"
DRIFT_FOR = "2h"
FAILURES_WINDOW = "30m"  # runs failing: this many failures in this window
FAILURES_AT_LEAST = 3

OTHER_REASON = "Other"
_REASON = re.compile(r"[A-Z][A-Za-z0-9]{0,62}")


def metric_reason(reason: str | None) -> str:
    """A reason as a metric label: condition reasons are CamelCase words set in code (stacks.status, the adapters'
    errors); anything else (free text, too long, empty) is `Other`, so a label never carries a message and the
    series stay few."""
    return reason if reason and _REASON.fullmatch(reason) else OTHER_REASON


def _selector(namespace: str) -> str:
    """The series of this install: the Prometheus Operator labels a target with its Service's namespace."""
    return f'{{namespace="{namespace}"}}'


def rule_groups(namespace: str) -> list[dict[str, Any]]:
    """The PrometheusRule's groups (the same text `promtool check rules` reads)."""
    sel = _selector(namespace)
    runbook = "see docs/service.md, Operating it"

    def alert(name: str, expr: str, duration: str, severity: str, summary: str, description: str) -> dict:
        return {"alert": name, "expr": expr, "for": duration, "labels": {"severity": severity},
                "annotations": {"summary": summary, "description": description, "runbook": runbook}}

    return [{"name": "hubwright", "rules": [
        alert("HubwrightClustersStalled", f"max by (reason) ({STALLED}{sel}) > 0", STALLED_FOR, "warning",
              "HubClusters are Stalled ({{ $labels.reason }})",
              "{{ $value }} HubCluster(s) have been Stalled with reason {{ $labels.reason }} for " + STALLED_FOR
              + ": nothing runs for them until a person fixes the input or the permission. "
              "kubectl get hubclusters -A shows which."),
        alert("HubwrightRunsFailing",
              f"sum by (operation, reason) (increase({RUN_FAILURES}{sel}[{FAILURES_WINDOW}])) >= {FAILURES_AT_LEAST}",
              FAILING_FOR, "warning", "Pulumi {{ $labels.operation }} runs are failing ({{ $labels.reason }})",
              "{{ $value | humanize }} {{ $labels.operation }} run(s) failed with reason {{ $labels.reason }} in the "
              f"last {FAILURES_WINDOW}; they are retried with backoff. The service's log (logger hubwright.run) "
              "names the clusters."),
        alert("HubwrightNoLeader", f"(sum({LEADER}{sel}) or vector(0)) < 1", LEADERLESS_FOR, "critical",
              "No hubwright replica holds the Lease",
              f"No replica in {namespace} has led for {LEADERLESS_FOR}: no HubCluster is reconciled, deleted or "
              "checked for drift. Look at the pods and their Lease."),
        alert("HubwrightDriftUncorrected", f"max({DRIFTED}{sel}) > 0", DRIFT_FOR, "warning",
              "Stacks drifted from the cloud",
              "{{ $value }} stack(s) have differed from the cloud for " + DRIFT_FOR + " (condition DriftDetected). "
              "With --drift-policy report, annotate hubwright.io/reconcile-request to correct them."),
    ]}]


def service_monitor(namespace: str, *, name: str, metrics_port_name: str, selector: dict[str, str],
                    labels: dict[str, str] | None = None, interval: str = "30s") -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": {"selector": {"matchLabels": dict(selector)}, "namespaceSelector": {"matchNames": [namespace]},
                 "endpoints": [{"port": metrics_port_name, "path": "/metrics", "interval": interval}]}}


def prometheus_rule(namespace: str, *, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
            "spec": {"groups": rule_groups(namespace)}}


def _panel(index: int, title: str, targets: list[tuple[str, str]], *, unit: str = "short") -> dict[str, Any]:
    return {"id": index + 1, "type": "timeseries", "title": title,
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"h": 8, "w": 12, "x": (index % 2) * 12, "y": (index // 2) * 8},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "targets": [{"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend}
                        for i, (expr, legend) in enumerate(targets)]}


def dashboard(namespace: str) -> dict[str, Any]:
    """The Grafana dashboard (JSON model): clusters, runs, failures and refusals by reason, queue, leadership."""
    sel = _selector(namespace)
    panels = [
        ("HubClusters by condition", [(f"max by (condition) ({CLUSTERS}{sel})", "{{condition}}")], "short"),
        ("Stalled HubClusters by reason", [(f"max by (reason) ({STALLED}{sel})", "{{reason}}")], "short"),
        ("Runs per second by operation and result",
         [(f"sum by (operation, result) (rate({RUNS}{sel}[5m]))", "{{operation}} {{result}}")], "ops"),
        ("Run duration (p50, p95)",
         [(f"histogram_quantile(0.5, sum by (le, operation) (rate({RUN_DURATION}_bucket{sel}[15m])))",
           "p50 {{operation}}"),
          (f"histogram_quantile(0.95, sum by (le, operation) (rate({RUN_DURATION}_bucket{sel}[15m])))",
           "p95 {{operation}}")], "s"),
        ("Run failures by reason (per hour)",
         [(f"sum by (operation, reason) (increase({RUN_FAILURES}{sel}[1h]))", "{{operation}} {{reason}}")], "short"),
        ("Refusals by reason (per hour)",
         [(f"sum by (reason) (increase({REFUSALS}{sel}[1h]))", "{{reason}}")], "short"),
        ("Work queue", [(f"max({QUEUE_DEPTH}{sel})", "waiting"), (f"max({QUEUE_IN_FLIGHT}{sel})", "in flight")],
         "short"),
        ("Leader and drift", [(f"sum({LEADER}{sel})", "leaders"), (f"max({DRIFTED}{sel})", "drifted stacks"),
                              (f"sum by (source, reason) (increase({WATCH_RESTARTS}{sel}[1h]))",
                               "watch restarts {{source}} {{reason}}")], "short"),
    ]
    return {
        "uid": "hubwright-service", "title": "hubwright", "tags": ["hubwright"], "schemaVersion": 39,
        "timezone": "utc", "refresh": "1m", "time": {"from": "now-24h", "to": "now"}, "editable": False,
        "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus",
                                 "label": "Prometheus"}]},
        "panels": [_panel(i, title, targets, unit=unit) for i, (title, targets, unit) in enumerate(panels)]}


def dashboard_configmap(namespace: str, *, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """The dashboard in a ConfigMap that Grafana's sidecar loads (label grafana_dashboard: "1")."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": {**(labels or {}), "grafana_dashboard": "1"}},
            "data": {"hubwright.json": json.dumps(dashboard(namespace), indent=1, sort_keys=True)}}


def manifests(namespace: str, *, service_name: str, metrics_port_name: str, selector: dict[str, str],
              labels: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """ServiceMonitor, PrometheusRule and the dashboard's ConfigMap for the install in `namespace`, whose metrics
    are served on the port named `metrics_port_name` of the Service `service_name` labelled `selector`. `labels`
    go on all three (e.g. the `release` label a Prometheus's serviceMonitorSelector/ruleSelector asks for)."""
    return [service_monitor(namespace, name=service_name, metrics_port_name=metrics_port_name, selector=selector,
                            labels=labels),
            prometheus_rule(namespace, name=service_name, labels=labels),
            dashboard_configmap(namespace, name=f"{service_name}-dashboard", labels=labels)]


def metric_names(text: str) -> set[str]:
    """The service's metric names a PromQL expression (or any text) uses."""
    return set(re.findall(r"\bhubwright_[a-z_]+\b", text))
