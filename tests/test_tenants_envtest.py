"""The tenant controller (automation/service/tenants.py) against the real kube-apiserver, running as a
ServiceAccount that holds exactly stacks.admission.tenant_controller_rules(): what only a real API server shows.
Its admins (and nobody else) run Clusters in the Tenant's namespace and read their own HubTenant (RBAC); a Tenant
with Clusters is refused by the deletion policy while its status counts them, and held by the finalizer while
they are there even when the count lags (admission, the real deletion); only the service's leader runs it.
The controller's own logic (what it makes, adopts and refuses, its status, its finalizer, conflicts and errors):
tests/test_tenants_direct.py, over the fake API server.
The test server has no controller-manager (no GC; namespaces never finish deleting): every name is unique.
"""
from __future__ import annotations

import json
import uuid
from types import SimpleNamespace

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from automation.adapters.backoff import Backoff
from automation.adapters.kube.informer import sources
from automation.adapters.kube.kit_sources import tenant_source
from automation.adapters.kube.objects import KubeObjects
from automation.kit.runtime import Manager
from automation.service import tenants as tenant_controller
from automation.service.tenants import TenantController
from doubles.engine import RecordingEngine
from stacks.admission import TENANT_ADMINS_ROLEBINDING, tenant_controller_rules
from stacks.names import GROUP, OWNER_ACCOUNT_ANNOTATION, TENANT_ANNOTATION, TENANT_LABEL, VERSION
from tests.envtest import kube_apiserver  # noqa: F401 - the fixture
from doubles.factories import HUB_ACCOUNT
from tests.registry_rbac import (bind_cluster_role, delete_tenant, eventually, install_registry_rules, sa_subject,
                                 service_account_token, unbind_cluster_role)
from doubles.service_env import ServiceEnv, wait_until

WAIT = 20.0


@pytest.fixture(scope="module")
def world(kube_apiserver):  # noqa: F811 - the fixture
    """The policies and the tenant-admin role; a namespace of users: the controller's ServiceAccount (bound to
    tenant_controller_rules() only), `alice` (a tenant admin in the tests that name her) and `mallory` (never)."""
    suffix = uuid.uuid4().hex[:6]
    admin = kube_apiserver.api_client()
    install_registry_rules(admin)
    users = f"tenant-users-{suffix}"
    client.CoreV1Api(admin).create_namespace({"metadata": {"name": users}})
    role = f"hubwright-tenants-{suffix}"
    bind_cluster_role(admin, role, tenant_controller_rules(), [sa_subject(users, "controller")])
    tokens = {name: service_account_token(admin, users, name) for name in ("controller", "alice", "mallory")}
    clients = {name: kube_apiserver.api_client(token) for name, token in tokens.items()}
    yield SimpleNamespace(server=kube_apiserver, admin=admin, users=users, suffix=suffix, **clients)
    for api in clients.values():
        api.close()
    unbind_cluster_role(admin, role)
    client.CoreV1Api(admin).delete_namespace(users)
    admin.close()


