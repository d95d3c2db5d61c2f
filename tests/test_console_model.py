"""automation.console.model: the console resolves the fleet again only when something the resolution reads moved
(ConsoleCache.fleet_version), never for a status write, an Event or a run: at 10,000 clusters one resolution takes
seconds, and a live fleet writes statuses all the time."""
from __future__ import annotations

import copy

from automation.console.cache import ConsoleCache
from automation.console.model import FleetModel
from doubles.factories import cluster_doc, hub_doc


def filled() -> tuple[ConsoleCache, FleetModel]:
    cache = ConsoleCache()
    hub = hub_doc()
    hub["metadata"]["name"] = "default"
    cache.hubconfigs.apply("ADDED", hub)
    cache.namespaces.apply("ADDED", {"metadata": {"name": "acme", "annotations": {}}})
    for name in ("prod-1", "prod-2"):
        cache.clusters.apply("ADDED", cluster_doc(name, "acme"))
    return cache, FleetModel(cache)


def test_a_status_write_an_event_or_a_run_does_not_resolve_the_fleet_again():
    cache, model = filled()
    try:
        first = model.resolved()
        assert set(first.inputs) == {"acme/prod-1", "acme/prod-2"}
        written = copy.deepcopy(cache.cluster("acme", "prod-1"))
        written["status"] = {"conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded"}],
                             "lastUpdate": {"operation": "up", "result": "Succeeded"}}
        cache.clusters.apply("MODIFIED", written)
        cache.events.apply("ADDED", {"metadata": {"namespace": "acme", "name": "e1"},
                                     "involvedObject": {"namespace": "acme", "name": "prod-1"}})
        cache.runs.apply("ADDED", {"metadata": {"namespace": "acme", "name": "r1"}, "spec": {"stack": "acme.prod-1"}})
        labelled = copy.deepcopy(cache.namespaces.get("acme"))
        labelled["metadata"]["labels"] = {"team": "blue"}  # a label: the tenant's row, not the fleet
        cache.namespaces.apply("MODIFIED", labelled)
        assert cache.version > 0 and model.resolved() is first
    finally:
        model.close()


def test_what_the_resolution_reads_resolves_it_again():
    cache, model = filled()
    try:
        for change in (
            lambda: cache.clusters.apply("MODIFIED", {**cache.cluster("acme", "prod-1"), "spec": {
                **cache.cluster("acme", "prod-1")["spec"], "tags": {"team": "blue"}}}),
            lambda: cache.clusters.apply("MODIFIED", {**cache.cluster("acme", "prod-2"), "status": {
                "meshJoin": {"group": "core", "order": 1}}}),  # a record
            lambda: cache.namespaces.apply("MODIFIED", {"metadata": {"name": "acme", "annotations": {"x": "1"}}}),
            lambda: cache.configmaps.apply("ADDED", {"metadata": {"namespace": "sys", "name": "roles"}, "data": {}}),
            lambda: cache.clusters.apply("DELETED", cache.cluster("acme", "prod-2")),
        ):
            before = model.resolved()
            change()
            assert model.resolved() is not before
        assert set(model.resolved().inputs) == {"acme/prod-1"}
    finally:
        model.close()
