"""The transit controller called directly: no service, no threads (but where the bound is the point), no HTTP.

Its reconciler over doubles.objects.FakeObjects (the in-memory API server of every kind, its changes handed to a real
Cache as the hubconfigs informer would), the HubConfig's status.mesh written through the kit's status writer
(MeshHub), Events on the HubConfig. Then the controllers together, as automation/service/serve.py wires them: the
real Mapper and FleetPublisher over the same store, the clusters' Reconciler over FakeClusters, the transit
controller from `transit.setup`, both drawing on one `Slots` bound: a cluster's attachment waits for its transit
stack (transit, clusters, transit), and a join costs the joiner's run, then the transit stack's.
tests/test_transit_service.py keeps the same story on the real API server, end to end.
"""
from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from automation.adapters.engine import PolicyViolation
from automation.kit.objects import HUBCONFIGS
from automation.kit.queue import Outcome, WorkQueue
from automation.kit.runtime import Manager
from automation.service.cache import Cache
from automation.service.clusters import ReconcileOptions, Reconciler
from automation.service.mapper import FleetPublisher, Mapper
from automation.service.runs import Runs
from automation.kit.runtime import Slots
from automation.service.transit import MeshHub, MeshStates, TransitReconciler, setup
from doubles.clusters import FakeClusters
from doubles.engine import RecordingEngine
from doubles.factories import HUB_ACCOUNT, cluster_doc, hub_doc
from doubles.objects import FakeObjects, fake_hub
from doubles.service_env import wait_until
from stacks.names import MESH_ENABLED_ANNOTATION, MESH_LABEL
from stacks.status import (GroupStatus, LastUpdate, MeshHubStatus, TransitOutputsStatus, TransitRegionStatus,
                           TransitStatus)
from stacks.targets import AwsTarget
from stacks.transit import GroupState, MeshStatus, TransitInputs, TransitRegionInputs, transit_stack

TRANSIT = transit_stack(HUB_ACCOUNT)
EAST, WEST = "us-east-1", "eu-west-1"


def transit_inputs(*regions: str) -> TransitInputs:
    return TransitInputs(stack=TRANSIT, account_id=HUB_ACCOUNT, asn=64512, organization=True, tags={},
                         regions=tuple(TransitRegionInputs(region=r, network=AwsTarget(account_id=HUB_ACCOUNT, region=r))
                                       for r in regions))


class Wanted:
    """The desired state as the mapper's snapshot publishes it (DesiredView), for the transit stack alone."""

    def __init__(self, inputs: TransitInputs | None):
        self.inputs = inputs

    def transit(self, stack: str) -> TransitInputs | None:
        return self.inputs if stack == TRANSIT else None


class Hub:
    """A HubConfig in FakeObjects, a Cache fed from it (`watched`: as the informer would, else only as created)."""

    def __init__(self, *, watched: bool = True, **spec: Any):
        self.store = FakeObjects()
        self.cache = Cache(hub_name="default", role_map_name="role-map", role_map_namespace="hubwright-system",
                           parse_role_map=lambda raw: {})
        stores = self.cache.stores()
        if watched:
            self.store.watch(HUBCONFIGS, stores["hubconfigs"].apply)
        created = self.store.create(HUBCONFIGS, hub_doc(**spec))
        if not watched:
            stores["hubconfigs"].apply("ADDED", created)
        self.mesh = MeshHub(self.store, self.cache)

    def status(self) -> dict:
        """status.mesh as the API server has it."""
        return ((self.store.get(HUBCONFIGS, "default") or {}).get("status") or {}).get("mesh") or {}

    def events(self) -> list[tuple[str, str, str]]:
        return [(e.type, e.reason, e.message) for e in self.store.events if e.kind == "HubConfig"]

    def reconciler(self, wanted: Wanted, engine: RecordingEngine, runs: Runs | None = None) -> TransitReconciler:
        return TransitReconciler(desired=wanted, cache=self.cache, engine=engine, hub=self.mesh, runs=runs or Runs(),
                                 lock_retry=7.0, stalled_recheck=60.0)


# --------------------------------------------------------------------------- status.mesh, written whole