class Tenants:
    """One test's Tenants and the controller: unique names, and everything removed afterwards."""

    def __init__(self, world):
        self.world = world
        self.custom = client.CustomObjectsApi(world.admin)
        self.core = client.CoreV1Api(world.admin)
        self.rbac = client.RbacAuthorizationV1Api(world.admin)
        self.names: list[str] = []
        self.namespaces: list[str] = []
        self.controller: TenantController | None = None
        self.manager: Manager | None = None

    # -- the controller, as the least-privileged ServiceAccount
    def start(self) -> TenantController:
        """The controller on a runtime of its own over the kinds it reads (Tenants, Clusters, Namespaces)."""
        self.manager = Manager(watch_timeout=30)
        for kind, source in sources(self.world.controller, hub_name="hub", role_map_name="none",
                                    role_map_namespace=self.world.users, every_namespace=True).items():
            if kind in ("clusters", "namespaces"):
                self.manager.source(source)
        self.controller = tenant_controller.setup(self.manager, objects=KubeObjects(self.world.controller),
                                                  source=tenant_source(self.world.controller),
                                                  hub_account=lambda: HUB_ACCOUNT, backoff=Backoff(0.05, 0.5))
        self.manager.start()
        wait_until(lambda: self.manager.started.is_set(), WAIT, what="the tenant controller to sync")
        return self.controller

    def stop(self) -> None:
        if self.controller is not None and self.manager is not None:
            self.manager.stop()
            self.controller = None

    # -- objects
    def name(self, prefix: str = "t") -> str:
        self.names.append(f"{prefix}-{uuid.uuid4().hex[:8]}")
        return self.names[-1]

    def create(self, name: str, as_: client.ApiClient | None = None, **spec) -> dict:
        doc = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "HubTenant", "metadata": {"name": name}, "spec": spec}
        return client.CustomObjectsApi(as_ or self.world.admin).create_cluster_custom_object(GROUP, VERSION,
                                                                                             "hubtenants", doc)

    def get(self, name: str) -> dict | None:
        try:
            return self.custom.get_cluster_custom_object(GROUP, VERSION, "hubtenants", name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def status(self, name: str) -> dict:
        return (self.get(name) or {}).get("status") or {}

    def namespace(self, name: str, **meta) -> dict:
        self.namespaces.append(name)
        return self.core.create_namespace({"metadata": {"name": name, **meta}})

    def read_namespace(self, name: str) -> dict | None:
        try:
            return self.world.admin.sanitize_for_serialization(self.core.read_namespace(name))["metadata"]
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def binding(self, namespace: str):
        try:
            return self.rbac.read_namespaced_role_binding(TENANT_ADMINS_ROLEBINDING, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def cluster(self, namespace: str, name: str, as_: client.ApiClient | None = None) -> dict:
        doc = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "HubCluster", "metadata": {"name": name, "namespace": namespace},
               "spec": {"displayName": "registered only"}}
        return client.CustomObjectsApi(as_ or self.world.admin).create_namespaced_custom_object(
            GROUP, VERSION, namespace, "hubclusters", doc)

    def cleanup(self) -> None:
        self.stop()
        for name in self.names:
            for item in self.custom.list_namespaced_custom_object(GROUP, VERSION, name, "hubclusters")["items"]:
                self.custom.delete_namespaced_custom_object(GROUP, VERSION, name, "hubclusters", item["metadata"]["name"])
            delete_tenant(self.world.admin, name)
        for name in {*self.names, *self.namespaces}:
            try:
                self.core.delete_namespace(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise


@pytest.fixture
def tenants(world):
    made = Tenants(world)
    yield made
    made.cleanup()


def alice(world) -> dict:
    return sa_subject(world.users, "alice")


# --------------------------------------------------------------------------- RBAC

def test_the_tenant_admins_run_clusters_in_its_namespace_and_nobody_else_does(world, tenants):
    tenants.start()
    name = tenants.name()
    tenants.create(name, admins=[alice(world)])
    wait_until(lambda: tenants.binding(name), WAIT, what="the admins' RoleBinding")

    created = eventually(lambda: tenants.cluster(name, "edge-1", as_=world.alice))
    assert created["metadata"]["namespace"] == name
    assert wait_until(lambda: tenants.status(name).get("clusters") == 1, WAIT, what="the count to reach 1")
    alices = client.CustomObjectsApi(world.alice)
    assert [c["metadata"]["name"] for c in alices.list_namespaced_custom_object(GROUP, VERSION, name,
                                                                                "hubclusters")["items"]] == ["edge-1"]
    refused = [
        lambda: tenants.cluster(name, "edge-2", as_=world.mallory),  # not an admin
        lambda: client.CustomObjectsApi(world.mallory).list_namespaced_custom_object(GROUP, VERSION, name, "hubclusters"),
        lambda: alices.patch_namespaced_custom_object_status(  # status belongs to the service
            GROUP, VERSION, name, "hubclusters", "edge-1", {"status": {"meshJoin": {"group": "x", "order": 0}}}),
        lambda: tenants.cluster(world.users, "elsewhere", as_=world.alice),  # only in the tenant's namespace
        lambda: client.CoreV1Api(world.alice).patch_namespace(name, {"metadata": {"annotations": {
            OWNER_ACCOUNT_ANNOTATION: "111111111111"}}}),  # nor its annotations
    ]
    for attempt in refused:
        with pytest.raises(ApiException) as denied:
            attempt()
        assert denied.value.status == 403

    alices.delete_namespaced_custom_object(GROUP, VERSION, name, "hubclusters", "edge-1")
    assert wait_until(lambda: tenants.status(name).get("clusters") == 0, WAIT, what="the count back to 0")
    # No admins, no RoleBinding, and alice is out.
    tenants.custom.patch_cluster_custom_object(GROUP, VERSION, "hubtenants", name, {"spec": {"admins": []}})
    wait_until(lambda: tenants.binding(name) is None, WAIT, what="the RoleBinding to go")
    wait_until(lambda: _refused(lambda: alices.list_namespaced_custom_object(GROUP, VERSION, name, "hubclusters")),
               WAIT, what="alice to lose her access")


def _refused(call) -> bool:
    try:
        call()
    except ApiException as exc:
        if exc.status == 403:
            return True
        raise
    return False


# --------------------------------------------------------------------------- deletion

def test_a_tenant_with_a_cluster_is_held_until_the_cluster_is_gone_and_its_namespace_is_kept(world, tenants):
    tenants.start()
    name = tenants.name()
    tenants.create(name, accountID="222222222222", admins=[alice(world)])
    wait_until(lambda: tenants.binding(name), WAIT, what="the tenant's namespace")
    tenants.cluster(name, "edge-1")
    wait_until(lambda: tenants.status(name).get("clusters") == 1, WAIT, what="the count to reach 1")

    # The deletion policy refuses while the status counts the cluster.
    with pytest.raises(ApiException) as refused:
        tenants.custom.delete_cluster_custom_object(GROUP, VERSION, "hubtenants", name)
    assert refused.value.status == 403
    assert f"still has 1 cluster(s) in namespace {name}: delete its clusters first" in \
        json.loads(refused.value.body)["message"]

    # The count lags (here: the controller is down and the count was zeroed): the finalizer holds the Tenant.
    tenants.stop()
    tenants.custom.patch_cluster_custom_object_status(GROUP, VERSION, "hubtenants", name, {"status": {"clusters": 0}})
    tenants.custom.delete_cluster_custom_object(GROUP, VERSION, "hubtenants", name)
    assert tenants.get(name)["metadata"]["deletionTimestamp"]
    tenants.start()
    status = wait_until(lambda: tenants.status(name).get("clusters") == 1 and tenants.status(name), WAIT,
                        what="the count back at 1")
    assert status["message"] == f"being deleted: waiting for the 1 cluster(s) in namespace {name} to be deleted"
    assert tenants.get(name) is not None and tenants.binding(name) is not None

    tenants.custom.delete_namespaced_custom_object(GROUP, VERSION, name, "hubclusters", "edge-1")
    wait_until(lambda: tenants.get(name) is None, WAIT, what="the Tenant to go")
    meta = tenants.read_namespace(name)  # kept, without the tenant's marks; its account annotation stays
    assert meta is not None and not meta.get("deletionTimestamp")
    assert TENANT_LABEL not in (meta.get("labels") or {}) and TENANT_ANNOTATION not in meta["annotations"]
    assert meta["annotations"][OWNER_ACCOUNT_ANNOTATION] == "222222222222"
    assert tenants.binding(name) is None


# --------------------------------------------------------------------------- in the service

def test_only_the_leader_runs_the_tenant_controller_and_stops_it_with_its_term(world, tenants):
    env = ServiceEnv.isolated(world.admin)
    lease = dict(leader_election=True, leader_election_id=f"lease-{world.suffix}", lease_duration=4.0,
                 renew_deadline=2.0, retry_period=0.5, tenants=True, watch_namespace=env.ns)
    leader, follower = env.service(RecordingEngine(), **lease), env.service(RecordingEngine(), **lease)
    leader.start()
    try:
        wait_until(lambda: leader.pipeline is not None and leader.ready()[0], WAIT, what="a leader")
        follower.start()
        wait_until(lambda: follower.elector.holder, WAIT, what="the follower to see the leader")
        controller = leader.pipeline.tenants
        informers = leader.pipeline.informers
        # One informer per kind, shared with the stacks' controller: Clusters are watched once.
        assert controller is not None and set(leader.ready()[1]["synced"]) == \
            {"clusters", "hubconfigs", "namespaces", "configmaps", "hubretainedstacks", "hubtenants",
             "hubgitrepos"}  # + --gitrepos
        assert follower.pipeline is None

        name = tenants.name()
        tenants.create(name)
        wait_until(lambda: tenants.status(name).get("namespace") == name, WAIT, what="the leader to materialise")
    finally:
        leader.stop()
        follower.stop()
    assert leader.pipeline is None
    assert not any(informer._thread.is_alive() for informer in informers)


def test_a_tenant_admin_reads_their_own_hubtenant_and_no_other(world, tenants):
    """HubTenant is cluster-scoped, so the admins' RoleBinding in the namespace never reached it: they could not
    read their own Tenant (its status: namespace, clusters, why it is refused). The controller grants each Tenant's
    admins get and watch on that one HubTenant, by name; never another's, never the list."""
    tenants.start()
    mine, theirs = tenants.name(), tenants.name()
    tenants.create(mine, admins=[alice(world)])
    tenants.create(theirs, admins=[sa_subject(world.users, "mallory")])
    alices = client.CustomObjectsApi(world.alice)
    read = eventually(lambda: alices.get_cluster_custom_object(GROUP, VERSION, "hubtenants", mine), WAIT)
    assert read["metadata"]["name"] == mine
    wait_until(lambda: tenants.status(theirs).get("namespace"), WAIT, what="the other Tenant made")
    for attempt in (lambda: alices.get_cluster_custom_object(GROUP, VERSION, "hubtenants", theirs),
                    lambda: alices.list_cluster_custom_object(GROUP, VERSION, "hubtenants"),
                    lambda: alices.patch_cluster_custom_object(GROUP, VERSION, "hubtenants", mine,
                                                               {"spec": {"displayName": "mine now"}}),
                    lambda: alices.patch_cluster_custom_object_status(GROUP, VERSION, "hubtenants", mine,
                                                                      {"status": {"clusters": 0}})):
        with pytest.raises(ApiException) as denied:
            attempt()
        assert denied.value.status == 403
    # An admin removed loses it.
    tenants.custom.patch_cluster_custom_object(GROUP, VERSION, "hubtenants", mine, {"spec": {"admins": []}})
    wait_until(lambda: _refused(lambda: alices.get_cluster_custom_object(GROUP, VERSION, "hubtenants", mine)), WAIT,
               what="alice to lose her read")
