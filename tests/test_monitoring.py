"""stacks.monitoring: the alerts pass `promtool check rules` and each fires on a synthetic series in `promtool test
rules`; every metric the rules and the dashboard name is on the running service's /metrics; the ServiceMonitor
and the PrometheusRule are accepted whole by a real kube-apiserver serving the Prometheus Operator's real CRDs."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from doubles.engine import RecordingEngine
from doubles.envtest import install_crds
from doubles.thirdparty import crds
from stacks import monitoring
from stacks.names import stack_name
from tests.envtest import kube_apiserver  # noqa: F401 - fixture
from doubles.service_env import on_kmock, wait_until

NS = "hubwright-system"
SELECTOR = {"app.kubernetes.io/name": "hubwright", "app.kubernetes.io/instance": "hubwright"}


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    binary = shutil.which("promtool")
    assert binary, "promtool is not installed (Debian's prometheus package; .ci/run installs it)"
    return subprocess.run([binary, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def manifests() -> list[dict]:
    return monitoring.manifests(NS, service_name="hubwright-metrics", metrics_port_name="metrics", selector=SELECTOR,
                                labels={"release": "kube-prometheus-stack"})


def the(kind: str) -> dict:
    return next(m for m in manifests() if m["kind"] == kind)


@pytest.mark.live
def test_the_rules_pass_promtool_check(tmp_path):
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(the("PrometheusRule")["spec"]))
    checked = promtool("check", "rules", "rules.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 4 rules found" in checked.stdout


def _annotations(alert: str, labels: dict[str, str], value: str) -> dict[str, str]:
    """The alert's annotations as Prometheus renders them for `labels` and `value` (a label the template names
    but the alert lacks is a KeyError here: the test fails)."""
    rule = next(r for g in the("PrometheusRule")["spec"]["groups"] for r in g["rules"] if r["alert"] == alert)

    def render(text: str) -> str:
        text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], text)
        return re.sub(r"\{\{ \$value( \| humanize)? \}\}", value, text)
    return {key: render(text) for key, text in rule["annotations"].items()}


def _case(series: dict[str, str], alert: str, *, at: str, fires: list[tuple[dict, str]],
          quiet_at: str | None = None) -> dict:
    """A promtool test: `alert` fires with `fires` (labels, the value its annotations show) at `at`, and not yet at
    `quiet_at`."""
    checks = [{"eval_time": at, "alertname": alert, "exp_alerts": [
        {"exp_labels": labels, "exp_annotations": _annotations(alert, labels, value)} for labels, value in fires]}]
    if quiet_at is not None:
        checks.append({"eval_time": quiet_at, "alertname": alert, "exp_alerts": []})
    return {"interval": "1m", "input_series": [{"series": s, "values": v} for s, v in series.items()],
            "alert_rule_test": checks}


def _unit_tests() -> list[dict]:
    ns = f'namespace="{NS}"'
    return [
        # Stalled by reason: after 15 minutes, not before; another install's clusters are not ours.
        _case({f'hubwright_stalled_clusters{{{ns},pod="a",reason="AssumeRoleFailed"}}': "2x40",
               'hubwright_stalled_clusters{namespace="other",pod="b",reason="InvalidSpec"}': "1x40"},
              "HubwrightClustersStalled", at="20m", quiet_at="10m",
              fires=[({"severity": "warning", "reason": "AssumeRoleFailed"}, "2")]),
        # Runs failing: one failed up a minute.
        _case({f'hubwright_run_failures_total{{{ns},pod="a",operation="up",reason="UpdateFailed"}}': "0+1x60"},
              "HubwrightRunsFailing", at="45m", quiet_at="5m",
              fires=[({"severity": "warning", "operation": "up", "reason": "UpdateFailed"}, "30")]),
        # A failure now and then (one an hour) is retried and heals: no alert.
        _case({f'hubwright_run_failures_total{{{ns},pod="a",operation="up",reason="UpdateFailed"}}': "0+0x30 1+0x60"},
              "HubwrightRunsFailing", at="80m", fires=[]),
        # No leader: two followers (0 each) for 5 minutes...
        _case({f'hubwright_leader{{{ns},pod="a"}}': "0x20", f'hubwright_leader{{{ns},pod="b"}}': "0x20"},
              "HubwrightNoLeader", at="10m", quiet_at="3m", fires=[({"severity": "critical"}, "0")]),
        # ... or no replica scraped at all; but one leader is fine.
        _case({'hubwright_leader{namespace="other",pod="c"}': "1x20"}, "HubwrightNoLeader", at="10m",
              fires=[({"severity": "critical"}, "0")]),
        _case({f'hubwright_leader{{{ns},pod="a"}}': "1x20", f'hubwright_leader{{{ns},pod="b"}}': "0x20"},
              "HubwrightNoLeader", at="10m", fires=[]),
        # Drift left for 2 hours.
        _case({f'hubwright_drifted_stacks{{{ns},pod="a"}}': "3x200"}, "HubwrightDriftUncorrected", at="150m",
              quiet_at="60m", fires=[({"severity": "warning"}, "3")]),
    ]


@pytest.mark.live
def test_each_alert_fires_on_a_synthetic_series_in_promtool_test_rules(tmp_path):
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(the("PrometheusRule")["spec"]))
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump({
        "rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": _unit_tests()}))
    tested = promtool("test", "rules", "tests.yaml", cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    alerts = {rule["alert"] for group in the("PrometheusRule")["spec"]["groups"] for rule in group["rules"]}
    assert alerts == {case["alert_rule_test"][0]["alertname"] for case in _unit_tests()}  # every alert tested


@pytest.mark.live
def test_a_broken_expectation_fails_promtool_test_rules(tmp_path):
    """The unit tests above can fail: an alert expected where none fires is reported."""
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(the("PrometheusRule")["spec"]))
    wrong = _case({f'hubwright_leader{{namespace="{NS}",pod="a"}}': "1x20"}, "HubwrightNoLeader", at="10m",
                  fires=[({"severity": "critical"}, "0")])
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump({
        "rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [wrong]}))
    assert promtool("test", "rules", "tests.yaml", cwd=tmp_path).returncode != 0


def test_every_metric_the_rules_and_the_dashboard_name_is_served():
    """The service's real /metrics, after a failed run and a refusal (so the counters by reason have series)."""
    used = monitoring.metric_names(json.dumps(the("PrometheusRule")) + the("ConfigMap")["data"]["hubwright.json"])
    assert {monitoring.STALLED, monitoring.RUN_FAILURES, monitoring.LEADER, monitoring.DRIFTED} <= used
    engine = RecordingEngine()
    engine.fail("up", stack_name("acme", "prod-1"))
    with on_kmock() as env, env.running(engine) as service:
        env.create("prod-1")
        env.create("stranger", accountID="333333333333")  # acme owns 222222222222 only: refused
        wait_until(lambda: env.ready("prod-1") and (env.condition("stranger", "Stalled") or {}).get("status"), 20)
        with urllib.request.urlopen(f"http://127.0.0.1:{service.server.port}/metrics", timeout=5) as response:
            text = response.read().decode()
    families = list(text_string_to_metric_families(text))
    # A series by its sample name; a labelled counter that has counted nothing yet (watch restarts) by its family.
    served = {sample.name for family in families for sample in family.samples} | {
        family.name + suffix for family in families
        for suffix in {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}.get(family.type, ("",))}
    assert monitoring.RUN_FAILURES in {s.name for f in families for s in f.samples}  # counted: a series
    assert used <= served, f"named but not served: {sorted(used - served)}"


