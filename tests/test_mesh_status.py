"""HubConfig status.mesh: one model (stacks.status), typed whole-entry patches, and the transit reconciler's
contract (reconcile(key) -> Outcome, Events on the HubConfig), against a REAL kube-apiserver (tests/envtest.py).

The writer is automation/service/transit.py's MeshStatusWriter; the reader, the planner's MeshStatus
(stacks.transit) and the service's recorded_transit / MeshStates, all through stacks.status.MeshHubStatus.
"""
from __future__ import annotations

import logging
import uuid

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from automation.adapters.engine import PolicyViolation
from automation.adapters.kube.status import EventRecorder
from automation.service.cache import Cache
from automation.service.runs import Runs
from automation.service.transit import MeshStates, MeshStatusWriter, TransitReconciler
from components.controlplane import TENANT_RULES
from doubles.engine import RecordingEngine
from stacks.names import GROUP, HUBCONFIGS, VERSION
from stacks.status import LastUpdate, MeshHubStatus, TransitOutputsStatus, TransitRegionStatus, TransitStatus
from stacks.targets import AwsTarget
from stacks.transit import GroupState, MeshStatus, TransitInputs, TransitRegionInputs, transit_stack
from tests.envtest import TENANT_USER, kube_apiserver  # noqa: F401 - the fixture
from doubles.factories import HUB_ACCOUNT, cluster_doc, hub_doc
from doubles.service_env import wait_until

TRANSIT = transit_stack(HUB_ACCOUNT)
EAST, WEST = "us-east-1", "eu-west-1"


class Hub:
    """A HubConfig of its own on the shared API server, with a cache fed from it as the informer would."""

    def __init__(self, api_client: client.ApiClient):
        self.api_client = api_client
        self.name = f"hub-{uuid.uuid4().hex[:8]}"
        self.custom = client.CustomObjectsApi(api_client)
        doc = hub_doc()
        doc["metadata"]["name"] = self.name
        self.raw = self.custom.create_cluster_custom_object(GROUP, VERSION, HUBCONFIGS, doc)
        self.cache = Cache(hub_name=self.name, role_map_name="none", role_map_namespace="default",
                           parse_role_map=lambda raw: {})
        self.refresh()
        self.writer = MeshStatusWriter(api_client, self.name, recorded=lambda: self.cache.hub_status)

    def refresh(self) -> dict:
        """Read the HubConfig back into the cache (the watch event of the last write); its status.mesh."""
        self.raw = self.custom.get_cluster_custom_object(GROUP, VERSION, HUBCONFIGS, self.name)
        self.cache.on_hub("MODIFIED", self.raw)
        return (self.raw.get("status") or {}).get("mesh") or {}

    def events(self) -> list[dict]:
        listed = client.CoreV1Api(self.api_client).list_namespaced_event(
            "default", field_selector=f"involvedObject.name={self.name}")
        return [self.api_client.sanitize_for_serialization(e) for e in listed.items]

    def close(self) -> None:
        self.custom.delete_cluster_custom_object(GROUP, VERSION, HUBCONFIGS, self.name)


@pytest.fixture
def hub(kube_apiserver):  # noqa: F811 - the fixture
    api_client = kube_apiserver.api_client()
    hub = Hub(api_client)
    yield hub
    hub.close()
    api_client.close()


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


def reconciler(hub: Hub, wanted: Wanted, engine: RecordingEngine, events: EventRecorder,
               runs: Runs | None = None) -> TransitReconciler:
    return TransitReconciler(desired=wanted, cache=hub.cache, engine=engine, writer=hub.writer, runs=runs or Runs(),
                             events=events, lock_retry=7.0, stalled_recheck=60.0)


# --------------------------------------------------------------------------- the typed patches

