"""One-time bootstrap tokens and the install endpoint against the real kube-apiserver.

The API's own client is a ServiceAccount bound to exactly stacks.install.API_RULES and held to its agents by the
install's admission policy (stacks.agent_admission), so every test here also proves those rights suffice under
it. Proven: a token is redeemed once, expires, is stored only as its hash and never logged; concurrent
redemptions give exactly one success; a reset invalidates the old token (and a new install revokes the previous
agent); issuing needs `create hubclusters/bootstraptoken`; the agent's token may push facts
for its own cluster, nothing else (not even mint tokens: the registry rotates them), and dies with its
ServiceAccount; an agent of a deleted Cluster reaches no later Cluster of its name; lifetimes stop at the hub's
maxTokenLifetime; the install endpoint is rate-limited per address; shared-ingress and PrivateLink clusters get
their node proxy config and endpoint.
"""
from __future__ import annotations

import base64
import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterator

import httpx
import pytest
from fastapi.testclient import TestClient
from kubernetes import client, utils
from kubernetes.client.rest import ApiException

from automation.adapters.kube.agent import AgentGone, grant_agent, revoke_agent
from automation.adapters.facts import FactsStore
from automation.adapters.kube.ingress_sync import IngressSync
from stacks.times import parse_seconds
from automation.api import agents, bootstrap, facts
from automation.api.app import ApiSettings, ClientCache, Registry, create_app
from automation.cli.agent import Agent, AgentError, renewal_due, token_times
from doubles.envtest import next_second
from doubles.kubectl import against
from stacks.install import AGENT, AGENT_NAMESPACE, API_RULES
from stacks.sources.hypershift import GUEST_PROXY_WRITER
from stacks.sources.kinds import HOSTED_CLUSTER
from stacks.names import (AGENT_CLUSTER_UID_ANNOTATION, ANNOTATION_PREFIX, API_VERSION, BOOTSTRAP_TOKEN_LABEL, GROUP,
                          OWNER_ACCOUNT_ANNOTATION, SHARED_INGRESS_CONFIGMAP, TENANT_ANNOTATION, TENANT_LABEL,
                          TENANT_TAG, VERSION, agent_name)
from stacks.haproxy import CONFIG_FILE, MAP_FILE, parse_map, published_routes, split_backends
from stacks.model.loading import parse
from stacks.registry import token_hash, token_label
from stacks.resolve import Fleet, resolve, resolve_all
from tests.envtest import EnvTest, kube_apiserver  # noqa: F401 - the fixture
from doubles.factories import cluster_doc, hub_doc
from doubles.service_env import wait_until
from tests.registry_rbac import (bind_cluster_role, delete_tenant, eventually, hold_to_agents, sa_subject,
                                 service_account_token, unbind_cluster_role, undo_all)

SUFFIX = uuid.uuid4().hex[:6]
HUB = f"hub-{SUFFIX}"  # the HubConfig the API reads for the shared ingress (unique: the server is shared)
PUBLIC_URL = "https://registry.example.com"
IMAGE = "ghcr.io/hubwright/hubwright:test"
REVOKED_WITHIN = 30.0  # the API server caches a successful authentication for 10 s


def bearer(token: str | None) -> dict[str, str]:
    return {} if token is None else {"Authorization": f"Bearer {token}"}


def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def may(api: client.ApiClient, verb: str, resource: str, namespace: str, name: str, *, group: str = GROUP,
        subresource: str | None = None) -> bool:
    """SelfSubjectAccessReview as `api`'s token (raises 401 when the token is not accepted)."""
    attributes = {"group": group, "resource": resource, "verb": verb, "namespace": namespace, "name": name}
    if subresource:
        attributes["subresource"] = subresource
    review = client.AuthorizationV1Api(api).create_self_subject_access_review(
        {"spec": {"resourceAttributes": attributes}})
    return bool(review.status.allowed)


# --------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def admin(kube_apiserver) -> Iterator[client.ApiClient]:
    with kube_apiserver.api_client() as api:
        yield api


@pytest.fixture(scope="module")
def own(kube_apiserver, admin) -> Iterator[client.ApiClient]:
    """The API's own client: a ServiceAccount bound to exactly API_RULES, nothing else, and held to its agents by
    the admission policy the install gives it (stacks.agent_admission)."""
    namespace, name = f"registry-sys-{SUFFIX}", "registry-api"
    core = client.CoreV1Api(admin)
    core.create_namespace({"metadata": {"name": namespace}})
    role = f"registry-api-{SUFFIX}"
    bind_cluster_role(admin, role, [dict(rule) for rule in API_RULES], [sa_subject(namespace, name)])
    api = kube_apiserver.api_client(service_account_token(admin, namespace, name))
    eventually(lambda: custom(api).list_custom_object_for_all_namespaces(GROUP, VERSION, "hubclusters", limit=1))
    release = hold_to_agents(admin, api, namespace, name)
    yield api
    release()
    api.close()
    unbind_cluster_role(admin, role)
    core.delete_namespaced_service_account(name, namespace)
    core.delete_namespace(namespace)


def settings(env: EnvTest, **overrides: Any) -> ApiSettings:
    values: dict[str, Any] = dict(install_rate=1000.0, install_burst=100_000, public_url=PUBLIC_URL,
                                  agent_image=IMAGE, agent_token_seconds=3600, hub_name=HUB)
    values.update(overrides)
    return ApiSettings(**values)


def make_app(env: EnvTest, own: client.ApiClient, *, store: Any = None, routers=(bootstrap.router,),
             **overrides: Any):
    reg = Registry(settings=settings(env, **overrides), own=own, callers=ClientCache(env.configuration(), 64),
                   facts=store)
    return create_app(reg, routers=routers)


@pytest.fixture(scope="module")
def http(kube_apiserver, own) -> Iterator[TestClient]:
    with TestClient(make_app(kube_apiserver, own)) as test_client:
        yield test_client


