"""The service against a REAL kube-apiserver + etcd (tests/envtest.py): everything but fault injection.

CRDs generated from the models are installed by the fixture; the server refuses
bad Clusters; status is a subresource; the finalizer holds a deleted Cluster until
its stack is destroyed; a Lease keeps a second replica idle; 410 Gone after an
etcd compaction makes the watch relist, and a renewed watch resumes without one.
Skips, naming the missing binaries, where scripts/tools.sh has not built them.
"""
from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from automation.adapters.kube.informer import Informer, Source
from stacks.crds import crd_manifests
from doubles.engine import RecordingEngine
from doubles.envtest import take_lease
from tests.envtest import env, executor, kube_apiserver, kube_apiserver_nocache  # noqa: F401 - fixtures
from doubles.factories import cluster_doc
from doubles.service_env import ServiceEnv, wait_until
from stacks.names import FINALIZER, GROUP, VERSION


def running(env: ServiceEnv, engine, executor: str = "local", **options):
    """The service, watching only this test's namespace (the API server is shared by the session)."""
    return env.running(engine, watch_namespace=env.ns, executor=executor, **options)


# --------------------------------------------------------------------------- CRDs

def test_the_generated_crds_are_established_with_their_columns(env):
    ext = client.ApiextensionsV1Api(env.api_client)
    for crd in crd_manifests():
        live = ext.read_custom_resource_definition(crd["metadata"]["name"])
        assert any(c.type == "Established" and c.status == "True" for c in live.status.conditions)
        assert live.spec.scope == crd["spec"]["scope"]
    cluster = ext.read_custom_resource_definition("hubclusters.hubwright.io")
    columns = [c.name for c in cluster.spec.versions[0].additional_printer_columns]
    assert columns[:4] == ["Account", "Region", "Ready", "Reason"]
    assert cluster.spec.versions[0].subresources.status is not None


@pytest.mark.parametrize("change, complaint", [
    ({"accountID": "12"}, "spec.accountID"),
    ({"region": "mars-north-1"}, "spec.region"),
    ({"infraID": "Not_A_Label"}, "spec.infraID"),
    ({"apiURL": "http://api.example.com"}, "spec.apiURL"),
    ({"network": {"vpcID": "vpc-0c1", "cidr": "10.0.0.0/8"}}, "spec.network.cidr"),  # a VPC block is /16 to /28
    ({"network": {"vpcID": "subnet-1", "cidr": "10.1.0.0/16"}}, "spec.network.vpcID"),
    ({"privateLink": {"enabled": "yes"}}, "spec.privateLink.enabled"),
])
def test_the_api_server_refuses_invalid_clusters(env, change, complaint):
    doc = cluster_doc("bad", env.ns, **change)
    with pytest.raises(ApiException) as refused:
        env.custom.create_namespaced_custom_object(GROUP, VERSION, env.ns, "hubclusters", doc)
    assert refused.value.status == 422
    assert complaint in json.loads(refused.value.body)["message"]


def test_unknown_fields_are_refused_with_strict_validation(env):
    doc = cluster_doc("typo", env.ns)
    doc["spec"]["privateLnk"] = {"enabled": True}
    with pytest.raises(ApiException) as refused:
        env.custom.create_namespaced_custom_object(GROUP, VERSION, env.ns, "hubclusters", doc, field_validation="Strict")
    assert 'unknown field "spec.privateLnk"' in json.loads(refused.value.body)["message"]


def test_status_is_a_subresource_and_only_spec_moves_generation(env):
    doc = cluster_doc("prod-1", env.ns)
    doc["status"] = {"inputsHash": "forged"}
    created = env.custom.create_namespaced_custom_object(GROUP, VERSION, env.ns, "hubclusters", doc)
    assert "status" not in created  # ignored on create
    env.patch_status("prod-1", {"inputsHash": "abc", "observedGeneration": 1})
    after_status = env.get("prod-1")
    assert after_status["status"]["inputsHash"] == "abc" and after_status["metadata"]["generation"] == 1
    env.patch("prod-1", {"spec": {"apiURL": "https://api.t.example.com"}, "status": {"inputsHash": "ignored"}})
    after_spec = env.get("prod-1")
    assert after_spec["metadata"]["generation"] == 2 and after_spec["status"]["inputsHash"] == "abc"


