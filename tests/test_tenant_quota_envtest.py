"""A Tenant's spec.quota as the API server enforces it: the tenant controller (automation/service/tenants.py, as
the least-privileged ServiceAccount) writes a ResourceQuota `count/hubclusters.hubwright.io` into the tenant's
namespace, owned by the Tenant; a real kube-controller-manager computes its usage, and the API server then
refuses the tenant's admin a Cluster beyond it. The tenant can neither touch the quota nor raise it through its
Tenant (the ownership policy), and the garbage collector removes the quota with its Tenant.
"""
from __future__ import annotations

import json
import uuid
from types import SimpleNamespace

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from stacks.admission import CLUSTER_COUNT, TENANT_QUOTA, tenant_controller_rules
from stacks.names import GROUP, TENANT_FINALIZER, TENANT_OWNERSHIP_SUBRESOURCE, VERSION
from tests.envtest import exists, kube_apiserver_gc  # noqa: F401 - the fixture
from tests.registry_rbac import (bind_cluster_role, eventually, install_registry_rules, sa_subject,
                                 service_account_token, unbind_cluster_role)
from doubles.service_env import wait_until
from tests.test_tenants_envtest import WAIT, Tenants, alice

QUOTA_WAIT = 60.0  # the ResourceQuota controller's first sync of a new quota (its resync period is 10 s here)


@pytest.fixture(scope="module")
def world(kube_apiserver_gc):  # noqa: F811 - the fixture
    """As tests/test_tenants_envtest.py's world, on the server that runs kube-controller-manager."""
    suffix = uuid.uuid4().hex[:6]
    admin = kube_apiserver_gc.api_client()
    install_registry_rules(admin)
    users = f"tenant-users-{suffix}"
    client.CoreV1Api(admin).create_namespace({"metadata": {"name": users}})
    role = f"hubwright-tenants-{suffix}"
    bind_cluster_role(admin, role, tenant_controller_rules(), [sa_subject(users, "controller")])
    tokens = {name: service_account_token(admin, users, name) for name in ("controller", "alice", "mallory")}
    clients = {name: kube_apiserver_gc.api_client(token) for name, token in tokens.items()}
    yield SimpleNamespace(server=kube_apiserver_gc, admin=admin, users=users, suffix=suffix, **clients)
    for api in clients.values():
        api.close()
    unbind_cluster_role(admin, role)
    client.CoreV1Api(admin).delete_namespace(users)
    admin.close()


@pytest.fixture
def tenants(world):
    made = Tenants(world)
    yield made
    made.cleanup()


