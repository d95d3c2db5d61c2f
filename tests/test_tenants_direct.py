"""The tenant controller (automation/service/tenants.py) called directly, over doubles.objects.FakeObjects.

The controller is wired as production wires it, by `tenants.setup(manager, ...)`, on a Manager that is never
started: the fake's changes are handed to the manager's informers' stores (what a watch would deliver), so the
handlers setup registered (TenantStore, ClusterCounts, NamespaceMarks) fill the controller's queue, and `settle`
works that queue off in this thread as the worker would (Workers.apply: backoff on an error, requeue when asked).
Each test states what the fake API server holds afterwards. What only a real API server shows (RBAC, the admission
policies, the garbage collector, the real watch, the service's wiring) stays in tests/test_tenants_envtest.py and
tests/test_tenant_quota_envtest.py.
"""
from __future__ import annotations

import time
from typing import Any, Iterable

import pytest

from automation.adapters.backoff import Backoff
from automation.adapters.kube.informer import Source
from automation.kit.objects import (CLUSTERROLEBINDINGS, CLUSTERROLES, HUBCLUSTERS, HUBTENANTS, NAMESPACES,
                                    RESOURCEQUOTAS, ROLEBINDINGS, ApiError, Conflict, Kind)
from automation.kit.queue import Outcome
from automation.kit.runtime import Manager
from automation.service import tenants as tenant_controller
from doubles.factories import HUB_ACCOUNT
from doubles.objects import FakeObjects
from stacks.admission import (CLUSTER_COUNT, TENANT_ADMIN_CLUSTERROLE, TENANT_ADMINS_ROLEBINDING, TENANT_QUOTA)
from stacks.names import (API_VERSION, DEFAULT_REGION_ANNOTATION, OWNER_ACCOUNT_ANNOTATION, TENANT_ANNOTATION,
                          TENANT_FINALIZER, TENANT_LABEL, TENANTS)

USERS = "tenant-users"
ALICE = {"kind": "ServiceAccount", "name": "alice", "namespace": USERS}


# ------------------------------------------------------------------- the harness (the other direct tests share it)

