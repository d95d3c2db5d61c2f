"""A Cluster's facts agent loses its hub identity when the Cluster is gone, however it was deleted: the service
(the real pipeline against a real kube-apiserver, the engine a double) deletes the agent's ServiceAccount, Role
and RoleBinding, and a deleted ServiceAccount's tokens are refused."""
from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from automation.adapters.agent import grant_agent
from doubles.engine import RecordingEngine
from stacks.names import GROUP, VERSION, agent_name
from tests.envtest import kube_apiserver  # noqa: F401 - the fixture
from tests.service_env import ServiceEnv, wait_until


@pytest.fixture
def env(kube_apiserver):  # noqa: F811 - the fixture
    env = ServiceEnv.isolated(kube_apiserver.api_client())
    yield env
    env.api_client.close()


def _may_push(api_client: client.ApiClient, namespace: str, cluster: str) -> bool | None:
    """Whether the token may push this cluster's facts; None when the API server refuses the token itself."""
    try:
        review = client.AuthorizationV1Api(api_client).create_self_subject_access_review({
            "spec": {"resourceAttributes": {"group": GROUP, "resource": "clusters", "subresource": "facts",
                                            "verb": "create", "namespace": namespace, "name": cluster}}})
    except ApiException as exc:
        if exc.status == 401:
            return None
        raise
    return bool(review.status.allowed)


def _exists(read) -> bool:
    try:
        read()
        return True
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise


@pytest.mark.parametrize("provisioned", [False, True], ids=["registered-only", "with-a-stack"])
def test_a_deleted_clusters_agent_identity_is_revoked_by_the_service(env, kube_apiserver, provisioned):  # noqa: F811
    name = "prod-1"
    if provisioned:
        env.create(name)
    else:
        env.custom.create_namespaced_custom_object(GROUP, VERSION, env.ns, "clusters", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Cluster", "metadata": {"name": name, "namespace": env.ns},
            "spec": {"displayName": "registered before it exists"}})
    token, _ = grant_agent(env.api_client, env.ns, name, 600)
    agent = kube_apiserver.api_client(token)
    assert _may_push(agent, env.ns, name) is True

    engine = RecordingEngine()
    with env.running(engine, watch_namespace=env.ns):
        if provisioned:
            wait_until(lambda: env.ready(name), 20)
        env.delete(name)
        wait_until(lambda: env.get(name) is None, 20, what="the Cluster to go")
        core, rbac = client.CoreV1Api(env.api_client), client.RbacAuthorizationV1Api(env.api_client)
        wait_until(lambda: not any(_exists(lambda read=read: read(agent_name(name), env.ns)) for read in (
            core.read_namespaced_service_account, rbac.read_namespaced_role, rbac.read_namespaced_role_binding)),
            20, what="the agent's ServiceAccount, Role and RoleBinding to go")
    # The API server caches a successful authentication for up to 10 s.
    wait_until(lambda: _may_push(agent, env.ns, name) is None, 30, what="the agent's token to be refused")
    assert [call.operation for call in engine.calls] == (["up", "destroy"] if provisioned else [])
    agent.close()
