"""The tenant controller (automation/service/tenants.py) against the real kube-apiserver, running as a
ServiceAccount that holds exactly stacks.admission.tenant_controller_rules(): a Tenant gets its Namespace with
its account and region, its admins (and nobody else) run Clusters there, an annotated namespace is adopted and
keeps its owner account, another tenant's namespace (or one merely named like the Tenant) is not, and a Tenant
with Clusters is held by the deletion policy and the finalizer until they are gone; the namespace is kept.
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
from automation.kit.runtime import Manager
from automation.service.tenants import TenantController
from doubles.engine import RecordingEngine
from stacks.admission import TENANT_ADMIN_CLUSTERROLE, TENANT_ADMINS_ROLEBINDING, tenant_controller_rules
from stacks.names import (DEFAULT_REGION_ANNOTATION, GROUP, OWNER_ACCOUNT_ANNOTATION, TENANT_ANNOTATION,
                          TENANT_FINALIZER, TENANT_LABEL, VERSION)
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
                                    role_map_namespace=self.world.users, tenants=True).items():
            if kind in ("clusters", "namespaces"):
                self.manager.source(source)
        self.controller = TenantController(self.world.controller, self.manager, hub_account=lambda: HUB_ACCOUNT,
                                           backoff=Backoff(0.05, 0.5))
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


# --------------------------------------------------------------------------- materialising

def test_a_tenant_gets_its_namespace_with_its_account_and_region_and_a_rolebinding_for_its_admins(world, tenants):
    tenants.start()
    name = tenants.name()
    tenants.create(name, displayName="Payments", accountID="222222222222", defaultRegion="eu-west-1",
                   admins=[alice(world), {"kind": "Group", "name": "payments-admins"}])

    status = wait_until(lambda: tenants.status(name).get("namespace") and tenants.status(name), WAIT,
                        what="the Tenant's namespace in its status")
    assert status == {"namespace": name, "clusters": 0}
    meta = tenants.read_namespace(name)
    assert meta["labels"][TENANT_LABEL] == name
    assert {k: meta["annotations"][k] for k in (TENANT_ANNOTATION, OWNER_ACCOUNT_ANNOTATION,
                                                 DEFAULT_REGION_ANNOTATION)} == {
        TENANT_ANNOTATION: name, OWNER_ACCOUNT_ANNOTATION: "222222222222", DEFAULT_REGION_ANNOTATION: "eu-west-1"}
    assert TENANT_FINALIZER in tenants.get(name)["metadata"]["finalizers"]
    binding = tenants.binding(name)
    assert binding.role_ref.kind == "ClusterRole" and binding.role_ref.name == TENANT_ADMIN_CLUSTERROLE
    assert [(s.kind, s.name, s.namespace) for s in binding.subjects] == [
        ("ServiceAccount", "alice", world.users), ("Group", "payments-admins", None)]

    # A change of account is carried to the namespace; a hand-made change to the RoleBinding is put back.
    tenants.custom.patch_cluster_custom_object(GROUP, VERSION, "hubtenants", name, {"spec": {"accountID": "333333333333"}})
    wait_until(lambda: tenants.read_namespace(name)["annotations"][OWNER_ACCOUNT_ANNOTATION] == "333333333333", WAIT,
               what="the new owner account on the namespace")
    tenants.custom.patch_cluster_custom_object(GROUP, VERSION, "hubtenants", name, {"spec": {"admins": [alice(world)]}})
    wait_until(lambda: [s.name for s in tenants.binding(name).subjects] == ["alice"], WAIT, what="one admin left")

    # Looking again changes nothing that is already right.
    version = tenants.binding(name).metadata.resource_version
    namespace_version = tenants.read_namespace(name)["resourceVersion"]
    tenants.custom.patch_cluster_custom_object(GROUP, VERSION, "hubtenants", name, {"spec": {"displayName": "Pay"}})
    tenants.controller.reconcile(name)
    assert tenants.binding(name).metadata.resource_version == version
    assert tenants.read_namespace(name)["resourceVersion"] == namespace_version


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


def test_an_invalid_tenant_gets_a_message_naming_the_field_and_nothing_else(world, tenants):
    tenants.start()
    name = tenants.name()
    tenants.create(name, admins=[{"kind": "User", "name": "bob", "namespace": "team"}])  # schema-valid, model-invalid
    message = wait_until(lambda: tenants.status(name).get("message"), WAIT, what="a status message")
    assert message.startswith("invalid: spec.admins[0]") and "ServiceAccount" in message
    assert tenants.read_namespace(name) is None
    assert TENANT_FINALIZER not in (tenants.get(name)["metadata"].get("finalizers") or [])


# --------------------------------------------------------------------------- adoption

def test_a_namespace_the_hub_admin_annotated_is_adopted_and_keeps_its_owner_account(world, tenants):
    tenants.start()
    # Named by a cluster administrator in spec.namespace (the ownership policy lets only them)...
    legacy = tenants.name("legacy")
    tenants.namespace(legacy, annotations={OWNER_ACCOUNT_ANNOTATION: "222222222222", "team": "payments"})
    named = tenants.name()
    tenants.create(named, namespace=legacy, defaultRegion="eu-west-1", admins=[alice(world)])
    # ... or set aside for the tenant by the annotation hubwright.io/tenant (then anyone may create the Tenant).
    reserved = tenants.name()
    tenants.namespace(reserved, annotations={OWNER_ACCOUNT_ANNOTATION: "444444444444", TENANT_ANNOTATION: reserved})
    writer = f"tenant-writer-{world.suffix}"
    bind_cluster_role(world.admin, writer, [{"apiGroups": [GROUP], "resources": ["hubtenants"], "verbs": ["create"]}],
                      [sa_subject(world.users, "mallory")])
    try:
        eventually(lambda: tenants.create(reserved, as_=world.mallory, displayName="Reserved"))
    finally:
        unbind_cluster_role(world.admin, writer)

    for tenant, namespace, owner in ((named, legacy, "222222222222"), (reserved, reserved, "444444444444")):
        wait_until(lambda: tenants.status(tenant).get("namespace") == namespace, WAIT, what=f"{tenant} to adopt")
        meta = tenants.read_namespace(namespace)
        assert meta["labels"][TENANT_LABEL] == tenant and meta["annotations"][TENANT_ANNOTATION] == tenant
        assert meta["annotations"][OWNER_ACCOUNT_ANNOTATION] == owner  # kept: the Tenant sets no accountID
    assert tenants.read_namespace(legacy)["annotations"]["team"] == "payments"
    assert tenants.read_namespace(legacy)["annotations"][DEFAULT_REGION_ANNOTATION] == "eu-west-1"
    assert tenants.binding(legacy).subjects[0].name == "alice"
    assert tenants.read_namespace(named) is None  # nothing made under the Tenant's own name


def test_a_namespace_labelled_for_another_tenant_is_not_adopted(world, tenants):
    tenants.start()
    first = tenants.name()
    tenants.create(first, accountID="222222222222")
    wait_until(lambda: tenants.status(first).get("namespace") == first, WAIT, what="the first tenant's namespace")
    squatter = tenants.name()
    tenants.create(squatter, namespace=first, accountID="999999999999", admins=[alice(world)])

    message = wait_until(lambda: tenants.status(squatter).get("message"), WAIT, what="the refusal")
    assert f"namespace {first} belongs to Tenant {first}" in message
    assert "namespace" not in tenants.status(squatter)
    assert TENANT_FINALIZER not in (tenants.get(squatter)["metadata"].get("finalizers") or [])
    meta = tenants.read_namespace(first)
    assert meta["labels"][TENANT_LABEL] == first and meta["annotations"][OWNER_ACCOUNT_ANNOTATION] == "222222222222"
    assert tenants.binding(first) is None


def test_a_namespace_merely_named_like_the_tenant_is_not_adopted(world, tenants):
    tenants.start()
    name = tenants.name()
    tenants.namespace(name, annotations={OWNER_ACCOUNT_ANNOTATION: "222222222222"})
    tenants.create(name, admins=[alice(world)])
    message = wait_until(lambda: tenants.status(name).get("message"), WAIT, what="the refusal")
    assert f"namespace {name} exists and is not this Tenant's" in message and "spec.namespace" in message
    assert TENANT_LABEL not in (tenants.read_namespace(name).get("labels") or {})
    assert tenants.binding(name) is None

    # The hub administrator sets it aside for the tenant: the resync (or any change) adopts it.
    tenants.core.patch_namespace(name, {"metadata": {"annotations": {TENANT_ANNOTATION: name}}})
    tenants.custom.patch_cluster_custom_object(GROUP, VERSION, "hubtenants", name, {"spec": {"displayName": "now"}})
    wait_until(lambda: tenants.status(name).get("namespace") == name and "message" not in tenants.status(name),
               WAIT, what="the adoption")
    assert tenants.binding(name) is not None


def _stalled(tenants, name: str) -> dict | None:
    return next((c for c in tenants.status(name).get("conditions") or [] if c["type"] == "Stalled"), None)


def test_a_tenant_given_the_hub_account_is_refused_and_nothing_is_applied(world, tenants):
    """The new-user walkthrough's finding: a Tenant naming the hub account adopted a namespace and rewrote its owner
    account from 222222222222 to the hub's, and its clusters flipped to AccountMismatch. Now nothing is applied."""
    tenants.start()
    name = tenants.name()
    tenants.namespace(name, annotations={OWNER_ACCOUNT_ANNOTATION: "222222222222", TENANT_ANNOTATION: name})
    tenants.create(name, accountID=HUB_ACCOUNT, admins=[alice(world)])
    stalled = wait_until(lambda: _stalled(tenants, name), WAIT, what="the refusal")
    assert stalled["status"] == "True" and stalled["reason"] == "HubAccount"
    assert f"spec.accountID {HUB_ACCOUNT} is the hub account" in stalled["message"]
    assert tenants.status(name)["message"] == stalled["message"] and "namespace" not in tenants.status(name)
    meta = tenants.read_namespace(name)
    assert meta["annotations"][OWNER_ACCOUNT_ANNOTATION] == "222222222222"
    assert TENANT_LABEL not in (meta.get("labels") or {})
    assert tenants.binding(name) is None
    assert TENANT_FINALIZER not in (tenants.get(name)["metadata"].get("finalizers") or [])
    # Nor a namespace of its own.
    fresh = tenants.name()
    tenants.create(fresh, accountID=HUB_ACCOUNT)
    wait_until(lambda: (_stalled(tenants, fresh) or {}).get("reason") == "HubAccount", WAIT, what="the refusal")
    assert tenants.read_namespace(fresh) is None


