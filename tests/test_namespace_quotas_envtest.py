"""Per-namespace caps as deployed: the real kube-apiserver with the project's CRDs, the service watching every
namespace. One tenant's cheap PrivateLink clusters cannot take the endpoint slots another tenant's cluster needs:
the one over its cap is Stalled (QuotaExceeded), runs nothing and takes no slot; a cap lowered below what runs
keeps every running stack, across a restart of the service (docs/security.md). The plan's side of it:
tests/test_namespace_quotas.py.
"""
from __future__ import annotations

import uuid

import pytest

from doubles.engine import RecordingEngine
from stacks.names import FINALIZER, GROUP, MAX_ENDPOINTS_ANNOTATION, VERSION
from tests.envtest import kube_apiserver_alone  # noqa: F401 - fixture
from doubles.service_env import ServiceEnv, wait_until

EVIL = "333333333333"


@pytest.fixture
def env(kube_apiserver_alone):  # noqa: F811 - the fixture
    suffix = uuid.uuid4().hex[:6]
    env = ServiceEnv(kube_apiserver_alone.api_client(), namespace=f"acme-{suffix}", system_namespace=f"sys-{suffix}",
                     hub_name=f"hub-{suffix}")
    env.suffix = suffix
    env.namespace(env.ns)  # owns 222222222222
    env.namespace(env.system_namespace, owner=None)
    # us-east-1's one inventory VPC takes three endpoints; a namespace may have two.
    env.hub(privateLink={"endpointsPerVPC": 3}, tenancy={"maxEndpointsPerNamespace": 2})
    yield env
    for item in env.custom.list_cluster_custom_object(GROUP, VERSION, "hubclusters")["items"]:
        meta = item["metadata"]
        env.patch(meta["name"], {"metadata": {"finalizers": []}}, meta["namespace"])
        env.delete(meta["name"], meta["namespace"])
    env.api_client.close()


def settle(service) -> None:
    wait_until(lambda: service.pipeline is not None and service.pipeline.queue.idle(), 20, what="an idle queue")


def test_a_tenant_over_its_endpoint_cap_is_stalled_takes_no_slot_and_a_lowered_cap_keeps_what_runs(env):
    evil = f"evil-{env.suffix}"
    env.namespace(evil, owner=EVIL)
    engine = RecordingEngine()
    with env.running(engine) as service:
        for name in ("e-1", "e-2"):
            env.create(name, evil, accountID=EVIL)
        wait_until(lambda: env.ready("e-1", evil) and env.ready("e-2", evil), 30, what="evil's first two clusters")
        env.create("e-3", evil, accountID=EVIL)  # the third would fill the region's last endpoint slot
        wait_until(lambda: env.reason("e-3", evil) == "QuotaExceeded", 20, what="e-3 refused by its cap")
        message = env.condition("e-3", "Stalled", evil)["message"]
        assert (f"HubCluster {evil}/e-3: spec.privateLink.enabled: namespace {evil} already uses 2 of its 2 PrivateLink "
                f"endpoint slots (HubConfig {env.hub_name} spec.tenancy.maxEndpointsPerNamespace)") in message
        assert FINALIZER not in (env.get("e-3", evil)["metadata"].get("finalizers") or [])

        # The slot e-3 was refused is the one acme's cluster, younger, gets.
        env.create("prod-1")
        wait_until(lambda: env.ready("prod-1"), 20, what="acme's cluster")
        assert env.get("prod-1")["status"]["outputs"]["endpointVPC"] == "vpc-0hub1"
        settle(service)
        before = {n: env.get(n, evil)["status"] for n in ("e-1", "e-2")}

        # The hub administrator lowers evil's cap below what runs: both running stacks keep their slots, and only
        # what waits is refused, now naming the annotation.
        env.namespace(evil, {MAX_ENDPOINTS_ANNOTATION: "1"}, owner=EVIL)
        wait_until(lambda: f"annotation {MAX_ENDPOINTS_ANNOTATION} of Namespace {evil}"
                   in env.condition("e-3", "Stalled", evil)["message"], 20, what="e-3 refused by the annotation")
        settle(service)
    assert f"{evil}.e-3" not in {c.stack for c in engine.calls}
    ran = len(engine.calls)

    # A new service (nothing in memory) keeps both stacks too: their status records their endpoints.
    with env.running(engine) as service:
        settle(service)
        wait_until(lambda: service.pipeline.desired.view.inputs(f"{evil}/e-3") is not None, 20,
                   what="the new service to resolve the fleet")
        assert env.reason("e-3", evil) == "QuotaExceeded"
        for name, status in before.items():
            assert env.ready(name, evil)
            now = env.get(name, evil)["status"]
            assert (now["inputsHash"], now["lastUpdate"]) == (status["inputsHash"], status["lastUpdate"])
            assert service.pipeline.desired.view.inputs(f"{evil}/{name}").private_link.endpoint_vpc.vpc_id == \
                "vpc-0hub1"
    assert len(engine.calls) == ran  # nothing ran again, nothing was destroyed