def test_an_entry_is_written_whole_so_a_region_or_a_migration_step_that_went_is_gone():
    hub = Hub()
    two = TransitStatus(inputs_hash="a" * 64, outputs=TransitOutputsStatus(regions={
        r: TransitRegionStatus(transit_gateway_id=f"tgw-{r}", route_tables={"acme/core": f"tgw-rtb-{r}"})
        for r in (EAST, WEST)}))
    migrating = GroupState(topology="peering", migrating_to="transitGateway", step="routes").entry(
        members=3, message="moving the routes")
    assert hub.mesh.patch(groups={"acme/core": migrating, "acme/other": GroupState(topology="peering").entry(
        members=2)}, transit={TRANSIT: two})
    mesh = hub.status()
    assert mesh["groups"]["acme/core"] == {"topology": "peering", "migratingTo": "transitGateway", "step": "routes",
                                           "members": 3, "message": "moving the routes"}
    assert set(mesh["transit"][TRANSIT]["outputs"]["regions"]) == {EAST, WEST}

    one = TransitStatus(inputs_hash="b" * 64, outputs=TransitOutputsStatus(regions={
        EAST: TransitRegionStatus(transit_gateway_id=f"tgw-{EAST}")}))
    done = GroupState(topology="transitGateway").entry(members=3)
    assert hub.mesh.patch(groups={"acme/core": done}, transit={TRANSIT: one})
    mesh = hub.status()
    assert mesh["groups"]["acme/core"] == {"topology": "transitGateway", "members": 3}  # no migratingTo, step, message
    assert mesh["transit"][TRANSIT] == {"inputsHash": "b" * 64,
                                        "outputs": {"regions": {EAST: {"transitGatewayId": f"tgw-{EAST}",
                                                                       "routeTables": {}}}}}  # its group's table went
    assert mesh["groups"]["acme/other"] == {"topology": "peering", "members": 2}  # not named: untouched

    assert hub.mesh.patch(groups={"acme/core": None}, transit={TRANSIT: None})
    mesh = hub.status()
    assert mesh.get("transit", {}) == {} and set(mesh["groups"]) == {"acme/other"}
    # What the planner reads is what was written, through the same model.
    assert MeshStatus.from_hub_status({"mesh": mesh}).groups == {"acme/other": GroupState(topology="peering")}
    # One merge patch per write, on the status subresource, naming only the entries it writes.
    assert [set(w.status["mesh"]) for w in hub.store.status_writes] == [{"groups", "transit"}] * 3


def test_a_stale_cache_does_not_let_a_dropped_field_survive():
    """The cache may lag behind the writer's own last write: the writer nulls what it last sent too."""
    hub = Hub(watched=False)  # the cache never sees a write
    migrating = GroupState(topology="peering", migrating_to="transitGateway", step="attach").entry(members=2)
    hub.mesh.patch(groups={"acme/core": migrating})
    hub.mesh.patch(groups={"acme/core": GroupState(topology="peering").entry(members=2)})
    assert hub.status()["groups"]["acme/core"] == {"topology": "peering", "members": 2}


def test_a_write_that_failed_leaves_nothing_behind_once_the_next_lands():
    """A write refused (or whose answer was lost) may have landed: the next write of the entry nulls what it had."""
    hub = Hub(watched=False)
    hub.store.fail("patch_status", HUBCONFIGS)
    migrating = GroupState(topology="peering", migrating_to="transitGateway", step="attach").entry(members=2)
    with pytest.raises(Exception):
        hub.mesh.patch(groups={"acme/core": migrating})
    hub.store.patch_status(HUBCONFIGS, "default", {"mesh": {"groups": {"acme/core": migrating.model_dump(
        by_alias=True, exclude_none=True)}}})  # as if it had landed; the cache shows none of it
    hub.mesh.patch(groups={"acme/core": GroupState(topology="peering").entry(members=2)})
    assert hub.status()["groups"]["acme/core"] == {"topology": "peering", "members": 2}


# --------------------------------------------------------------------------- the reconciler's contract

GARBAGE = {"mesh": {
    "groups": {"acme/core": {"topology": "ring", "members": 2}, "acme/ok": {"topology": "peering", "members": 2}},
    "transit": {TRANSIT: {"inputsHash": "x" * 65, "lastUpdate": {"operation": "dance", "result": "Succeeded"},
                          "outputs": {"regions": {EAST: {"transitGatewayId": "tgw-0old"}}}}}}}


