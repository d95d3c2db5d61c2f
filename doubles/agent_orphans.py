"""A Cluster deleted while no service runs: how long until its facts agent is revoked by the garbage collector.

`orphaned_agent(env)` (env: an EnvTest with kube-controller-manager, `kube_apiserver_gc`) makes a Tenant, its
namespace and a registered Cluster, installs it through the registry API's real install route (one-time bootstrap token),
deletes the Cluster (no service runs: nothing of ours sees the delete), and times:

    gc_s       the delete -> the agent's ServiceAccount, Role and RoleBinding all gone (the garbage collector,
               following their ownerReference to the Cluster's uid)
    refused_s  the delete -> the agent's token refused by the API server (401: its ServiceAccount is gone, and
               the API server's authentication cache, 10 s, has expired)

tests/test_registry_revoke.py asserts on one run; `python -m bench.agent_gc` prints several.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from fastapi.testclient import TestClient
from kubernetes import client
from kubernetes.client.rest import ApiException

from automation.api import bootstrap
from automation.api.app import ApiSettings, ClientCache, Registry, create_app
from stacks.names import CLUSTERS, TENANTS, API_VERSION, GROUP, TENANT_ANNOTATION, TENANT_LABEL, VERSION, agent_name
from doubles.envtest import EnvTest, delete_tenant

GC_WITHIN = 120.0  # loose: the collector's first pass after a start may wait for its discovery (30 s period)


@dataclass
class Orphaned:
    namespace: str
    cluster: str
    owners: list[dict]  # the ServiceAccount's ownerReferences as granted
    gc_s: float
    refused_s: float


def agent_gone(api: client.ApiClient, namespace: str, cluster: str) -> bool:
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    for read in (core.read_namespaced_service_account, rbac.read_namespaced_role, rbac.read_namespaced_role_binding):
        try:
            read(agent_name(cluster), namespace)
            return False
        except ApiException as exc:
            if exc.status != 404:
                raise
    return True


def token_refused(env: EnvTest, token: str) -> bool:
    with env.api_client(token) as api:
        try:
            client.AuthenticationV1Api(api).create_self_subject_review({"apiVersion": "authentication.k8s.io/v1",
                                                                        "kind": "SelfSubjectReview"})
        except ApiException as exc:
            if exc.status == 401:
                return True
            raise
    return False


def _until(predicate, start: float, timeout: float, what: str) -> float:
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        time.sleep(0.1)
    return time.monotonic() - start


def orphaned_agent(env: EnvTest, timeout: float = GC_WITHIN) -> Orphaned:
    suffix = uuid.uuid4().hex[:8]
    namespace, cluster = f"t-gc-{suffix}", f"c-gc-{suffix}"
    with env.api_client() as admin:
        client.CoreV1Api(admin).create_namespace({"metadata": {
            "name": namespace, "labels": {TENANT_LABEL: namespace}, "annotations": {TENANT_ANNOTATION: namespace}}})
        objects = client.CustomObjectsApi(admin)
        objects.create_cluster_custom_object(GROUP, VERSION, TENANTS, {
            "apiVersion": API_VERSION, "kind": "HubTenant", "metadata": {"name": namespace}, "spec": {}})
        objects.create_namespaced_custom_object(GROUP, VERSION, namespace, CLUSTERS, {
            "apiVersion": API_VERSION, "kind": "HubCluster", "metadata": {"name": cluster}, "spec": {}})
        reg = Registry(settings=ApiSettings(install_rate=1000.0, install_burst=1000, agent_token_seconds=3600),
                       own=admin, callers=ClientCache(env.configuration(), 4), facts=None)
        with TestClient(create_app(reg, routers=(bootstrap.router,))) as http:
            issued = http.post(f"/tenants/{namespace}/clusters/{cluster}/bootstrap-token",
                               headers={"Authorization": f"Bearer {env.token}"})
            assert issued.status_code == 201, issued.text
            installed = http.get("/install/agent.json", params={"token": issued.json()["token"]})
            assert installed.status_code == 200, installed.text
        token = next(m for m in installed.json()["items"] if m["kind"] == "Secret")["stringData"]["token"]
        owners = client.CoreV1Api(admin).read_namespaced_service_account(
            agent_name(cluster), namespace).to_dict()["metadata"]["owner_references"]
        assert not token_refused(env, token)

        start = time.monotonic()
        objects.delete_namespaced_custom_object(GROUP, VERSION, namespace, CLUSTERS, cluster)
        gc_s = _until(lambda: agent_gone(admin, namespace, cluster), start, timeout,
                      "the garbage collector to delete the agent's ServiceAccount, Role and RoleBinding")
        refused_s = _until(lambda: token_refused(env, token), start, timeout + 30, "the agent's token to be refused")
        delete_tenant(admin, namespace)
        client.CoreV1Api(admin).delete_namespace(namespace)
    return Orphaned(namespace, cluster, owners, gc_s, refused_s)