def test_an_entry_is_written_whole_so_a_region_or_a_migration_step_that_went_is_gone(hub):
    two = TransitStatus(inputs_hash="a" * 64, outputs=TransitOutputsStatus(regions={
        r: TransitRegionStatus(transit_gateway_id=f"tgw-{r}", route_tables={"acme/core": f"tgw-rtb-{r}"})
        for r in (EAST, WEST)}))
    migrating = GroupState(topology="peering", migrating_to="transitGateway", step="routes").entry(
        members=3, message="moving the routes")
    assert hub.writer.patch(groups={"acme/core": migrating, "acme/other": GroupState(topology="peering").entry(
        members=2)}, transit={TRANSIT: two})
    mesh = hub.refresh()
    assert mesh["groups"]["acme/core"] == {"topology": "peering", "migratingTo": "transitGateway", "step": "routes",
                                           "members": 3, "message": "moving the routes"}
    assert set(mesh["transit"][TRANSIT]["outputs"]["regions"]) == {EAST, WEST}

    one = TransitStatus(inputs_hash="b" * 64, outputs=TransitOutputsStatus(regions={
        EAST: TransitRegionStatus(transit_gateway_id=f"tgw-{EAST}")}))
    done = GroupState(topology="transitGateway").entry(members=3)
    assert hub.writer.patch(groups={"acme/core": done}, transit={TRANSIT: one})
    mesh = hub.refresh()
    assert mesh["groups"]["acme/core"] == {"topology": "transitGateway", "members": 3}  # no migratingTo, step, message
    assert mesh["transit"][TRANSIT] == {"inputsHash": "b" * 64,
                                        "outputs": {"regions": {EAST: {"transitGatewayId": f"tgw-{EAST}",
                                                                       "routeTables": {}}}}}  # its group's table went
    assert mesh["groups"]["acme/other"] == {"topology": "peering", "members": 2}  # not named: untouched

    assert hub.writer.patch(groups={"acme/core": None}, transit={TRANSIT: None})
    mesh = hub.refresh()
    assert mesh.get("transit", {}) == {} and set(mesh["groups"]) == {"acme/other"}
    # What the planner reads is what was written, through the same model.
    assert MeshStatus.from_hub_status(hub.raw["status"]).groups == {"acme/other": GroupState(topology="peering")}


def test_a_stale_cache_does_not_let_a_dropped_field_survive(hub):
    """The cache may lag behind the writer's own last write: the writer nulls what it last sent too."""
    migrating = GroupState(topology="peering", migrating_to="transitGateway", step="attach").entry(members=2)
    hub.writer.patch(groups={"acme/core": migrating})  # the cache has not seen this write
    hub.writer.patch(groups={"acme/core": GroupState(topology="peering").entry(members=2)})
    assert hub.refresh()["groups"]["acme/core"] == {"topology": "peering", "members": 2}


def test_a_tenant_cannot_write_the_hubs_status_mesh(kube_apiserver, hub):  # noqa: F811 - the fixture
    """status.mesh points members at gateways and says which migration step is done: the service's alone. A tenant
    that may create HubClusters in its namespace is refused any write of hubconfigs/status."""
    hub.writer.patch(transit={TRANSIT: TransitStatus(inputs_hash="c" * 64, outputs=TransitOutputsStatus(
        regions={EAST: TransitRegionStatus(transit_gateway_id="tgw-0hub")}))})
    written = hub.refresh()
    ns = f"tenant-{uuid.uuid4().hex[:6]}"
    core, rbac = client.CoreV1Api(hub.api_client), client.RbacAuthorizationV1Api(hub.api_client)
    core.create_namespace({"metadata": {"name": ns}})
    role = f"hubwright-tenant-{ns}"
    rbac.create_cluster_role({"metadata": {"name": role}, "rules": TENANT_RULES})
    rbac.create_namespaced_role_binding(ns, {
        "metadata": {"name": "tenant"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                                    "name": role},
        "subjects": [{"kind": "User", "name": TENANT_USER, "apiGroup": "rbac.authorization.k8s.io"}]})
    tenant = client.ApiClient(kube_apiserver.configuration(kube_apiserver.tenant_token))
    try:
        custom = client.CustomObjectsApi(tenant)

        def create() -> dict | None:
            try:
                return custom.create_namespaced_custom_object(GROUP, VERSION, ns, "hubclusters", cluster_doc("mine", ns))
            except ApiException as exc:
                if exc.status == 403:
                    return None
                raise
        assert wait_until(create, 10, what="the tenant's rights to take effect")["metadata"]["name"] == "mine"
        forged = {"status": {"mesh": {"transit": {TRANSIT: {"outputs": {"regions": {
            EAST: {"transitGatewayId": "tgw-0attacker"}}}}}, "groups": {"acme/core": {"topology": "transitGateway",
                                                                               "members": 1}}}}}
        for attempt in (lambda: custom.patch_cluster_custom_object_status(GROUP, VERSION, HUBCONFIGS, hub.name, forged),
                        lambda: custom.replace_cluster_custom_object_status(GROUP, VERSION, HUBCONFIGS, hub.name,
                                                                           {**hub.raw, **forged})):
            with pytest.raises(ApiException) as denied:
                attempt()
            assert denied.value.status == 403
        assert hub.refresh() == written
    finally:
        tenant.close()
        custom_admin = client.CustomObjectsApi(hub.api_client)
        custom_admin.delete_namespaced_custom_object(GROUP, VERSION, ns, "hubclusters", "mine")
        rbac.delete_cluster_role(role)
        core.delete_namespace(ns)