def test_an_unreadable_transit_entry_is_run_again_and_rewritten_whole_and_reported():
    """Recorded by an older service (an older CRD let it in): the transit stack is not taken as applied, its up runs,
    and the entry written replaces every unreadable field; MeshStates reports it once, as an Event on the hub."""
    hub = Hub()
    hub.store.patch_status(HUBCONFIGS, "default", GARBAGE)
    engine = RecordingEngine()
    states = MeshStates(hub.cache, hub.mesh)
    assert set(states.recorded().groups) == {"acme/ok"}
    states.recorded()  # the same status again: not reported twice
    [reported] = [e for e in hub.events() if e[1] == "InvalidMeshStatus"]
    assert reported[0] == "Warning" and "status.mesh.groups[acme/core]: topology" in reported[2]

    outcome = hub.reconciler(Wanted(transit_inputs(EAST)), engine).reconcile(TRANSIT)
    assert outcome.failed is False and engine.count("up", TRANSIT) == 1
    entry = hub.status()["transit"][TRANSIT]
    assert entry["inputsHash"] == transit_inputs(EAST).digest()
    assert entry["lastUpdate"]["operation"] == "up" and entry["lastUpdate"]["result"] == "Succeeded"
    assert entry["outputs"]["regions"][EAST]["transitGatewayId"] != "tgw-0old"
    problems = MeshHubStatus.read(hub.store.get(HUBCONFIGS, "default")["status"])[1]
    assert not [p for p in problems if p.startswith("status.mesh.transit")]  # rewritten whole: nothing unreadable


def test_the_transit_reconciler_reports_each_step_as_an_event_on_the_hub():
    hub, engine = Hub(), RecordingEngine()
    wanted = Wanted(transit_inputs(EAST, WEST))
    transit = hub.reconciler(wanted, engine)

    assert transit.reconcile(TRANSIT) == Outcome.done()  # first up
    entry = TransitStatus.model_validate(hub.status()["transit"][TRANSIT])
    assert entry.outputs is not None and set(entry.outputs.regions) == {EAST, WEST}
    assert transit.reconcile(TRANSIT) == Outcome.done() and engine.count("up", TRANSIT) == 1  # applied: no run

    wanted.inputs = transit_inputs(EAST)
    engine.lock(TRANSIT)
    locked = transit.reconcile(TRANSIT)
    assert locked.failed is False and 7.0 * 0.5 <= locked.requeue_after <= 7.0 * 1.5  # waits, not a failure
    assert hub.status()["transit"][TRANSIT]["inputsHash"] == entry.inputs_hash  # nothing ran: nothing recorded

    engine.fail("up", TRANSIT, message="the gateway quota is spent")
    assert transit.reconcile(TRANSIT) == Outcome.retry()  # retried with backoff
    failed = hub.status()["transit"][TRANSIT]
    assert failed["lastUpdate"]["result"] == "Failed" and "the gateway quota is spent" in failed["lastUpdate"]["message"]
    assert failed["inputsHash"] == entry.inputs_hash and set(failed["outputs"]["regions"]) == {EAST, WEST}

    assert transit.reconcile(TRANSIT).failed is False
    assert set(hub.status()["transit"][TRANSIT]["outputs"]["regions"]) == {EAST}  # the region gone is gone

    wanted.inputs = None
    assert transit.reconcile(TRANSIT).failed is False and engine.count("destroy", TRANSIT) == 1
    assert TRANSIT not in hub.status().get("transit", {})
    assert transit.reconcile(TRANSIT).failed is False and engine.count("destroy", TRANSIT) == 1  # gone: no run

    seen = [(t, r) for t, r, _ in hub.events()]
    assert seen == [("Normal", "UpdateStarted"), ("Normal", "UpdateSucceeded"),
                    ("Normal", "UpdateStarted"), ("Normal", "StackLocked"),
                    ("Normal", "UpdateStarted"), ("Warning", "UpdateFailed"),
                    ("Normal", "UpdateStarted"), ("Normal", "UpdateSucceeded"),
                    ("Normal", "DestroyStarted"), ("Normal", "DestroySucceeded")]
    assert all(TRANSIT in message for _, _, message in hub.events())
    assert {e.key for e in hub.store.events} == {"default"}  # on the HubConfig itself