def test_adopting_a_namespace_owned_by_another_account_is_refused_until_they_agree(world, tenants):
    tenants.start()
    name = tenants.name()
    tenants.namespace(name, annotations={OWNER_ACCOUNT_ANNOTATION: "222222222222", TENANT_ANNOTATION: name})
    tenants.create(name, accountID="444444444444", admins=[alice(world)])
    stalled = wait_until(lambda: _stalled(tenants, name), WAIT, what="the refusal")
    assert stalled["reason"] == "OwnerAccountDiffers"
    assert f"namespace {name} is owned by account 222222222222" in stalled["message"] and "444444444444" in \
        stalled["message"]
    meta = tenants.read_namespace(name)
    assert meta["annotations"][OWNER_ACCOUNT_ANNOTATION] == "222222222222"
    assert TENANT_LABEL not in (meta.get("labels") or {})
    assert tenants.binding(name) is None

    # A cluster administrator makes them agree: adopted, and the condition goes.
    tenants.custom.patch_cluster_custom_object(GROUP, VERSION, "hubtenants", name, {"spec": {"accountID": "222222222222"}})
    wait_until(lambda: tenants.status(name).get("namespace") == name and _stalled(tenants, name) is None, WAIT,
               what="the adoption")
    assert tenants.read_namespace(name)["labels"][TENANT_LABEL] == name and tenants.binding(name) is not None
    # Once its own, a cluster administrator's change of the Tenant's account is carried to the namespace.
    tenants.custom.patch_cluster_custom_object(GROUP, VERSION, "hubtenants", name, {"spec": {"accountID": "444444444444"}})
    wait_until(lambda: tenants.read_namespace(name)["annotations"][OWNER_ACCOUNT_ANNOTATION] == "444444444444", WAIT,
               what="the new owner account")


