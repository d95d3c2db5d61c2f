"""The reconciler, through the whole watch -> queue -> reconcile path, over real HTTP.

The API server is kmock's Kubernetes emulator (doubles.MockKubeAPI) and the
engine the recording double: every test states what ran on the engine and what the
Cluster says about it. These are the cases that need the running service: the mapper's
resolution (role map, hub, namespaces, mesh, placement, shared ingress), the queue, a restart,
the real client's finalizer and status writes. The reconciler's own paths (failures, locks,
recovery, drift, delete, refusals) are called directly in tests/test_reconcile_direct.py.
"""
from __future__ import annotations


import pytest

from stacks.guards import check_move
from automation.adapters.kube.ingress_sync import central_files
from stacks.haproxy import published_routes
from stacks.ingress import Route
from stacks.model.loading import parse
from stacks.names import (CLUSTER_ID_PREFIXES_ANNOTATION, DEFAULT_REGION_ANNOTATION, FINALIZER, GROUP,
                          SHARED_INGRESS_CONFIGMAP, VERSION)
from doubles.engine import RecordingEngine
from doubles.factories import INGRESS
from doubles.service_env import on_kmock, quiet, wait_until


@pytest.fixture
def env():
    with on_kmock() as env:
        yield env


def ready_condition(obj: dict) -> dict:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"), {})


def test_a_new_cluster_is_applied_once_and_reported(env):
    engine = RecordingEngine()
    env.create("prod-1")
    with env.running(engine) as service:
        wait_until(lambda: env.ready("prod-1"), what="Ready")
        quiet(service)
    assert [(c.operation, c.stack) for c in engine.calls] == [("up", "acme.prod-1")]
    obj = env.get("prod-1")
    status = obj["status"]
    assert FINALIZER in obj["metadata"]["finalizers"]
    assert status["observedGeneration"] == obj["metadata"]["generation"]
    assert status["inputsHash"] == engine.stacks["acme.prod-1"].digest()
    assert status["lastUpdate"]["operation"] == "up" and status["lastUpdate"]["result"] == "Succeeded"
    assert status["outputs"]["endpointVPC"] == "vpc-0hub1" and status["outputs"]["endpoint"].startswith("vpce-")
    assert (status["account"], status["region"]) == ("222222222222", "us-east-1")
    assert {c["type"]: c["status"] for c in status["conditions"]} == {
        "Ready": "True", "Reconciling": "False", "Stalled": "False"}
    reasons = [r for _, r, _ in env.events(name="prod-1")]
    assert reasons == ["UpdateStarted", "UpdateSucceeded"]


def test_metrics_count_runs_and_clusters_by_condition(env):
    engine = RecordingEngine()
    env.create("prod-1")
    env.namespace("strays", owner="444444444444")
    env.create("stray", namespace="strays", accountID="444444444444")
    with env.running(engine) as service:
        wait_until(lambda: env.ready("prod-1") and env.reason("stray", "strays") == "AccountNotMapped")
        metrics = wait_until(lambda: (lambda m: m if 'hubwright_clusters{condition="Stalled"} 1.0' in m else None)(
            service.metrics.exposition().decode()), what="the metrics")
    assert 'hubwright_clusters{condition="Ready"} 1.0' in metrics
    assert 'hubwright_runs_total{operation="up",result="succeeded"} 1.0' in metrics
    assert 'hubwright_run_duration_seconds_count{operation="up"} 1.0' in metrics
    assert "hubwright_queue_depth 0.0" in metrics and "hubwright_leader 1.0" in metrics


def test_a_restart_with_nothing_changed_costs_no_engine_run(env):
    for name in ("prod-1", "prod-2", "prod-3"):
        env.create(name)
    first = RecordingEngine()
    with env.running(first):
        wait_until(lambda: all(env.ready(n) for n in ("prod-1", "prod-2", "prod-3")))
    assert first.count("up") == 3

    second = RecordingEngine()
    second.stacks = dict(first.stacks)
    with env.running(second, drift_interval=3600) as service:
        quiet(service)
        assert service.pipeline.mapper.enqueued == 0
    assert second.calls == []


