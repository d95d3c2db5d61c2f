"""The service's FleetPublisher: resolve_all's answer kept up to date from the cache's changes, at the cost of the change.

It must answer as a full resolve_all over the cache would, name exactly the clusters whose answer moved (the
mapper looks at no others), and never move an endpoint because a status recorded another cluster's.
"""
from __future__ import annotations

import copy

from automation.service.cache import Cache
from automation.service.mapper import FleetPublisher
from stacks.names import ALLOWED_DOMAINS_ANNOTATION, ROLE_MAP_CONFIGMAP
from stacks.resolve import Fleet, resolve_all
from stacks.tenancy import DOMAIN_NOT_ALLOWED
from doubles.factories import NAMESPACES, cluster_doc, hub_doc

SUBNETS = [{"subnetID": "subnet-0a", "availabilityZone": "us-east-1a"}]
TWO_VPCS = [{"region": "us-east-1", "vpcID": f"vpc-0hub{x}", "cidr": f"10.{100 + i}.0.0/16", "subnets": SUBNETS}
            for i, x in enumerate("ab")]


def _cache() -> Cache:
    return Cache(hub_name="default", role_map_name=ROLE_MAP_CONFIGMAP, role_map_namespace="hubwright-system",
                 parse_role_map=lambda raw: {})


def _cluster(n: int, **spec) -> dict:
    doc = cluster_doc(f"c{n}", network={"vpcID": f"vpc-0c{n}", "cidr": f"10.{n}.0.0/16", "routeTableIDs": ["rtb-1"],
                                        "nodeSecurityGroupIDs": ["sg-1"]}, **spec)
    doc["metadata"].update(uid=f"u-{n}", generation=1, creationTimestamp=f"2025-01-01T00:00:{n:02d}Z")
    return doc


def _recorded(doc: dict, vpc: str) -> dict:
    """The Cluster after a run wrote its outputs: status.outputs.endpointVPC."""
    doc = copy.deepcopy(doc)
    doc["status"] = {"outputs": {"endpointVPC": vpc}}
    return doc


def _fleet(cache: Cache) -> Fleet:
    """What a full resolve_all over the cache reads."""
    entries = cache.entries()
    shared = cache.shared()
    return Fleet(hub=shared.hub, clusters=tuple(e.parsed for e in entries.values()), namespaces=shared.namespaces,
                 role_map=shared.role_map, placements={k: e.placement for k, e in entries.items() if e.placement})


def _vpc(desired: FleetPublisher, key: str) -> str:
    return desired.get().inputs[key].private_link.endpoint_vpc.vpc_id


def _setup(clusters: int, **hub_spec) -> tuple[Cache, FleetPublisher, list[dict]]:
    cache = _cache()
    cache.on_hub("ADDED", hub_doc(**hub_spec))
    for name, owned in NAMESPACES.items():
        cache.on_namespace("ADDED", {"metadata": {"name": name, "annotations": owned}})
    docs = [_cluster(n) for n in range(clusters)]
    for doc in docs:
        cache.apply("ADDED", doc)
    return cache, FleetPublisher(cache), docs


def test_a_recorded_endpoint_never_moves_a_younger_cluster_that_is_not_recorded_yet():
    """Two VPCs, two endpoints each, three clusters by age: least-used placement gives c0 a, c1 b, c2 a. Were c2's
    record (a) placed before the others, c0 would take b and c1 a: each run would record the VPC the other's run
    moved, for ever. The placement decided first stays."""
    cache, desired, docs = _setup(3, endpointVPCInventory=TWO_VPCS, privateLink={"endpointsPerVPC": 2})
    first = {f"acme/c{n}": _vpc(desired, f"acme/c{n}") for n in range(3)}
    assert first == {"acme/c0": "vpc-0huba", "acme/c1": "vpc-0hubb", "acme/c2": "vpc-0huba"}
    desired.take_changed()
    for n in (2, 0, 1):  # the youngest's run records first
        cache.apply("MODIFIED", _recorded(docs[n], first[f"acme/c{n}"]))
        assert {key: _vpc(desired, key) for key in first} == first
        assert desired.take_changed() == set()  # nothing moved: the mapper queues nothing


