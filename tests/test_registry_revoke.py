"""A Cluster's facts agent loses its hub identity when the Cluster is gone, however it was deleted: the service
(the real pipeline against a real kube-apiserver, the engine a double) deletes the agent's ServiceAccount, Role
and RoleBinding, and a deleted ServiceAccount's tokens are refused. Deleted while no service runs, the garbage
collector (a real kube-controller-manager) deletes them by their ownerReference, and the next service to start
sweeps whatever is left (where no collector runs)."""
from __future__ import annotations


import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from automation.adapters.kube.agent import MANAGED_LABELS, grant_agent
from doubles.engine import RecordingEngine
from stacks.names import AGENT_CLUSTER_LABEL, AGENT_CLUSTER_UID_ANNOTATION, GROUP, VERSION, agent_name
from doubles.agent_orphans import GC_WITHIN, orphaned_agent
from tests.envtest import env, exists, kube_apiserver, kube_apiserver_gc  # noqa: F401 - the fixtures
from doubles.envtest import next_second
from doubles.service_env import ServiceEnv, wait_until


def _may_push(api_client: client.ApiClient, namespace: str, cluster: str) -> bool | None:
    """Whether the token may push this cluster's facts; None when the API server refuses the token itself."""
    try:
        review = client.AuthorizationV1Api(api_client).create_self_subject_access_review({
            "spec": {"resourceAttributes": {"group": GROUP, "resource": "hubclusters", "subresource": "facts",
                                            "verb": "create", "namespace": namespace, "name": cluster}}})
    except ApiException as exc:
        if exc.status == 401:
            return None
        raise
    return bool(review.status.allowed)



@pytest.mark.parametrize("provisioned", [False, True], ids=["registered-only", "with-a-stack"])
def test_a_deleted_clusters_agent_identity_is_revoked_by_the_service(env, kube_apiserver, provisioned):  # noqa: F811
    name = "prod-1"
    if provisioned:
        env.create(name)
    else:
        env.custom.create_namespaced_custom_object(GROUP, VERSION, env.ns, "hubclusters", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "HubCluster", "metadata": {"name": name, "namespace": env.ns},
            "spec": {"displayName": "registered before it exists"}})
    token, _ = grant_agent(env.api_client, env.ns, name, env.get(name)["metadata"]["uid"], 600)
    agent = kube_apiserver.api_client(token)
    assert _may_push(agent, env.ns, name) is True

    engine = RecordingEngine()
    with env.running(engine, watch_namespace=env.ns):
        if provisioned:
            wait_until(lambda: env.ready(name), 20)
        env.delete(name)
        wait_until(lambda: env.get(name) is None, 20, what="the Cluster to go")
        core, rbac = client.CoreV1Api(env.api_client), client.RbacAuthorizationV1Api(env.api_client)
        wait_until(lambda: not any(exists(lambda read=read: read(agent_name(name), env.ns)) for read in (
            core.read_namespaced_service_account, rbac.read_namespaced_role, rbac.read_namespaced_role_binding)),
            20, what="the agent's ServiceAccount, Role and RoleBinding to go")
    # The API server caches a successful authentication for up to 10 s.
    wait_until(lambda: _may_push(agent, env.ns, name) is None, 30, what="the agent's token to be refused")
    assert [call.operation for call in engine.calls] == (["up", "destroy"] if provisioned else [])
    agent.close()


def test_a_cluster_deleted_while_no_service_runs_loses_its_agent_to_the_garbage_collector(kube_apiserver_gc):  # noqa: F811
    """The finding: revocation ran only when the service saw the Cluster go. Now the agent's objects are owned
    by the Cluster's uid; nothing of ours runs here, kube-controller-manager's garbage collector deletes them."""
    found = orphaned_agent(kube_apiserver_gc)
    (owner,) = found.owners
    assert (owner["kind"], owner["name"], owner["block_owner_deletion"]) == ("HubCluster", found.cluster, False)
    assert found.gc_s < GC_WITHIN and found.refused_s < GC_WITHIN + 30  # loose: 2 shared cores
    print(f"agent revoked by the garbage collector: objects gone after {found.gc_s:.1f} s, "
          f"token refused after {found.refused_s:.1f} s")


