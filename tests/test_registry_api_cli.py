"""`python -m automation api`: every setting has a flag, and the real process serves the API against the envtest,
keeps query strings (the install endpoint's one-time ?token=) and bearer tokens out of its log, and stops
cleanly on SIGTERM."""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from automation.api.app import ApiSettings
from automation.api.serve import MaskSecrets, NoQueryString, facts_url, listen_on, settings_from
from automation.cli import build_parser
from automation.service.options import ServiceOptions
from tests.envtest import free_port, kube_apiserver  # noqa: F401 - the fixture
from doubles.service_env import wait_until

ROOT = Path(__file__).resolve().parent.parent
SECRET = "secret-value"


@pytest.mark.live
def test_every_api_setting_has_a_flag_and_flags_become_settings(tmp_path):
    (tmp_path / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    args = build_parser().parse_args([
        "api", "--bind", ":9090", "--token-cache", "7", "--install-rate", "2.5", "--install-burst", "3",
        "--agent-image", "registry.example/hubwright:1", "--agent-token-seconds", "600", "--trust-forwarded-for",
        "--hub-name", "prod", "--hub-url", "https://hub.example:6443", "--hub-ca", str(tmp_path / "ca.pem"),
        "--state-dir", str(tmp_path)])
    settings = settings_from(args)
    assert settings == ApiSettings(token_cache=7, install_rate=2.5, install_burst=3,
                                   agent_image="registry.example/hubwright:1", public_url="http://127.0.0.1:9090",
                                   agent_token_seconds=600, trust_forwarded_for=True, hub_name="prod")
    # --hub-url and --hub-ca (agents renewed at the hub's Kubernetes API) are still accepted, and change nothing
    assert listen_on(args.bind) == ("0.0.0.0", 9090) and listen_on("[::1]:80") == ("::1", 80)
    assert facts_url(args) == f"sqlite:///{tmp_path}/registry-facts.db"
    defaults = build_parser().parse_args(["api"])
    assert defaults.bind == "127.0.0.1:8081" and settings_from(defaults).public_url == "http://127.0.0.1:8081"
    # run by hand beside `serve` (its tenant controller), the API's default port is not serve's metrics port
    assert listen_on(defaults.bind)[1] != ServiceOptions().metrics_port
    assert settings_from(build_parser().parse_args(["api", "--public-url", "https://reg.example"])).public_url == \
        "https://reg.example"

    helptext = subprocess.run([sys.executable, "-m", "automation", "api", "--help"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout
    for field in dataclasses.fields(ApiSettings):
        assert "--" + field.name.replace("_", "-") in helptext, f"ApiSettings.{field.name} has no flag"
    for flag in ("--kubeconfig", "--context", "--facts-db", "--facts-retention", "--state-dir", "--bind"):
        assert flag in helptext


def test_log_filters_cut_query_strings_and_mask_tokens():
    access = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
                               ("127.0.0.1:1", "GET", f"/install/agent.json?token={SECRET}", "1.1", 200), None)
    assert NoQueryString().filter(access) and access.getMessage() == \
        '127.0.0.1:1 - "GET /install/agent.json HTTP/1.1" 200'
    other = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed %s with %s",
                              (f"https://h/install?a=1&token={SECRET}", f"Authorization: Bearer {SECRET}"), None)
    assert MaskSecrets().filter(other) and SECRET not in other.getMessage()
    assert other.getMessage() == "failed https://h/install?a=1&token=*** with Authorization: Bearer ***"


def _get(url: str, token: str | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except urllib.error.URLError:  # not listening yet
        return 0, b""


def test_the_api_process_serves_logs_no_secrets_and_stops_on_sigterm(kube_apiserver, tmp_path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("KUBERNETES_SERVICE_HOST", "HUBWRIGHT_FACTS_DB", "KUBECONFIG"):
        env.pop(name, None)
    log = tmp_path / "api.log"
    with open(log, "wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "automation", "api", "--kubeconfig", str(kube_apiserver.kubeconfig()),
             "--bind", f"127.0.0.1:{port}", "--state-dir", str(tmp_path)],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        wait_until(lambda: proc.poll() is not None or _get(f"{base}/healthz")[0] == 200, 30, what="/healthz")
        assert proc.poll() is None, log.read_text()

        status, body = _get(f"{base}/tenants?limit=1&token={SECRET}", kube_apiserver.token)
        assert status == 200 and "items" in json.loads(body)  # as the caller: the admin may list tenants
        assert _get(f"{base}/tenants", "not-a-token")[0] == 401
        assert _get(f"{base}/healthz?token={SECRET}")[0] == 200
        _get(f"{base}/install/agent.json?token={SECRET}")  # whatever it answers, the token is not logged
        assert json.loads(_get(f"{base}/openapi.json")[1])["info"]["title"] == "hubwright registry"
        assert (tmp_path / "registry-facts.db").exists()
        wait_until(lambda: "GET /install/agent.json" in log.read_text(), 10, what="the access log")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    text = log.read_text()
    assert code == 0, text
    assert 'GET /tenants HTTP/1.1" 200' in text and 'GET /healthz HTTP/1.1" 200' in text
    assert SECRET not in text and kube_apiserver.token not in text and "not-a-token" not in text
    assert "?" not in "".join(line for line in text.splitlines() if "HTTP/1.1" in line)
    assert "stopped" in text.splitlines()[-1]


def test_a_state_dir_it_cannot_write_is_a_usage_error_naming_the_flag_and_the_env_var(kube_apiserver, tmp_path):
    """No SQLAlchemy traceback: the default history needs a directory to write; where there is none (no
    --state-dir and a read-only working directory, or a directory that does not exist) the process says which
    setting to give, and exits 2 before it serves anything."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("KUBERNETES_SERVICE_HOST", "HUBWRIGHT_FACTS_DB", "KUBECONFIG", "HUBWRIGHT_STATE_DIR"):
        env.pop(name, None)
    command = [sys.executable, "-m", "automation", "api", "--kubeconfig", str(kube_apiserver.kubeconfig()),
               "--bind", f"127.0.0.1:{free_port()}"]
    # /proc: a working directory nobody can create a file in, root included (as a pod's read-only root)
    for extra, cwd in (([], "/proc"), (["--state-dir", str(tmp_path / "missing")], ROOT),
                       (["--state-dir", str(tmp_path / "a-file")], ROOT)):
        (tmp_path / "a-file").write_text("")
        done = subprocess.run([*command, *extra], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr and "sqlalchemy" not in done.stderr.lower(), done.stderr
        assert "--state-dir" in done.stderr and "HUBWRIGHT_STATE_DIR" in done.stderr and \
            "--facts-db" in done.stderr, done.stderr
    assert not (tmp_path / "missing").exists()
