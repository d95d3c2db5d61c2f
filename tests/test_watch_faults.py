"""Watch faults over real HTTP: dropped connections, streams that end, 410 Gone, API errors.

kmock's emulator (doubles.MockKubeAPI) is the API server; faults are injected
as kmock reactions (a stream that ends, an ERROR 410 event, an HTTP 500) or by a TCP
proxy that cuts the connection under the official client (doubles.CuttableProxy).
The client itself is never patched.
"""
from __future__ import annotations

import threading

import kmock
import pytest
from kubernetes import client

from automation.adapters.kube.informer import Informer, Source
from doubles.engine import RecordingEngine
from doubles.kube import CuttableProxy, MockKubeAPI
from doubles.service_env import ServiceEnv, wait_until
from stacks.names import GROUP, VERSION

GONE = {"type": "ERROR", "object": {"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": 410,
                                    "reason": "Expired", "message": "too old resource version"}}


def is_cluster(action):
    def check(request) -> bool:
        return request.action == action and request.resource is not None and request.resource.plural == "hubclusters"
    return check


class Recorder:
    """An informer handler that remembers what it was told."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str | None]] = []
        self._lock = threading.Lock()

    def __call__(self, kind: str, raw: dict) -> None:
        meta = raw["metadata"]
        with self._lock:
            self.events.append((kind, meta["name"], meta.get("resourceVersion")))

    def since(self, n: int) -> list[tuple[str, str]]:
        with self._lock:
            return [(kind, name) for kind, name, _ in self.events[n:]]


@pytest.fixture
def api():
    with MockKubeAPI() as api:
        yield api


@pytest.fixture
def proxy(api):
    proxy = CuttableProxy(api.port)
    yield proxy
    proxy.close()


def direct(api) -> ServiceEnv:
    """The test's own client: straight to the server, never through the proxy."""
    env = ServiceEnv(client.ApiClient(api.configuration()))
    env.namespace("acme")
    return env


def informer(api, url: str | None = None) -> tuple[Informer, Recorder]:
    custom = client.CustomObjectsApi(client.ApiClient(api.configuration(url)))
    recorder = Recorder()
    inf = Informer(Source("clusters", custom.list_cluster_custom_object, (GROUP, VERSION, "hubclusters")), recorder,
                   timeout_seconds=30, retry_base=0.05, retry_cap=0.2)
    return inf, recorder


def watches(api) -> list[dict]:
    return [r.params for r in api.requests(is_cluster(kmock.action.WATCH))]


def lists(api) -> int:
    return len(api.requests(is_cluster(kmock.action.LIST)))


def test_a_stream_that_ends_resumes_from_the_last_version_seen(api):
    env = direct(api)
    obj = env.create("a")
    changed = {**obj, "metadata": {**obj["metadata"], "resourceVersion": "100"}, "spec": {**obj["spec"],
                                                                                       "apiURL": "https://api.t1.example.com"}}
    inf, seen = informer(api)
    api.run(lambda k: k[is_cluster(kmock.action.WATCH)][:1] << ({"type": "MODIFIED", "object": changed},))
    inf.start()
    try:
        wait_until(lambda: len(watches(api)) >= 2, what="a second watch")
    finally:
        inf.stop()
    first, second = watches(api)[:2]
    assert first["resourceVersion"] == obj["metadata"]["resourceVersion"]  # from the list's version
    assert second["resourceVersion"] == "100"  # resumed where the stream ended, no relist
    assert lists(api) == 1 and inf.lists == 1
    # (After that the emulator replays its stored objects, as it does on every watch; a real server does not.)
    assert seen.events[:2] == [("ADDED", "a", obj["metadata"]["resourceVersion"]), ("MODIFIED", "a", "100")]


def test_a_cut_connection_resumes_without_relisting(api, proxy):
    env = direct(api)
    env.create("a")
    inf, seen = informer(api, proxy.url)
    inf.start()
    try:
        wait_until(lambda: inf.synced.is_set() and len(watches(api)) == 1)
        version = inf.resource_version
        assert proxy.cut() >= 1
        wait_until(lambda: len(watches(api)) >= 2, what="the watch to come back")
        env.patch("a", {"spec": {"apiURL": "https://api.after-the-cut.example.com"}})
        wait_until(lambda: ("MODIFIED", "a") in seen.since(1), what="the change after reconnecting")
    finally:
        inf.stop()
    assert watches(api)[1]["resourceVersion"] == version
    assert lists(api) == 1
    assert seen.since(0) == [("ADDED", "a"), ("MODIFIED", "a")]  # the replay of "a" was not handed on