# --------------------------------------------------------------------------- entries the model cannot parse

GARBAGE = {"mesh": {
    "groups": {"acme/core": {"topology": "ring", "members": 2}, "acme/ok": {"topology": "peering", "members": 2}},
    "transit": {TRANSIT: {"inputsHash": "x" * 65, "lastUpdate": {"operation": "dance", "result": "Succeeded"},
                          "outputs": {"regions": {EAST: {"transitGatewayId": "tgw-0old"}}}}}}}


def test_an_entry_the_model_cannot_parse_is_left_out_and_named_not_raised():
    mesh, problems = MeshHubStatus.read(GARBAGE)
    assert set(mesh.groups) == {"acme/ok"} and mesh.transit == {}
    assert any(p.startswith("status.mesh.groups[acme/core]: topology") for p in problems), problems
    assert any(p.startswith(f"status.mesh.transit[{TRANSIT}]: inputsHash") for p in problems), problems
    planned = MeshStatus.from_hub_status(GARBAGE)
    assert planned.groups == {"acme/ok": GroupState(topology="peering")} and planned.problems == problems
    assert MeshHubStatus.read({"mesh": ["not", "an", "object"]})[1] == ("status.mesh: not an object (list)",)


def test_an_unreadable_transit_entry_is_run_again_and_rewritten_whole_and_reported(hub, caplog):
    """Recorded by an older service (an older CRD let it in): the transit stack is not taken as applied, its up runs,
    and the entry written replaces every unreadable field; MeshStates reports it once, as an Event on the hub."""
    hub.cache.on_hub("MODIFIED", {**hub.raw, "status": GARBAGE})
    engine, events = RecordingEngine(), EventRecorder(hub.api_client)
    states = MeshStates(hub.cache, hub.writer, events)
    with caplog.at_level(logging.WARNING, logger="hubwright.transit"):
        assert set(states.recorded().groups) == {"acme/ok"}
        states.recorded()  # the same status again: not reported twice
    assert sum("status.mesh entries left out" in r.getMessage() for r in caplog.records) == 1

    outcome = reconciler(hub, Wanted(transit_inputs(EAST)), engine, events).reconcile(TRANSIT)
    assert outcome.failed is False and engine.count("up", TRANSIT) == 1
    entry = hub.refresh()["transit"][TRANSIT]
    assert entry["inputsHash"] == transit_inputs(EAST).digest()
    assert entry["lastUpdate"]["operation"] == "up" and entry["lastUpdate"]["result"] == "Succeeded"
    events.close()
    [reported] = [e for e in hub.events() if e["reason"] == "InvalidMeshStatus"]
    assert reported["type"] == "Warning" and "status.mesh.groups[acme/core]: topology" in reported["message"]
    assert reported["involvedObject"]["kind"] == "HubConfig"


# --------------------------------------------------------------------------- the transit reconciler's contract