def test_invalid_input_stalls_with_the_reason_and_never_runs(env):
    engine = RecordingEngine()
    env.namespace("strays", owner="444444444444")
    env.create("stray", namespace="strays", accountID="444444444444")  # no role for this account
    with env.running(engine) as service:
        wait_until(lambda: env.reason("stray", "strays") == "AccountNotMapped")
        quiet(service)
        assert engine.calls == []
        stalled = env.condition("stray", "Stalled", "strays")
        assert stalled["status"] == "True" and "444444444444" in stalled["message"]
        assert FINALIZER not in (env.get("stray", "strays")["metadata"].get("finalizers") or [])
        assert ("Warning", "AccountNotMapped") in [(t, r) for t, r, _ in env.events("strays", name="stray")]

        # The role map ConfigMap gains the account: exactly that cluster runs.
        env.role_map({"444444444444": "arn:aws:iam::444444444444:role/hubwright"})
        wait_until(lambda: env.ready("stray", "strays"))
    assert [c.stack for c in engine.calls] == ["strays.stray"]
    assert engine.stacks["strays.stray"].cluster.role_arn == "arn:aws:iam::444444444444:role/hubwright"


def test_a_missing_hub_stalls_every_cluster_until_it_exists(env):
    engine = RecordingEngine()
    env.create("prod-1")
    with env.running(engine, hub_name="other") as service:
        wait_until(lambda: env.reason("prod-1") == "HubConfigNotFound")
        assert env.condition("prod-1", "Stalled")["status"] == "True"
        quiet(service)
        assert engine.calls == []
        env.hub("other")
        wait_until(lambda: env.ready("prod-1"))
    assert engine.count("up") == 1


def test_a_namespace_annotation_reaches_only_its_clusters_and_a_move_is_refused(env):
    env.namespace("other")
    engine = RecordingEngine()
    env.create("a1", region=None)  # the namespace's default is its region
    env.create("o1", namespace="other", region=None)
    with env.running(engine, guards=[check_move]) as service:
        wait_until(lambda: env.ready("a1") and env.ready("o1", "other"))
        env.namespace("acme", {DEFAULT_REGION_ANNOTATION: "eu-west-1"})
        wait_until(lambda: env.reason("a1") == "RegionChanged", what="RegionChanged")
        quiet(service)
        assert env.ready("o1", "other")
    assert engine.count("up") == 2  # the refused move never ran
    assert "region changed from us-east-1 to eu-west-1" in env.condition("a1", "Stalled")["message"]


def test_under_legacy_precedence_an_overridden_spec_region_is_warned_once_and_explicit_refuses_the_move(env):
    """The upgrade path of docs/security.md: under Legacy the namespace default keeps the cluster where it runs,
    with a RegionOverridden Warning condition and one Event naming both regions; the switch to Explicit would
    move it, which is refused (RegionChanged), never done; fixing spec.region heals both."""
    engine = RecordingEngine()
    env.namespace("acme", {DEFAULT_REGION_ANNOTATION: "us-east-1"})
    env.patch_hub({"spec": {"regionPrecedence": "Legacy"}})
    env.create("prod-1", region="eu-west-1")
    with env.running(engine, guards=[check_move]) as service:
        wait_until(lambda: env.ready("prod-1"), what="Ready")
        warned = wait_until(lambda: env.condition("prod-1", "RegionOverridden"), what="the RegionOverridden warning")
        assert warned["status"] == "True"
        assert "spec.region is eu-west-1" in warned["message"] and "in us-east-1" in warned["message"]
        assert env.get("prod-1")["status"]["region"] == "us-east-1"
        assert engine.stacks["acme.prod-1"].cluster.region == "us-east-1"
        env.patch("prod-1", {"metadata": {"labels": {"touched": "yes"}}})  # another status write: no second Event
        quiet(service)
        warnings = [(r, m) for t, r, m in env.events(name="prod-1") if r == "RegionOverridden"]
        counts = [e.count or 1 for e in env.core.list_namespaced_event(env.ns).items if e.reason == "RegionOverridden"]
        assert counts == [1], counts
        assert len(warnings) == 1 and "eu-west-1" in warnings[0][1] and "us-east-1" in warnings[0][1], warnings

        env.patch_hub({"spec": {"regionPrecedence": "Explicit"}})
        wait_until(lambda: env.reason("prod-1") == "RegionChanged", what="the move refused")
        assert env.condition("prod-1", "RegionOverridden") is None  # the warning went with the rule
        env.patch("prod-1", {"spec": {"region": "us-east-1"}})  # the fix the warning asked for
        wait_until(lambda: env.ready("prod-1"), what="Ready again")
        quiet(service)
    assert engine.count("up") == 1  # neither the warning, the refusal nor the fix (same inputs) cost a run