def test_a_tenant_moved_to_another_namespace_lets_the_old_one_go_once_it_holds_no_clusters(world, tenants):
    tenants.start()
    name = tenants.name()
    tenants.create(name, admins=[alice(world)])
    wait_until(lambda: tenants.binding(name), WAIT, what="the tenant's namespace")
    tenants.cluster(name, "edge-1")
    wait_until(lambda: tenants.status(name).get("clusters") == 1, WAIT, what="the count to reach 1")
    target = tenants.name("moved")
    tenants.namespaces.append(target)
    tenants.custom.patch_cluster_custom_object(GROUP, VERSION, "hubtenants", name, {"spec": {"namespace": target}})
    message = wait_until(lambda: tenants.status(name).get("message"), WAIT, what="the refusal to move")
    assert f"cannot move from namespace {name} to {target} while {name} holds 1 cluster(s)" in message
    assert tenants.read_namespace(target) is None

    tenants.custom.delete_namespaced_custom_object(GROUP, VERSION, name, "hubclusters", "edge-1")
    wait_until(lambda: tenants.status(name).get("namespace") == target, WAIT, what="the move")
    assert tenants.binding(target) is not None and tenants.binding(name) is None
    assert TENANT_LABEL not in (tenants.read_namespace(name).get("labels") or {})
    assert tenants.read_namespace(target)["labels"][TENANT_LABEL] == name


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


