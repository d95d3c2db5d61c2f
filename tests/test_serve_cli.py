"""`python -m automation serve`: every option documented, and the real process serving probes."""
from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from automation.adapters.engine import proctree
from automation.cli import build_parser
from automation.service.command import options_from
from automation.service.options import ServiceOptions
from doubles.kube import MockKubeAPI
from doubles.service_env import wait_until

ROOT = Path(__file__).resolve().parent.parent


def serve_process(api: MockKubeAPI, tmp_path: Path, *args: str, **env: str) -> subprocess.Popen:
    """The real `python -m automation serve` against kmock's API server (no leader election, any free metrics
    port, its state under `tmp_path`), with `env` added to this environment; its stderr piped, as text."""
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    environ = {**os.environ, "PULUMI_CONFIG_PASSPHRASE": "test", "PYTHONPATH": str(ROOT), **env}
    environ.pop("KUBERNETES_SERVICE_HOST", None)
    return subprocess.Popen(
        [sys.executable, "-m", "automation", "serve", "--kubeconfig", str(kubeconfig), "--no-leader-election",
         "--metrics-bind", "127.0.0.1", "--metrics-port", "0", "--state-dir", str(tmp_path / "state"), *args],
        cwd=ROOT, env=environ, stderr=subprocess.PIPE, text=True)


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")


@pytest.mark.live
def test_every_service_option_has_a_documented_flag():
    helptext = subprocess.run([sys.executable, "-m", "automation", "serve", "--help"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout
    for field in dataclasses.fields(ServiceOptions):
        assert _flag(field.name) in helptext, f"{field.name} has no flag"
    for flag in ("--state-dir", "--backend", "--kubeconfig", "--metrics-port", "--leader-election-id",
                 "--role-map-configmap", "--hub-name", "--workers", "--backoff-cap", "--drift-interval"):
        line = re.search(rf"{flag}\b.*?(?=\n  --|\Z)", helptext, re.S)
        assert line and len(line.group(0).split(None, 2)) == 3, f"{flag} is not explained"


def test_flags_become_service_options():
    args = build_parser().parse_args(["serve", "--workers", "8", "--backoff-cap", "120", "--no-leader-election",
                                      "--watch-namespace", "acme", "--hub-name", "prod", "--drift-interval", "0"])
    options = options_from(args)
    assert (options.workers, options.backoff_cap, options.leader_election) == (8, 120.0, False)
    assert (options.watch_namespace, options.hub_name, options.drift_interval) == ("acme", "prod", 0.0)
    assert options.backoff_cap < 24 * 3600


@pytest.mark.live
def test_the_serve_process_syncs_reports_ready_and_stops_on_sigterm(tmp_path):
    with MockKubeAPI() as api:
        proc = serve_process(api, tmp_path)
        try:
            port = None
            deadline = time.monotonic() + 30
            while port is None and time.monotonic() < deadline:
                line = proc.stderr.readline()
                found = re.search(r"probes and metrics on [\d.]+:(\d+)", line)
                port = int(found.group(1)) if found else None
            assert port, "the service did not say where it serves"

            def ready():
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                        return json.loads(r.read())
                except OSError:
                    return None
            body = wait_until(ready, 20, what="/readyz")
            assert body["ok"] and body["role"] == "leader" and all(body["synced"].values())
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                assert b"hubwright_queue_depth" in r.read()
            def workers():
                return [p for p in proctree.children(proc.pid) if "automation.adapters.engine.worker" in _cmdline(p)]
            # --workers (4) worker processes are started ahead of any run, one after the other
            # a bound, not a speed: each worker imports the program afresh, 5-10 s apiece on a loaded machine
            started = wait_until(lambda: len(workers()) == 4 and workers(), 120, what="4 worker processes")
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(20) == 0
            wait_until(lambda: not any(proctree.alive(p) for p in started), 10, what="the workers to exit")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""