def test_a_misspelled_key_is_a_warning_condition_and_one_event_until_it_is_fixed(env):
    engine = RecordingEngine()
    env.create("prod-1", annotations={"hubwright.io/mesh-enable": "true"}, labels={"hubwright.io/mesh": "core"})
    with env.running(engine) as service:
        warned = wait_until(lambda: env.condition("prod-1", "UnknownKeys"), what="the UnknownKeys warning")
        assert "metadata.annotations[hubwright.io/mesh-enable]" in warned["message"]
        assert "did you mean hubwright.io/mesh-enabled?" in warned["message"]
        assert env.ready("prod-1")  # a warning, not a refusal: the cluster runs as written
        env.patch("prod-1", {"metadata": {"annotations": {"hubwright.io/mesh-enable": None,
                                                          "hubwright.io/mesh-enabled": "true"}}})
        wait_until(lambda: env.condition("prod-1", "UnknownKeys") is None, what="the warning gone with the typo")
        quiet(service)
    told = [m for _, r, m in env.events(name="prod-1") if r == "UnknownKeys"]
    assert len(told) == 1 and "mesh-enable" in told[0], told


def test_delete_destroys_the_stack_before_releasing_the_cluster(env):
    engine = RecordingEngine()
    env.create("prod-1")
    with env.running(engine):
        wait_until(lambda: env.ready("prod-1"))
        env.delete("prod-1")
        wait_until(lambda: env.get("prod-1") is None, what="the Cluster to go")
    assert [c.operation for c in engine.calls] == ["up", "destroy"]
    assert "acme.prod-1" not in engine.stacks
    assert [r for _, r, _ in env.events(name="prod-1")][-2:] == ["DestroyStarted", "DestroySucceeded"]


def test_endpoint_placement_stays_where_the_status_says(env):
    second_vpc = {"region": "us-east-1", "vpcID": "vpc-0hub9", "cidr": "10.109.0.0/16",
                  "subnets": [{"subnetID": "subnet-09", "availabilityZone": "us-east-1a"}]}
    engine = RecordingEngine()
    env.create("prod-1")
    with env.running(engine) as service:
        wait_until(lambda: env.ready("prod-1"))
        hub = env.custom.get_cluster_custom_object(GROUP, VERSION, "hubconfigs", "default")
        inventory = hub["spec"]["endpointVPCInventory"]
        # A new, emptier VPC listed first would win a fresh placement; the applied cluster stays.
        env.patch_hub({"spec": {"endpointVPCInventory": [second_vpc, *inventory]}})
        # HubConfigs and HubClusters are two watches: their events may arrive in either order. The new cluster is
        # created once the service holds the new inventory (else it is placed, and kept, in the only VPC there was).
        wait_until(lambda: "vpc-0hub9" in {vpc.vpc_id for vpc in getattr(
            getattr(service.pipeline.cache.hub, "spec", None), "endpoint_vpc_inventory", [])}, what="the new VPC")
        env.create("prod-2")
        wait_until(lambda: env.ready("prod-2"))
        quiet(service)
    assert engine.count("up", "acme.prod-1") == 1
    assert engine.stacks["acme.prod-1"].private_link.endpoint_vpc.vpc_id == "vpc-0hub1"
    assert engine.stacks["acme.prod-2"].private_link.endpoint_vpc.vpc_id == "vpc-0hub9"