def test_a_tenant_without_clusters_is_deleted_at_once(world, tenants):
    tenants.start()
    name = tenants.name()
    tenants.create(name)
    wait_until(lambda: tenants.status(name).get("namespace") == name, WAIT, what="the tenant's namespace")
    tenants.custom.delete_cluster_custom_object(GROUP, VERSION, "hubtenants", name)
    wait_until(lambda: tenants.get(name) is None, WAIT, what="the Tenant to go")
    assert TENANT_LABEL not in (tenants.read_namespace(name).get("labels") or {})


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
            {"clusters", "hubconfigs", "namespaces", "configmaps", "hubtenants", "hubgitrepos"}  # + --gitrepos
        assert follower.pipeline is None

        name = tenants.name()
        tenants.create(name)
        wait_until(lambda: tenants.status(name).get("namespace") == name, WAIT, what="the leader to materialise")
    finally:
        leader.stop()
        follower.stop()
    assert leader.pipeline is None
    assert not any(informer._thread.is_alive() for informer in informers)


def test_annotating_the_namespace_as_the_refusal_says_adopts_it_within_seconds(world, tenants):
    """The refusal tells the hub administrator to annotate the namespace; the controller watches Namespaces, so
    the fix acts within seconds (it waited for the next look: 30 s for a refused Tenant, the 300 s resync else)."""
    tenants.start()
    name = tenants.name()
    tenants.namespace(name, annotations={OWNER_ACCOUNT_ANNOTATION: "222222222222"})
    tenants.create(name, admins=[alice(world)])
    wait_until(lambda: (_stalled(tenants, name) or {}).get("reason") == "NamespaceNotAdopted", WAIT,
               what="the refusal")
    tenants.core.patch_namespace(name, {"metadata": {"annotations": {TENANT_ANNOTATION: name}}})  # nothing else
    wait_until(lambda: tenants.status(name).get("namespace") == name and not tenants.status(name).get("conditions"),
               10.0, what="the adoption within seconds of the annotation")
    assert tenants.binding(name) is not None
    assert tenants.read_namespace(name)["labels"][TENANT_LABEL] == name


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
