"""docs/quickstart.md, every block run as it is written, in order, in one bash, from the repository's root, as a
new user runs it: `./dev plan`, then `python -m automation sandbox up` seeded from the examples, the install, the
fleet, the real `python -m automation serve` (the real pulumi CLI, no AWS provider plugin) and the console.

Before the last block (the stop) the test looks at what the quickstart says a user sees: every example cluster
got through the AWS side (its network discovered from the fake AWS) and stopped at the AWS provider plugin with
the message the doc quotes, and the console signs the doc's token in and lists the three clusters. Afterwards the
sandbox's processes and folder are gone and `git status` is what it was: the quickstart wrote nothing into the
repository.
"""
from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes import config as kube_config

from stacks.names import GROUP, VERSION
from tests.console_env import Browserless
from tests.doc_run import DEFAULT_PORTS, run_from_the_repository, sandbox_env
from tests.docblocks import blocks, section

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "quickstart.md"
PORTS = (8080, 8082)  # serve's /metrics and the console: the defaults the quickstart relies on
CLUSTERS = {("acme", "prod-1"), ("acme", "prod-2"), ("globex", "eu-1")}
NO_PLUGIN = "no resource plugin 'pulumi-resource-aws' found"


def quickstart_blocks():
    return [block for heading in ("1. Get it", "2. The plan, offline", "3. A hub on your laptop",
                                  "4. The install, the tenants and the fleet", "5. The service", "6. The console",
                                  "7. Stop")
            for block in blocks(DOC, heading)]


def test_every_block_is_run_but_the_clone():
    not_run = [block.not_run for block in quickstart_blocks() if block.not_run]
    assert not_run == ["the test runs in the checkout CI cloned and set up"]
    body, _ = section(DOC.read_text(encoding="utf-8"), "Where a local run stops")
    assert NO_PLUGIN in body.replace("\n", " ")


@pytest.mark.live
@pytest.mark.xdist_group(DEFAULT_PORTS)
def test_the_quickstart_runs_as_written_and_leaves_the_repository_clean(tmp_path):
    started = time.monotonic()
    ran = run_from_the_repository(quickstart_blocks(), tmp_path, timeout=600, checks=_what_a_user_sees, ports=PORTS,
                                  binaries=("etcd", "kube-apiserver", "kube-controller-manager", "kubectl", "pulumi"))
    print(f"the quickstart ran in {time.monotonic() - started:.1f} s")
    assert "acme.prod-1" in ran.stdout  # ./dev plan's tree


def _what_a_user_sees(env: dict[str, str], stdout: str) -> None:
    admin = kube_config.new_client_from_config(config_file=sandbox_env(env)["KUBECONFIG"])
    custom = client.CustomObjectsApi(admin)
    for namespace, name in sorted(CLUSTERS):
        status = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "hubclusters", name)["status"]
        assert status["network"]["vpcID"], (namespace, name, status)  # discovered from the fake AWS
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        assert ready["reason"] == "UpdateFailed" and NO_PLUGIN in ready["message"], (namespace, name, ready)
    assert f"up acme.prod-1: error: {NO_PLUGIN}" in stdout  # the Ready message the doc prints
    [token_file] = re.findall(r"sign in with the token in (\S+)", stdout)
    viewer = Browserless("http://127.0.0.1:8082")
    try:
        assert viewer.sign_in(Path(token_file).read_text().strip()).status_code == 303
        fleet = viewer.http.get("/").text
        for namespace, name in CLUSTERS:
            assert f"/clusters/{namespace}/{name}" in fleet, (namespace, name)
    finally:
        viewer.close()