def never(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a direct test lists nothing from an API server: the fake feeds the informers' stores")


def feed(kube: FakeObjects, manager: Manager, kinds: dict[Kind, str]) -> None:
    """Hand every change of the fake's `kinds` to the manager's informer of that name, as its watch would."""
    for kind, name in kinds.items():
        kube.watch(kind, manager.informers[name].store.apply)


def settle(*controllers: Any, wait: float = 0.5, limit: int = 500) -> list[tuple[Any, Any]]:
    """Work the controllers' queues off in this thread, as their workers would, until none has a key ready nor one
    due within `wait` seconds (a backoff; a requeue further off is left). Returns (key, Outcome or the error)."""
    seen: list[tuple[Any, Any]] = []
    while True:
        ran = False
        for controller in controllers:
            queue, workers = controller.queue, controller.controller.workers
            while (key := queue.get(timeout=0)) is not None:
                ran = True
                outcome: Outcome = Outcome.retry()
                try:
                    outcome = controller.reconcile(key)
                    seen.append((key, outcome))
                except Exception as exc:  # noqa: BLE001 - what the worker does: retried with backoff
                    seen.append((key, exc))
                finally:
                    workers.apply(key, outcome)
                    queue.done(key)
                assert len(seen) < limit, f"the queues do not settle: {seen[-5:]}"
        if ran:
            continue
        due = [d for c in controllers if (d := c.queue.next_due()) is not None and d <= wait]
        if not due:
            return seen
        time.sleep(min(due) + 0.001)


def writes(kube: FakeObjects, since: int = 0) -> list[tuple[str, str, str]]:
    return [call for call in kube.calls[since:] if call[0] not in ("get", "list")]


class World:
    """The tenant controller as setup() wires it, over one fake API server."""

    def __init__(self, hub_account: str | None = HUB_ACCOUNT, resync: float = 300.0):
        self.kube = FakeObjects()
        self.hub_account = hub_account
        self.manager = Manager()
        for kind in ("clusters", "namespaces"):  # the service's shared informers (serve.Pipeline adds them)
            self.manager.source(Source(kind, never))
        self.controller = tenant_controller.setup(self.manager, objects=self.kube, source=Source(TENANTS, never),
                                                  hub_account=lambda: self.hub_account,
                                                  backoff=Backoff(0.01, 0.05), resync=resync)
        feed(self.kube, self.manager, {HUBTENANTS: TENANTS, HUBCLUSTERS: "clusters", NAMESPACES: "namespaces"})

    # -- what a user does
    def tenant(self, name: str, **spec: Any) -> dict:
        return self.kube.create(HUBTENANTS, {"apiVersion": API_VERSION, "kind": "HubTenant",
                                             "metadata": {"name": name}, "spec": spec})

    def edit(self, name: str, spec: dict) -> None:
        self.kube.patch(HUBTENANTS, name, {"spec": spec})

    def namespace(self, name: str, **meta: Any) -> dict:
        return self.kube.create(NAMESPACES, {"metadata": {"name": name, **meta}})

    def cluster(self, namespace: str, name: str) -> dict:
        return self.kube.create(HUBCLUSTERS, {"metadata": {"name": name, "namespace": namespace},
                                              "spec": {"displayName": "registered only"}})

    # -- what it holds
    def settle(self) -> list[tuple[Any, Any]]:
        return settle(self.controller)

    def get(self, name: str) -> dict | None:
        return self.kube.get(HUBTENANTS, name)

    def status(self, name: str) -> dict:
        return (self.get(name) or {}).get("status") or {}

    def finalizers(self, name: str) -> list[str]:
        return ((self.get(name) or {}).get("metadata") or {}).get("finalizers") or []

    def ns(self, name: str) -> dict | None:
        raw = self.kube.get(NAMESPACES, name)
        return raw["metadata"] if raw is not None else None

    def binding(self, namespace: str) -> dict | None:
        return self.kube.get(ROLEBINDINGS, TENANT_ADMINS_ROLEBINDING, namespace)

    def stalled(self, name: str) -> dict | None:
        return next((c for c in self.status(name).get("conditions") or [] if c["type"] == "Stalled"), None)


@pytest.fixture
def world() -> World:
    return World()


def subjects(binding: dict | None) -> list[tuple]:
    return [(s["kind"], s["name"], s.get("namespace")) for s in (binding or {}).get("subjects") or []]


def keys(seen: Iterable[tuple[Any, Any]]) -> list[Any]:
    return [key for key, _ in seen]


# --------------------------------------------------------------------------- materialising

def test_a_tenant_gets_its_namespace_with_its_account_and_region_and_a_rolebinding_for_its_admins(world):
    world.tenant("payments", displayName="Payments", accountID="222222222222", defaultRegion="eu-west-1",
                 admins=[ALICE, {"kind": "Group", "name": "payments-admins"}])
    world.settle()

    assert world.status("payments") == {"namespace": "payments", "clusters": 0}
    meta = world.ns("payments")
    assert meta["labels"] == {TENANT_LABEL: "payments"}
    assert meta["annotations"] == {TENANT_ANNOTATION: "payments", OWNER_ACCOUNT_ANNOTATION: "222222222222",
                                   DEFAULT_REGION_ANNOTATION: "eu-west-1"}
    assert world.finalizers("payments") == [TENANT_FINALIZER]
    binding = world.binding("payments")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": TENANT_ADMIN_CLUSTERROLE}
    assert subjects(binding) == [("ServiceAccount", "alice", USERS), ("Group", "payments-admins", None)]
    assert binding["metadata"]["labels"] == {TENANT_LABEL: "payments"}

    # A change of account is carried to the namespace; a change of admins to the RoleBinding.
    world.edit("payments", {"accountID": "333333333333"})
    world.settle()
    assert world.ns("payments")["annotations"][OWNER_ACCOUNT_ANNOTATION] == "333333333333"
    world.edit("payments", {"admins": [ALICE]})
    world.settle()
    assert subjects(world.binding("payments")) == [("ServiceAccount", "alice", USERS)]
    # A hand-made change to the RoleBinding is put back at the next look (the resync).
    world.kube.patch(ROLEBINDINGS, TENANT_ADMINS_ROLEBINDING, {"subjects": [
        {"kind": "ServiceAccount", "name": "mallory", "namespace": USERS}]}, "payments")
    world.controller.resync.call()
    world.settle()
    assert subjects(world.binding("payments")) == [("ServiceAccount", "alice", USERS)]

    # Looking again changes nothing that is already right.
    since = len(world.kube.calls)
    world.edit("payments", {"displayName": "Pay"})
    assert keys(world.settle()) == ["payments"]
    assert writes(world.kube, since + 1) == []


def test_the_clusters_in_its_namespace_are_counted_and_its_admins_removed_take_the_rolebinding(world):
    world.tenant("t1", admins=[ALICE])
    world.settle()
    world.cluster("t1", "edge-1")
    world.cluster("elsewhere", "edge-9")  # another namespace: not counted
    assert set(keys(world.settle())) == {"t1"}  # the shared Clusters informer brought the Tenant back
    assert world.status("t1")["clusters"] == 1
    world.kube.delete(HUBCLUSTERS, "edge-1", "t1")
    world.settle()
    assert world.status("t1")["clusters"] == 0
    # No admins: no RoleBinding, and the reader binding grants nobody.
    world.edit("t1", {"admins": []})
    world.settle()
    assert world.binding("t1") is None
    assert "subjects" not in world.kube.get(CLUSTERROLEBINDINGS, f"{TENANT_ADMIN_CLUSTERROLE}:t1")


def test_a_tenant_admin_reader_role_is_made_for_its_admins_and_owned_by_the_tenant(world):
    """The ClusterRole and binding that let the admins get and watch their own HubTenant (RBAC itself, and the
    garbage collector removing them: tests/test_tenants_envtest.py, tests/test_tenant_quota_envtest.py)."""
    raw = world.tenant("mine", admins=[ALICE])
    world.tenant("none")  # no admins: nothing made for it
    world.settle()
    name = f"{TENANT_ADMIN_CLUSTERROLE}:mine"
    role, binding = world.kube.get(CLUSTERROLES, name), world.kube.get(CLUSTERROLEBINDINGS, name)
    assert role["rules"] == [{"apiGroups": ["hubwright.io"], "resources": [TENANTS], "resourceNames": ["mine"],
                              "verbs": ["get", "watch"]}]
    assert subjects(binding) == [("ServiceAccount", "alice", USERS)]
    for made in (role, binding):
        assert [(o["kind"], o["uid"], o["controller"]) for o in made["metadata"]["ownerReferences"]] == [
            ("HubTenant", raw["metadata"]["uid"], True)]
    assert world.kube.get(CLUSTERROLEBINDINGS, f"{TENANT_ADMIN_CLUSTERROLE}:none") is None


def test_an_invalid_tenant_gets_a_message_naming_the_field_and_nothing_else(world):
    world.tenant("bad", admins=[{"kind": "User", "name": "bob", "namespace": "team"}])  # schema-valid, model-invalid
    world.settle()
    message = world.status("bad")["message"]
    assert message.startswith("invalid: spec.admins[0]") and "ServiceAccount" in message
    assert world.ns("bad") is None and world.finalizers("bad") == []
    assert set(world.status("bad")) == {"message"}


def test_the_tenant_quota_follows_spec_quota_owned_by_the_tenant(world):
    """The ResourceQuota's content (the API server enforcing it and the garbage collector removing it:
    tests/test_tenant_quota_envtest.py)."""
    raw = world.tenant("q", quota={"maxClusters": 2})
    world.settle()
    quota = world.kube.get(RESOURCEQUOTAS, TENANT_QUOTA, "q")
    assert quota["spec"]["hard"] == {CLUSTER_COUNT: "2"}
    assert [(o["kind"], o["name"], o["uid"], o["controller"]) for o in quota["metadata"]["ownerReferences"]] == [
        ("HubTenant", "q", raw["metadata"]["uid"], True)]
    world.edit("q", {"quota": {"maxClusters": 3}})
    world.settle()
    assert world.kube.get(RESOURCEQUOTAS, TENANT_QUOTA, "q")["spec"]["hard"] == {CLUSTER_COUNT: "3"}
    world.edit("q", {"quota": None})
    world.settle()
    assert world.kube.get(RESOURCEQUOTAS, TENANT_QUOTA, "q") is None


# --------------------------------------------------------------------------- adoption

def test_a_namespace_the_hub_admin_annotated_is_adopted_and_keeps_its_owner_account(world):
    # Named by a cluster administrator in spec.namespace (the ownership policy lets only them)...
    world.namespace("legacy", annotations={OWNER_ACCOUNT_ANNOTATION: "222222222222", "team": "payments"})
    world.tenant("named", namespace="legacy", defaultRegion="eu-west-1", admins=[ALICE])
    # ... or set aside for the tenant by the annotation hubwright.io/tenant.
    world.namespace("reserved", annotations={OWNER_ACCOUNT_ANNOTATION: "444444444444", TENANT_ANNOTATION: "reserved"})
    world.tenant("reserved", displayName="Reserved")
    world.settle()

    for tenant, namespace, owner in (("named", "legacy", "222222222222"), ("reserved", "reserved", "444444444444")):
        assert world.status(tenant) == {"namespace": namespace, "clusters": 0}
        meta = world.ns(namespace)
        assert meta["labels"][TENANT_LABEL] == tenant and meta["annotations"][TENANT_ANNOTATION] == tenant
        assert meta["annotations"][OWNER_ACCOUNT_ANNOTATION] == owner  # kept: the Tenant sets no accountID
    assert world.ns("legacy")["annotations"]["team"] == "payments"
    assert world.ns("legacy")["annotations"][DEFAULT_REGION_ANNOTATION] == "eu-west-1"
    assert subjects(world.binding("legacy")) == [("ServiceAccount", "alice", USERS)]
    assert world.ns("named") is None  # nothing made under the Tenant's own name


def test_a_namespace_labelled_for_another_tenant_is_not_adopted(world):
    world.tenant("first", accountID="222222222222")
    world.settle()
    world.tenant("squatter", namespace="first", accountID="999999999999", admins=[ALICE])
    world.settle()
    message = world.status("squatter")["message"]
    assert "namespace first belongs to Tenant first" in message
    assert "namespace" not in world.status("squatter") and world.finalizers("squatter") == []
    assert world.stalled("squatter")["reason"] == "NamespaceNotAdopted"
    meta = world.ns("first")
    assert meta["labels"][TENANT_LABEL] == "first" and meta["annotations"][OWNER_ACCOUNT_ANNOTATION] == "222222222222"
    assert world.binding("first") is None


def test_a_namespace_merely_named_like_the_tenant_is_adopted_at_once_when_annotated(world):
    """The refusal tells the hub administrator to annotate the namespace: the Namespaces' handler setup registers
    brings the Tenant back at once (not at the next 30 s look of a refused Tenant, nor the resync)."""
    world.namespace("n1", annotations={OWNER_ACCOUNT_ANNOTATION: "222222222222"})
    world.tenant("n1", admins=[ALICE])
    assert {outcome for _, outcome in world.settle()} == {Outcome.done(30.0)}  # a refused Tenant: looked at soon
    message = world.status("n1")["message"]
    assert "namespace n1 exists and is not this Tenant's" in message and "spec.namespace" in message
    assert world.stalled("n1")["reason"] == "NamespaceNotAdopted"
    assert TENANT_LABEL not in (world.ns("n1").get("labels") or {}) and world.binding("n1") is None

    world.kube.patch(NAMESPACES, "n1", {"metadata": {"annotations": {TENANT_ANNOTATION: "n1"}}})  # nothing else
    assert world.controller.queue.depth == 1
    world.settle()
    assert world.status("n1") == {"namespace": "n1", "clusters": 0}  # message and condition gone
    assert world.binding("n1") is not None and world.ns("n1")["labels"][TENANT_LABEL] == "n1"


def test_a_tenant_given_the_hub_account_is_refused_and_nothing_is_applied(world):
    world.namespace("h1", annotations={OWNER_ACCOUNT_ANNOTATION: "222222222222", TENANT_ANNOTATION: "h1"})
    world.tenant("h1", accountID=HUB_ACCOUNT, admins=[ALICE])
    world.settle()
    stalled = world.stalled("h1")
    assert stalled["status"] == "True" and stalled["reason"] == "HubAccount"
    assert f"spec.accountID {HUB_ACCOUNT} is the hub account" in stalled["message"]
    assert stalled["observedGeneration"] == 1 and stalled["lastTransitionTime"]
    assert world.status("h1")["message"] == stalled["message"] and "namespace" not in world.status("h1")
    meta = world.ns("h1")
    assert meta["annotations"][OWNER_ACCOUNT_ANNOTATION] == "222222222222"
    assert TENANT_LABEL not in (meta.get("labels") or {})
    assert world.binding("h1") is None and world.finalizers("h1") == []
    # Nor a namespace of its own.
    world.tenant("h2", accountID=HUB_ACCOUNT)
    world.settle()
    assert world.stalled("h2")["reason"] == "HubAccount" and world.ns("h2") is None
    # Looked at again, the condition keeps its transition time.
    since = len(world.kube.status_writes)
    world.controller.resync.call()
    world.settle()
    assert len(world.kube.status_writes) == since


def test_a_tenant_naming_an_account_waits_while_the_hub_account_is_unknown():
    world = World(hub_account=None)
    world.tenant("w", accountID="222222222222")
    assert {outcome for _, outcome in world.settle()} == {Outcome.done(2.0)}  # the HubConfig looked for at once
    assert world.stalled("w")["reason"] == "HubAccountUnknown" and world.ns("w") is None
    world.hub_account = HUB_ACCOUNT
    world.controller.queue.add("w")
    world.settle()
    assert world.status("w") == {"namespace": "w", "clusters": 0}


def test_adopting_a_namespace_owned_by_another_account_is_refused_until_they_agree(world):
    world.namespace("o1", annotations={OWNER_ACCOUNT_ANNOTATION: "222222222222", TENANT_ANNOTATION: "o1"})
    world.tenant("o1", accountID="444444444444", admins=[ALICE])
    world.settle()
    stalled = world.stalled("o1")
    assert stalled["reason"] == "OwnerAccountDiffers"
    assert "namespace o1 is owned by account 222222222222" in stalled["message"] and "444444444444" in \
        stalled["message"]
    meta = world.ns("o1")
    assert meta["annotations"][OWNER_ACCOUNT_ANNOTATION] == "222222222222"
    assert TENANT_LABEL not in (meta.get("labels") or {}) and world.binding("o1") is None

    # A cluster administrator makes them agree: adopted, and the condition goes.
    world.edit("o1", {"accountID": "222222222222"})
    world.settle()
    assert world.status("o1") == {"namespace": "o1", "clusters": 0}
    assert world.ns("o1")["labels"][TENANT_LABEL] == "o1" and world.binding("o1") is not None
    # Once its own, a cluster administrator's change of the Tenant's account is carried to the namespace.
    world.edit("o1", {"accountID": "444444444444"})
    world.settle()
    assert world.ns("o1")["annotations"][OWNER_ACCOUNT_ANNOTATION] == "444444444444"


def test_a_tenant_moved_to_another_namespace_lets_the_old_one_go_once_it_holds_no_clusters(world):
    world.tenant("m1", admins=[ALICE], quota={"maxClusters": 3})
    world.settle()
    world.cluster("m1", "edge-1")
    world.settle()
    world.edit("m1", {"namespace": "moved"})
    world.settle()
    assert "cannot move from namespace m1 to moved while m1 holds 1 cluster(s)" in world.status("m1")["message"]
    assert world.ns("moved") is None and world.status("m1")["namespace"] == "m1"

    world.kube.delete(HUBCLUSTERS, "edge-1", "m1")
    world.settle()
    assert world.status("m1") == {"namespace": "moved", "clusters": 0}
    assert world.binding("moved") is not None and world.binding("m1") is None
    assert world.kube.get(RESOURCEQUOTAS, TENANT_QUOTA, "m1") is None
    assert world.kube.get(RESOURCEQUOTAS, TENANT_QUOTA, "moved") is not None
    assert TENANT_LABEL not in (world.ns("m1").get("labels") or {})
    assert TENANT_ANNOTATION not in world.ns("m1")["annotations"]
    assert world.ns("moved")["labels"][TENANT_LABEL] == "m1"


# --------------------------------------------------------------------------- deletion

def test_a_tenant_with_a_cluster_is_held_until_the_cluster_is_gone_and_its_namespace_is_kept(world):
    world.tenant("d1", accountID="222222222222", admins=[ALICE])
    world.settle()
    world.cluster("d1", "edge-1")
    world.settle()
    assert world.status("d1")["clusters"] == 1
    # The count lags (here: zeroed by hand): the live count, not the status, holds the finalizer.
    world.kube.patch_status(HUBTENANTS, "d1", {"clusters": 0})
    world.kube.delete(HUBTENANTS, "d1")
    assert world.get("d1")["metadata"]["deletionTimestamp"]
    world.settle()
    status = world.status("d1")
    assert status["clusters"] == 1
    assert status["message"] == "being deleted: waiting for the 1 cluster(s) in namespace d1 to be deleted"
    assert world.finalizers("d1") == [TENANT_FINALIZER] and world.binding("d1") is not None

    world.kube.delete(HUBCLUSTERS, "edge-1", "d1")  # its deletion brings the Tenant back
    world.settle()
    assert world.get("d1") is None
    meta = world.ns("d1")  # kept, without the tenant's marks; its account annotation stays
    assert meta is not None and not meta.get("deletionTimestamp")
    assert TENANT_LABEL not in (meta.get("labels") or {}) and TENANT_ANNOTATION not in meta["annotations"]
    assert meta["annotations"][OWNER_ACCOUNT_ANNOTATION] == "222222222222"
    assert world.binding("d1") is None


def test_a_tenant_without_clusters_is_deleted_at_once(world):
    world.tenant("d2", quota={"maxClusters": 1})
    world.settle()
    world.kube.delete(HUBTENANTS, "d2")
    world.settle()
    assert world.get("d2") is None
    assert TENANT_LABEL not in (world.ns("d2").get("labels") or {})
    assert world.kube.get(RESOURCEQUOTAS, TENANT_QUOTA, "d2") is None


def test_a_deleted_tenant_releases_only_a_namespace_that_is_still_its_own(world):
    """Without status.namespace (it stopped between making the namespace and writing the status) the spec's
    namespace is released only when it is labelled for this Tenant."""
    world.namespace("other", labels={TENANT_LABEL: "someone"}, annotations={TENANT_ANNOTATION: "someone"})
    world.tenant("gone", namespace="other")
    world.kube.patch(HUBTENANTS, "gone", {"metadata": {"finalizers": [TENANT_FINALIZER]}})
    world.kube.delete(HUBTENANTS, "gone")
    world.settle()
    assert world.get("gone") is None
    assert world.ns("other")["labels"] == {TENANT_LABEL: "someone"}


# --------------------------------------------------------------------------- conflicts and errors

def test_a_conflict_on_the_finalizer_is_retried_on_a_fresh_read(world):
    world.tenant("c1")
    world.kube.fail("patch", HUBTENANTS, Conflict(409, "the object has been modified"))
    seen = world.settle()
    assert [outcome for _, outcome in seen] == [Outcome.done()] * len(seen)  # no error reached the queue
    assert world.finalizers("c1") == [TENANT_FINALIZER] and world.status("c1")["namespace"] == "c1"
    assert world.controller.queue.failures("c1") == 0


def test_a_conflict_making_the_reader_binding_reads_again(world):
    world.tenant("c2", admins=[ALICE])
    world.kube.fail("create", CLUSTERROLEBINDINGS, Conflict(409, "already exists"))
    world.settle()
    assert subjects(world.kube.get(CLUSTERROLEBINDINGS, f"{TENANT_ADMIN_CLUSTERROLE}:c2")) == [
        ("ServiceAccount", "alice", USERS)]
    assert world.controller.queue.failures("c2") == 0


def test_an_api_error_is_retried_with_backoff(world):
    world.tenant("e1")
    world.kube.fail("create", NAMESPACES, ApiError(500, "Internal Server Error"), times=2)
    seen = world.settle()
    errors = [outcome for _, outcome in seen if isinstance(outcome, ApiError)]
    assert len(errors) == 2  # twice, each time put back with backoff (Workers.apply)
    assert world.status("e1") == {"namespace": "e1", "clusters": 0}
    assert world.controller.queue.failures("e1") == 0  # forgotten once it succeeded


def test_a_tenant_gone_before_its_turn_is_done(world):
    assert world.controller.reconcile("never-there") == Outcome.done()
    world.kube.fail("get", HUBTENANTS, ApiError(503, "Service Unavailable"))
    with pytest.raises(ApiError):
        world.controller.reconcile("never-there")


# --------------------------------------------------------------------------- the watches setup declares

def test_setup_declares_the_tenants_source_the_shared_handlers_a_worker_and_the_resync(world):
    manager = world.manager
    assert set(manager.informers) == {"clusters", "namespaces", TENANTS}
    assert manager.store(TENANTS) is world.controller.tenants
    assert [(c.name, c.workers.count) for c in manager.controllers] == [("tenant", 1)]
    assert world.controller.controller is manager.controllers[0]
    assert world.controller.resync in manager._runnables
    # A Tenant's status naming another namespace makes a Cluster there bring it back too.
    world.tenant("s1")
    world.settle()
    assert world.controller.tenants.in_namespace("s1") == ["s1"]
