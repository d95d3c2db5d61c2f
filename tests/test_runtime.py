"""The runtime (automation/kit/runtime.py): one informer per kind in a process, shared by every controller;
--watch-namespace honoured by the tenant controller's view of the Clusters; one start-when-synced; a new kind
is a Source and a watch registration.

The service runs on kmock's emulator (doubles.MockKubeAPI), which logs every request it serves: the lists and
watches counted are the ones the API server saw. The new-kind test runs on the real kube-apiserver (envtest).
"""
from __future__ import annotations

import threading
import uuid
from collections import Counter

import kmock
import pytest
from kubernetes import client

from automation.adapters.kube.informer import Source, object_key
from automation.kit.queue import Outcome
from automation.kit.runtime import Manager
from doubles.engine import RecordingEngine
from doubles.kube import MockKubeAPI
from stacks.names import CLUSTERS, TENANTS
from tests.envtest import kube_apiserver  # noqa: F401 - the fixture
from doubles.service_env import ServiceEnv, wait_until


@pytest.fixture
def api():
    with MockKubeAPI() as api:
        yield api


def requests_of(api, action) -> list:
    return api.requests(lambda r: r.action == action and r.resource is not None)


def test_one_informer_per_kind_and_the_tenant_controllers_clusters_are_the_watched_namespaces(api):
    """Finding 2: the tenant controller watched Clusters a second time, cluster-wide even with --watch-namespace.
    A tenant of `acme` must not learn of (nor be counted) the Clusters of a namespace the service does not watch."""
    env = ServiceEnv(client.ApiClient(api.configuration()))
    env.namespace("acme")
    env.namespace("other")
    env.hub()
    env.create("mine", namespace="acme")
    env.create("theirs", namespace="other")
    with env.running(RecordingEngine(), tenants=True, watch_namespace="acme") as service:
        pipeline = service.pipeline
        assert pipeline is not None and pipeline.tenants is not None
        wait_until(lambda: pipeline.manager.started.is_set(), 20, what="the controllers to start")
        lists = requests_of(api, kmock.action.LIST)
        watches = requests_of(api, kmock.action.WATCH)
        listed = Counter(r.resource.plural for r in lists)
        # One list per kind, whoever reads it (the stacks' cache, the tenant controller's counts and marks).
        assert listed[CLUSTERS] == 1 and listed[TENANTS] == 1 and set(listed.values()) == {1}, listed
        assert {r.namespace for r in lists + watches if r.resource.plural == CLUSTERS} == {"acme"}
        assert len({(i.source.name) for i in pipeline.informers}) == len(pipeline.informers) == 7  # + hubgitrepos, hubretainedstacks
        # Cluster and transit stacks and the retained stacks' releases have a controller each, their reconciles in one bound of --workers slots (the
        # engine's); Tenants and the Git repository controllers (--gitrepos, over the same Tenants and Clusters)
        # their own.
        assert {c.name: c.workers.count for c in pipeline.manager.controllers} == {
            "stacks": 4, "transit": 4, "retained": 1, "tenant": 1, "gitrepo": 1, "gitrepo-templates": 1}
        assert pipeline.slots.size == 4
        assert pipeline.tenants.clusters.count("acme") == 1
        assert pipeline.tenants.clusters.count("other") == 0  # never seen: not watched
        # The shared informer feeds both: a new Cluster reaches the cache and the tenant controller's counts.
        env.create("second", namespace="acme")
        wait_until(lambda: pipeline.tenants.clusters.count("acme") == 2 and "acme/second" in pipeline.cache.keys(),
                   what="the second cluster in both views")
        assert Counter(r.resource.plural for r in requests_of(api, kmock.action.LIST))[CLUSTERS] == 1


def test_a_kind_is_watched_once_however_many_controllers_read_it():
    manager = Manager()
    source = Source("configmaps", lambda *a, **k: None)
    manager.source(source)
    with pytest.raises(ValueError, match="one informer per kind"):
        manager.source(Source("configmaps", lambda *a, **k: None))
    manager.watch("secrets", lambda kind, raw: None)
    with pytest.raises(ValueError, match="watched without a source: secrets"):
        manager.start()


def test_a_new_kind_is_a_source_and_a_watch_registration(kube_apiserver):  # noqa: F811 - the fixture
    """A controller over ConfigMaps, on the real API server, with nothing but a Source and a mapping: two
    controllers share the one informer; nothing reconciles before the list is in (the object made before the
    start is in the store when the first key is reconciled)."""
    admin = kube_apiserver.api_client()
    core = client.CoreV1Api(admin)
    namespace = f"rt-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": namespace}})
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "before"}, "data": {"a": "1"}})

    manager = Manager(watch_timeout=30)
    store = manager.source(Source("configmaps", core.list_namespaced_config_map, (namespace,)))
    seen: dict[str, list[str]] = {"names": [], "upper": []}
    at_first_reconcile: list[list[str]] = []
    lock = threading.Lock()

    def reconciler(name: str):
        def reconcile(key: str) -> Outcome:
            with lock:
                if not at_first_reconcile:
                    at_first_reconcile.append(sorted(store.keys()))
                seen[name].append(key)
            return Outcome.done()
        return reconcile

    manager.controller("names", reconciler("names")).watches("configmaps", lambda event, raw: [object_key(raw)])
    manager.controller("upper", reconciler("upper")).watches(
        "configmaps", lambda event, raw: [object_key(raw).upper()] if event != "DELETED" else [])
    manager.start()
    try:
        wait_until(lambda: manager.started.is_set(), 20, what="the manager to sync")
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "after"}, "data": {"a": "2"}})
        wait_until(lambda: f"{namespace}/after" in seen["names"] and f"{namespace}/after".upper() in seen["upper"],
                   20, what="both controllers to get the new ConfigMap's keys")
        assert f"{namespace}/before" in seen["names"] and f"{namespace}/before".upper() in seen["upper"]
        assert f"{namespace}/before" in at_first_reconcile[0]  # listed before anything reconciled
        assert list(manager.informers) == ["configmaps"] and manager.synced() == {"configmaps": True}
        assert manager.alive()
    finally:
        manager.stop()
        core.delete_namespace(namespace)
        admin.close()
    assert not any(i._thread is not None and i._thread.is_alive() for i in manager.informers.values())