def test_410_gone_relists_and_hands_on_only_the_differences(api, proxy):
    env = direct(api)
    for name in ("a", "b", "c"):
        env.create(name)
    inf, seen = informer(api, proxy.url)
    inf.start()
    try:
        wait_until(lambda: inf.synced.is_set() and len(watches(api)) == 1)
        stale = inf.resource_version
        # By the time the informer comes back, its version will have been compacted away...
        api.run(lambda k: k[lambda r: is_cluster(kmock.action.WATCH)(r)
                            and r.params.get("resourceVersion") == stale] << (GONE,))
        proxy.refuse()  # ...because the connection drops, and while it is down the world moves on.
        env.patch("b", {"spec": {"apiURL": "https://api.changed.example.com"}})
        env.delete("c")
        env.create("d")
        proxy.accept()
        wait_until(lambda: inf.lists == 2, what="a relist after 410")
        wait_until(lambda: len(seen.since(3)) == 3, what="the differences")
    finally:
        inf.stop()
    assert sorted(seen.since(3)) == [("ADDED", "d"), ("DELETED", "c"), ("MODIFIED", "b")]
    assert sorted(inf.objects) == ["acme/a", "acme/b", "acme/d"]


def test_api_errors_are_retried_with_backoff(api):
    env = direct(api)
    env.create("a")
    api.run(lambda k: k[is_cluster(kmock.action.LIST)][:2] << 500)
    inf, seen = informer(api)
    inf.start()
    try:
        wait_until(lambda: inf.synced.is_set(), what="the list to succeed on the third try")
    finally:
        inf.stop()
    assert lists(api) == 3
    assert seen.since(0) == [("ADDED", "a")]


def test_an_error_event_mid_stream_resumes_from_the_same_version(api):
    env = direct(api)
    env.create("a")
    boom = {"type": "ERROR", "object": {"kind": "Status", "code": 500, "reason": "InternalError",
                                        "message": "etcdserver: leader changed"}}
    api.run(lambda k: k[is_cluster(kmock.action.WATCH)][:1] << (boom,))
    inf, _ = informer(api)
    inf.start()
    try:
        wait_until(lambda: len(watches(api)) >= 2)
    finally:
        inf.stop()
    first, second = watches(api)[:2]
    assert first["resourceVersion"] == second["resourceVersion"] and lists(api) == 1


def test_the_service_rides_out_drops_and_410_reconciling_only_what_changed(api, proxy):
    env = direct(api)
    env.hub()
    for name in ("a", "b", "c"):
        env.create(name)
    engine = RecordingEngine()
    service_env = ServiceEnv(client.ApiClient(api.configuration(proxy.url)))
    with service_env.running(engine, backoff_base=0.05) as service:
        wait_until(lambda: all(env.ready(n) for n in "abc"))
        assert engine.count("up") == 3
        for _ in range(2):  # dropped twice: nothing to do
            proxy.cut()
            wait_until(lambda: service.ready()[0])
        clusters = next(i for i in service.pipeline.informers if i.source.name == "clusters")
        wait_until(lambda: proxy.connections > 0 and clusters.resource_version is not None)
        stale = clusters.resource_version
        api.run(lambda k: k[lambda r: is_cluster(kmock.action.WATCH)(r)
                            and r.params.get("resourceVersion") == stale] << (GONE,))
        proxy.refuse()
        env.patch("b", {"spec": {"apiURL": "https://api.changed-while-away.example.com"}})
        env.create("d")
        proxy.accept()
        wait_until(lambda: env.ready("d") and engine.count("up") == 5, what="b and d to run")
        wait_until(lambda: clusters.lists >= 2)
    assert sorted(c.stack for c in engine.runs("up")[3:]) == ["acme.b", "acme.d"]
    metrics = service.metrics.exposition().decode()
    assert 'hubwright_watch_restarts_total{reason="gone",source="clusters"}' in metrics
