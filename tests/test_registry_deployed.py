"""The registry API as deployed: components/registry.py's RegistryApi rendered, applied to the real kube-apiserver
(its ServiceAccount bound to exactly stacks.install.API_RULES and held to its agents by its admission policy,
stacks.agent_admission), and its pod's container run the way a kubelet
would (tests/deployed.py): uid 65532 on a read-only root, writable only the "facts" volume (the SQLite history)
and /tmp, the ServiceAccount's TokenRequest token at the in-cluster path.

Then, over HTTP, the path an administrator and an agent take: a Tenant and a registered-only Cluster made through
the API, a bootstrap token issued and redeemed once, the agent's token from the install answer pushing facts, the
history read back, and the agent's token rotated through the API. Every step that the API does with its own client (the tenant's namespace, the token's
bookkeeping, the agent's ServiceAccount, Role and token, status.facts) is done with the deployed rights, so this
proves API_RULES suffice; the facts are written to the volume, so it proves the read-only root leaves the API
all it needs. Skips, naming what is missing, without bwrap or the engines.
"""
from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import pytest
from kubernetes import client, dynamic

from automation.adapters.kube.agent import revoke_agent
from components.registry import FACTS_DIR, RegistryApi, RegistryApiArgs
from stacks.install import AGENT, API_RULES
from stacks.names import GROUP, TENANT_ANNOTATION, TENANT_LABEL, VERSION, agent_name
from tests import deployed
from tests.dockerfile import image
from tests.envtest import EnvTest, free_port, kube_apiserver  # noqa: F401 - the fixture
from tests.registry_rbac import delete_tenant, undo_all
from doubles.service_env import wait_until

MISSING = deployed.missing()
pytestmark = [pytest.mark.live, pytest.mark.skipif(MISSING is not None, reason=str(MISSING))]

NAME = "hubwright-registry"  # as deploy/__main__.py names it
IMAGE = "hubwright:live"
CLUSTER_SCOPED = ("ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
                  "ValidatingAdmissionPolicyBinding")
RBAC_WAIT = 10.0  # the API server's RBAC authorizer sees a new binding a moment after it is written


@dataclass
class Deployed:
    env: EnvTest
    admin: client.ApiClient
    namespace: str  # the registry's own (hubwright-system in a real deploy)
    objs: list[dict]  # what RegistryApi renders, applied

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.admin)

    @property
    def apiserver_port(self) -> int:
        return int(self.env.host.rsplit(":", 1)[1])


def render(namespace: str, port: int) -> list[dict]:
    """RegistryApi's objects as `pulumi up` sends them, with deploy/'s arguments but the test's namespace.

    `port`: in Kubernetes the pod has a network namespace of its own, so its 8080 is always free; the sandbox shares
    the host's network (the apiserver is on loopback), where 8080 may be taken. So the component is rendered for a
    free port (RegistryApiArgs.port: `--bind 0.0.0.0:<port>` and the containerPort the probes and the Service name),
    the only difference from the default rendering."""
    return deployed.objects(deployed.render_component(lambda provider: RegistryApi(
        NAME, RegistryApiArgs(image=IMAGE, rules=API_RULES, namespace=namespace, port=port), provider)))


def unique(objs: list[dict], suffix: str) -> list[dict]:
    """The ClusterRole, the admission policy and their bindings renamed `<name>-<suffix>`: cluster-scoped, so unique
    on the shared server (the policy's user is the ServiceAccount of the test's own namespace already)."""
    for obj in objs:
        if obj["kind"] in CLUSTER_SCOPED:
            obj["metadata"]["name"] += f"-{suffix}"
        if obj["kind"] == "ClusterRoleBinding":
            obj["roleRef"]["name"] += f"-{suffix}"
        if obj["kind"] == "ValidatingAdmissionPolicyBinding":
            obj["spec"]["policyName"] += f"-{suffix}"
    return objs


def may(admin: client.ApiClient, user: str, verb: str, resource: str, group: str = GROUP) -> bool:
    review = client.AuthorizationV1Api(admin).create_subject_access_review({"spec": {
        "user": user, "resourceAttributes": {"group": group, "resource": resource, "verb": verb}}})
    return bool(review.status.allowed)