def _agent_objects(env: ServiceEnv, name: str) -> list[bool]:
    core, rbac = client.CoreV1Api(env.api_client), client.RbacAuthorizationV1Api(env.api_client)
    return [exists(lambda read=read: read(agent_name(name), env.ns)) for read in (
        core.read_namespaced_service_account, rbac.read_namespaced_role, rbac.read_namespaced_role_binding)]


def _legacy_agent(env: ServiceEnv, name: str) -> None:
    """An agent as grants before this change made it: no recorded uid, no ownerReference."""
    meta = {"name": agent_name(name), "labels": {**MANAGED_LABELS, AGENT_CLUSTER_LABEL: name}}
    client.CoreV1Api(env.api_client).create_namespaced_service_account(env.ns, {"metadata": meta})
    rbac = client.RbacAuthorizationV1Api(env.api_client)
    rbac.create_namespaced_role(env.ns, {"metadata": meta, "rules": [
        {"apiGroups": [GROUP], "resources": ["hubclusters/facts"], "resourceNames": [name], "verbs": ["create"]}]})
    rbac.create_namespaced_role_binding(env.ns, {"metadata": meta, "roleRef": {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": agent_name(name)}, "subjects": [
        {"kind": "ServiceAccount", "name": agent_name(name), "namespace": env.ns}]})


def test_the_service_sweeps_agents_of_clusters_deleted_while_it_was_down(env, kube_apiserver):  # noqa: F811
    """No garbage collector on this server: what the service finds at its start decides. An agent whose Cluster
    is gone, or is a later Cluster of its name, is revoked; the agent of the Cluster that exists is kept; one
    granted before uids were recorded, for the Cluster that exists now, gets its uid and ownerReference."""
    for name in ("gone", "replaced", "kept"):
        env.custom.create_namespaced_custom_object(GROUP, VERSION, env.ns, "hubclusters", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "HubCluster", "metadata": {"name": name, "namespace": env.ns},
            "spec": {}})
    tokens = {name: grant_agent(env.api_client, env.ns, name, env.get(name)["metadata"]["uid"], 600)[0]
              for name in ("gone", "replaced", "kept")}
    _legacy_agent(env, "legacy-replaced")  # made before its Cluster (of the same name, a later one) was
    next_second(env.api_client)  # creation times have whole seconds: the next Cluster is unambiguously younger
    env.custom.create_namespaced_custom_object(GROUP, VERSION, env.ns, "hubclusters", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "HubCluster",
        "metadata": {"name": "legacy-replaced", "namespace": env.ns}, "spec": {}})
    env.custom.create_namespaced_custom_object(GROUP, VERSION, env.ns, "hubclusters", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "HubCluster", "metadata": {"name": "legacy", "namespace": env.ns},
        "spec": {}})
    next_second(env.api_client)
    _legacy_agent(env, "legacy")  # made after its Cluster: granted for it
    for name in ("gone", "replaced"):
        env.delete(name)
    env.custom.create_namespaced_custom_object(GROUP, VERSION, env.ns, "hubclusters", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "HubCluster", "metadata": {"name": "replaced", "namespace": env.ns},
        "spec": {}})
    assert all(all(_agent_objects(env, name)) for name in ("gone", "replaced", "kept", "legacy", "legacy-replaced"))

    with env.running(RecordingEngine(), watch_namespace=env.ns):
        for name in ("gone", "replaced", "legacy-replaced"):
            wait_until(lambda name=name: not any(_agent_objects(env, name)), 30,
                       what=f"the agent of {name} to be revoked at the service's start")
        assert all(_agent_objects(env, "kept")) and all(_agent_objects(env, "legacy"))
        legacy = client.CoreV1Api(env.api_client).read_namespaced_service_account(agent_name("legacy"), env.ns)
        uid = env.get("legacy")["metadata"]["uid"]
        assert legacy.metadata.annotations[AGENT_CLUSTER_UID_ANNOTATION] == uid
        assert [ref.uid for ref in legacy.metadata.owner_references] == [uid]
    for name in ("gone", "replaced"):
        agent = kube_apiserver.api_client(tokens[name])
        wait_until(lambda agent=agent, name=name: _may_push(agent, env.ns, name) is None, 30,
                   what=f"the token of {name}'s agent to be refused")
        agent.close()
    with kube_apiserver.api_client(tokens["kept"]) as kept:
        assert _may_push(kept, env.ns, "kept") is True