def test_a_halted_service_starts_no_transit_run():
    """The transit reconciler's runs pass the service's one gate (Runs): once halted, nothing reaches the engine."""
    hub, engine, runs = Hub(), RecordingEngine(), Runs()
    runs.halt()
    transit = hub.reconciler(Wanted(transit_inputs(EAST)), engine, runs)
    assert transit.reconcile(TRANSIT).failed is True and engine.count() == 0 and runs.active() == 0
    last = LastUpdate.model_validate(hub.status()["transit"][TRANSIT]["lastUpdate"])
    assert last.result == "Failed" and "not started" in (last.message or "")
    assert ("Warning", "RunCancelled") in [(t, r) for t, r, _ in hub.events()]


def test_a_transit_failure_maps_by_its_class_like_a_clusters():
    """outcomes.judge, the one rule (the clusters' too): NeedsAttention (a policy refusal) stalls and is looked at
    again after --stalled-recheck, not retried with backoff; a plain failure retries."""
    hub, engine = Hub(), RecordingEngine()
    transit = hub.reconciler(Wanted(transit_inputs(EAST)), engine)
    engine.fail("up", TRANSIT, message="rule tgw-routes-declared refused it", error=PolicyViolation)
    stalled = transit.reconcile(TRANSIT)
    assert stalled.failed is False and stalled.requeue_after == 60.0
    assert hub.events()[-1][1] == PolicyViolation.reason
    engine.fail("up", TRANSIT, message="throttled")
    assert transit.reconcile(TRANSIT).failed is True and hub.events()[-1][1] == "UpdateFailed"


def test_a_gone_hub_is_said_not_raised():
    """No HubConfig: the entry's write says so (False), the reconcile does not raise."""
    hub = Hub()
    hub.store.delete(HUBCONFIGS, "default")
    assert hub.mesh.patch(groups={"acme/core": GroupStatus(topology="peering", members=1)}) is False
    assert hub.reconciler(Wanted(transit_inputs(EAST)), RecordingEngine()).reconcile(TRANSIT) == Outcome.done()


# --------------------------------------------------------------------------- the shared bound

def test_the_clusters_and_the_transit_controllers_share_one_bound_served_in_order():
    """Two controllers' workers (the clusters' and the transit stacks'), each with as many threads as slots: never
    more reconciles at once than slots, all controllers together, and a transit key waits its turn, not forever."""
    slots = Slots(2)
    running, most, lock = [0], [0], threading.Lock()
    done: list[str] = []

    def work(key: str) -> Outcome:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.01)
        with lock:
            running[0] -= 1
            done.append(key)
        return Outcome.done()

    manager = Manager()
    clusters = manager.controller("stacks", slots.bound(work), workers=2)
    transit = manager.controller("transit", slots.bound(work), workers=2)
    for i in range(20):
        clusters.queue.add(f"acme/c{i}")
    transit.queue.add(TRANSIT)
    manager.start()
    try:
        wait_until(lambda: len(done) >= 21, 10, what="every key reconciled")
    finally:
        manager.stop()
    assert len(done) == 21 and most[0] == 2 and slots.busy == 0
    assert done.index(TRANSIT) < 6  # in line with the clusters' keys, not after all of them


# --------------------------------------------------------------------------- the order: transit, clusters, transit

def member_doc(i: int) -> dict:
    return cluster_doc(
        f"m{i}", "acme", labels={MESH_LABEL: "core"}, annotations={MESH_ENABLED_ANNOTATION: "true"},
        privateLink={"enabled": False},
        network={"vpcID": f"vpc-0m{i}", "cidr": f"10.{i + 1}.0.0/16", "routeTableIDs": [f"rtb-0m{i}"],
                 "nodeSecurityGroupIDs": [f"sg-0m{i}"],
                 "transitSubnets": [{"subnetID": f"subnet-0m{i}", "availabilityZone": "us-east-1a"}]})