def test_the_dashboard_is_a_grafana_sidecar_configmap():
    configmap = the("ConfigMap")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    board = json.loads(configmap["data"]["hubwright.json"])
    assert board["uid"] == "hubwright-service" and board["panels"]
    assert all(t["expr"] and f'namespace="{NS}"' in t["expr"] for p in board["panels"] for t in p["targets"])
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])


@pytest.mark.parametrize("reason, label", [("AssumeRoleFailed", "AssumeRoleFailed"), ("", "Other"),
                                           ("the VPC vpc-1 is gone", "Other"), ("X" * 80, "Other")])
def test_reason_labels_are_condition_reasons_never_free_text(reason, label):
    assert monitoring.metric_reason(reason) == label


def test_the_service_monitor_and_rule_are_accepted_whole_by_the_operators_real_crds(kube_apiserver):  # noqa: F811
    """Created on a real kube-apiserver with the Prometheus Operator's published CRDs: a field the operator does
    not know would be pruned (its schemas are structural), so reading back the same spec proves every field."""
    api = kube_apiserver.api_client()
    install_crds(api, [c for c in crds("prometheus-operator")
                       if c["spec"]["names"]["kind"] in ("ServiceMonitor", "PrometheusRule")])
    namespace = f"mon-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
    custom = client.CustomObjectsApi(api)
    objects = monitoring.manifests(namespace, service_name="hubwright-metrics", metrics_port_name="metrics",
                                   selector=SELECTOR)
    for obj in objects:
        if obj["kind"] == "ConfigMap":
            client.CoreV1Api(api).create_namespaced_config_map(namespace, obj)
            continue
        plural = {"ServiceMonitor": "servicemonitors", "PrometheusRule": "prometheusrules"}[obj["kind"]]
        custom.create_namespaced_custom_object("monitoring.coreos.com", "v1", namespace, plural, obj)
        live = custom.get_namespaced_custom_object("monitoring.coreos.com", "v1", namespace, plural,
                                                   obj["metadata"]["name"])
        assert live["spec"] == obj["spec"], obj["kind"]
    live_map = client.CoreV1Api(api).read_namespaced_config_map("hubwright-metrics-dashboard", namespace)
    assert json.loads(live_map.data["hubwright.json"]) == monitoring.dashboard(namespace)