def delete(api: dynamic.DynamicClient, obj: dict) -> None:
    """Delete for good: the claim's kubernetes.io/pvc-protection finalizer is dropped as its controller would (no
    pod uses it), since no controller-manager runs here to do it."""
    kind = api.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    where = {"name": obj["metadata"]["name"], "namespace": obj["metadata"].get("namespace")}
    with contextlib.suppress(dynamic.exceptions.NotFoundError):
        api.delete(kind, **where)
        api.patch(kind, body={"metadata": {"finalizers": None}}, content_type="application/merge-patch+json",
                  **where)


@pytest.fixture
def registry(kube_apiserver: EnvTest) -> Iterator[Deployed]:
    """RegistryApi applied in a namespace of its own; everything it made deleted afterwards."""
    suffix = uuid.uuid4().hex[:6]
    namespace = f"hubwright-registry-{suffix}"
    objs = unique(render(namespace, free_port()), suffix)
    assert sorted(o["kind"] for o in objs) == ["ClusterRole", "ClusterRoleBinding", "Deployment",
                                               "PersistentVolumeClaim", "Service", "ServiceAccount",
                                               "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    with kube_apiserver.api_client() as admin:
        core = client.CoreV1Api(admin)
        core.create_namespace({"metadata": {"name": namespace}})
        try:
            # All of it, by server-side apply as pulumi-kubernetes does (nothing runs the Deployment or binds the
            # claim here: no controller-manager); the pod is run below, by hand.
            deployed.apply(admin, objs)
            user = f"system:serviceaccount:{namespace}:{NAME}"
            wait_until(lambda: may(admin, user, "list", "hubclusters"), RBAC_WAIT, what=f"{user}'s ClusterRoleBinding")
            yield Deployed(kube_apiserver, admin, namespace, objs)
        finally:
            api = dynamic.DynamicClient(admin)
            for obj in objs:
                delete(api, obj)
            core.delete_namespace(namespace)  # stays Terminating: no controller-manager, nothing left in it


class Made:
    """What the test makes through the API or beside it, undone in reverse order (a 404 is fine)."""

    def __init__(self) -> None:
        self.undo: list[Callable[[], Any]] = []

    def later(self, call: Callable[[], Any]) -> None:
        self.undo.append(call)

    def cleanup(self) -> None:
        undo_all(reversed(self.undo))


@pytest.fixture
def made() -> Iterator[Made]:
    found = Made()
    yield found
    found.cleanup()


def manifest(body: dict, kind: str, name: str | None = None) -> dict:
    [found] = [m for m in body["items"] if m["kind"] == kind and name in (None, m["metadata"]["name"])]
    return found


def expect(response: httpx.Response, status: int) -> Any:
    assert response.status_code == status, f"{response.request.method} {response.request.url.path}: " \
                                           f"{response.status_code} {response.text}"
    return response.json()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_the_deployed_registry_registers_bootstraps_and_keeps_the_facts_history(registry, made, tmp_path: Path):
    env, admin = registry.env, registry.admin
    pod = deployed.pod_of(deployed.one(registry.objs, "Deployment", NAME))
    assert pod.container["args"][:4] == ["python", "-m", "automation", "api"]
    assert f"sqlite:///{FACTS_DIR}/facts.db" in pod.container["args"]
    secrets_seen: list[str] = [env.token]
    with deployed.running(pod, image(), registry.core, registry.apiserver_port, env.ca_file, tmp_path) as (
            box, volumes), httpx.Client(base_url=f"http://127.0.0.1:{pod.port('http')}", timeout=30) as http:
        assert set(volumes) == {"facts", "tmp"}  # the only writable paths (the rest is the read-only root)
        assert expect(http.get("/healthz"), 200) == {"status": "ok"}
        as_admin = bearer(env.token)

        # A Tenant through the API; its namespace made here, as no tenant controller runs
        tenant = expect(http.post("/tenants", json={"spec": {"displayName": "Deployed Ltd"}}, headers=as_admin), 201)
        tenant_id, namespace = tenant["id"], tenant["namespace"]
        made.later(lambda: delete_tenant(admin, tenant_id))
        registry.core.create_namespace({"metadata": {"name": namespace, "labels": {TENANT_LABEL: tenant_id},
                                                     "annotations": {TENANT_ANNOTATION: tenant_id}}})
        made.later(lambda: registry.core.delete_namespace(namespace))

        # A registered-only Cluster (no AWS part: no stack), through the API
        cluster = expect(http.post(f"/tenants/{tenant_id}/clusters", json={"spec": {"displayName": "edge 1"}},
                                   headers=as_admin), 201)
        cluster_id = cluster["id"]
        made.later(lambda: client.CustomObjectsApi(admin).delete_namespaced_custom_object(
            GROUP, VERSION, namespace, "hubclusters", cluster_id))
        made.later(lambda: revoke_agent(admin, namespace, cluster_id))  # runs first: the service would do it

        # A bootstrap token, redeemed once: the agent's ServiceAccount, Role and token made with the deployed rights
        issued = expect(http.post(f"/tenants/{tenant_id}/clusters/{cluster_id}/bootstrap-token", headers=as_admin),
                        201)
        secrets_seen.append(issued["token"])
        installed = expect(http.get("/install/agent.json", params={"token": issued["token"]}), 200)
        assert (installed["cluster"], installed["tenant"]) == (cluster_id, tenant_id)
        assert installed["apiURL"] == f"http://{NAME}.{registry.namespace}.svc"  # the rendered Service's address
        assert manifest(installed, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE
        again = http.get("/install/agent.json", params={"token": issued["token"]})
        assert again.status_code == 401, again.text
        agent_token = manifest(installed, "Secret", AGENT)["stringData"]["token"]
        secrets_seen.append(agent_token)
        assert registry.core.read_namespaced_service_account(agent_name(cluster_id), namespace)

        # The agent pushes facts with its own token (its new RoleBinding may take a moment to be seen)
        facts = {"kubernetesVersion": "v1.30.2", "nodes": "3"}
        def push() -> httpx.Response | None:
            answer = http.post(f"/tenants/{tenant_id}/clusters/{cluster_id}/facts", json={"facts": facts},
                               headers=bearer(agent_token))
            return None if answer.status_code == 403 else answer
        pushed = expect(wait_until(push, RBAC_WAIT, what="the agent's RoleBinding to take effect"), 201)
        assert (pushed["version"], pushed["facts"]) == (1, facts)
        history = expect(http.get(f"/tenants/{tenant_id}/clusters/{cluster_id}/facts/history", headers=as_admin),
                         200)
        assert [(v["version"], v["set"], v["removed"]) for v in history["items"]] == [(1, facts, [])]
        stored = client.CustomObjectsApi(admin).get_namespaced_custom_object(
            GROUP, VERSION, namespace, "hubclusters", cluster_id)
        assert stored["status"]["facts"]["version"] == 1 and stored["status"]["facts"]["facts"] == facts
        assert (volumes["facts"] / "facts.db").is_file()  # the history is on the claim's volume

        # The agent rotates its token through the API (it holds no serviceaccounts/token right of its own)
        rotated = expect(http.post(f"/tenants/{tenant_id}/clusters/{cluster_id}/agent-token",
                                   headers=bearer(agent_token)), 201)
        secrets_seen.append(rotated["token"])
        assert rotated["token"] != agent_token
        expect(http.post(f"/tenants/{tenant_id}/clusters/{cluster_id}/facts", json={"facts": facts},
                         headers=bearer(rotated["token"])), 201)

        gone = expect(http.delete(f"/tenants/{tenant_id}/clusters/{cluster_id}", headers=as_admin), 200)
        assert gone == {"id": cluster_id, "finished": True}

    status, took = box.stopped
    assert status == 0, (took, box.tail())  # SIGTERM: a clean exit within terminationGracePeriodSeconds
    log = box.log.read_text(errors="replace")
    assert "Traceback" not in log and " ERROR " not in log and "Forbidden" not in log, log[-8000:]
    assert "bootstrap token issued" in log and "installed: agent token valid until" in log, log[-8000:]
    leaked = [i for i, secret in enumerate(secrets_seen) if secret in log]
    assert leaked == [], f"tokens in the log (admin, bootstrap, agent: {leaked})"