@dataclass
class Made:
    """Tenants, namespaces, clusters and HubConfigs one test made; `cleanup()` deletes them (and agents)."""

    env: EnvTest
    admin: client.ApiClient
    http: TestClient
    tenants: list[str] = field(default_factory=list)
    clusters: list[tuple[str, str]] = field(default_factory=list)
    hubs: list[str] = field(default_factory=list)

    def tenant(self) -> tuple[str, str]:
        """A Tenant and its namespace (of the same name, annotated as the service would)."""
        name = f"t-boot-{uuid.uuid4().hex[:8]}"
        custom(self.admin).create_cluster_custom_object(GROUP, VERSION, "hubtenants", {
            "apiVersion": API_VERSION, "kind": "HubTenant", "metadata": {"name": name}, "spec": {}})
        self.tenants.append(name)
        client.CoreV1Api(self.admin).create_namespace({"metadata": {
            "name": name, "labels": {TENANT_LABEL: name}, "annotations": {TENANT_ANNOTATION: name}}})
        return name, name

    def cluster(self, namespace: str, spec: dict | None = None, name: str | None = None) -> str:
        name = name or f"c-boot-{uuid.uuid4().hex[:8]}"
        custom(self.admin).create_namespaced_custom_object(GROUP, VERSION, namespace, "hubclusters", {
            "apiVersion": API_VERSION, "kind": "HubCluster", "metadata": {"name": name}, "spec": spec or {}})
        self.clusters.append((namespace, name))
        return name

    def read(self, namespace: str, name: str) -> dict[str, Any]:
        return custom(self.admin).get_namespaced_custom_object(GROUP, VERSION, namespace, "hubclusters", name)

    def issue(self, tenant: str, cluster: str, token: str | None = "admin") -> httpx.Response:
        token = self.env.token if token == "admin" else token
        return self.http.post(f"/tenants/{tenant}/clusters/{cluster}/bootstrap-token", headers=bearer(token))

    def token(self, tenant: str, cluster: str) -> str:
        response = self.issue(tenant, cluster)
        assert response.status_code == 201, response.text
        return response.json()["token"]

    def install(self, token: str | None, http: TestClient | None = None, **headers: str) -> httpx.Response:
        params = {} if token is None else {"token": token}
        return (http or self.http).get("/install/agent.json", params=params, headers=headers)

    def hub(self, spec: dict) -> None:
        custom(self.admin).create_cluster_custom_object(GROUP, VERSION, "hubconfigs", {
            "apiVersion": API_VERSION, "kind": "HubConfig", "metadata": {"name": HUB}, "spec": spec})
        self.hubs.append(HUB)

    def cleanup(self) -> None:
        objects, core = custom(self.admin), client.CoreV1Api(self.admin)
        calls = [lambda ns=ns, n=n: revoke_agent(self.admin, ns, n) for ns, n in self.clusters]
        calls += [lambda ns=ns, n=n: objects.delete_namespaced_custom_object(GROUP, VERSION, ns, "hubclusters", n)
                  for ns, n in self.clusters]
        calls += [lambda n=n: objects.delete_cluster_custom_object(GROUP, VERSION, "hubconfigs", n) for n in self.hubs]
        calls += [lambda n=n: delete_tenant(self.admin, n) for n in self.tenants]
        calls += [lambda n=n: core.delete_namespace(n) for n in self.tenants]
        undo_all(calls)


@pytest.fixture
def made(kube_apiserver, admin, http) -> Iterator[Made]:
    found = Made(kube_apiserver, admin, http)
    yield found
    found.cleanup()


def manifest(body: dict, kind: str, name: str | None = None) -> dict[str, Any]:
    found = [m for m in body["items"] if m["kind"] == kind and (name is None or m["metadata"]["name"] == name)]
    assert len(found) == 1, f"{kind} {name}: {[(m['kind'], m['metadata']['name']) for m in body['items']]}"
    return found[0]


def denied(response: httpx.Response) -> None:
    assert response.status_code == 401, response.text
    assert response.json()["detail"] == bootstrap.DENIED  # one message: unknown, expired and used look alike