def test_the_endpoint_census_steers_new_placements_from_the_first_run_and_never_moves_one(env):
    """Endpoints that are not hubwright's fill the same quota: the census counts them before the first
    resolution and then on its interval; a count that changes later moves only endpoints not yet placed."""
    hub = env.custom.get_cluster_custom_object(GROUP, VERSION, "hubconfigs", "default")
    first, *others = hub["spec"]["endpointVPCInventory"]
    second = {"region": "us-east-1", "vpcID": "vpc-0hub9", "cidr": "10.109.0.0/16",
              "subnets": [{"subnetID": "subnet-09", "availabilityZone": "us-east-1a"}]}
    env.patch_hub({"spec": {"endpointVPCInventory": [first, second, *others]}})
    counts, asked = {"vpc-0hub1": 50}, []  # vpc-0hub1 is full of other endpoints

    def census(hub):
        asked.append(sorted(vpc.vpc_id for vpc in hub.spec.endpoint_vpc_inventory))
        return dict(counts)

    engine = RecordingEngine()
    env.create("prod-1")
    with env.running(engine, census=census, endpoint_census_interval=0.1):
        wait_until(lambda: env.ready("prod-1"))
        counts.clear()
        counts["vpc-0hub9"] = 50  # now the other one fills up
        seen = len(asked)
        wait_until(lambda: len(asked) >= seen + 2, what="the census to count again")
        env.create("prod-2")
        wait_until(lambda: env.ready("prod-2"))
    assert asked[0] == ["vpc-0hub1", "vpc-0hub9", "vpc-0hubeu"]
    assert engine.count("up", "acme.prod-1") == 1
    assert engine.stacks["acme.prod-1"].private_link.endpoint_vpc.vpc_id == "vpc-0hub9"
    assert engine.stacks["acme.prod-2"].private_link.endpoint_vpc.vpc_id == "vpc-0hub1"


def mesh_member(env, name: str, n: int, group: str = "payments") -> None:
    env.create(name, labels={"hubwright.io/mesh": group}, annotations={"hubwright.io/mesh-enabled": "true"},
               network={"vpcID": f"vpc-0m{n}", "cidr": f"10.{n}.0.0/16", "routeTableIDs": [f"rtb-0m{n}"],
                        "nodeSecurityGroupIDs": [f"sg-0m{n}"]})


def test_a_cluster_joining_a_mesh_runs_only_its_own_stack_and_gets_a_durable_join_stamp(env):
    engine = RecordingEngine()
    for n in range(1, 4):
        mesh_member(env, f"m{n}", n)
    with env.running(engine) as service:
        wait_until(lambda: all(env.ready(f"m{n}") for n in range(1, 4)))
        joins = {n: env.get(f"m{n}")["status"]["meshJoin"] for n in range(1, 4)}
        before = engine.count("up")
        mesh_member(env, "m4", 4)
        wait_until(lambda: env.ready("m4"))
        quiet(service)
        joiner = env.get("m4")["status"]
    assert sorted(j["order"] for j in joins.values()) == [1, 2, 3]
    assert {j["group"] for j in joins.values()} == {"payments"}
    assert engine.count("up") - before == 1 and engine.runs("up")[-1].stack == "acme.m4"
    assert joiner["meshJoin"] == {"group": "payments", "order": 4}
    share = engine.stacks["acme.m4"].mesh
    assert len(share.pairs) == 3  # the later joiner owns its pair with every earlier member


def test_a_cluster_leaving_a_mesh_runs_exactly_the_stacks_whose_share_changed(env):
    engine = RecordingEngine()
    with env.running(engine) as service:
        for n in range(1, 5):  # one by one, so the join order is m1, m2, m3, m4
            mesh_member(env, f"m{n}", n)
            wait_until(lambda: env.ready(f"m{n}"))
        before = engine.count("up")
        env.patch("m2", {"metadata": {"labels": {"hubwright.io/mesh": None}}})
        wait_until(lambda: engine.count("up") - before == 3, what="the leaver and the later joiners")
        quiet(service)
        wait_until(lambda: "meshJoin" not in env.get("m2")["status"], what="the stamp to go")
    ran = sorted(c.stack for c in engine.runs("up")[before:])
    assert ran == ["acme.m2", "acme.m3", "acme.m4"]  # 1 + (N - k): m1's share did not change
    assert engine.stacks["acme.m2"].mesh is None
    assert [p.peer.key for p in engine.stacks["acme.m4"].mesh.pairs] == ["acme/m1", "acme/m3"]


