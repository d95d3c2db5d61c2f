"""The reconciler's Kubernetes interface (automation/service/clusters/client.py: ClusterClient) over the real
kube-apiserver (KubeObjects), and over the in-memory one (doubles.clusters.FakeClusters: the same ClusterClient
over FakeObjects) held to the same contract, so that what the direct tests (tests/test_reconcile_direct.py) prove
over the fake holds over the API server.
"""
from __future__ import annotations

from typing import Any, Iterator

import pytest

from automation.adapters.kube.objects import KubeObjects
from automation.service.cache import Cache
from automation.service.clusters import ClusterClient, ReconcileOptions, Reconciler
from automation.kit.queue import Outcome
from doubles.engine import RecordingEngine
from doubles.clusters import FakeClusters, StaticDesired
from stacks.model.cluster import Cluster
from stacks.model.loading import parse
from stacks.names import FINALIZER
from stacks.status import ClusterStatus
from tests.envtest import kube_apiserver  # noqa: F401 - the fixture
from doubles.factories import cluster_doc, resolve_one
from doubles.service_env import ServiceEnv

pytestmark = pytest.mark.live  # starts processes (tests/tiers.py)

RUNNING = ClusterStatus.model_validate({"lastUpdate": {"operation": "up", "result": "Running", "message": "test"}})


class Side:
    """A user's hands on one API server (create, patch, delete, get) beside the reconciler's client."""

    def __init__(self, client: ClusterClient, ns: str):
        self.client, self.ns = client, ns

    def create(self, name: str) -> dict: ...

    def patch(self, name: str, patch: dict) -> dict: ...

    def delete(self, name: str) -> None: ...

    def get(self, name: str) -> dict | None: ...


class FakeSide(Side):
    def __init__(self) -> None:
        self.fake = FakeClusters()
        super().__init__(self.fake, "acme")

    def create(self, name: str) -> dict:
        return self.fake.create(cluster_doc(name, self.ns))

    def patch(self, name: str, patch: dict) -> dict:
        return self.fake.patch(f"{self.ns}/{name}", patch)

    def delete(self, name: str) -> None:
        self.fake.delete(f"{self.ns}/{name}")

    def get(self, name: str) -> dict | None:
        return self.fake.get(f"{self.ns}/{name}")


class RealSide(Side):
    def __init__(self, env: ServiceEnv):
        self.env = env
        self.objects = KubeObjects(env.api_client)
        self.events = self.objects.events
        super().__init__(ClusterClient(self.objects), env.ns)

    def create(self, name: str) -> dict:
        return self.env.create(name)

    def patch(self, name: str, patch: dict) -> dict:
        return self.env.patch(name, patch)

    def delete(self, name: str) -> None:
        self.env.delete(name)

    def get(self, name: str) -> dict | None:
        return self.env.get(name)


@pytest.fixture(params=["fake", "real"])
def side(request) -> Iterator[Side]:
    if request.param == "fake":
        yield FakeSide()
        return
    env = ServiceEnv.isolated(request.getfixturevalue("kube_apiserver").api_client())
    real = RealSide(env)
    yield real
    real.client.close()
    real.events.close()
    env.api_client.close()


def finalizers(obj: dict | None) -> list[str]:
    return list(((obj or {}).get("metadata") or {}).get("finalizers") or [])


def test_the_client_contract(side):
    raw = side.create("c1")
    key = f"{side.ns}/c1"
    assert side.client.write(raw, RUNNING, previous=ClusterStatus())
    assert side.get("c1")["status"]["lastUpdate"]["result"] == "Running"
    assert side.client.status(key, raw) == RUNNING  # its own last write, whatever the copy it is handed

    # The copy it holds is stale (a status write and someone's label since): the finalizer still lands, over
    # the live object, and the label stays.
    side.patch("c1", {"metadata": {"labels": {"team": "blue"}}})
    assert side.client.edit_finalizers(raw, lambda names: [*names, FINALIZER])
    live = side.get("c1")
    assert finalizers(live) == [FINALIZER] and live["metadata"]["labels"]["team"] == "blue"

    side.delete("c1")  # held by the finalizer
    held = side.get("c1")
    assert held is not None and held["metadata"].get("deletionTimestamp")
    assert side.client.edit_finalizers(held, lambda names: [n for n in names if n != FINALIZER])
    assert side.get("c1") is None  # released: gone

    assert side.client.write(raw, RUNNING, previous=RUNNING) is False  # gone: said, not raised
    assert side.client.edit_finalizers(raw, lambda names: [*names, FINALIZER]) is False
    side.client.revoke_agent(side.ns, "c1")  # no agent: nothing to delete, no error


def test_the_reconciler_applies_and_destroys_over_the_real_api_server(kube_apiserver):  # noqa: F811
    env = ServiceEnv.isolated(kube_apiserver.api_client())
    real = RealSide(env)
    cache = Cache(hub_name=env.hub_name, role_map_name="role-map", role_map_namespace=env.system_namespace,
                  parse_role_map=lambda raw: {})
    engine = RecordingEngine()
    desired = StaticDesired()
    reconciler = Reconciler(desired=desired, cache=cache, engine=engine, kube=real.client,
                            options=ReconcileOptions(drift_interval=0))
    key = f"{env.ns}/prod-1"

    def seen() -> None:  # what the informer would deliver
        obj = env.get("prod-1")
        cache.apply("MODIFIED" if obj is not None else "DELETED", obj or {"metadata": {"namespace": env.ns,
                                                                                      "name": "prod-1"}})

    try:
        created = env.create("prod-1")
        parsed = parse(created)
        assert isinstance(parsed, Cluster)
        desired.wanted[key] = resolve_one(parsed)
        seen()
        assert reconciler.reconcile(key) == Outcome.done(None)
        reconciler.close()  # the finished run's report is written from the background: wait for it
        obj: Any = env.get("prod-1")
        assert FINALIZER in finalizers(obj)
        assert obj["status"]["inputsHash"] == engine.stacks[f"{env.ns}.prod-1"].digest()
        ready = next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")
        assert (ready["status"], ready["reason"]) == ("True", "Succeeded")

        env.delete("prod-1")
        seen()
        assert reconciler.reconcile(key) == Outcome.done()
        assert [c.operation for c in engine.calls] == ["up", "destroy"]
        assert env.get("prod-1") is None
        seen()
        assert reconciler.reconcile(key) == Outcome.done()  # gone: the agent revoked (there was none)
        real.events.close()
        reasons = sorted(r for _, r, _ in env.events(name="prod-1"))  # listed by name: random suffixes
        assert reasons == ["DestroyStarted", "DestroySucceeded", "UpdateStarted", "UpdateSucceeded"]
    finally:
        reconciler.close()
        real.events.close()
        env.api_client.close()