def retry(call: Any, timeout: float = 10.0) -> Any:
    """`call()` until it neither fails an assertion nor is refused (RBAC caches take a moment to catch up)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except (AssertionError, AgentError, ApiException):
            if time.monotonic() > deadline:
                raise
        time.sleep(0.1)


def wait_revoked(env: EnvTest, token: str) -> None:
    """Until the token is refused (401): the API server caches successful authentications for 10 s."""
    deadline = time.monotonic() + REVOKED_WITHIN
    with env.api_client(token) as api:
        while True:
            try:
                may(api, "create", "hubclusters", "default", "x", subresource="facts")
            except ApiException as exc:
                assert exc.status == 401, exc
                return
            assert time.monotonic() < deadline, "the token still authenticates after its ServiceAccount is gone"
            time.sleep(0.5)


# --------------------------------------------------------------------------- tokens

def test_a_token_is_redeemed_once_and_never_stored_or_logged_in_clear(made, caplog):
    caplog.set_level(logging.DEBUG)
    tenant, namespace = made.tenant()
    cluster = made.cluster(namespace)
    issued = made.issue(tenant, cluster)
    assert issued.status_code == 201, issued.text
    token = issued.json()["token"]
    assert len(token) >= 43 and issued.headers["cache-control"] == "no-store"

    stored = made.read(namespace, cluster)
    dumped = json.dumps(stored)
    assert token not in dumped  # only its hash is kept
    assert stored["status"]["bootstrapToken"] == {"sha256": token_hash(token), "used": False,
                                                  "validUntil": issued.json()["validUntil"]}
    assert stored["metadata"]["labels"][BOOTSTRAP_TOKEN_LABEL] == token_label(token_hash(token))

    first = made.install(token)
    assert first.status_code == 200, first.text
    body = first.json()
    assert {k: body[k] for k in ("cluster", "tenant", "apiURL", "privateLinkEndpoint")} == {
        "cluster": cluster, "tenant": tenant, "apiURL": PUBLIC_URL, "privateLinkEndpoint": None}
    assert first.headers["cache-control"] == "no-store"
    assert [m["kind"] for m in body["items"]] == ["Namespace", "ServiceAccount", "ClusterRole",
                                                      "ClusterRoleBinding", "Role", "RoleBinding", "Secret",
                                                      "Secret", "Deployment"]  # no shared ingress: no node proxy
    secret = manifest(body, "Secret", AGENT)["stringData"]
    assert secret == {"apiURL": PUBLIC_URL, "tenant": tenant, "cluster": cluster, "namespace": namespace,
                      "token": secret["token"], "installID": secret["installID"]}  # nothing about the hub's own API
    assert body["gitRepo"] is None  # no catalog repository: no ConfigMap for it
    assert secret["token"] != token and token_times(secret["token"]) is not None  # the agent's own hub token
    pod = manifest(body, "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] and container["securityContext"]["readOnlyRootFilesystem"]
    assert container["resources"]["limits"] and container["image"] == IMAGE
    assert container["args"][:4] == ["python", "-m", "automation", "agent"]

    denied(made.install(token))  # used
    assert made.read(namespace, cluster)["status"]["bootstrapToken"]["used"] is True
    assert token not in json.dumps(made.read(namespace, cluster))
    logged = [r.getMessage() for r in caplog.records if not r.name.startswith(("httpx", "httpcore"))]
    assert logged and not any(token in line or secret["token"] in line for line in logged)


def test_kubectl_apply_takes_the_answer_as_it_is(made, admin, kube_apiserver):
    """The answer is a Kubernetes List, as Lieutenant's: `curl .../install/agent.json?token=... | kubectl apply -f -`
    creates every item, in order, with nothing taken out of it first (before, kubectl refused it: no kind)."""
    tenant, namespace = made.tenant()
    answer = made.install(made.token(tenant, made.cluster(namespace)))
    assert answer.status_code == 200, answer.text
    assert (answer.json()["apiVersion"], answer.json()["kind"]) == ("v1", "List")
    kubectl = against(kube_apiserver)
    try:
        applied = kubectl("apply", "-f", "-", stdin=answer.text)
        names = [line.split(" ", 1)[0] for line in applied.stdout.splitlines()]
        assert [name.split("/", 1)[1] for name in names] == [m["metadata"]["name"] for m in answer.json()["items"]]
        stored = client.CoreV1Api(admin).read_namespaced_secret(AGENT, AGENT_NAMESPACE)
        token = manifest(answer.json(), "Secret", AGENT)["stringData"]["token"]
        assert base64.b64decode(stored.data["token"]).decode() == token
    finally:  # the shared server: the cluster-scoped items would meet the next test's
        kubectl("delete", "--wait=false", "--ignore-not-found", "-f", "-", stdin=answer.text, check=False)


def test_the_manifests_are_objects_the_api_server_accepts(made, admin):
    """Applied (server-side dry run, as the guest cluster would) to the test server, in a namespace of the
    test's own instead of hubwright-agent (namespaces never finish deleting here)."""
    tenant, namespace = made.tenant()
    body = made.install(made.token(tenant, made.cluster(namespace))).json()
    guest_namespace = f"agent-{uuid.uuid4().hex[:8]}"
    manifests = json.loads(json.dumps(body["items"]))
    for item in manifests:
        if item["metadata"].get("namespace") == AGENT_NAMESPACE:
            item["metadata"]["namespace"] = guest_namespace
        for subject in item.get("subjects", []):
            subject["namespace"] = guest_namespace
    assert manifests[0]["kind"] == "Namespace"
    manifests[0]["metadata"]["name"] = guest_namespace
    core = client.CoreV1Api(admin)
    core.create_namespace(manifests[0])
    try:
        for item in manifests[1:]:
            utils.create_from_dict(admin, item, dry_run="All")
    finally:
        core.delete_namespace(guest_namespace)


def test_an_unknown_or_expired_token_is_refused_alike(made):
    tenant, namespace = made.tenant()
    cluster = made.cluster(namespace, {"tokenLifetime": "1s"})
    token = made.token(tenant, cluster)
    valid_until = parse_seconds(made.read(namespace, cluster)["status"]["bootstrapToken"]["validUntil"])
    wait_until(lambda: time.time() > valid_until, 5, what="the token's validUntil to pass")
    denied(made.install(token))  # expired
    assert made.read(namespace, cluster)["status"]["bootstrapToken"]["used"] is False  # refused, not used up
    denied(made.install("not-a-token"))
    denied(made.install(None))
    denied(made.install("x" * 5000))


def test_concurrent_installs_with_one_token_give_exactly_one_success(made):
    tenant, namespace = made.tenant()
    token = made.token(tenant, made.cluster(namespace))
    codes = together(12, lambda: made.install(token).status_code)
    assert sorted(codes) == [200] + [401] * 11