def test_the_transit_reconciler_reports_each_step_as_an_event_on_the_hub(hub):
    engine, events, runs = RecordingEngine(), EventRecorder(hub.api_client), Runs()
    wanted = Wanted(transit_inputs(EAST, WEST))
    transit = reconciler(hub, wanted, engine, events, runs)

    assert transit.reconcile(TRANSIT).failed is False  # first up
    hub.refresh()
    entry = TransitStatus.model_validate(hub.raw["status"]["mesh"]["transit"][TRANSIT])
    assert entry.outputs is not None and set(entry.outputs.regions) == {EAST, WEST}
    assert transit.reconcile(TRANSIT).requeue_after is None and engine.count("up", TRANSIT) == 1  # applied: no run

    wanted.inputs = transit_inputs(EAST)
    engine.lock(TRANSIT)
    locked = transit.reconcile(TRANSIT)
    assert locked.failed is False and 7.0 * 0.5 <= locked.requeue_after <= 7.0 * 1.5  # waits, not a failure
    assert hub.refresh()["transit"][TRANSIT]["inputsHash"] == entry.inputs_hash  # nothing ran: nothing recorded

    engine.fail("up", TRANSIT, message="the gateway quota is spent")
    assert transit.reconcile(TRANSIT).failed is True  # retried with backoff
    failed = hub.refresh()["transit"][TRANSIT]
    assert failed["lastUpdate"]["result"] == "Failed" and "the gateway quota is spent" in failed["lastUpdate"]["message"]
    assert failed["inputsHash"] == entry.inputs_hash and set(failed["outputs"]["regions"]) == {EAST, WEST}

    assert transit.reconcile(TRANSIT).failed is False
    assert set(hub.refresh()["transit"][TRANSIT]["outputs"]["regions"]) == {EAST}  # the region gone is gone

    wanted.inputs = None
    assert transit.reconcile(TRANSIT).failed is False and engine.count("destroy", TRANSIT) == 1
    assert TRANSIT not in hub.refresh().get("transit", {})
    assert transit.reconcile(TRANSIT).failed is False and engine.count("destroy", TRANSIT) == 1  # gone: no run

    events.close()
    seen = [(e["type"], e["reason"]) for e in sorted(hub.events(), key=lambda e: e["metadata"]["creationTimestamp"])]
    for want in [("Normal", "UpdateStarted"), ("Normal", "UpdateSucceeded"), ("Normal", "StackLocked"),
                 ("Warning", "UpdateFailed"), ("Normal", "DestroyStarted"), ("Normal", "DestroySucceeded")]:
        assert want in seen, (want, seen)
    assert seen.count(("Normal", "UpdateSucceeded")) == 2
    for event in hub.events():
        assert event["involvedObject"]["kind"] == "HubConfig" and event["involvedObject"]["uid"] == hub.raw["metadata"]["uid"]
        assert TRANSIT in event["message"]


def test_a_halted_service_starts_no_transit_run():
    """The transit reconciler's runs pass the service's one gate (Runs): once halted, nothing reaches the engine."""
    engine, runs = RecordingEngine(), Runs()
    runs.halt()
    cache = Cache(hub_name="h", role_map_name="none", role_map_namespace="default", parse_role_map=lambda raw: {})

    class NoWrites(MeshStatusWriter):
        def __init__(self) -> None:
            self.hub_name, self.written = "h", []

        def patch(self, **entries):  # noqa: ANN003
            self.written.append(entries)
            return True

        def ref(self) -> dict:
            return {"metadata": {"name": "h"}}

    class Sink:
        def __init__(self) -> None:
            self.events: list[tuple] = []

        def event(self, raw, type_, reason, message, *, kind="HubCluster"):  # noqa: ANN001
            self.events.append((kind, type_, reason))

    writer, sink = NoWrites(), Sink()
    transit = TransitReconciler(desired=Wanted(transit_inputs(EAST)), cache=cache, engine=engine,
                                writer=writer, runs=runs, events=sink, stalled_recheck=60.0)
    assert transit.reconcile(TRANSIT).failed is True and engine.count() == 0 and runs.active() == 0
    [failed] = writer.written
    last = failed["transit"][TRANSIT].last_update
    assert isinstance(last, LastUpdate) and last.result == "Failed" and "not started" in last.message
    assert ("HubConfig", "Warning", "RunCancelled") in sink.events


def test_a_transit_failure_maps_by_its_class_like_a_clusters():
    """outcomes.judge, the one rule (the clusters' too): NeedsAttention (a policy refusal) stalls and is looked at again after
    --stalled-recheck, not retried with backoff; a plain failure retries."""
    engine = RecordingEngine()
    cache = Cache(hub_name="h", role_map_name="none", role_map_namespace="default", parse_role_map=lambda raw: {})

    class Writer:
        hub_name = "h"

        def patch(self, **entries):  # noqa: ANN003
            return True

        def ref(self) -> dict:
            return {"metadata": {"name": "h"}}

    reasons: list[str] = []
    sink = type("Sink", (), {"event": lambda self, raw, type_, reason, message, kind="": reasons.append(reason)})()
    transit = TransitReconciler(desired=Wanted(transit_inputs(EAST)), cache=cache, engine=engine, writer=Writer(),
                                runs=Runs(), events=sink, stalled_recheck=60.0)
    engine.fail("up", TRANSIT, message="rule tgw-routes-declared refused it", error=PolicyViolation)
    stalled = transit.reconcile(TRANSIT)
    assert stalled.failed is False and stalled.requeue_after == 60.0 and reasons[-1] == PolicyViolation.reason
    engine.fail("up", TRANSIT, message="throttled")
    assert transit.reconcile(TRANSIT).failed is True and reasons[-1] == "UpdateFailed"
