"""One structured log line per engine run (logger hubwright.run), JSON with --log-format json, and the counters of
failures and refusals by reason: through the running service (kmock's API server, the recording engine) and the
real `python -m automation serve` process."""
from __future__ import annotations

import io
import json
import logging
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

from automation.adapters import logs
from doubles.engine import RecordingEngine
from doubles.kube import MockKubeAPI
from stacks.names import stack_name
from doubles.service_env import on_kmock, wait_until
from tests.test_serve_cli import serve_process

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def json_log():
    """The service's records as the json format writes them; returns a function giving the parsed lines so far."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JsonFormatter())
    logger = logging.getLogger("hubwright")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def runs(lines: list[dict], cluster: str, operation: str | None = None) -> list[dict]:
    return [line for line in lines if line["logger"] == "hubwright.run" and line.get("cluster") == cluster
            and (operation is None or line["operation"] == operation)]


def scraped(service, metric: str) -> dict[str, float]:
    """`metric`'s samples in the service's /metrics text: labels -> value."""
    text = service.metrics.exposition().decode()
    return {m.group(1) or "": float(m.group(2))
            for m in re.finditer(rf"^{metric}(\{{[^}}]*\}})? (\S+)$", text, re.M)}


def test_a_successful_up_and_destroy_each_write_one_run_line(json_log):
    engine = RecordingEngine()
    with on_kmock() as env, env.running(engine) as service:
        env.create("prod-1")
        wait_until(lambda: env.ready("prod-1"), 15, what="prod-1 Ready")
        up = wait_until(lambda: runs(json_log(), "acme/prod-1", "up"), 5, what="the up's log line")
        assert len(up) == 1, up
        line = up[0]
        assert {k: line[k] for k in ("level", "cluster", "stack", "operation", "result")} == {
            "level": "INFO", "cluster": "acme/prod-1", "stack": stack_name("acme", "prod-1"), "operation": "up",
            "result": "succeeded"}
        assert line["changes"] == {"same": 1}  # the engine's summary, as it gave it
        assert 0 <= line["duration"] < 15 and "reason" not in line
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["time"])

        env.delete("prod-1")
        wait_until(lambda: env.get("prod-1") is None, 15, what="prod-1 released")
        destroy = wait_until(lambda: runs(json_log(), "acme/prod-1", "destroy"), 5, what="the destroy's log line")
        assert [(d["result"], d["stack"]) for d in destroy] == [("succeeded", stack_name("acme", "prod-1"))]
        assert scraped(service, "hubwright_run_failures_total") == {}


def test_a_failed_run_says_why_and_is_counted_by_reason(json_log):
    engine = RecordingEngine()
    engine.fail("up", stack_name("acme", "prod-2"), times=2, message="simulated: the VPC endpoint quota")
    with on_kmock() as env, env.running(engine) as service:
        env.create("prod-2")
        wait_until(lambda: env.ready("prod-2"), 20, what="prod-2 Ready after two failures")
        lines = wait_until(lambda: len(runs(json_log(), "acme/prod-2", "up")) >= 3 and runs(json_log(), "acme/prod-2",
                                                                                             "up"), 5)
        assert [line["result"] for line in lines] == ["failed", "failed", "succeeded"]
        failed = lines[0]
        assert failed["level"] == "WARNING" and failed["reason"] == "UpdateFailed"
        assert "the VPC endpoint quota" in failed["error"]
        assert scraped(service, "hubwright_run_failures_total") == {
            '{operation="up",reason="UpdateFailed"}': 2.0}


def test_a_refused_cluster_writes_a_refused_line_and_counts_its_reason(json_log):
    engine = RecordingEngine()
    with on_kmock() as env, env.running(engine) as service:
        env.create("stranger", accountID="333333333333")  # acme owns 222222222222 only
        wait_until(lambda: (env.condition("stranger", "Stalled") or {}).get("status") == "True", 15,
                   what="the cluster refused")
        reason = env.condition("stranger", "Stalled")["reason"]
        refused = wait_until(lambda: runs(json_log(), "acme/stranger"), 5, what="the refusal's log line")
        assert [(r["operation"], r["result"], r["reason"]) for r in refused] == [("up", "refused", reason)]
        assert "333333333333" in refused[0]["error"]
        assert engine.count(stack=stack_name("acme", "stranger")) == 0  # refused: nothing ran
        assert scraped(service, "hubwright_cluster_refusals_total") == {f'{{reason="{reason}"}}': 1.0}
        assert scraped(service, "hubwright_stalled_clusters") == {f'{{reason="{reason}"}}': 1.0}


def test_text_format_keeps_the_old_line_and_appends_the_fields():
    record = logging.LogRecord("hubwright.run", logging.INFO, __file__, 1, "acme/p up succeeded", None, None)
    record.fields = {"cluster": "acme/p", "changes": {"create": 2}, "reason": None}
    text = logs.TextFormatter().format(record)
    assert re.fullmatch(r"\S+ \S+ INFO hubwright.run: acme/p up succeeded \[cluster=acme/p changes=\{\"create\":2\}\]",
                        text), text


@pytest.mark.live
def test_serve_with_json_log_format_writes_only_json_lines(tmp_path):
    """The real process: HUBWRIGHT_LOG_FORMAT=json makes every line it writes a JSON object a shipper can parse,
    its engine workers' included: here a worker that cannot start (no `pulumi` on PATH) says why in JSON, where it
    wrote a bare Python traceback."""
    with MockKubeAPI() as api:
        proc = serve_process(api, tmp_path, "--workers", "1", HUBWRIGHT_LOG_FORMAT="json",
                             PATH=f"{Path(sys.executable).parent}{os.pathsep}/usr/bin:/bin")
        lines: list[str] = []
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not (any("watches synced" in line for line in lines)
                                                       and any("starting a worker failed" in line for line in lines)):
                line = proc.stderr.readline()
                if not line:
                    break
                lines.append(line)
        finally:
            proc.send_signal(signal.SIGTERM)
            _, rest = proc.communicate(timeout=60)
        lines += rest.splitlines()
    print("".join(lines))
    parsed = [json.loads(line) for line in lines if line.strip()]  # raises on any line that is not JSON
    assert any("watches synced" in p["message"] for p in parsed), lines
    assert any("probes and metrics on" in p["message"] and p["logger"] == "hubwright.service" for p in parsed)
    for p in parsed:
        assert {"time", "level", "logger", "message"} <= set(p), p
    worker = [p for p in parsed if p["logger"] == "hubwright.worker"]
    assert worker and worker[0]["level"] == "CRITICAL" and "'pulumi'" in worker[0]["exception"], parsed


def test_a_tenant_cannot_forge_a_run_line_or_a_metric_label(json_log):
    """The attack: a spec value carrying a newline and a JSON record of a successful run, refused. It stays
    inside the refusal's one line (escaped), and the refusal is counted under the condition's reason only."""
    forged = '{"logger":"hubwright.run","cluster":"acme/forger","result":"succeeded","reason":"Pwned"}'
    engine = RecordingEngine()
    with on_kmock() as env, env.running(engine) as service:
        env.create("forger", apiURL=f"https://api.forger.example.com/\n{forged}")
        wait_until(lambda: (env.condition("forger", "Stalled") or {}).get("status") == "True", 15,
                   what="the cluster refused")
        reason = env.condition("forger", "Stalled")["reason"]
        lines = wait_until(lambda: runs(json_log(), "acme/forger"), 5, what="the refusal's log line")
        assert [(line["result"], line["reason"]) for line in lines] == [("refused", reason)]
        assert "hubwright.run" in lines[0]["error"]  # the forged text, as data inside the one record
        assert scraped(service, "hubwright_cluster_refusals_total") == {f'{{reason="{reason}"}}': 1.0}