def together(callers: int, call: Any) -> list[Any]:
    """`call()` from `callers` threads released at once; their results."""
    start, results = threading.Barrier(callers), []

    def run() -> None:
        start.wait()
        results.append(call())

    threads = [threading.Thread(target=run) for _ in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(results) == callers
    return results


def test_marking_used_is_atomic_on_the_server(made, own):
    """Every caller past the read-side checks at once: the JSON patch's tests let exactly one through."""
    tenant, namespace = made.tenant()
    cluster = made.cluster(namespace)
    digest = token_hash(made.token(tenant, cluster))
    results = together(12, lambda: bootstrap._mark_used(custom(own), namespace, cluster, digest))
    assert sorted(results) == [False] * 11 + [True]
    assert not bootstrap._mark_used(custom(own), namespace, cluster, token_hash("another token"))


def test_concurrent_resets_leave_exactly_one_valid_token(made):
    tenant, namespace = made.tenant()
    cluster = made.cluster(namespace)
    responses = together(6, lambda: made.issue(tenant, cluster))
    assert {r.status_code for r in responses} <= {201, 409}
    tokens = [r.json()["token"] for r in responses if r.status_code == 201]
    stored = made.read(namespace, cluster)
    digest = stored["status"]["bootstrapToken"]["sha256"]
    assert stored["metadata"]["labels"][BOOTSTRAP_TOKEN_LABEL] == token_label(digest)  # label and hash agree
    assert [token_hash(token) for token in tokens].count(digest) == 1
    assert sorted(made.install(token).status_code for token in tokens) == [200] + [401] * (len(tokens) - 1)


def test_a_reset_invalidates_the_old_token_and_a_new_install_replaces_the_agent(made, kube_apiserver):
    tenant, namespace = made.tenant()
    cluster = made.cluster(namespace)
    old, new = made.token(tenant, cluster), made.token(tenant, cluster)
    assert old != new
    denied(made.install(old))
    first = made.install(new)
    assert first.status_code == 200, first.text
    first_agent = manifest(first.json(), "Secret", AGENT)["stringData"]["token"]

    again = made.install(made.token(tenant, cluster))  # reset after use: a fresh install
    assert again.status_code == 200, again.text
    second_agent = manifest(again.json(), "Secret", AGENT)["stringData"]["token"]
    with kube_apiserver.api_client(second_agent) as api:
        assert may(api, "create", "hubclusters", namespace, cluster, subresource="facts")
    wait_revoked(kube_apiserver, first_agent)  # the previous agent's ServiceAccount was replaced


def test_issuing_needs_the_bootstrap_right_asked_as_the_caller(made, admin, kube_apiserver):
    tenant, namespace = made.tenant()
    cluster, other = made.cluster(namespace), made.cluster(namespace)
    assert made.issue(tenant, cluster, None).status_code == 401
    refused = made.issue(tenant, cluster, kube_apiserver.tenant_token)
    assert refused.status_code == 403 and "hubclusters/bootstraptoken" in refused.json()["detail"]
    assert "bootstrapToken" not in (made.read(namespace, cluster).get("status") or {})
    assert made.issue(f"t-missing-{SUFFIX}", cluster).status_code == 404
    assert made.issue(tenant, "c-missing").status_code == 404

    rbac = client.RbacAuthorizationV1Api(admin)
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "bootstrapper"}, "rules": [
        {"apiGroups": [GROUP], "resources": ["hubclusters/bootstraptoken"], "resourceNames": [cluster],
         "verbs": ["create"]}]})
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "bootstrapper"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "bootstrapper"},
        "subjects": [sa_subject(namespace, "bootstrapper")]})
    try:
        token = service_account_token(admin, namespace, "bootstrapper")
        eventually(lambda: _issued(made.issue(tenant, cluster, token)), refused=403)
        assert made.issue(tenant, other, token).status_code == 403  # its Role names one cluster
    finally:
        rbac.delete_namespaced_role_binding("bootstrapper", namespace)
        rbac.delete_namespaced_role("bootstrapper", namespace)
        client.CoreV1Api(admin).delete_namespaced_service_account("bootstrapper", namespace)


def _issued(response: httpx.Response) -> httpx.Response:
    if response.status_code == 403:
        raise ApiException(status=403)
    assert response.status_code == 201, response.text
    return response


# --------------------------------------------------------------------------- the agent's hub identity

def test_the_agent_token_may_push_facts_for_its_cluster_only_and_mint_no_token(made, kube_apiserver):
    tenant, namespace = made.tenant()
    cluster, other = made.cluster(namespace), made.cluster(namespace)
    body = made.install(made.token(tenant, cluster)).json()
    agent_token = manifest(body, "Secret", AGENT)["stringData"]["token"]
    with kube_apiserver.api_client(agent_token) as api:
        assert may(api, "create", "hubclusters", namespace, cluster, subresource="facts")
        assert not may(api, "create", "hubclusters", namespace, other, subresource="facts")
        assert not may(api, "patch", "hubclusters", namespace, cluster, subresource="status")
        assert not may(api, "get", "hubclusters", namespace, cluster)
        with pytest.raises(ApiException) as refused:
            custom(api).patch_namespaced_custom_object_status(GROUP, VERSION, namespace, "hubclusters", cluster,
                                                              {"status": {"facts": {"version": 1}}})
        assert refused.value.status == 403
        # The finding: it could mint itself 10-year tokens for any audience. No TokenRequest at all now.
        assert not may(api, "create", "serviceaccounts", namespace, agent_name(cluster), group="",
                       subresource="token")
        core = client.CoreV1Api(api)
        for target in (cluster, other):
            with pytest.raises(ApiException) as refused:
                core.create_namespaced_service_account_token(agent_name(target), namespace, {"spec": {
                    "expirationSeconds": 10 * 365 * 86400, "audiences": ["https://anything.example"]}})
            assert refused.value.status == 403


def test_deleting_the_agent_revokes_its_token(made, own, kube_apiserver):
    """Proven with the adapter alone, as the API's own ServiceAccount (its delete rights)."""
    tenant, namespace = made.tenant()
    cluster = made.cluster(namespace)
    token, expiry = grant_agent(own, namespace, cluster, made.read(namespace, cluster)["metadata"]["uid"], 600)
    assert expiry.endswith("Z")
    with kube_apiserver.api_client(token) as api:
        retry(lambda: _check(may(api, "create", "hubclusters", namespace, cluster, subresource="facts")))
    revoke_agent(own, namespace, cluster)
    revoke_agent(own, namespace, cluster)  # gone already: fine
    wait_revoked(kube_apiserver, token)


def _check(allowed: bool) -> None:
    assert allowed


