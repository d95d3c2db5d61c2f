"""The registry's Git repositories end to end, as deployed: a real kube-apiserver with the garbage collector (a server
of this module's own: the service watches every namespace), the install's cluster-wide objects applied with the real
kubectl, the real `python -m automation serve` and `python -m automation api` processes, a real Gitea, and the real
facts agent (`python -m automation agent --once`, with the hub standing in for the new cluster's own API).

1. a HubTenant and a HubCluster made through the REST API get their repositories, with the template's first commit;
2. the bootstrap token is redeemed: the install answer names the catalog's SSH URL and the forge's host keys;
3. the agent makes its key pair and sends the public key: it becomes the catalog's read-only deploy key;
4. `git clone` over Gitea's SSH server with that key succeeds, with another key fails;
5. deleting the HubCluster removes the deploy key and (deletionPolicy Delete) the repository; the tenant's
   repository (Retain) stays when the HubTenant goes, without the keys hubwright added.

And the faults: a name taken by someone else (refused, not adopted), a token without the scope (Stalled, naming it),
and the forge down (Retrying with the condition saying so, then Ready once it answers).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from doubles.envtest import EnvTest, free_port, project_crds, start_envtest
from doubles.kubectl import against
from doubles.service_env import wait_until
from stacks.names import GROUP, VERSION
from tests.gitea import Gitea, start_gitea
from tests.registry_rbac import service_account_token

ROOT = Path(__file__).resolve().parent.parent
SERVICE_NAMESPACE = "hubwright-system"
README = "# Managed by hubwright\n"


@dataclass
class Hub:
    env: EnvTest
    api: str  # the registry API's URL
    admin: str  # a cluster administrator's token
    forge: Gitea
    owner: str  # the Gitea organisation the templates make repositories under
    work: Path
    logs: dict[str, Path]

    def call(self, method: str, path: str, token: str | None = None, **kwargs: Any) -> httpx.Response:
        return httpx.request(method, f"{self.api}{path}", timeout=30,
                             headers={"Authorization": f"Bearer {token or self.admin}"}, **kwargs)

    def ok(self, method: str, path: str, token: str | None = None, **kwargs: Any) -> Any:
        response = self.call(method, path, token, **kwargs)
        assert response.status_code < 300, f"{method} {path}: {response.status_code} {response.text}\n{self.tails()}"
        return response.json()

    def template(self, *, secret: str = "forge", api_url: str | None = None, deletion: str = "Retain",
                 **extra: Any) -> dict[str, Any]:
        return {"forge": "gitea", "apiURL": api_url or self.forge.url, "credentialsSecretRef": {"name": secret},
                "owner": self.owner, "deletionPolicy": deletion, "templateFiles": {"README.md": README}, **extra}

    def gitrepo(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self.env.api_client() as api:
            try:
                return client.CustomObjectsApi(api).get_namespaced_custom_object(
                    GROUP, VERSION, namespace, "hubgitrepos", name)
            except ApiException as exc:
                if exc.status == 404:
                    return None
                raise

    def condition(self, namespace: str, name: str, type_: str) -> dict[str, Any] | None:
        found = self.gitrepo(namespace, name) or {}
        return next((c for c in (found.get("status") or {}).get("conditions") or [] if c.get("type") == type_), None)

    # Gitea's commit of a repository's first files went past the forge client's 30 s on a loaded machine
    # (2026-11-29): the controller retried and got there, after this wait's old 60 s.
    def wait(self, predicate: Callable[[], Any], what: str, timeout: float = 180) -> Any:
        try:
            return wait_until(predicate, timeout, what=what)
        except Exception as exc:
            raise AssertionError(f"{exc}\n{self.tails()}") from None

    def tails(self) -> str:
        return "".join(f"\n--- {name}:\n{path.read_text(errors='replace')[-5000:]}" for name, path in self.logs.items()
                       if path.exists())

    def repo(self, path: str, token: str | None = None) -> dict[str, Any] | None:
        response = httpx.get(f"{self.forge.api}/repos/{path}", timeout=30,
                             headers={"Authorization": f"token {token or self.forge.token}"})
        if response.status_code == 404:
            return None
        response.raise_for_status()
        return response.json()

    def forge_keys(self, path: str) -> list[dict[str, Any]]:
        return self.forge.request("GET", f"/repos/{path}/keys").json()


def _process(command: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "automation", *command], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture(scope="module")
def hub(tmp_path_factory, gitea: Gitea) -> Iterator[Hub]:
    work = tmp_path_factory.mktemp("gitrepo-e2e")
    with start_envtest(crds=project_crds(), controller_manager=True) as env:
        # The cluster-wide part of the install, as docs/registry.md's walkthrough applies it, and the HubConfig.
        subprocess.run([sys.executable, "-m", "automation", "install", "--render", str(work / "hub-install"),
                        "--cluster-wide-only"], cwd=ROOT, check=True, capture_output=True, timeout=120)
        against(env)("apply", "-k", str(work / "hub-install"))
        against(env)("apply", "-f", str(ROOT / "examples" / "hub.yaml"))
        with env.api_client() as api:
            admin = service_account_token(api, "default", "hub-admin")
            client.RbacAuthorizationV1Api(api).create_cluster_role_binding({
                "metadata": {"name": "hub-admin"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"kind": "ServiceAccount", "name": "hub-admin", "namespace": "default"}]})
            client.CoreV1Api(api).create_namespaced_secret(SERVICE_NAMESPACE, {
                "metadata": {"name": "forge"}, "stringData": {"token": gitea.token}})
        owner = gitea.create_org(f"acme-{uuid.uuid4().hex[:6]}")
        api_port, metrics_port = free_port(), free_port()
        run_env = {k: v for k, v in os.environ.items() if not k.startswith(("HUBWRIGHT_", "AWS_", "KUBERNETES_"))}
        run_env.update(KUBECONFIG=str(env.kubeconfig()), PULUMI_CONFIG_PASSPHRASE="e2e", HOME=str(work),
                       AWS_EC2_METADATA_DISABLED="true", PYTHONPATH=str(ROOT),
                       PATH=os.pathsep.join([str(ROOT / ".tools" / "bin"), os.environ.get("PATH", "/usr/bin:/bin")]))
        logs = {"serve": work / "serve.log", "api": work / "api.log"}
        serve = _process(["serve", "--state-dir", str(work / "state"), "--metrics-bind", "127.0.0.1",
                          "--metrics-port", str(metrics_port), "--gitrepo-resync", "5"], logs["serve"], run_env)
        api = _process(["api", "--state-dir", str(work), "--bind", f"127.0.0.1:{api_port}",
                        "--public-url", f"http://127.0.0.1:{api_port}"], logs["api"], run_env)
        hub = Hub(env=env, api=f"http://127.0.0.1:{api_port}", admin=admin, forge=gitea, owner=owner, work=work,
                  logs=logs)
        try:
            for url in (f"http://127.0.0.1:{metrics_port}/healthz", f"{hub.api}/healthz"):
                hub.wait(lambda: _answers(url), f"{url} to answer")
            yield hub
        finally:
            _stop(api)
            _stop(serve)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _git(*args: str, key: Path, known_hosts: Path, port: int, cwd: Path | None = None) -> subprocess.CompletedProcess:
    ssh = (f"ssh -i {key} -o IdentitiesOnly=yes -o UserKnownHostsFile={known_hosts} -o StrictHostKeyChecking=yes "
           f"-o BatchMode=yes -p {port}")
    env = {**os.environ, "GIT_SSH_COMMAND": ssh, "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def _ready(hub: Hub, namespace: str, name: str) -> dict[str, Any]:
    hub.wait(lambda: (hub.condition(namespace, name, "Ready") or {}).get("status") == "True",
             f"HubGitRepo {namespace}/{name} to be Ready")
    found = hub.gitrepo(namespace, name)
    assert found is not None
    return found


def test_a_tenant_and_a_cluster_get_repositories_the_agent_key_clones_and_deleting_cleans_up(hub: Hub, tmp_path):
    tenant, cluster = f"t{uuid.uuid4().hex[:6]}", "prod-1"
    ci_key = subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ci", "-f", str(tmp_path / "ci")],
                            check=True)
    assert ci_key.returncode == 0
    ci_public = (tmp_path / "ci.pub").read_text().strip()
    # 1. through the REST API: a tenant whose own repository keeps a CI key, and a cluster
    hub.ok("POST", "/tenants", json={"id": tenant, "spec": {
        "displayName": "Initech", "gitRepoTemplate": hub.template(deployKeys=[{"name": "ci", "publicKey": ci_public}]),
        "clusterTemplate": {"gitRepoTemplate": hub.template(deletion="Delete")}}})
    hub.wait(lambda: hub.call("GET", f"/tenants/{tenant}/clusters").status_code == 200, "the tenant's namespace")
    hub.ok("POST", f"/tenants/{tenant}/clusters", json={"id": cluster, "spec": {"displayName": "Production"}})

    tenant_repo = _ready(hub, tenant, f"tenant-{tenant}")
    catalog = _ready(hub, tenant, f"cluster-{cluster}")
    tenant_path, catalog_path = f"{hub.owner}/{tenant}", f"{hub.owner}/{tenant}.{cluster}"
    assert tenant_repo["spec"]["path"] == tenant_path and catalog["spec"]["path"] == catalog_path
    assert catalog["status"]["ownership"] == "Created"
    # ... on the forge, each with one commit: the template's files
    for path in (tenant_path, catalog_path):
        assert hub.repo(path) is not None, path
        commits = hub.forge.request("GET", f"/repos/{path}/commits").json()
        assert len(commits) == 1, commits
        readme = hub.forge.request("GET", f"/repos/{path}/raw/README.md").text
        assert readme == README
    assert [k["title"] for k in hub.forge_keys(tenant_path)] == ["ci"]
    assert hub.forge_keys(tenant_path)[0]["read_only"] is True
    # the REST API reports it, as the caller
    view = hub.ok("GET", f"/tenants/{tenant}/clusters/{cluster}/gitrepo")
    assert view["sshURL"] == catalog["status"]["sshURL"] and view["phase"] == "Ready"

    # 2. the bootstrap token; the install answer names the catalog and the forge's host keys
    token = hub.ok("POST", f"/tenants/{tenant}/clusters/{cluster}/bootstrap-token")["token"]
    answer = httpx.get(f"{hub.api}/install/agent.json", params={"token": token}, timeout=30)
    assert answer.status_code == 200, answer.text
    install = answer.json()
    assert install["gitRepo"]["sshURL"] == catalog["status"]["sshURL"]
    assert install["gitRepo"]["hostKeys"] == [hub.forge.known_hosts()]

    # 3. the real agent, once, with the hub standing in for the cluster's own API: the install's objects applied
    # there, its args from the install's Deployment
    (tmp_path / "agent.json").write_text(json.dumps(install))
    against(hub.env)("apply", "-f", str(tmp_path / "agent.json"))
    deployment = next(item for item in install["items"] if item["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    secret = next(item for item in install["items"] if item["kind"] == "Secret" and "token" in item.get("stringData", {}))
    (tmp_path / "token").write_text(secret["stringData"]["token"])
    (tmp_path / "known_hosts").write_text("\n".join(install["gitRepo"]["hostKeys"]) + "\n")
    args = _agent_args(container, secret["stringData"])
    args = _replace(_replace(args, "--known-hosts-file", str(tmp_path / "known_hosts")),
                    "--token-file", str(tmp_path / "token"))
    agent = subprocess.run(
        [sys.executable, "-m", "automation", *args, "--kubeconfig", str(hub.env.kubeconfig()), "--once"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert agent.returncode == 0, agent.stderr
    with hub.env.api_client() as api:
        stored = client.CoreV1Api(api).read_namespaced_secret("hubwright-catalog-key", "hubwright-agent")
    import base64
    identity = base64.b64decode(stored.data["identity"]).decode()
    public = base64.b64decode(stored.data["identity.pub"]).decode().strip()
    assert "PRIVATE KEY" in identity and "PRIVATE KEY" not in agent.stderr + agent.stdout
    (tmp_path / "agent-key").write_text(identity)
    (tmp_path / "agent-key").chmod(0o600)

    # 4. the agent's key is the catalog's read-only deploy key: it clones; another key does not
    def agent_key_on_forge() -> dict[str, Any] | None:
        return next((k for k in hub.forge_keys(catalog_path) if k["title"] == "hubwright-agent"), None)
    on_forge = hub.wait(agent_key_on_forge, "the agent's key on the catalog")
    assert on_forge["read_only"] is True and on_forge["key"].split()[:2] == public.split()[:2]
    view = hub.ok("GET", f"/tenants/{tenant}/clusters/{cluster}/gitrepo")
    assert [(k["name"], k["write"]) for k in view["deployKeys"]] == [("hubwright-agent", False)]
    cloned = _git("clone", install["gitRepo"]["sshURL"], str(tmp_path / "catalog"), key=tmp_path / "agent-key",
                  known_hosts=tmp_path / "known_hosts", port=hub.forge.ssh_port)
    assert cloned.returncode == 0, cloned.stderr
    assert (tmp_path / "catalog" / "README.md").read_text() == README
    refused = _git("clone", install["gitRepo"]["sshURL"], str(tmp_path / "other"), key=tmp_path / "ci",
                   known_hosts=tmp_path / "known_hosts", port=hub.forge.ssh_port)
    assert refused.returncode != 0 and not (tmp_path / "other" / "README.md").exists()

    # 5. deleting the cluster takes its catalog (Delete) and so the key; the tenant's repository (Retain) stays
    hub.ok("DELETE", f"/tenants/{tenant}/clusters/{cluster}")
    hub.wait(lambda: hub.repo(catalog_path) is None, "the catalog repository to be deleted", timeout=90)
    hub.wait(lambda: hub.gitrepo(tenant, f"cluster-{cluster}") is None, "the catalog's HubGitRepo to go")
    gone = _git("ls-remote", install["gitRepo"]["sshURL"], key=tmp_path / "agent-key",
                known_hosts=tmp_path / "known_hosts", port=hub.forge.ssh_port)
    assert gone.returncode != 0
    hub.ok("DELETE", f"/tenants/{tenant}")
    hub.wait(lambda: hub.gitrepo(tenant, f"tenant-{tenant}") is None, "the tenant's HubGitRepo to go", timeout=90)
    assert hub.repo(tenant_path) is not None  # Retain: the repository is kept ...
    assert hub.forge_keys(tenant_path) == []  # ... without the key hubwright added


def _agent_args(container: dict[str, Any], data: dict[str, str]) -> list[str]:
    """The container's args after `python -m automation`, with $(VAR) filled in from its env as the kubelet does
    (values from the agent's Secret)."""
    env = {e["name"]: e["value"] if "value" in e else data[e["valueFrom"]["secretKeyRef"]["key"]]
           for e in container["env"]}
    args = list(container["args"])
    assert args[:3] == ["python", "-m", "automation"], args
    out = []
    for arg in args[3:]:
        for name, value in env.items():
            arg = arg.replace(f"$({name})", value)
        assert "$(" not in arg, arg
        out.append(arg)
    return out


def _drop(args: list[str], flag: str) -> list[str]:
    if flag in args:
        at = args.index(flag)
        return args[:at] + args[at + 2:]
    return args


def _replace(args: list[str], flag: str, value: str) -> list[str]:
    return [*_drop(args, flag), flag, value]


# --------------------------------------------------------------------------- faults

def test_a_name_taken_by_someone_else_is_refused_not_adopted(hub: Hub):
    tenant = f"t{uuid.uuid4().hex[:6]}"
    theirs = hub.forge.request("POST", f"/orgs/{hub.owner}/repos", json={"name": tenant, "description": "theirs"}).json()
    hub.ok("POST", "/tenants", json={"id": tenant, "spec": {"gitRepoTemplate": hub.template()}})
    hub.wait(lambda: (hub.condition(tenant, f"tenant-{tenant}", "Stalled") or {}).get("reason") == "RepositoryExists",
             "the HubGitRepo to stall on the taken name")
    stalled = hub.condition(tenant, f"tenant-{tenant}", "Stalled") or {}
    assert f"{hub.owner}/{tenant}" in stalled["message"] and "adopt-repository" in stalled["message"]
    after = hub.repo(f"{hub.owner}/{tenant}")
    assert after is not None and after["id"] == theirs["id"] and after["description"] == "theirs"
    assert hub.forge_keys(f"{hub.owner}/{tenant}") == []
    hub.ok("DELETE", f"/tenants/{tenant}")
    hub.wait(lambda: hub.gitrepo(tenant, f"tenant-{tenant}") is None, "the HubGitRepo to go", timeout=90)
    assert hub.repo(f"{hub.owner}/{tenant}") is not None  # never theirs to delete


def test_a_token_without_the_scope_stalls_naming_the_scope(hub: Hub):
    tenant = f"t{uuid.uuid4().hex[:6]}"
    weak = hub.forge.make_token(hub.forge.admin, "read:user,read:repository,read:organization")
    with hub.env.api_client() as api:
        client.CoreV1Api(api).create_namespaced_secret(SERVICE_NAMESPACE, {
            "metadata": {"name": f"weak-{tenant}"}, "stringData": {"token": weak}})
    hub.ok("POST", "/tenants", json={"id": tenant, "spec": {"gitRepoTemplate": hub.template(secret=f"weak-{tenant}")}})
    hub.wait(lambda: (hub.condition(tenant, f"tenant-{tenant}", "Stalled") or {}).get("reason") == "TokenScope",
             "the HubGitRepo to stall on the token's scope")
    stalled = hub.condition(tenant, f"tenant-{tenant}", "Stalled") or {}
    assert "write:" in stalled["message"], stalled
    assert hub.repo(f"{hub.owner}/{tenant}") is None


def test_the_forge_down_is_retried_and_the_condition_heals_when_it_answers(hub: Hub):
    tenant = f"t{uuid.uuid4().hex[:6]}"
    with start_gitea() as other:
        owner = other.create_org(f"down-{uuid.uuid4().hex[:4]}")
        with hub.env.api_client() as api:
            client.CoreV1Api(api).create_namespaced_secret(SERVICE_NAMESPACE, {
                "metadata": {"name": f"other-{tenant}"}, "stringData": {"token": other.token}})
        other.stop()
        hub.ok("POST", "/tenants", json={"id": tenant, "spec": {"gitRepoTemplate": {
            **hub.template(secret=f"other-{tenant}", api_url=other.url), "owner": owner}}})
        name = f"tenant-{tenant}"
        hub.wait(lambda: (hub.condition(tenant, name, "Reconciling") or {}).get("reason") == "ForgeUnavailable",
                 "the HubGitRepo to say the forge is unavailable")
        assert (hub.gitrepo(tenant, name) or {})["status"]["phase"] == "Retrying"
        other.start()
        hub.wait(lambda: (hub.condition(tenant, name, "Ready") or {}).get("status") == "True",
                 "the HubGitRepo to heal once the forge answers", timeout=120)
        assert hub.condition(tenant, name, "Reconciling") in (None, {}) or \
            (hub.condition(tenant, name, "Reconciling") or {}).get("status") == "False"
        assert httpx.get(f"{other.api}/repos/{owner}/{tenant}", timeout=10,
                         headers={"Authorization": f"token {other.token}"}).status_code == 200
        time.sleep(0)  # (the repository is the other forge's; it goes with it)
