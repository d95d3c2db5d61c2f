"""The sources controller called directly: `reconcile(key) -> Outcome`, no service, no queue, no HTTP.

automation/service/sources.py's Sources over doubles.objects.FakeObjects (the in-memory API server of every kind:
Cluster API's and Hive's kinds as well as ours, its changes handed to a real Cache and to the source kinds' stores
as their informers would), the desired state from a real FleetPublisher over that cache (what the mapper would
publish), and the clusters' Reconciler over the same store where a HubCluster's stack matters (its destroy before
the source is let go). Each test states the Outcome, what the source and its HubCluster look like after, and the
Events on the source. `setup` is shown wiring the watches the way the Manager hands them changes.
tests/test_sources_envtest.py keeps the flows that need the real API server (its garbage collector, the real CRDs,
discovery and the stacks end to end); tests/test_sources_held_envtest.py its RBAC and kubectl's view.
"""
from __future__ import annotations

from typing import Any

import pytest

from automation.adapters.kube.informer import DictStore, Source
from automation.kit.finalizers import FinalizerConflict
from automation.kit.objects import HUBCLUSTERS, NAMESPACES, Conflict
from automation.kit.queue import Outcome
from automation.kit.runtime import Manager
from automation.service.clusters import ReconcileOptions, Reconciler
from automation.service.mapper import FleetPublisher
from automation.service.sources import WAIT, Sources, kind_of, setup, write_conditions
from doubles.clusters import FakeClusters
from doubles.engine import RecordingEngine
from doubles.factories import cluster_doc, hub_doc
from doubles.objects import FakeObjects, fake_hub
from doubles.sources import (aws_cluster_doc, capi_cluster_doc, cluster_deployment_doc, control_plane_namespace_doc,
                             hosted_cluster_doc, hosted_control_plane_doc)
from stacks.names import DELETION_PROTECTION_ANNOTATION, ENABLED_ANNOTATION, MESH_ENABLED_ANNOTATION, MESH_LABEL, \
    OVERRIDES_SOURCE_ANNOTATION, SOURCE_FINALIZER
from stacks.sources.held import HELD_CONDITION
from stacks.sources.families import KINDS, RELATED, SOURCES
from stacks.sources.kinds import (AWS_CLUSTER, CAPI_CLUSTER, CLUSTER_DEPLOYMENT, HOSTED_CLUSTER, HOSTED_CONTROL_PLANE,
                                  SourceKind)

CAPI_OWN = "cluster.cluster.x-k8s.io"  # Cluster API's own finalizer
MESH = {"mesh": {"groups": {"payments": {"topology": "peering"}}}}


class World:
    """The sources controller and what it sees, all in this thread."""

    def __init__(self, **hub_spec: Any):
        self.store = FakeObjects()
        self.cache = fake_hub(self.store, hub_doc(**hub_spec))
        self.kinds: dict[str, DictStore] = {}
        for kind in KINDS:
            self.kinds[kind.qualified] = DictStore(lambda event, raw: None)
            self.store.watch(kind_of(kind), self.kinds[kind.qualified].apply)
        self.fleet = FleetPublisher(self.cache)
        self.sources = Sources(kinds=SOURCES, stores=self.kinds, cache=self.cache, desired=self.fleet.view,
                               objects=self.store)
        self.engine = RecordingEngine()
        self.clusters = Reconciler(desired=self.fleet.view, cache=self.cache, engine=self.engine,
                                   kube=FakeClusters(self.store), options=ReconcileOptions(drift_interval=0))

    def add(self, doc: dict) -> dict:
        kind = next(k for k in KINDS if k.kind == doc["kind"] and doc["apiVersion"].startswith(f"{k.group}/"))
        made = self.store.create(kind_of(kind), {k: v for k, v in doc.items() if k != "status"})
        if doc.get("status"):
            made = self.store.patch_status(kind_of(kind), made["metadata"]["name"], doc["status"], "acme") or made
        return made

    def capi(self, name: str = "web-1", **opt: Any) -> None:
        self.add(aws_cluster_doc(name, vpc=f"vpc-0{name.replace('-', '')}", tag=name[-1]))
        self.add(capi_cluster_doc(name, **opt))

    def reconcile(self, name: str = "web-1", kind: SourceKind = CAPI_CLUSTER, namespace: str = "acme") -> Outcome:
        """What the mapper would have published first (the fleet as the cache has it), then one reconcile."""
        self.fleet.publish(self.fleet.get())
        return self.sources.reconcile(f"{kind.qualified}|{namespace}/{name}")

    def run(self, key: str) -> Outcome:
        """The clusters' controller on a HubCluster (its stack: up, or destroy once deleted)."""
        self.fleet.publish(self.fleet.get())
        return self.clusters.reconcile(key)

    def source(self, name: str = "web-1", kind: SourceKind = CAPI_CLUSTER) -> dict | None:
        return self.store.get(kind_of(kind), name, "acme")

    def hubcluster(self, name: str = "web-1", namespace: str = "acme") -> dict | None:
        return self.store.get(HUBCLUSTERS, name, namespace)

    def events(self, name: str = "web-1") -> list[tuple[str, str]]:
        """The Events on the source (not its HubCluster's)."""
        return [(e.type, e.reason) for e in self.store.events if e.key == f"acme/{name}" and e.kind != "HubCluster"]

    def held(self, name: str = "web-1") -> dict | None:
        conditions = ((self.source(name) or {}).get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == HELD_CONDITION), None)