def test_the_agent_pushes_facts_and_renews_its_token(made, own, admin, kube_apiserver, tmp_path):
    """The agent command's round against the real server (the test server plays hub and guest)."""
    tenant, namespace = made.tenant()
    cluster = made.cluster(namespace)
    body = made.install(made.token(tenant, cluster)).json()
    token = manifest(body, "Secret", AGENT)["stringData"]["token"]
    core = client.CoreV1Api(admin)
    core.create_namespaced_secret(namespace, {"metadata": {"name": AGENT}, "stringData": {"token": token}})
    store = FactsStore(f"sqlite:///{tmp_path / 'facts.db'}")
    app = make_app(kube_apiserver, own, store=store, routers=(bootstrap.router, facts.router, agents.router))
    try:
        with TestClient(app) as api:
            agent = Agent(api_url="http://testserver", tenant=tenant, namespace=namespace, cluster=cluster,
                          token=token, guest=admin, http=api, secret=(namespace, AGENT))
            pushed = retry(agent.step)  # RBAC takes a moment to see the agent's new Role
            assert pushed["version"] == 1 and set(pushed["facts"]) == {"kubernetesVersion", "platform", "nodes"}
            assert pushed["facts"]["kubernetesVersion"].startswith("v1.")

            issued, expires = token_times(token)
            assert not renewal_due(token, issued + 60)
            agent.clock = lambda: expires - 60  # near its end: the next round renews it first
            assert agent.step()["version"] == 2
            assert agent.token != token
            kept = core.read_namespaced_secret(AGENT, namespace).data["token"]
            assert base64.b64decode(kept).decode() == agent.token
            renewed_times = token_times(agent.token)
            assert renewed_times[1] - renewed_times[0] == expires - issued  # as long-lived as the first
    finally:
        store.close()
        core.delete_namespaced_secret(AGENT, namespace)


# --------------------------------------------------------------------------- the agent outlives nothing

def push(http: TestClient, tenant: str, cluster: str, token: str) -> httpx.Response:
    return http.post(f"/tenants/{tenant}/clusters/{cluster}/facts", json={"facts": {"nodes": "3"}},
                     headers=bearer(token))


def rotate(http: TestClient, tenant: str, cluster: str, token: str | None) -> httpx.Response:
    return http.post(f"/tenants/{tenant}/clusters/{cluster}/agent-token", headers=bearer(token))


@pytest.fixture
def full(kube_apiserver, own, tmp_path) -> Iterator[TestClient]:
    """The install, facts and agent-token routes in one app, the API's own client bound to API_RULES."""
    store = FactsStore(f"sqlite:///{tmp_path / 'facts.db'}")
    app = make_app(kube_apiserver, own, store=store, routers=(bootstrap.router, facts.router, agents.router))
    with TestClient(app) as test_client:
        yield test_client
    store.close()


def test_an_agent_of_a_deleted_cluster_reaches_no_later_cluster_of_its_name(made, full, admin):
    """The finding: deleted while no service ran, a Cluster's agent kept its ServiceAccount, and its Role names
    the cluster by name only, so it pushed facts to (and rotated its token for) a later Cluster of that name."""
    tenant, namespace = made.tenant()
    cluster = made.cluster(namespace)
    body = made.install(made.token(tenant, cluster), http=full).json()
    token = manifest(body, "Secret", AGENT)["stringData"]["token"]
    assert retry(lambda: _status(push(full, tenant, cluster, token), 201)).json()["version"] == 1

    uid = made.read(namespace, cluster)["metadata"]["uid"]
    account = client.CoreV1Api(admin).read_namespaced_service_account(agent_name(cluster), namespace)
    assert account.metadata.annotations[AGENT_CLUSTER_UID_ANNOTATION] == uid
    for meta in (account.metadata,
                 client.RbacAuthorizationV1Api(admin).read_namespaced_role(agent_name(cluster), namespace).metadata,
                 client.RbacAuthorizationV1Api(admin).read_namespaced_role_binding(agent_name(cluster),
                                                                                   namespace).metadata):
        (owner,) = meta.owner_references
        assert (owner.kind, owner.name, owner.uid, owner.block_owner_deletion) == ("HubCluster", cluster, uid, False)

    # no service and no garbage collector here: the agent's objects stay
    custom(admin).delete_namespaced_custom_object(GROUP, VERSION, namespace, "hubclusters", cluster)
    custom(admin).create_namespaced_custom_object(GROUP, VERSION, namespace, "hubclusters", {
        "apiVersion": API_VERSION, "kind": "HubCluster", "metadata": {"name": cluster}, "spec": {}})
    refused = push(full, tenant, cluster, token)
    assert refused.status_code == 403 and "earlier HubCluster" in refused.json()["detail"], refused.text
    assert rotate(full, tenant, cluster, token).status_code == 403
    assert "facts" not in (made.read(namespace, cluster).get("status") or {})

    again = made.install(made.token(tenant, cluster), http=full).json()  # the new Cluster's own install
    fresh = manifest(again, "Secret", AGENT)["stringData"]["token"]
    assert retry(lambda: _status(push(full, tenant, cluster, fresh), 201)).status_code == 201


def _status(response: httpx.Response, code: int) -> httpx.Response:
    assert response.status_code == code, response.text
    return response


@pytest.mark.parametrize("replaced", [False, True], ids=["deleted", "deleted-and-made-again"])
def test_a_cluster_deleted_during_its_install_leaves_no_agent(made, own, admin, kube_apiserver, replaced):
    """Between the install reading the Cluster and granting its agent, the Cluster goes (and maybe a new one
    of its name comes): the grant reads it again, revokes what it made and fails."""
    tenant, namespace = made.tenant()
    cluster = made.cluster(namespace)
    stale = made.read(namespace, cluster)["metadata"]["uid"]
    custom(admin).delete_namespaced_custom_object(GROUP, VERSION, namespace, "hubclusters", cluster)
    if replaced:
        custom(admin).create_namespaced_custom_object(GROUP, VERSION, namespace, "hubclusters", {
            "apiVersion": API_VERSION, "kind": "HubCluster", "metadata": {"name": cluster}, "spec": {}})
    with pytest.raises(AgentGone):
        grant_agent(own, namespace, cluster, stale, 600)
    core, rbac = client.CoreV1Api(admin), client.RbacAuthorizationV1Api(admin)
    for read in (core.read_namespaced_service_account, rbac.read_namespaced_role, rbac.read_namespaced_role_binding):
        with pytest.raises(ApiException) as gone:
            read(agent_name(cluster), namespace)
        assert gone.value.status == 404


