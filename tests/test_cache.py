"""The service's Cache: the one store of the watched objects, and what counts as a change of a cluster's inputs.

stacks.model.loading.resolved_part decides both what the cache parses and what it hands FleetPublisher as changed
(`Cache.drain`), so a field outside it can neither reach resolve() nor cost a re-resolve; these tests hold the two
to each other.
"""
from __future__ import annotations

import copy
import json

import pytest

from automation.adapters.aws.lookups import LookupFailed
from automation.adapters.kube.informer import Informer, Source
from automation.service.cache import Cache
from automation.service.census import EndpointCensus
from stacks.model.loading import RESOLVED_METADATA, parse, resolved_part
from stacks.names import JOIN_STATUS_KEY, ROLE_MAP_CONFIGMAP
from stacks.resolve import resolve_fleet
from doubles.factories import NAMESPACES, cluster_doc, fleet, hub, hub_doc


def _cache() -> Cache:
    return Cache(hub_name="default", role_map_name=ROLE_MAP_CONFIGMAP, role_map_namespace="hubwright-system",
                 parse_role_map=lambda raw: {})


def _raw(**meta) -> dict:
    doc = cluster_doc("prod-1")
    doc["metadata"].update({"resourceVersion": "1", "uid": "u-1", "generation": 1,
                            "creationTimestamp": "2025-01-01T00:00:00Z", **meta})
    doc["status"] = {"conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded"}]}
    return doc


# Writes that happen all the time (the service's own status writes, finalizers, server bookkeeping)
# and that resolve() never reads.
NOT_READ = {
    "resourceVersion": lambda d: d["metadata"].update(resourceVersion="2"),
    "finalizers": lambda d: d["metadata"].update(finalizers=["hubwright.io/stack"]),
    "managedFields": lambda d: d["metadata"].update(managedFields=[{"manager": "kubectl"}]),
    "status.conditions": lambda d: d["status"].update(conditions=[]),
    "status.lastUpdate": lambda d: d["status"].update(lastUpdate={"operation": "up", "result": "Running"}),
}
# Every part resolve() reads.
READ = {
    "spec": lambda d: d["spec"].update(region="eu-west-1"),
    "labels": lambda d: d["metadata"].setdefault("labels", {}).update(team="a"),
    "annotations": lambda d: d["metadata"].setdefault("annotations", {}).update(note="b"),
    "generation": lambda d: d["metadata"].update(generation=2),
    "creationTimestamp": lambda d: d["metadata"].update(creationTimestamp="2025-02-01T00:00:00Z"),
    "deletionTimestamp": lambda d: d["metadata"].update(deletionTimestamp="2025-03-01T00:00:00Z"),
    "status.meshJoin": lambda d: d["status"].update({JOIN_STATUS_KEY: {"group": "g", "order": 1}}),
}


@pytest.mark.parametrize("field", sorted(NOT_READ) + sorted(READ))
def test_exactly_the_changes_resolve_reads_are_drained_as_changes(field):
    cache, raw = _cache(), _raw()
    cache.apply("ADDED", raw)
    cache.drain()
    changed = copy.deepcopy(raw)
    {**NOT_READ, **READ}[field](changed)
    cache.apply("MODIFIED", changed)
    assert cache.drain().clusters == ({"acme/prod-1"} if field in READ else set())
    assert cache.get("acme/prod-1") == changed  # the one copy, as it is now


def test_the_read_metadata_is_exactly_what_the_parsed_cluster_keeps():
    """resolve() sees the parsed Cluster: built from resolved_part, it has nothing the cache does not watch."""
    cache, raw = _cache(), _raw(finalizers=["x"], managedFields=[{"m": 1}], ownerReferences=[{"o": 1}])
    cache.apply("ADDED", raw)
    parsed = cache.entries()["acme/prod-1"].parsed
    meta = parsed.metadata.model_dump(by_alias=True, exclude_defaults=True)
    assert set(meta) <= set(RESOLVED_METADATA)
    assert parsed.metadata.resource_version is None and parsed.metadata.finalizers == []
    assert set(resolved_part(raw)["metadata"]) == set(RESOLVED_METADATA) & set(raw["metadata"])


def test_resolving_the_part_equals_resolving_the_whole_object():
    """What the service resolves (the part) and what the plan resolves (the whole file) give one digest."""
    raw = _raw(finalizers=["x"], managedFields=[{"m": 1}])
    whole, part = parse({k: v for k, v in raw.items() if k != "status"}), parse(resolved_part(raw))
    digests = [resolve_fleet(fleet(hub(), (c,), namespaces=NAMESPACES))["acme/prod-1"].digest() for c in (whole, part)]
    assert digests[0] == digests[1]


def test_the_informer_keeps_no_copy_of_its_own():
    """The informer's store is the cache: a relist compares against it and hands on only the differences."""
    cache = _cache()
    items = [_raw(), {**_raw(), "metadata": {**_raw()["metadata"], "name": "prod-2"}}]

    def list_fn(*args, **kwargs):
        return _Response({"metadata": {"resourceVersion": "10"}, "items": items})

    informer = Informer(Source("clusters", list_fn), cache)
    informer.relist()
    assert sorted(cache.keys()) == ["acme/prod-1", "acme/prod-2"] and cache.revision == 2
    assert informer.objects == {"acme/prod-1": items[0], "acme/prod-2": items[1]}
    items.pop()  # prod-2 is gone; prod-1 unchanged
    informer.relist()
    assert sorted(cache.keys()) == ["acme/prod-1"] and cache.revision == 3  # one change: the deletion


def test_the_hub_namespaces_and_role_map_each_have_a_store_feeding_the_cache():
    cache = _cache()
    stores = cache.stores()
    assert set(stores) == {"clusters", "hubconfigs", "namespaces", "configmaps", "hubretainedstacks"} \
        and stores["clusters"] is cache
    stores["hubconfigs"].apply("ADDED", {**hub_doc(), "metadata": {"name": "default"}})
    stores["namespaces"].apply("ADDED", {"metadata": {"name": "acme", "annotations": NAMESPACES["acme"]}})
    assert cache.hub is not None and cache.namespaces["acme"] == dict(NAMESPACES["acme"])
    assert stores["namespaces"].get("acme")["metadata"]["name"] == "acme"


class _Response:
    def __init__(self, body: dict):
        self.data = json.dumps(body).encode()


def test_the_census_hands_changed_counts_to_the_cache_and_keeps_the_last_ones_when_a_count_fails():
    cache, answers = _cache(), []
    census = EndpointCensus(cache, lambda hub: answers.pop(0)() if callable(answers[0]) else answers.pop(0),
                            interval=60)
    assert census.count_once() is False  # no hub yet: nothing to count
    cache.stores()["hubconfigs"].apply("ADDED", {**hub_doc(), "metadata": {"name": "default"}})
    cache.drain()

    answers.append({"vpc-0hub1": 3, "vpc-0hubeu": 0})
    assert census.count_once() and cache.foreign_endpoints == {"vpc-0hub1": 3}
    assert cache.drain().shared
    answers.append({"vpc-0hub1": 3})  # the same answer: no re-resolve
    assert census.count_once() and not cache.drain()

    def refused():
        raise LookupFailed("counting VPC endpoints failed: AccessDenied", reason="AccessDenied")

    answers.append(refused)
    assert census.count_once() is False and census.failures == 1
    assert cache.foreign_endpoints == {"vpc-0hub1": 3} and not cache.drain()
    assert cache.shared().foreign_endpoints == {"vpc-0hub1": 3}  # what resolve_all is given
