"""deletionPolicy Retain through the service against the REAL kube-apiserver (tests/envtest.py), with each executor:
a HubCluster deleted with Retain keeps its stack's own-account part (stacks/keep.py), is recorded as a
HubRetainedStack that holds its claims, and goes; a HubCluster re-created in the same namespace adopts it (only
what Retain removed is created again); the hub administrator releases one with Destroy or Forget, said out loud;
and Retain where the hub does not allow it holds the cluster, its stack kept, until someone decides.

The engine is the recording double (the real pulumi CLI's part is tests/test_retention_pulumi_live.py)."""
from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from doubles.engine import RecordingEngine
from doubles.service_env import ServiceEnv, wait_until
from stacks.inputs import StackInputs
from stacks.keep import retained_inputs
from stacks.names import FINALIZER, GROUP, RETAINEDS, VERSION
from stacks.retention import RETAIN_NOT_ALLOWED
from tests.envtest import env, executor, kube_apiserver  # noqa: F401 - the fixtures

pytestmark = pytest.mark.live


def record(env: ServiceEnv, name: str) -> dict | None:
    try:
        return env.custom.get_cluster_custom_object(GROUP, VERSION, RETAINEDS, f"{env.ns}.{name}")
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def release(env: ServiceEnv, name: str, how: str) -> None:
    """What the hub administrator runs (the command the refusals and docs/service.md give)."""
    env.custom.patch_cluster_custom_object(GROUP, VERSION, RETAINEDS, f"{env.ns}.{name}", {"spec": {"release": how}})


def allow_retain(env: ServiceEnv, allowed: bool = True) -> None:
    env.patch_hub({"spec": {"deletion": {"allowRetain": allowed}}})


def record_events(env: ServiceEnv, name: str) -> list[tuple[str, str]]:
    """The Events on a HubRetainedStack (cluster-scoped: they go to the default namespace)."""
    events = client.CoreV1Api(env.api_client).list_namespaced_event(
        "default", field_selector=f"involvedObject.name={env.ns}.{name}").items
    return [(e.reason, e.message) for e in events]


def test_retain_keeps_the_own_account_part_records_it_and_the_re_created_cluster_adopts_it(env, executor):
    engine, stack = RecordingEngine(), f"{env.ns}.prod-1"
    allow_retain(env)
    env.create("prod-1", deletionPolicy="Retain")
    with env.running(engine, watch_namespace=env.ns, executor=executor):
        wait_until(lambda: env.ready("prod-1"), 20)
        full = engine.stacks[stack]
        assert isinstance(full, StackInputs) and full.private_link is not None
        env.delete("prod-1")
        wait_until(lambda: env.get("prod-1") is None, 20, what="the retained cluster to go")
        assert engine.stacks[stack] == retained_inputs(full)  # the hub side went; the stack stayed
        kept = record(env, "prod-1")
        assert kept is not None
        uid = env.core.read_namespace(env.ns).metadata.uid
        assert {k: kept["spec"][k] for k in ("namespace", "cluster", "namespaceUID", "accountID", "stack")} == {
            "namespace": env.ns, "cluster": "prod-1", "namespaceUID": uid, "accountID": full.cluster.account_id,
            "stack": stack}
        assert kept["spec"]["claims"]["infraID"] == f"{full.cluster.account_id}/{full.private_link.infra_id}"
        assert kept["spec"]["kept"][0].startswith("aws:ec2/vpcEndpointService:VpcEndpointService")
        wait_until(lambda: {"RetainStarted", "Retained"} <= {r for _, r, _ in env.events(name="prod-1")}, 20,
                   what="the retain's Events")
        assert "DestroyStarted" not in {r for _, r, _ in env.events(name="prod-1")}

        env.create("prod-1")  # the same name, the same namespace: it adopts the stack
        wait_until(lambda: env.ready("prod-1") and record(env, "prod-1") is None, 20,
                   what="the re-created cluster to adopt the retained stack")
        assert engine.stacks[stack].digest() == full.digest()
        wait_until(lambda: "Adopted" in [r for _, r, _ in env.events(name="prod-1")], 20, what="the Adopted Event")
    assert [c.operation for c in engine.calls] == ["up", "up", "up"]  # never a destroy


def test_the_administrator_releases_a_retained_stack_with_destroy_or_forget(env, executor):
    engine = RecordingEngine()
    allow_retain(env)
    for name in ("gone", "left"):
        env.create(name, deletionPolicy="Retain")
    with env.running(engine, watch_namespace=env.ns, executor=executor) as service:
        wait_until(lambda: env.ready("gone") and env.ready("left"), 20)
        for name in ("gone", "left"):
            env.delete(name)
        wait_until(lambda: record(env, "gone") is not None and record(env, "left") is not None, 20)
        release(env, "gone", "Destroy")
        release(env, "left", "Forget")
        wait_until(lambda: record(env, "gone") is None and record(env, "left") is None, 20, what="both released")
        cache = service.pipeline.cache  # what admission reads: the claims and slots are free again
        wait_until(lambda: cache.retained_of(f"{env.ns}/gone") is None and cache.retained_of(f"{env.ns}/left") is None,
                   20, what="the releases in the service's cache")
        assert f"{env.ns}.gone" not in engine.stacks and f"{env.ns}.left" not in engine.stacks
        wait_until(lambda: any(r == "ReleasedDestroy" for r, _ in record_events(env, "gone"))
                   and any(r == "ReleasedForget" for r, _ in record_events(env, "left")), 20)
        [forgot] = [m for r, m in record_events(env, "left") if r == "ReleasedForget"]
        assert "left in account 222222222222" in forgot and "VpcEndpointService" in forgot
    operations = [(c.operation, c.stack) for c in engine.calls if c.operation in ("destroy", "forget")]
    assert sorted(operations) == [("destroy", f"{env.ns}.gone"), ("forget", f"{env.ns}.left")]


def test_retain_where_the_hub_does_not_allow_it_holds_the_deleted_cluster_until_someone_decides(env, executor):
    engine, stack = RecordingEngine(), f"{env.ns}.prod-1"
    allow_retain(env)
    env.create("prod-1", deletionPolicy="Retain")
    with env.running(engine, watch_namespace=env.ns, executor=executor):
        wait_until(lambda: env.ready("prod-1"), 20)
        allow_retain(env, False)  # the hub administrator turns it off: the cluster says so, its stack is kept
        wait_until(lambda: env.reason("prod-1") == RETAIN_NOT_ALLOWED, 20)
        env.delete("prod-1")
        held = env.get("prod-1")
        assert held is not None and FINALIZER in held["metadata"]["finalizers"]
        assert engine.count("destroy") == 0 and stack in engine.stacks
        env.patch("prod-1", {"spec": {"deletionPolicy": "Delete"}})  # the tenant decides: destroy it after all
        wait_until(lambda: env.get("prod-1") is None, 20, what="the destroy the tenant chose")
    assert engine.count("destroy") == 1 and record(env, "prod-1") is None