def test_token_lifetimes_stop_at_the_hubs_maximum(made, kube_apiserver, own):
    """The finding: tokenLifetime took 6.2 years. HubConfig spec.registry.maxTokenLifetime (default 168h)
    refuses a longer bootstrap token when it is issued, and caps the agent's token, first and rotated."""
    tenant, namespace = made.tenant()
    too_long = made.cluster(namespace, {"tokenLifetime": "9999h999999m99999999s"})
    refused = made.issue(tenant, too_long)
    assert refused.status_code == 409, refused.text
    assert refused.json()["detail"] == (
        f"HubCluster {namespace}/{too_long}: spec.tokenLifetime: 9999h999999m99999999s is longer than the default "
        "maxTokenLifetime (168h) allows; ask for 168h or less")
    assert "bootstrapToken" not in (made.read(namespace, too_long).get("status") or {})

    made.hub({"accountID": "111111111111", "region": "us-east-1", "registry": {"maxTokenLifetime": "1h"}})
    two_hours = made.cluster(namespace, {"tokenLifetime": "2h"})
    refused = made.issue(tenant, two_hours)
    assert refused.status_code == 409 and f"HubConfig {HUB} spec.registry.maxTokenLifetime (1h)" in \
        refused.json()["detail"]
    cluster = made.cluster(namespace, {"tokenLifetime": "1h"})
    app = make_app(kube_apiserver, own, routers=(bootstrap.router, agents.router), agent_token_seconds=30 * 86400)
    with TestClient(app) as http:
        body = made.install(made.token(tenant, cluster), http=http).json()
        token = manifest(body, "Secret", AGENT)["stringData"]["token"]
        issued, expires = token_times(token)
        assert expires - issued == 3600  # --agent-token-seconds asked for 30 days
        rotated = retry(lambda: _status(rotate(http, tenant, cluster, token), 201)).json()
        issued, expires = token_times(rotated["token"])
        assert expires - issued == 3600 and rotated["expiresAt"].endswith("Z")


def test_only_the_agent_itself_rotates_its_token(made, full, kube_apiserver):
    tenant, namespace = made.tenant()
    cluster, other = made.cluster(namespace), made.cluster(namespace)
    token = manifest(made.install(made.token(tenant, cluster), http=full).json(), "Secret", AGENT)["stringData"]["token"]
    stranger = manifest(made.install(made.token(tenant, other), http=full).json(), "Secret", AGENT)["stringData"]["token"]
    assert rotate(full, tenant, cluster, None).status_code == 401
    assert rotate(full, tenant, cluster, "not-a-token").status_code == 401
    missing = rotate(full, "no-such-tenant", cluster, stranger)
    for caller in (kube_apiserver.token, stranger):  # the hub's admin is not the agent; nor is another's agent
        refused = rotate(full, tenant, cluster, caller)
        # the one 403 body: it tells a stranger neither that the tenant exists nor its namespace
        assert refused.status_code == 403 and refused.json() == missing.json(), refused.text
        assert namespace not in refused.text
    rotated = _status(rotate(full, tenant, cluster, token), 201)
    assert rotated.headers["cache-control"] == "no-store"
    fresh = rotated.json()["token"]
    assert fresh != token and retry(lambda: _status(push(full, tenant, cluster, fresh), 201))


# --------------------------------------------------------------------------- rate limit, ingress, PrivateLink

def test_installs_are_rate_limited_per_client_address(kube_apiserver, own):
    app = make_app(kube_apiserver, own, install_rate=0.01, install_burst=3, trust_forwarded_for=True)
    with TestClient(app) as http:
        def install(address: str) -> httpx.Response:
            return http.get("/install/agent.json", params={"token": "guess"},
                            headers={"X-Forwarded-For": address})

        assert [install("203.0.113.7").status_code for _ in range(3)] == [401] * 3
        limited = install("203.0.113.7")
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
        assert install("203.0.113.8").status_code == 401  # another address has its own bucket
        # only the entry the trusted proxy appended counts: a client cannot pick its bucket
        assert install("198.51.100.1, 203.0.113.7").status_code == 429


# --------------------------------------------------------------------------- the shared ingress

@dataclass
class Ingress:
    """A hub with a shared ingress whose central proxy lives in `namespace` (unique: the server is shared)."""

    made: Made
    namespace: str

    @property
    def hub(self) -> dict:
        return hub_doc(sharedIngress={"address": "ingress.example.com:6443", "allowedBackends": ["10.0.0.0/8"],
                                      "namespace": self.namespace}, tenancy={"unownedNamespaces": "FirstClaim"})


@pytest.fixture
def ingress(made, admin) -> Iterator[Ingress]:
    """A hub with a shared ingress, and its (empty) ConfigMap, as deploy/ makes them."""
    core = client.CoreV1Api(admin)
    found = Ingress(made, f"ingress-{uuid.uuid4().hex[:8]}")
    core.create_namespace({"metadata": {"name": found.namespace}})
    core.create_namespaced_config_map(found.namespace, {"metadata": {"name": SHARED_INGRESS_CONFIGMAP}, "data": {}})
    made.hub(found.hub["spec"])
    yield found
    core.delete_namespace(found.namespace)


def ingress_cluster(made: Made, namespace: str, name: str, account: str, backend: str, **ingress: str) -> str:
    spec = cluster_doc(name, namespace, accountID=account, apiURL=f"https://api.{name}.{namespace}.example.com:6443",
                       sharedIngress={"enabled": True, "backend": backend, **ingress})["spec"]
    return made.cluster(namespace, spec, name=name)


