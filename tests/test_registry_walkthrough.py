"""docs/registry.md's curl walkthrough, run as it is written: a real kube-apiserver (a server of this module's
own, so the Tenant `acme` and the tenant controller meet no other test's objects), the tenant controller of the
service, and the real `python -m automation api` process.

$ADMIN is a system:masters token; $ALICE the token of `tenant-alice`, who has no rights until the Tenant `acme`
names her an admin and the controller binds her in its namespace.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from kubernetes import client

from automation.adapters.backoff import Backoff
from automation.service.tenants import TenantController
from stacks.names import GROUP, VERSION, agent_name
from tests.envtest import TENANT_USER, free_port, kube_apiserver_alone  # noqa: F401 - the fixture
from tests.factories import HUB_ACCOUNT
from tests.registry_rbac import install_registry_rules
from tests.service_env import wait_until

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "registry.md"


def walkthrough() -> str:
    """The ```sh block after the line `<!-- walkthrough -->`."""
    text = DOC.read_text(encoding="utf-8")
    found = re.search(r"<!-- walkthrough -->\s*```sh\n(.*?)```", text, re.S)
    assert found, "docs/registry.md lost its walkthrough block"
    return found[1]


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code
    except urllib.error.URLError:
        return 0


@pytest.fixture
def world(kube_apiserver_alone, tmp_path):
    env = kube_apiserver_alone
    admin = env.api_client()
    install_registry_rules(admin)
    custom, core = client.CustomObjectsApi(admin), client.CoreV1Api(admin)
    controller = TenantController(admin, hub_account=lambda: HUB_ACCOUNT, backoff=Backoff(0.05, 0.5), watch_timeout=30)
    controller.start()
    # The tenant alice is refused on: `other`, with a cluster of its own.
    custom.create_cluster_custom_object(GROUP, VERSION, "hubtenants", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "HubTenant", "metadata": {"name": "other"},
        "spec": {"displayName": "Other"}})
    wait_until(lambda: _exists(lambda: core.read_namespace("other")), 30, what="the namespace of Tenant other")
    custom.create_namespaced_custom_object(GROUP, VERSION, "other", "hubclusters", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "HubCluster", "metadata": {"name": "db-1", "namespace": "other"},
        "spec": {"displayName": "Other's database cluster"}})

    port = free_port()
    api = f"http://127.0.0.1:{port}"
    run_env = {key: value for key, value in os.environ.items()
               if key not in ("KUBERNETES_SERVICE_HOST", "HUBWRIGHT_FACTS_DB", "KUBECONFIG")}
    log = tmp_path / "api.log"
    with open(log, "wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "automation", "api", "--kubeconfig", str(env.kubeconfig()),
             "--bind", f"127.0.0.1:{port}", "--state-dir", str(tmp_path), "--public-url", api],
            cwd=ROOT, env={**run_env, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        wait_until(lambda: process.poll() is not None or _status(f"{api}/healthz") == 200, 30, what="/healthz")
        assert process.poll() is None, log.read_text()
        yield env, admin, api, tmp_path
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
        controller.stop()
        for namespace, name in (("acme", "prod-1"), ("other", "db-1")):
            _gone(lambda: custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "hubclusters", name))
        admin.close()


def _exists(read) -> bool:
    try:
        read()
        return True
    except client.ApiException as exc:
        if exc.status == 404:
            return False
        raise


def _gone(delete) -> None:
    try:
        delete()
    except client.ApiException as exc:
        if exc.status != 404:
            raise


def test_the_documented_curl_walkthrough_runs_end_to_end(world):
    env, admin, api, workdir = world
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", walkthrough()], cwd=workdir, capture_output=True,
                          text=True, timeout=180,
                          env={**os.environ, "API": api, "ADMIN": env.token, "ALICE": env.tenant_token})
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"

    custom, core = client.CustomObjectsApi(admin), client.CoreV1Api(admin)
    cluster = custom.get_namespaced_custom_object(GROUP, VERSION, "acme", "hubclusters", "prod-1")
    assert cluster["status"]["bootstrapToken"]["used"] is True  # step 3: the token was redeemed, once
    assert cluster["status"]["facts"]["version"] == 1  # step 4: the agent's push, mirrored
    assert cluster["status"]["facts"]["facts"]["nodes"] == "3"
    assert core.read_namespaced_service_account(agent_name("prod-1"), "acme")  # its hub identity
    namespace = core.read_namespace("acme")
    assert namespace.metadata.annotations["hubwright.io/owner-account-id"] == "222222222222"
    assert '"version":1' in done.stdout.replace(" ", "")  # the history alice read
    assert f'"name": "{TENANT_USER}"' in walkthrough()  # $ALICE is the admin the walkthrough names