class Service:
    """The stacks' two controllers as serve.py wires them, over one FakeObjects, stepped on this thread."""

    def __init__(self) -> None:
        self.store = FakeObjects()
        self.clusters = FakeClusters(self.store)
        self.cache = fake_hub(self.store, hub_doc(mesh={"groups": {"core": {"topology": "transitGateway",
                                                             "summaryCIDRs": ["10.0.0.0/8"]}}}))
        self.engine = RecordingEngine()
        self.desired = FleetPublisher(self.cache)
        runs, slots = Runs(), Slots(1)
        self.reconciler = Reconciler(desired=self.desired.view, cache=self.cache, engine=self.engine,
                                     kube=self.clusters, options=ReconcileOptions(drift_interval=0), runs=runs)
        self.manager = Manager()
        self.stacks = self.manager.controller("stacks", slots.bound(self.reconciler), queue=WorkQueue())
        self.transit = setup(self.manager, desired=self.desired.view, cache=self.cache, engine=self.engine,
                             objects=self.store, runs=runs, slots=slots, queue=WorkQueue())
        self.mapper = Mapper(self.cache, self.desired, add=self.stacks.queue.add,
                             add_after=self.stacks.queue.add_after, triage=self.reconciler.triage,
                             reset=self.stacks.queue.forget, hooks=self.transit.hooks)
        self.keys: dict[str, set[str]] = {"stacks": set(), "transit": set()}  # the keys each controller reconciled

    def settle(self) -> None:
        """Map and reconcile until nothing moves: one key of each controller in turn, as their workers would."""
        for _ in range(200):
            revision = self.cache.revision
            self.mapper.map_once()
            moved = self.cache.revision != revision  # a hook wrote (the groups' states): the next pass reads it
            for controller in self.manager.controllers:
                key = controller.queue.get(timeout=0)
                if key is None:
                    continue
                moved = True
                self.keys[controller.name].add(str(key))
                try:
                    controller.workers.apply(key, controller.reconcile(key))
                finally:
                    controller.queue.done(key)
            if not moved:
                return
        raise AssertionError("the controllers never settled")

    def hub_group(self) -> dict:
        mesh = ((self.store.get(HUBCONFIGS, "default") or {}).get("status") or {}).get("mesh") or {}
        return mesh.get("groups", {}).get("acme/core", {})

    def ups(self, since: int = 0) -> list[tuple[str, Any]]:
        return [(c.stack, c.inputs) for c in self.engine.calls[since:] if c.operation == "up"]

    def close(self) -> None:
        self.reconciler.close()


@pytest.fixture
def service():
    svc = Service()
    yield svc
    svc.close()


def test_a_clusters_attachment_waits_for_its_transit_stack_and_the_transit_stack_for_the_attachments(service):
    """transit, clusters, transit: the members' stacks attach only with the gateway the transit stack's first up
    recorded in status.mesh.transit, and the transit stack associates them only once their stacks recorded the
    attachments; the transit keys never reach the clusters' queue (nor a cluster's key the transit's)."""
    for i in range(3):
        service.clusters.create(member_doc(i))
    service.settle()
    ups = service.ups()
    transit_ups = [n for n, (stack, _) in enumerate(ups) if stack == TRANSIT]
    attached = {stack: n for n, (stack, inputs) in reversed(list(enumerate(ups)))
                if stack != TRANSIT and inputs.mesh.attachment is not None}
    assert set(attached) == {f"acme.m{i}" for i in range(3)}  # every member attached, in the end
    first = ups[transit_ups[0]][1]
    assert all(not g.attachments for r in first.regions for g in r.groups)  # made before any attachment existed
    assert all(transit_ups[0] < n for n in attached.values())  # no member attached before the gateway was made
    for i in range(3):
        share = service.engine.stacks[f"acme.m{i}"].mesh
        assert share.attachment.transit_gateway_id == f"tgw-{HUB_ACCOUNT}-us-east-1" and not share.peerings
    last = ups[transit_ups[-1]][1]
    [group] = last.regions[0].groups
    assert {a.cluster for a in group.attachments} == {f"acme/m{i}" for i in range(3)}  # all associated, after:
    assert transit_ups[-1] > max(attached.values())
    assert service.keys == {"stacks": {f"acme/m{i}" for i in range(3)}, "transit": {TRANSIT}}
    assert service.hub_group() == {"topology": "transitGateway", "members": 3}

    before = len(service.engine.calls)
    service.clusters.create(member_doc(3))
    service.settle()
    # the joiner's (attached at once: the gateway exists), then its association: exactly two runs, in this order
    assert [stack for stack, _ in service.ups(before)] == ["acme.m3", TRANSIT]
    assert service.ups(before)[0][1].mesh.attachment is not None