def test_an_edit_moves_only_that_cluster_and_the_answer_equals_a_full_resolve():
    cache, desired, docs = _setup(40)
    desired.get()
    assert len(desired.take_changed()) == 40  # the first answer: everyone
    edited = copy.deepcopy(docs[7])
    edited["spec"]["apiURL"] = "https://api.other.example.com:6443"
    cache.apply("MODIFIED", edited)
    resolution = desired.get()
    assert desired.take_changed() == {"acme/c7"}
    assert dict(resolution.inputs) == resolve_all(_fleet(cache)).inputs
    assert resolution.digests["acme/c7"] == resolution.inputs["acme/c7"].digest()


def test_a_status_write_the_resolution_does_not_read_costs_no_resolve():
    cache, desired, docs = _setup(3)
    before = desired.get()
    written = copy.deepcopy(docs[1])
    written["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    cache.apply("MODIFIED", written)
    assert desired.get() is before


def test_the_hub_going_and_coming_back_refuses_then_readmits_everyone():
    cache, desired, _ = _setup(3)
    desired.get()
    desired.take_changed()
    cache.on_hub("DELETED", hub_doc())
    gone = desired.get()
    assert desired.take_changed() == {"acme/c0", "acme/c1", "acme/c2"}
    assert all(value.reason == "HubConfigNotFound" for value in gone.inputs.values()), gone.inputs
    assert gone.hub is None
    cache.on_hub("ADDED", hub_doc())
    back = desired.get()
    assert desired.take_changed() == {"acme/c0", "acme/c1", "acme/c2"}
    assert dict(back.inputs) == resolve_all(_fleet(cache)).inputs


def test_a_namespace_change_moves_its_clusters_only():
    cache, desired, _ = _setup(2)
    other = _cluster(9, accountID="333333333333")
    other["metadata"]["namespace"] = "globex"
    cache.apply("ADDED", other)
    desired.get()
    desired.take_changed()
    cache.on_namespace("MODIFIED", {"metadata": {"name": "globex", "annotations": {
        **NAMESPACES["globex"], ALLOWED_DOMAINS_ANNOTATION: "nothing.example.org"}}})
    resolution = desired.get()
    assert desired.take_changed() == {"globex/c9"}
    assert resolution.inputs["globex/c9"].reason == DOMAIN_NOT_ALLOWED
    assert dict(resolution.inputs) == resolve_all(_fleet(cache)).inputs


def test_what_admission_granted_is_pinned_at_once_so_an_older_claimant_arriving_before_the_record_takes_nothing():
    """issue #45: the holder of an API host holds it from the pass that granted it (pinned as status.claims on the
    mapper's thread), before the reconciler writes the record: an older placeholder repointed at the host in between
    is refused, and the published snapshot hands the reconciler the record to write."""
    cache = _cache()
    cache.on_hub("ADDED", hub_doc())
    for name, owned in NAMESPACES.items():
        cache.on_namespace("ADDED", {"metadata": {"name": name, "annotations": owned}})
    holder = _cluster(1, apiURL="https://api.shop.example.com")
    holder["metadata"]["creationTimestamp"] = "2026-06-01T00:00:00Z"
    cache.apply("ADDED", holder)
    desired = FleetPublisher(cache)
    desired.publish(desired.get())
    assert desired.view.claims_of("acme/c1", None)["apiHost"] == "api.shop.example.com"
    placeholder = _cluster(2, apiURL="https://API.shop.example.com:6443")  # older, and no record is written yet
    placeholder["metadata"]["creationTimestamp"] = "2025-01-01T00:00:00Z"
    cache.apply("ADDED", placeholder)
    answer = desired.get().inputs
    assert answer["acme/c1"].stack == "acme.c1"
    assert answer["acme/c2"].reason == "APIHostTaken"