# --------------------------------------------------------------------------- the service

def test_create_update_delete_through_the_real_api_server(env, executor):
    engine = RecordingEngine()
    env.create("prod-1")
    with running(env, engine, executor):
        wait_until(lambda: env.ready("prod-1"), 20)
        obj = env.get("prod-1")
        assert FINALIZER in obj["metadata"]["finalizers"]
        assert obj["status"]["inputsHash"] == engine.stacks[f"{env.ns}.prod-1"].digest()
        assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"] == 1

        env.patch("prod-1", {"spec": {"apiURL": "https://api.blue.example.com"}})
        wait_until(lambda: engine.count("up") == 2 and env.get("prod-1")["status"]["observedGeneration"] == 2, 20)

        env.delete("prod-1")
        wait_until(lambda: env.get("prod-1") is None, 20, what="the Cluster to be released")
    assert [c.operation for c in engine.calls] == ["up", "up", "destroy"]
    if executor == "runners":  # the stack's update history, in the tenant's namespace
        runs = env.custom.list_namespaced_custom_object(GROUP, VERSION, env.ns, "hubstackruns")["items"]
        assert sorted((r["spec"]["operation"], r["status"]["phase"]) for r in runs) == [
            ("destroy", "Succeeded"), ("up", "Succeeded"), ("up", "Succeeded")]
    reasons = [r for _, r, _ in env.events(name="prod-1")]
    for reason in ("UpdateStarted", "UpdateSucceeded", "DestroyStarted", "DestroySucceeded"):
        assert reason in reasons


def test_a_failed_destroy_holds_the_cluster_until_a_retry_succeeds(env, executor):
    engine = RecordingEngine()
    env.create("prod-1")
    with running(env, engine, executor, backoff_base=0.3, backoff_cap=0.6):
        wait_until(lambda: env.ready("prod-1"), 20)
        engine.fail("destroy", times=1, message="DependencyViolation: the endpoint service has connections")
        env.delete("prod-1")
        wait_until(lambda: env.reason("prod-1") == "DestroyFailed", 20)
        held = env.get("prod-1")
        assert held["metadata"]["deletionTimestamp"] and FINALIZER in held["metadata"]["finalizers"]
        wait_until(lambda: env.get("prod-1") is None, 20, what="the retried destroy")
    assert [c.ok for c in engine.runs("destroy")] == [False, True]


def test_a_restart_costs_no_engine_run_against_the_real_server(env, executor):
    engine = RecordingEngine()
    for name in ("a", "b"):
        env.create(name)
    with running(env, engine, executor):
        wait_until(lambda: env.ready("a") and env.ready("b"), 20)
    again = RecordingEngine()
    again.stacks = dict(engine.stacks)
    with running(env, again, executor) as service:
        wait_until(lambda: service.pipeline is not None and service.pipeline.mapper.enqueued == 0
                   and service.ready()[0], 20)
        wait_until(lambda: service.pipeline.queue.idle(), 5)
    assert again.calls == []


def test_the_lease_keeps_the_second_replica_idle_until_the_leader_goes(env):
    leader_engine, follower_engine = RecordingEngine(), RecordingEngine()
    options = dict(leader_election=True, leader_election_id="hubwright", lease_duration=4, renew_deadline=2,
                   retry_period=0.5, watch_namespace=env.ns)
    first = env.service(leader_engine, identity="replica-1", **options)
    second = env.service(follower_engine, identity="replica-2", **options)
    first.start()
    try:
        wait_until(lambda: first.leading(), 20, what="replica-1 to lead")
        second.start()
        env.create("prod-1")
        wait_until(lambda: env.ready("prod-1"), 20)
        ok, detail = second.ready()
        assert ok and detail["role"] == "follower" and detail["leader"] == "replica-1"
        assert not second.leading() and second.pipeline is None
        lease = client.CoordinationV1Api(env.api_client).read_namespaced_lease("hubwright", env.system_namespace)
        assert lease.spec.holder_identity == "replica-1"

        first.stop()  # releases the Lease: the follower takes over without waiting for it to expire
        wait_until(lambda: second.leading(), 20, what="replica-2 to take over")
        env.create("prod-2")
        wait_until(lambda: env.ready("prod-2"), 20)
    finally:
        first.stop()
        second.stop()
    assert [c.stack for c in leader_engine.calls] == [f"{env.ns}.prod-1"]
    assert [c.stack for c in follower_engine.calls] == [f"{env.ns}.prod-2"]  # prod-1 was up to date