def publish(ingress: Ingress) -> dict[str, str]:
    """What the service does with each resolution (automation.service.serve.shared_ingress_sync): resolve the
    fleet and write its routes into the shared-ingress ConfigMap. The routes as published: cluster -> ID."""
    made = ingress.made
    core = client.CoreV1Api(made.admin)
    namespaces = {ns: core.read_namespace(ns).metadata.annotations or {} for ns, _ in made.clusters}
    hub = parse(ingress.hub)
    clusters = tuple(parse(made.read(ns, name)) for ns, name in made.clusters)
    routes = resolve_all(Fleet(hub=hub, clusters=clusters, namespaces=namespaces)).routes
    IngressSync(made.admin).sync(hub, routes)
    return published_routes(central_data(ingress))


def central_data(ingress: Ingress) -> dict[str, str]:
    core = client.CoreV1Api(ingress.made.admin)
    return core.read_namespaced_config_map(SHARED_INGRESS_CONFIGMAP, ingress.namespace).data or {}


def central_backend(ingress: Ingress, cluster_id: str) -> str:
    """Where the published central proxy sends this ID: its backend's server address."""
    data = central_data(ingress)
    backend = parse_map(data[MAP_FILE]).get(cluster_id)
    assert backend is not None, f"the central proxy does not route {cluster_id!r}"
    section = split_backends(data[CONFIG_FILE])[1][backend]
    return next(line.split()[2] for line in section.splitlines() if line.strip().startswith("server "))


def test_a_tenant_never_gets_a_node_proxy_config_that_the_central_proxy_routes_to_another_tenant(ingress):
    """Issue 31 item 4: globex/prod-1 created first took the fleet-global ID prod-1; acme/prod-1, refused, was
    still handed a node proxy sending prod-1, which the central proxy routes to globex's API server."""
    made = ingress.made
    globex, globex_ns = made.tenant()
    acme, acme_ns = made.tenant()
    ingress_cluster(made, globex_ns, "prod-1", "333333333333", "10.2.2.2:6443")
    next_second(made.admin)  # creationTimestamp has seconds: globex's is older
    ingress_cluster(made, acme_ns, "prod-1", "222222222222", "10.1.1.1:6443")
    published = publish(ingress)

    for tenant, namespace, backend in ((acme, acme_ns, "10.1.1.1:6443"), (globex, globex_ns, "10.2.2.2:6443")):
        response = made.install(made.token(tenant, "prod-1"))
        if response.status_code == 409:  # not routed: no config at all, and the reason
            assert "not routed" in response.json()["detail"]
            continue
        assert response.status_code == 200, response.text
        config = manifest(response.json(), "ConfigMap")["data"]["haproxy.cfg"]
        [sent] = [line.split()[1] for line in config.splitlines() if line.strip().startswith("unique-id-format")]
        assert central_backend(ingress, sent) == backend, f"{namespace}/prod-1's nodes would reach another cluster's API"
        assert published[f"{namespace}/prod-1"] == sent == f"{namespace}.prod-1"


def test_the_install_answers_409_for_a_cluster_the_service_does_not_route(ingress, admin):
    made = ingress.made
    tenant, namespace = made.tenant()
    routed = ingress_cluster(made, namespace, "prod-1", "222222222222", "10.1.1.1:6443")
    publish(ingress)
    waiting = ingress_cluster(made, namespace, "prod-2", "222222222222", "10.1.1.2:6443")
    token = made.token(tenant, waiting)
    response = made.install(token)  # valid on its own, but not routed (yet): the service has not published it
    assert response.status_code == 409 and "not routed by the shared ingress" in response.json()["detail"]
    assert made.read(namespace, waiting)["status"]["bootstrapToken"]["used"] is False  # not used up
    # The service refused it: the install says why, as the cluster's Stalled condition does.
    custom(admin).patch_namespaced_custom_object_status(GROUP, VERSION, namespace, "hubclusters", waiting, {"status": {
        "conditions": [{"type": "Stalled", "status": "True", "reason": "InvalidSpec", "message": "the reason"}]}})
    response = made.install(token)
    assert response.status_code == 409 and "InvalidSpec: the reason" in response.json()["detail"]
    publish(ingress)
    assert made.install(token).status_code == 200
    assert made.install(made.token(tenant, routed)).status_code == 200


def test_a_shared_ingress_cluster_gets_its_node_proxy_config(ingress):
    made = ingress.made
    tenant, namespace = made.tenant()
    cluster = ingress_cluster(made, namespace, "c-1", "222222222222", "10.1.2.3:6443", clusterID=f"{namespace}.id")
    publish(ingress)
    response = made.install(made.token(tenant, cluster))
    assert response.status_code == 200, response.text
    config_map = manifest(response.json(), "ConfigMap")
    assert config_map["metadata"]["namespace"] == "kube-system"
    config = config_map["data"]["haproxy.cfg"]
    assert f"unique-id-format {namespace}.id" in config and "ingress.example.com:6443" in config

    refused = made.cluster(namespace, {"sharedIngress": {"enabled": True, "backend": "192.168.7.7:6443"}})
    token = made.token(tenant, refused)
    response = made.install(token)
    assert response.status_code == 409 and "allowedBackends" in response.json()["detail"]
    assert made.read(namespace, refused)["status"]["bootstrapToken"]["used"] is False  # not used up


