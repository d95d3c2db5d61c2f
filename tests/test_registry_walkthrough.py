"""docs/registry.md's walkthrough, every block run as it is written, in order, in one bash, from the repository's
root, as a reader runs it: its first block starts the local sandbox (`python -m automation sandbox up --forge`: a
real kube-apiserver with the garbage collector, a real Gitea), and the walkthrough starts the real
`python -m automation serve` and `python -m automation api` processes itself. Nothing is prepared for it: no
ClusterRole, admission policy, namespace or user of the registry, no KUBECONFIG, no forge.

The reader's environment: the venv first on PATH (the walkthrough's `. .venv/bin/activate`), no AWS credentials,
no HUBWRIGHT_* variable, HOME and the sandbox's folder in a temporary folder. Before its last block (`sandbox down`)
the test looks at the hub and the forge; afterwards the sandbox's processes and folder are gone and `git status`
is what it was before: the walkthrough wrote nothing into the repository.
"""
from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from kubernetes import client
from kubernetes import config as kube_config

from stacks.admission import TENANT_ADMIN_CLUSTERROLE
from stacks.names import GROUP, VERSION, agent_name
from doubles.service_env import wait_until
from tests.doc_run import DEFAULT_PORTS, run_from_the_repository, sandbox_env
from tests.docblocks import blocks

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "registry.md"
HEADING = "Walkthrough"
PORTS = (8080, 8081)  # serve's /metrics and the API: the defaults the walkthrough relies on


def _exists(read) -> bool:
    try:
        read()
        return True
    except client.ApiException as exc:
        if exc.status == 404:
            return False
        raise


def test_the_walkthrough_runs_every_block():
    assert [block.not_run for block in blocks(DOC, HEADING) if block.not_run] == []
    assert len(blocks(DOC, HEADING)) >= 4


@pytest.mark.live
@pytest.mark.xdist_group(DEFAULT_PORTS)
def test_the_documented_walkthrough_runs_end_to_end(tmp_path):
    ran = run_from_the_repository(blocks(DOC, HEADING), tmp_path, timeout=420, checks=_the_hub_and_the_forge,
                                  ports=PORTS, binaries=("etcd", "kube-apiserver", "kube-controller-manager",
                                                         "kubectl", "gitea"))
    assert "# Catalog" in ran.stdout and "tenant-initech" in ran.stdout


def _the_hub_and_the_forge(env: dict[str, str], stdout: str) -> None:
    """What the walkthrough made, seen by the hub's administrator and the forge's, before `sandbox down`."""
    sandbox = sandbox_env(env)
    admin = kube_config.new_client_from_config(config_file=sandbox["KUBECONFIG"])
    custom, core = client.CustomObjectsApi(admin), client.CoreV1Api(admin)
    rbac = client.RbacAuthorizationV1Api(admin)
    # the install step: the ClusterRole and both Tenant policies with their bindings
    assert rbac.read_cluster_role(TENANT_ADMIN_CLUSTERROLE)
    policies = client.AdmissionregistrationV1Api(admin).list_validating_admission_policy().items
    assert {p.metadata.name for p in policies} >= {"hubwright-tenant-ownership", "hubwright-tenant-deletion"}
    namespace = core.read_namespace("initech")  # made by the tenant controller of the walkthrough's `serve`
    assert namespace.metadata.annotations["hubwright.io/owner-account-id"] == "222222222222"
    assert '"version":1' in stdout.replace(" ", "")  # step 4: the history alice read
    assert "prod-1" in stdout.split("NAME", 1)[-1]  # kubectl get hubclusters, as a cluster administrator
    assert custom.get_namespaced_custom_object(GROUP, VERSION, "globex", "hubclusters", "db-1")
    # Git: the tenant's repository stays (Retain), with the template's first commit; prod-1's catalog was cloned
    # with the agent's key (the README it printed), then went with prod-1 (Delete), and so did its agent's identity.
    forge = httpx.Client(base_url=f"{sandbox['FORGE_URL']}/api/v1", timeout=10,
                         headers={"Authorization": f"token {sandbox['FORGE_TOKEN']}"})
    owner = sandbox["FORGE_OWNER"]
    assert {r["name"] for r in forge.get(f"/orgs/{owner}/repos").json()} == {"initech"}
    assert forge.get(f"/repos/{owner}/initech/raw/README.md").text == "# Initech\n"
    tenant_repo = custom.get_namespaced_custom_object(GROUP, VERSION, "initech", "hubgitrepos", "tenant-initech")
    assert tenant_repo["status"]["phase"] == "Ready"
    # the garbage collector takes the agent's identity (owned by its HubCluster) with it
    wait_until(lambda: not _exists(lambda: core.read_namespaced_service_account(agent_name("prod-1"), "initech")),
               30, what="prod-1's agent ServiceAccount to be collected")