def finalizers(obj: dict | None) -> list[str]:
    return list(((obj or {}).get("metadata") or {}).get("finalizers") or [])


# --------------------------------------------------------------------------- taken

def test_an_opted_in_cluster_is_held_by_our_finalizer_first_then_its_hubcluster_is_made_owned_by_it():
    world = World()
    world.capi()
    assert world.reconcile() == Outcome.done()
    source, derived = world.source(), world.hubcluster()
    assert finalizers(source) == [SOURCE_FINALIZER]
    assert derived is not None and derived["metadata"]["ownerReferences"] == [{
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "web-1",
        "uid": source["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
    calls = [(method, plural) for method, plural, key in world.store.calls if key == "acme/web-1"
             and method in ("patch", "create") and plural in ("clusters", "hubclusters")]
    assert calls == [("create", "clusters"), ("patch", "clusters"), ("create", "hubclusters")]  # finalizer first
    [event] = [e for e in world.store.events if e.reason == "HubClusterCreated"]
    assert (event.kind, event.key, event.type) == ("Cluster", "acme/web-1", "Normal")  # on the source itself

    writes = len(world.store.calls)
    assert world.reconcile() == Outcome.done()  # level-triggered: nothing changed, nothing written
    assert [c for c in world.store.calls[writes:] if c[0] not in ("get", "list")] == []
    assert world.events() == [("Normal", "HubClusterCreated")]


def test_what_the_source_says_is_followed_and_nothing_else():
    world = World(**MESH)
    world.capi()
    world.reconcile()
    world.store.patch(kind_of(CAPI_CLUSTER), "web-1", {"metadata": {"labels": {MESH_LABEL: "payments"},
                                                                    "annotations": {MESH_ENABLED_ANNOTATION: "true"}}},
                      "acme")
    world.reconcile()
    derived = world.hubcluster()
    assert derived["metadata"]["labels"][MESH_LABEL] == "payments"
    assert derived["metadata"]["annotations"][MESH_ENABLED_ANNOTATION] == "true"
    assert world.events() == [("Normal", "HubClusterCreated")]  # an update is not an Event


def test_a_hand_written_hubcluster_is_adopted_keeping_its_stack_unless_it_says_it_overrides_the_source():
    world = World()
    world.store.create(HUBCLUSTERS, cluster_doc("web-1"))
    world.capi()
    world.reconcile()
    assert world.hubcluster()["metadata"]["ownerReferences"][0]["uid"] == world.source()["metadata"]["uid"]
    assert world.events() == [("Normal", "HubClusterAdopted")]

    kept = World()
    kept.store.create(HUBCLUSTERS, cluster_doc("web-1", annotations={OVERRIDES_SOURCE_ANNOTATION: "true"}))
    kept.capi()
    before = kept.hubcluster()
    assert kept.reconcile() == Outcome.done()
    assert kept.hubcluster() == before and finalizers(kept.source()) == []  # as written; the source not held
    assert kept.events() == [("Normal", "Overridden")]


def test_a_name_another_source_controls_is_never_taken_over():
    world = World()
    world.capi()
    world.reconcile()
    world.add(cluster_deployment_doc("web-1"))
    assert world.reconcile(kind=CLUSTER_DEPLOYMENT) == Outcome.done()
    assert world.hubcluster()["metadata"]["ownerReferences"][0]["kind"] == "Cluster"
    deployment = [(e.kind, e.type, e.reason) for e in world.store.events if e.kind == "ClusterDeployment"]
    assert deployment == [("ClusterDeployment", "Warning", "NameTaken")]
    assert finalizers(world.source("web-1", CLUSTER_DEPLOYMENT)) == []


def test_a_refusal_is_said_once_on_the_source_and_keeps_nothing():
    world = World()
    world.add(capi_cluster_doc("web-1", version="v1beta1", infra_namespace="globex"))  # another namespace's object
    assert world.reconcile() == Outcome.done()
    assert world.reconcile() == Outcome.done()  # a resync: not said again
    assert [(e.kind, e.type) for e in world.store.events] == [("Cluster", "Warning")]
    assert world.hubcluster() is None and finalizers(world.source()) == []


# --------------------------------------------------------------------------- let go

def test_opting_out_deletes_the_hubcluster_then_says_the_release_and_lets_go():
    world = World()
    world.capi()
    world.reconcile()
    world.store.patch(kind_of(CAPI_CLUSTER), "web-1", {"metadata": {"annotations": {ENABLED_ANNOTATION: None}}},
                      "acme")
    assert world.reconcile() == Outcome.done(WAIT)  # its HubCluster goes first (its stack is destroyed first)
    assert world.hubcluster() is None
    assert world.events()[-2:] == [("Normal", "HubClusterDeleted"), ("Normal", "WaitingForPeers")]
    held = world.held()
    assert held is not None and (held["status"], held["reason"]) == ("True", "WaitingForPeers")
    assert "HubCluster acme/web-1" in held["message"]
    assert world.reconcile() == Outcome.done()  # gone, and the fleet without it: released
    held = world.held()
    assert held is not None and (held["status"], held["reason"]) == ("False", "Released")  # the object stays
    assert finalizers(world.source()) == []


def test_a_deleted_source_goes_once_released_with_nothing_written_on_an_object_that_goes():
    world = World()
    world.capi()
    world.reconcile()
    world.store.delete(kind_of(CAPI_CLUSTER), "web-1", "acme")
    assert world.source()["metadata"].get("deletionTimestamp")  # held by our finalizer
    assert world.reconcile() == Outcome.done(WAIT)
    status_writes = len(world.store.status_writes)
    assert world.reconcile() == Outcome.done()
    assert world.source() is None and world.hubcluster() is None
    assert len(world.store.status_writes) == status_writes  # no condition on an object our release deletes


def test_a_later_hubcluster_of_the_same_name_is_never_deleted_for_an_earlier_one():
    """The cache still shows the HubCluster the source made; on the server another of the name (another uid) took its
    place: the one the source controlled is gone already, so nothing is deleted."""
    world = World()
    world.capi()
    world.reconcile()
    made = world.hubcluster()
    world.store.delete(HUBCLUSTERS, "web-1", "acme")
    world.store.create(HUBCLUSTERS, made)  # the same document: same name, same owner, a new uid
    world.cache.apply("MODIFIED", made)  # the watch has not delivered the new one yet
    world.store.patch(kind_of(CAPI_CLUSTER), "web-1", {"metadata": {"annotations": {ENABLED_ANNOTATION: None}}},
                      "acme")
    world.reconcile()
    assert world.hubcluster() is not None and world.hubcluster()["metadata"]["uid"] != made["metadata"]["uid"]


# --------------------------------------------------------------------------- deletion protection

PROTECT = DELETION_PROTECTION_ANNOTATION


def protection(obj: dict | None) -> str | None:
    return (((obj or {}).get("metadata") or {}).get("annotations") or {}).get(PROTECT)


def annotate(world: World, value: str | None) -> None:
    world.store.patch(kind_of(CAPI_CLUSTER), "web-1", {"metadata": {"annotations": {PROTECT: value}}}, "acme")


def test_the_deletion_protection_is_the_sources_copied_to_its_hubcluster_and_lifted_with_it():
    """The trial: the protection lifted on the source stayed on the HubCluster (a merge patch keeps what it does not
    name), which then could never be deleted, by its source or anyone."""
    world = World()
    world.capi(annotations={PROTECT: "true"})
    world.reconcile()
    assert protection(world.hubcluster()) == "true"  # created with it
    annotate(world, None)  # lifted on the source
    assert world.reconcile() == Outcome.done()
    kept = world.hubcluster()
    assert kept is not None and PROTECT not in kept["metadata"]["annotations"]  # removed, not set to anything
    annotate(world, "true")  # protected again later: the HubCluster follows
    world.reconcile()
    assert protection(world.hubcluster()) == "true"
    annotate(world, "false")  # copied as written: "false" protects nothing (the policy matches "true" only)
    world.reconcile()
    assert protection(world.hubcluster()) == "false"
    annotate(world, None)
    world.store.patch(HUBCLUSTERS, "web-1", {"metadata": {"annotations": {PROTECT: "true"}}}, "acme")
    world.reconcile()  # the source decides: one written on its HubCluster by hand goes
    assert protection(world.hubcluster()) is None
    writes = len(world.store.calls)
    assert world.reconcile() == Outcome.done()  # agreed: nothing written
    assert [c for c in world.store.calls[writes:] if c[0] not in ("get", "list")] == []
    assert world.events() == [("Normal", "HubClusterCreated")]


def test_a_source_that_protects_its_hubcluster_keeps_it_when_it_opts_out_until_the_protection_is_lifted():
    world = World()
    world.capi(annotations={PROTECT: "true"})
    world.reconcile()
    world.store.patch(kind_of(CAPI_CLUSTER), "web-1", {"metadata": {"annotations": {ENABLED_ANNOTATION: None}}},
                      "acme")
    assert world.reconcile() == Outcome.done()  # the API server would refuse the delete: none is sent
    assert world.hubcluster() is not None and ("delete", "hubclusters", "acme/web-1") not in world.store.calls
    assert world.events()[-1] == ("Warning", "HubClusterProtected")
    [told] = [e for e in world.store.events if e.reason == "HubClusterProtected"]
    assert "acme/web-1" in told.message and PROTECT in told.message
    assert world.reconcile() == Outcome.done() and world.events().count(("Warning", "HubClusterProtected")) == 1

    annotate(world, None)  # lifted on the source: removed from the HubCluster first, then it is deleted
    calls = len(world.store.calls)
    assert world.reconcile() == Outcome.done(WAIT)
    assert world.hubcluster() is None
    writes = [c for c in world.store.calls[calls:] if c[1] == "hubclusters" and c[0] in ("patch", "delete")]
    assert writes == [("patch", "hubclusters", "acme/web-1"), ("delete", "hubclusters", "acme/web-1")]


# --------------------------------------------------------------------------- concurrent writers

def test_our_finalizer_lands_over_another_projects_concurrent_edit():
    """The informer's copy of the source is stale (Cluster API added its own finalizer since): the write at that
    resourceVersion is refused, read again, and lands beside theirs."""
    world = World()
    world.capi()
    stale = world.source()
    world.store.patch(kind_of(CAPI_CLUSTER), "web-1", {"metadata": {"finalizers": [CAPI_OWN]}}, "acme")
    world.kinds[CAPI_CLUSTER.qualified].apply("MODIFIED", stale)
    world.reconcile()
    assert finalizers(world.source()) == [CAPI_OWN, SOURCE_FINALIZER]
    assert world.store.conflicts >= 1


def test_a_finalizer_that_keeps_losing_is_a_transient_failure():
    world = World()
    world.capi()
    world.store.fail("patch", kind_of(CAPI_CLUSTER), Conflict(409, "the object has been modified"), times=10)
    with pytest.raises(FinalizerConflict):
        world.reconcile()
    assert world.hubcluster() is None  # nothing made before the finalizer holds the source


def test_a_condition_written_from_a_stale_copy_is_refused_never_written_over():
    world = World()
    world.capi()
    stale = world.source()
    world.store.patch_status(kind_of(CAPI_CLUSTER), "web-1", {"conditions": [{"type": "Available"}]}, "acme")
    with pytest.raises(Conflict):
        write_conditions(world.store, CAPI_CLUSTER, stale, [{"type": HELD_CONDITION, "status": "True"}])
    assert world.source()["status"]["conditions"] == [{"type": "Available"}]


# --------------------------------------------------------------------------- the hold on a deleted source

def never_converging(world: World, namespace: str = "acme") -> str:
    """A hand-written member of mesh group payments in `namespace` whose every up fails: it never converges."""
    account = "222222222222" if namespace == "acme" else "333333333333"
    world.engine.fail("up", f"{namespace}.never-done", times=10 ** 6)
    world.store.create(HUBCLUSTERS, cluster_doc(
        "never-done", namespace, accountID=account, labels={MESH_LABEL: "payments"},
        annotations={MESH_ENABLED_ANNOTATION: "true"}, privateLink={"enabled": False},
        network={"vpcID": "vpc-0nd", "cidr": "10.30.0.0/16", "routeTableIDs": ["rtb-0nd0"],
                 "nodeSecurityGroupIDs": ["sg-0ndnode"]}))
    return f"{namespace}/never-done"


def deleted_an_hour_ago(world: World) -> None:
    """The source was deleted an hour ago (the hold counts from its deletionTimestamp)."""
    world.store.patch(kind_of(CAPI_CLUSTER), "web-1", {"metadata": {"deletionTimestamp": "2020-01-01T00:00:00Z"}},
                      "acme")


def test_another_tenants_never_converging_cluster_with_the_same_mesh_label_does_not_hold_a_deleted_source():
    """globex's never-done (group globex/payments) never converges; acme deletes its Cluster API Cluster web-1
    (group acme/payments): the source goes as soon as acme's own group has converged, with no Warning."""
    world = World(**MESH)
    world.run(never_converging(world, "globex"))
    world.capi(mesh="payments")
    world.reconcile()
    world.run("acme/web-1")
    world.store.delete(kind_of(CAPI_CLUSTER), "web-1", "acme")
    assert world.reconcile() == Outcome.done(WAIT)  # its HubCluster goes first: its stack is destroyed first
    assert world.hubcluster()["metadata"]["deletionTimestamp"] and world.source() is not None
    world.run("acme/web-1")
    assert world.hubcluster() is None and world.engine.count("destroy", "acme.web-1") == 1
    assert world.reconcile() == Outcome.done()
    assert world.source() is None
    assert [r for _, r in world.events()] == ["HubClusterCreated", "HubClusterDeleted", "WaitingForPeers"]
    [waited] = [e.message for e in world.store.events if e.reason == "WaitingForPeers"]
    assert "HubCluster acme/web-1" in waited and "never-done" not in waited  # its own part only: no Warning


def test_a_member_of_the_sources_own_group_that_never_converges_holds_it_only_until_the_bound():
    """acme's own never-done never converges: the deleted web-1 is held for it (it may still route to web-1's VPC),
    said once, on the source (an Event and the SourceHeld condition), until HubConfig spec.sources.releaseAfter, then
    released with a Warning Event naming never-done."""
    world = World(**MESH, sources={"releaseAfter": "3s"})
    held = never_converging(world)
    world.capi(mesh="payments")
    world.reconcile()
    world.run("acme/web-1")
    world.run(held)
    world.store.delete(kind_of(CAPI_CLUSTER), "web-1", "acme")
    world.reconcile()  # its HubCluster goes first
    world.run("acme/web-1")
    assert world.hubcluster() is None and world.engine.count("destroy", "acme.web-1") == 1
    for _ in range(3):
        assert world.reconcile() == Outcome.done(WAIT)
    waits = [e.message for e in world.store.events if e.reason == "WaitingForPeers"]
    assert all(held in m and SOURCE_FINALIZER in m for m in waits), waits  # its HubCluster, then never-done alone
    assert len(waits) == len(set(waits)) == 2  # said once per fact, not at every look
    condition = world.held()
    assert condition is not None and (condition["status"], condition["reason"]) == ("True", "WaitingForPeers")
    assert held in condition["message"]

    deleted_an_hour_ago(world)
    assert world.reconcile() == Outcome.done()
    [released] = [e for e in world.store.events if e.reason == "ReleasedUnconverged"]
    assert released.type == "Warning" and held in released.message
    assert "HubConfig spec.sources.releaseAfter" in released.message
    assert world.source() is None  # our finalizer was its last


# --------------------------------------------------------------------------- HyperShift

def test_a_hosted_cluster_waits_for_its_control_plane_then_is_routed_to_its_kube_apiserver():
    world = World()
    world.add(hosted_cluster_doc("hc-1", shared_ingress=True, uid="u-hc-1"))
    assert world.reconcile("hc-1", HOSTED_CLUSTER) == Outcome.done()
    assert world.hubcluster("hc-1") is None and world.events("hc-1") == [("Normal", "SourcePending")]
    world.store.create(NAMESPACES, control_plane_namespace_doc("acme", "hc-1"))
    world.add(hosted_control_plane_doc("acme", "hc-1"))
    assert world.reconcile("hc-1", HOSTED_CLUSTER) == Outcome.done()
    kept = world.hubcluster("hc-1")
    assert kept is not None and kept["spec"]["sharedIngress"]["backend"] == "kube-apiserver.acme-hc-1.svc:6443"
    assert kept["metadata"]["ownerReferences"][0]["kind"] == "HostedCluster"


def test_a_hosted_cluster_whose_control_plane_namespace_is_another_tenants_is_refused_and_keeps_nothing():
    world = World()
    world.store.create(NAMESPACES, control_plane_namespace_doc("acme", "prod", annotations={
        "hubwright.io/owner-account-id": "333333333333"}))
    world.add(hosted_control_plane_doc("acme", "prod"))
    world.add(hosted_cluster_doc("prod", shared_ingress=True, uid="u-prod"))
    assert world.reconcile("prod", HOSTED_CLUSTER) == Outcome.done()
    assert world.hubcluster("prod") is None and world.events("prod") == [("Warning", "SourceRefused")]


# --------------------------------------------------------------------------- setup: the watches

def test_setup_declares_an_informer_per_kind_and_maps_each_change_to_the_sources_it_concerns():
    world = World()
    manager = Manager()
    for kind in ("clusters", "namespaces", "hubconfigs"):
        manager.source(Source(kind, lambda **kw: None), DictStore(lambda event, raw: None))
    sources = setup(manager, kinds=SOURCES, related=RELATED, source=lambda kind: Source(kind.qualified,
                                                                                        lambda **kw: None),
                    cache=world.cache, desired=world.fleet.view, objects=world.store)
    assert sources is not None and set(manager.informers) == {"clusters", "namespaces", "hubconfigs",
                                                             *(k.qualified for k in KINDS)}
    [controller] = [c for c in manager.controllers if c.name == "sources"]
    queued: list[str] = []
    controller.queue.add = queued.append  # type: ignore[method-assign]
    informers = manager.informers  # what each informer hands its changes to: the kind's store, then the watches

    cluster, infra = capi_cluster_doc("web-1", uid="u-web-1"), aws_cluster_doc("web-1")
    informers[CAPI_CLUSTER.qualified].store.apply("ADDED", cluster)
    informers[CLUSTER_DEPLOYMENT.qualified].store.apply("ADDED", cluster_deployment_doc("ocp-1", "globex"))
    assert queued == [f"{CAPI_CLUSTER.qualified}|acme/web-1", f"{CLUSTER_DEPLOYMENT.qualified}|globex/ocp-1"]
    queued.clear()
    informers[AWS_CLUSTER.qualified].store.apply("MODIFIED", infra)  # the object web-1 references
    informers["namespaces"].store.apply("MODIFIED", {"metadata": {"name": "globex"}})
    owned = cluster_doc("web-1")
    owned["metadata"]["ownerReferences"] = [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                                             "name": "web-1", "uid": "u-web-1", "controller": True}]
    informers["clusters"].store.apply("MODIFIED", owned)
    assert queued == [f"{CAPI_CLUSTER.qualified}|acme/web-1", f"{CLUSTER_DEPLOYMENT.qualified}|globex/ocp-1",
                      f"{CAPI_CLUSTER.qualified}|acme/web-1"]
    queued.clear()
    informers["hubconfigs"].store.apply("MODIFIED", hub_doc())
    assert sorted(queued) == sorted([f"{CAPI_CLUSTER.qualified}|acme/web-1",
                                     f"{CLUSTER_DEPLOYMENT.qualified}|globex/ocp-1"])
    # A HostedCluster reads its control-plane namespace and the HostedControlPlane there: their changes derive it
    # again, found through what it read (never a scan of the fleet); gone, it reads nothing.
    hosted = hosted_cluster_doc("hc-1", shared_ingress=True)
    informers[HOSTED_CLUSTER.qualified].store.apply("ADDED", hosted)
    queued.clear()
    informers[HOSTED_CONTROL_PLANE.qualified].store.apply("ADDED", hosted_control_plane_doc("acme", "hc-1"))
    informers["namespaces"].store.apply("ADDED", control_plane_namespace_doc("acme", "hc-1"))
    informers[HOSTED_CONTROL_PLANE.qualified].store.apply("ADDED", hosted_control_plane_doc("acme", "hc-2"))
    assert queued == [f"{HOSTED_CLUSTER.qualified}|acme/hc-1"] * 2
    informers[HOSTED_CLUSTER.qualified].store.apply("DELETED", hosted)
    queued.clear()
    informers[HOSTED_CONTROL_PLANE.qualified].store.apply("MODIFIED", hosted_control_plane_doc("acme", "hc-1"))
    assert queued == []
    assert setup(Manager(), kinds=[], related=RELATED, source=lambda kind: Source(kind.qualified, print),
                 cache=world.cache, desired=world.fleet.view, objects=world.store) is None