def test_a_hosted_clusters_guests_get_no_node_proxy_config_hypershift_writes_theirs(ingress):
    """A HubCluster derived from a HyperShift HostedCluster (its controller ownerReference, spec.sharedIngress
    nodeProxy External): HyperShift writes its guests' kube-apiserver-proxy through the NodePool's ignition, so the
    install answer carries none (hubwright is never a second writer) and says who writes it; its facts agent is
    bootstrapped as any cluster's, whether or not the service has published its route yet."""
    made = ingress.made
    tenant, namespace = made.tenant()
    name = "hc-1"
    custom(made.admin).create_namespaced_custom_object(GROUP, VERSION, namespace, "hubclusters", {
        "apiVersion": API_VERSION, "kind": "HubCluster", "metadata": {"name": name, "ownerReferences": [{
            "apiVersion": f"{HOSTED_CLUSTER.group}/v1beta1", "kind": HOSTED_CLUSTER.kind, "name": name,
            "uid": str(uuid.uuid4()), "controller": True, "blockOwnerDeletion": True}]},
        "spec": cluster_doc(name, namespace, accountID="222222222222", apiURL=f"https://api.{name}.example.com:6443",
                            sharedIngress={"enabled": True, "backend": f"kube-apiserver.{namespace}-{name}.svc:6443",
                                           "nodeProxy": "External"})["spec"]})
    made.clusters.append((namespace, name))
    response = made.install(made.token(tenant, name))  # not published: a hubwright-written proxy would be a 409
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["nodeProxyWrittenBy"] == GUEST_PROXY_WRITER and "HyperShift" in body["nodeProxyWrittenBy"]
    assert [m["kind"] for m in body["items"] if m["kind"] == "ConfigMap"] == []  # no node proxy config
    assert manifest(body, "Deployment", AGENT)["metadata"]["namespace"] == AGENT_NAMESPACE  # the agent, as any

    own = ingress_cluster(made, namespace, "c-own", "222222222222", "10.1.2.4:6443")
    publish(ingress)
    assert made.install(made.token(tenant, own)).json()["nodeProxyWrittenBy"] == "hubwright"


def test_a_private_link_cluster_gets_its_endpoint(made, admin):
    tenant, namespace = made.tenant()
    cluster = made.cluster(namespace, {
        "accountID": "222222222222", "region": "us-east-1", "infraID": "demo-abc12",
        "apiURL": "https://api.demo.example.com:6443", "network": {"vpcID": "vpc-0abc", "cidr": "10.20.0.0/16"},
        "privateLink": {"enabled": True}})
    endpoint = "vpce-0123-abcd.vpce-svc-0456.us-east-1.vpce.amazonaws.com"
    custom(admin).patch_namespaced_custom_object_status(GROUP, VERSION, namespace, "hubclusters", cluster,
                                                        {"status": {"outputs": {"endpoint": endpoint}}})
    response = made.install(made.token(tenant, cluster))
    assert response.status_code == 200, response.text
    assert response.json()["privateLinkEndpoint"] == endpoint


def test_the_openapi_document_describes_the_bootstrap_routes(http):
    paths = http.get("/openapi.json").json()["paths"]
    assert "post" in paths["/tenants/{tenant}/clusters/{cluster}/bootstrap-token"]
    install = paths["/install/agent.json"]["get"]
    assert {"401", "409", "429"} <= set(install["responses"])


# --------------------------------------------------------------------------- one tenant rule (stacks.tenancy.namespace_tenant)

def test_the_install_answer_names_the_tenant_the_stack_tags_name(made, admin):
    """Attack: a namespace labelled hubwright.io/tenant for another Tenant, but not annotated (a label left behind,
    or put there by whoever may label namespaces: platforms hand namespace labels out for network and pod-security
    selection). The stack's tags come from the annotation (else the namespace); an install answer read from the
    label named the other Tenant, so the agent pushed as it while the cloud was tagged with the namespace. One rule
    now (stacks.tenancy.namespace_tenant): both name the namespace, never the Tenant the label names."""
    victim, _ = made.tenant()
    namespace = f"t-boot-{uuid.uuid4().hex[:8]}"  # a Tenant of its own, whose namespace carries victim's label
    account = "222222222222"
    custom(admin).create_cluster_custom_object(GROUP, VERSION, "hubtenants", {
        "apiVersion": API_VERSION, "kind": "HubTenant", "metadata": {"name": namespace}, "spec": {}})
    made.tenants.append(namespace)  # made.cleanup() deletes it and its namespace
    core = client.CoreV1Api(admin)
    core.create_namespace({"metadata": {"name": namespace, "labels": {TENANT_LABEL: victim},
                                        "annotations": {OWNER_ACCOUNT_ANNOTATION: account}}})
    cluster = made.cluster(namespace, {
        "accountID": account, "region": "us-east-1", "infraID": "demo-abc12",
        "apiURL": "https://api.demo.example.com:6443", "network": {"vpcID": "vpc-0abc", "cidr": "10.20.0.0/16"}})
    response = made.install(made.token(namespace, cluster))
    assert response.status_code == 200, response.text
    answered = response.json()["tenant"]
    # The tags, as the service resolves them: from the namespace's hubwright.io/ annotations it caches.
    annotations = core.read_namespace(namespace).metadata.annotations or {}
    tagged = resolve(parse(made.read(namespace, cluster)), parse(hub_doc()),
                     ns_annotations={k: v for k, v in annotations.items() if k.startswith(ANNOTATION_PREFIX)}
                     ).tags[TENANT_TAG]
    assert answered == tagged == namespace != victim
    assert manifest(response.json(), "Secret", AGENT)["stringData"]["tenant"] == namespace


def test_an_install_for_a_tenant_no_tag_can_name_is_refused_before_the_token_is_used(made, admin):
    """The hub administrator's hubwright.io/tenant annotation must be an AWS tag value: the service refuses such a
    namespace's clusters (InvalidNamespace), so the install answers 409 for it too, and keeps the token."""
    tenant, namespace = made.tenant()
    cluster = made.cluster(namespace)
    client.CoreV1Api(admin).patch_namespace(namespace, {"metadata": {"annotations": {TENANT_ANNOTATION: "evil <corp>"}}})
    token = made.token(tenant, cluster)
    response = made.install(token)
    assert response.status_code == 409 and "cannot be an AWS tag value" in response.json()["detail"], response.text
    assert TENANT_ANNOTATION in response.json()["detail"]
    assert made.read(namespace, cluster)["status"]["bootstrapToken"]["used"] is False  # not used up