def test_a_leader_that_loses_its_lease_stops_running(env):
    engine = RecordingEngine()
    options = dict(leader_election=True, leader_election_id="hubwright", lease_duration=4, renew_deadline=2,
                   retry_period=0.3, watch_namespace=env.ns)
    service = env.service(engine, identity="replica-1", **options)
    service.start()
    try:
        wait_until(lambda: service.leading() and service.ready()[0], 20)
        # someone else holds it now (e.g. after a network partition)
        take_lease(env.api_client, "hubwright", env.system_namespace, "intruder", 60)
        wait_until(lambda: not service.leading() and service.pipeline is None, 20, what="replica-1 to stop")
        env.create("prod-1")
        # It goes on reading the Lease as a follower: nothing watches, nothing can run.
        wait_until(lambda: service.elector.holder == "intruder", 10, what="replica-1 to see the intruder's Lease")
        assert service.pipeline is None and engine.calls == [] and service.ready()[1]["role"] == "follower"
    finally:
        service.stop()


# --------------------------------------------------------------------------- watch: resume and 410

def _cluster_informer(api_server, namespace: str, timeout_seconds: int):
    custom = client.CustomObjectsApi(api_server.api_client())
    seen: list[tuple[str, str]] = []
    source = Source("clusters", custom.list_namespaced_custom_object, (GROUP, VERSION, namespace, "hubclusters"))
    informer = Informer(source, lambda kind, raw: seen.append((kind, raw["metadata"]["name"])),
                        timeout_seconds=timeout_seconds, retry_base=0.05, retry_cap=0.2)
    return informer, seen


def test_a_renewed_watch_resumes_from_its_version_without_relisting(env, kube_apiserver):  # noqa: F811
    env.create("a")
    informer, seen = _cluster_informer(kube_apiserver, env.ns, timeout_seconds=1)
    informer.start()
    try:
        wait_until(lambda: informer.synced.is_set(), 20)
        env.patch("a", {"spec": {"apiURL": "https://api.x.example.com"}})
        wait_until(lambda: ("MODIFIED", "a") in seen, 20)
        renewed = informer.watches
        wait_until(lambda: informer.watches >= renewed + 2, 20)  # two server-side timeouts, renewed from our version
        env.patch("a", {"spec": {"apiURL": "https://api.y.example.com"}})
        wait_until(lambda: seen.count(("MODIFIED", "a")) == 2, 20)
    finally:
        informer.stop()
    assert informer.lists == 1
    assert seen == [("ADDED", "a"), ("MODIFIED", "a"), ("MODIFIED", "a")]


def test_410_after_an_etcd_compaction_relists_and_hands_on_only_differences(kube_apiserver_nocache):  # noqa: F811
    env = ServiceEnv.isolated(kube_apiserver_nocache.api_client())
    for name in ("a", "b", "c"):
        env.create(name)
    informer, seen = _cluster_informer(kube_apiserver_nocache, env.ns, timeout_seconds=1)
    informer.start()
    try:
        wait_until(lambda: informer.synced.is_set(), 20)
        informer.stop()  # the service is away for a while...
        env.patch("b", {"spec": {"apiURL": "https://api.changed.example.com"}})
        env.delete("c")
        env.create("d")
        kube_apiserver_nocache.compact()  # ...and etcd forgets the versions it knew
        before = len(seen)
        informer.start()
        wait_until(lambda: informer.lists == 2, 20, what="a relist after 410 Gone")
        wait_until(lambda: len(seen) - before == 3, 20)
    finally:
        informer.stop()
        env.api_client.close()
    assert sorted(seen[before:]) == [("ADDED", "d"), ("DELETED", "c"), ("MODIFIED", "b")]
