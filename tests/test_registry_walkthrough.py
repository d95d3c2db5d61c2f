"""docs/registry.md's walkthrough, every block run as it is written, in order, in one bash: a real kube-apiserver
(a server of this module's own, with the garbage collector: the walkthrough makes cluster-wide objects, Tenants among
them, and deletes a HubCluster whose catalog follows it) as the hub that KUBECONFIG names, the real kubectl, a real
Gitea on loopback as the forge (FORGE_URL, FORGE_OWNER, FORGE_TOKEN), and the real `python -m automation serve` and
`python -m automation api` processes the walkthrough starts itself. Nothing is prepared for it: the apiserver starts with the CRDs only (which
the walkthrough applies again), and no ClusterRole, admission policy, namespace or user of the registry.

The blocks run from a copy of the repository's root (packages, examples and .venv linked), with the venv's bin first
on PATH (the walkthrough's `. .venv/bin/activate`), no AWS credentials, and no HUBWRIGHT_* variable.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import uuid
from pathlib import Path

from kubernetes import client

from stacks.admission import TENANT_ADMIN_CLUSTERROLE
from stacks.names import GROUP, VERSION, agent_name
from tests.docblocks import blocks, repository_copy, script
from tests.envtest import kube_apiserver_alone_gc  # noqa: F401 - the fixture
from tests.envtest import require_binaries
from doubles.service_env import wait_until
from tests.gitea import Gitea

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "registry.md"
HEADING = "Walkthrough"
PORTS = (8080, 8081)  # serve's /metrics and the API: the defaults the walkthrough relies on


def _taken(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


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


def test_the_documented_walkthrough_runs_end_to_end(kube_apiserver_alone_gc, gitea: Gitea, tmp_path):
    env = kube_apiserver_alone_gc
    kubectl = require_binaries("kubectl")["kubectl"]
    assert not [port for port in PORTS if _taken(port)], f"ports {PORTS} must be free for the walkthrough"
    root = repository_copy(ROOT, tmp_path / "repo")
    run_env = {key: value for key, value in os.environ.items()
               if not key.startswith(("HUBWRIGHT_", "AWS_", "KUBERNETES_", "PULUMI_", "VIRTUAL_ENV", "PYTHON"))}
    owner = gitea.create_org(f"walk-{uuid.uuid4().hex[:6]}")
    run_env.update(FORGE_URL=gitea.url, FORGE_OWNER=owner, FORGE_TOKEN=gitea.token)
    run_env.update(KUBECONFIG=str(env.kubeconfig()), HOME=str(tmp_path), AWS_EC2_METADATA_DISABLED="true",
                   PATH=os.pathsep.join([str(ROOT / ".venv" / "bin"), str(Path(kubectl).parent),
                                         run_env.get("PATH", "/usr/bin:/bin")]))
    text = script(blocks(DOC, HEADING))
    process = subprocess.Popen(["bash", "-euo", "pipefail", "-c", text], cwd=root, env=run_env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=360)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        stderr += "\n(the walkthrough did not finish in 360 s)"
    finally:  # serve and api, started in the background by the walkthrough, whatever became of it
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        process.wait(30)
    logs = "".join(f"\n{name}:\n{(root / name).read_text()[-4000:]}"
                   for name in ("serve.log", "api.log") if (root / name).exists())
    assert process.returncode == 0, f"stdout:\n{stdout}\nstderr:\n{stderr}{logs}"

    admin = env.api_client()
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
    assert "# Catalog" in stdout and "tenant-initech" in stdout
    repos = {r["name"] for r in gitea.request("GET", f"/orgs/{owner}/repos").json()}
    assert repos == {"initech"}
    readme = gitea.request("GET", f"/repos/{owner}/initech/raw/README.md").text
    assert readme == "# Initech\n"
    tenant_repo = custom.get_namespaced_custom_object(GROUP, VERSION, "initech", "hubgitrepos", "tenant-initech")
    assert tenant_repo["status"]["phase"] == "Ready"
    # the garbage collector takes the agent's identity (owned by its HubCluster) with it
    wait_until(lambda: not _exists(lambda: core.read_namespaced_service_account(agent_name("prod-1"), "initech")),
               30, what="prod-1's agent ServiceAccount to be collected")