def test_the_routed_shared_ingress_id_is_recorded_once_and_kept_when_the_hubs_rule_changes(env):
    """Issue 31 item 4: the ID a cluster is routed on is recorded in status.sharedIngress.clusterID, and resolve()
    routes it on that ID from then on: here the hub administrator takes back the prefix its clusterID used."""
    env.patch_hub({"spec": {"sharedIngress": INGRESS}})
    env.namespace("acme", {CLUSTER_ID_PREFIXES_ANNOTATION: "edge-"})
    engine = RecordingEngine()
    env.create("prod-1", sharedIngress={"enabled": True, "backend": "10.0.1.10:6443"})
    env.create("edge", sharedIngress={"enabled": True, "backend": "10.0.1.11:6443", "clusterID": "edge-1"},
               apiURL="https://api.edge.example.com:6443")
    with env.running(engine) as service:
        wait_until(lambda: env.ready("prod-1") and env.ready("edge"))
        wait_until(lambda: all("sharedIngress" in env.get(n)["status"] for n in ("prod-1", "edge")),
                   what="the routed IDs to be recorded")
        assert env.get("prod-1")["status"]["sharedIngress"] == {"clusterID": "acme.prod-1"}
        assert env.get("edge")["status"]["sharedIngress"] == {"clusterID": "edge-1"}
        env.namespace("acme", {CLUSTER_ID_PREFIXES_ANNOTATION: ""})  # no longer granted: new IDs may not use it
        env.create("edge-2", sharedIngress={"enabled": True, "backend": "10.0.1.12:6443", "clusterID": "edge-2"},
                   apiURL="https://api.edge-2.example.com:6443")
        wait_until(lambda: stalled(env.get("edge-2")), what="the new cluster to be refused")
        quiet(service)
    assert "does not start with a prefix namespace acme may use" in stalled(env.get("edge-2"))
    assert engine.stacks["acme.edge"].shared_ingress.cluster_id == "edge-1"  # routed as before
    assert env.ready("edge") and engine.count("up", "acme.edge") == 1


def stalled(obj: dict) -> str | None:
    found = next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == "Stalled"), {})
    return found.get("message") if found.get("status") == "True" else None


def test_an_upgrade_keeps_the_bare_ids_the_shared_ingress_routed_before_ids_were_recorded(env):
    """Clusters routed by the service before this one recorded IDs have no status.sharedIngress: the routes the
    ConfigMap publishes at start are their record, so their node proxies (sending the bare name) keep working."""
    env.patch_hub({"spec": {"sharedIngress": INGRESS}})
    env.create("prod-1", sharedIngress={"enabled": True, "backend": "10.0.1.10:6443"})
    hub = parse(env.custom.get_cluster_custom_object(GROUP, VERSION, "hubconfigs", "default"))
    files, _ = central_files(hub, [Route("prod-1", "10.0.1.10:6443", cluster="acme/prod-1")])  # the old rule's
    namespace = hub.spec.shared_ingress.namespace
    env.namespace(namespace, owner=None)
    env.core.create_namespaced_config_map(namespace, {"metadata": {"name": SHARED_INGRESS_CONFIGMAP}, "data": files})
    engine = RecordingEngine()
    with env.running(engine) as service:
        wait_until(lambda: env.ready("prod-1"))
        env.create("prod-2", sharedIngress={"enabled": True, "backend": "10.0.1.11:6443"},
                   apiURL="https://api.prod-2.example.com:6443")
        wait_until(lambda: env.ready("prod-2"))
        wait_until(lambda: "sharedIngress" in env.get("prod-1")["status"], what="the bare ID to be recorded")
        wait_until(lambda: len(published(env, namespace)) == 2, what="the new route to be published")
        quiet(service)
    assert env.get("prod-1")["status"]["sharedIngress"] == {"clusterID": "prod-1"}
    assert engine.stacks["acme.prod-1"].shared_ingress.cluster_id == "prod-1"
    assert published(env, namespace) == {"acme/prod-1": "prod-1", "acme/prod-2": "acme.prod-2"}  # new: qualified


def published(env, namespace: str) -> dict[str, str]:
    return published_routes(env.core.read_namespaced_config_map(SHARED_INGRESS_CONFIGMAP, namespace).data or {})