def quota(tenants, namespace: str) -> dict | None:
    try:
        found = tenants.core.read_namespaced_resource_quota(TENANT_QUOTA, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return tenants.world.admin.sanitize_for_serialization(found)


def used(tenants, namespace: str) -> str | None:
    return (((quota(tenants, namespace) or {}).get("status") or {}).get("used") or {}).get(CLUSTER_COUNT)


def test_the_tenant_quota_is_a_resourcequota_the_api_server_enforces_on_the_tenants_admin(world, tenants):
    tenants.start()
    name = tenants.name()
    tenant = tenants.create(name, admins=[alice(world)], quota={"maxClusters": 2})
    wait_until(lambda: quota(tenants, name), WAIT, what="the ResourceQuota")
    made = quota(tenants, name)
    assert made["spec"]["hard"] == {CLUSTER_COUNT: "2"}
    assert [(o["kind"], o["name"], o["uid"], o.get("controller")) for o in made["metadata"]["ownerReferences"]] == \
        [("HubTenant", name, tenant["metadata"]["uid"], True)]
    wait_until(lambda: used(tenants, name) == "0", QUOTA_WAIT, what="kube-controller-manager to count the clusters")

    eventually(lambda: tenants.cluster(name, "edge-1", as_=world.alice))  # once alice's RoleBinding is in effect
    tenants.cluster(name, "edge-2", as_=world.alice)
    with pytest.raises(ApiException) as refused:
        tenants.cluster(name, "edge-3", as_=world.alice)
    assert refused.value.status == 403
    assert "exceeded quota" in json.loads(refused.value.body)["message"] and CLUSTER_COUNT in refused.value.body
    wait_until(lambda: used(tenants, name) == "2", QUOTA_WAIT, what="the usage to reach 2")

    # The tenant's admin cannot touch the quota; one who may write Tenants cannot raise it (ownership policy).
    alices = client.CoreV1Api(world.alice)
    for attempt in (lambda: alices.patch_namespaced_resource_quota(TENANT_QUOTA, name,
                                                                   {"spec": {"hard": {CLUSTER_COUNT: "100"}}}),
                    lambda: alices.delete_namespaced_resource_quota(TENANT_QUOTA, name)):
        with pytest.raises(ApiException) as denied:
            attempt()
        assert denied.value.status == 403
    writer = f"tenant-writer-{world.suffix}"
    bind_cluster_role(world.admin, writer, [{"apiGroups": [GROUP], "resources": ["hubtenants"], "verbs": ["patch"]}],
                      [sa_subject(world.users, "mallory")])
    try:
        def policy_refusal() -> str | None:
            """The ownership policy's refusal, once RBAC lets mallory's patch through to it."""
            try:
                client.CustomObjectsApi(world.mallory).patch_cluster_custom_object(
                    GROUP, VERSION, "hubtenants", name, {"spec": {"quota": {"maxClusters": 100}}})
            except ApiException as exc:
                assert exc.status == 403
                return exc.body if TENANT_OWNERSHIP_SUBRESOURCE in (exc.body or "") else None
            raise AssertionError("a Tenant writer raised its own quota")
        assert "spec.quota.maxClusters" in wait_until(policy_refusal, WAIT, what="the ownership policy's refusal")
    finally:
        unbind_cluster_role(world.admin, writer)

    # A cluster administrator raises it: the quota follows, and the third cluster is admitted.
    tenants.custom.patch_cluster_custom_object(GROUP, VERSION, "hubtenants", name, {"spec": {"quota": {"maxClusters": 3}}})
    wait_until(lambda: (quota(tenants, name) or {}).get("status", {}).get("hard", {}).get(CLUSTER_COUNT) == "3",
               QUOTA_WAIT, what="the raised quota")

    def third_admitted() -> bool:
        """The API server's quota admission reads its own copy of the ResourceQuota, which can lag its status."""
        try:
            tenants.cluster(name, "edge-3", as_=world.alice)
            return True
        except ApiException as exc:
            if exc.status == 403 and "exceeded quota" in (exc.body or ""):
                return False
            raise
    wait_until(third_admitted, QUOTA_WAIT, what="the third cluster admitted under the raised quota")
    # No quota in the spec: none in the namespace.
    tenants.custom.patch_cluster_custom_object(GROUP, VERSION, "hubtenants", name, {"spec": {"quota": None}})
    wait_until(lambda: quota(tenants, name) is None, WAIT, what="the quota to go")


def test_the_garbage_collector_removes_the_quota_with_its_tenant(world, tenants):
    tenants.start()
    name = tenants.name()
    tenants.create(name, quota={"maxClusters": 1})
    wait_until(lambda: quota(tenants, name), WAIT, what="the ResourceQuota")
    # The controller is down, and the Tenant goes without it (its finalizer taken off by hand).
    tenants.stop()
    tenants.custom.patch_cluster_custom_object(GROUP, VERSION, "hubtenants", name, {"metadata": {"finalizers": []}})
    tenants.custom.delete_cluster_custom_object(GROUP, VERSION, "hubtenants", name)
    assert TENANT_FINALIZER not in ((tenants.get(name) or {}).get("metadata", {}).get("finalizers") or [])
    wait_until(lambda: quota(tenants, name) is None, QUOTA_WAIT, what="the garbage collector to remove the quota")


def test_the_garbage_collector_removes_the_admins_reader_role_with_its_tenant(world, tenants):
    """The controller never deletes a ClusterRole or a binding (it holds no such right): the reader role it made for
    the Tenant's admins (stacks.admission.tenant_reader) is owned by the Tenant, and goes with it."""
    tenants.start()
    name = tenants.name()
    tenants.create(name, admins=[alice(world)])
    rbac = client.RbacAuthorizationV1Api(world.admin)
    reader = f"hubwright-tenant-admin:{name}"
    wait_until(lambda: exists(lambda: rbac.read_cluster_role_binding(reader)), WAIT, what="the reader binding")
    tenants.stop()
    tenants.custom.patch_cluster_custom_object(GROUP, VERSION, "hubtenants", name, {"metadata": {"finalizers": []}})
    tenants.custom.delete_cluster_custom_object(GROUP, VERSION, "hubtenants", name)
    wait_until(lambda: not exists(lambda: rbac.read_cluster_role_binding(reader))
               and not exists(lambda: rbac.read_cluster_role(reader)), QUOTA_WAIT,
               what="the garbage collector to remove the reader role and its binding")

