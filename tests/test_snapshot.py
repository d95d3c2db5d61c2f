"""Decisions on one thread: only the mapper resolves (automation/service/mapper.py: FleetPublisher); the workers read the
Snapshot it publishes (automation/service/snapshot.py), published before the keys it motivated are queued, and a
new cluster's resolution does not pass over its region (the fleet scan per create)."""
from __future__ import annotations

import copy
import random
import threading

import pytest

import stacks.incremental
from automation.service.cache import Cache
from automation.service.mapper import FleetPublisher, Mapper, WrongThread
from automation.service.snapshot import Frozen, Snapshot
from doubles.engine import RecordingEngine
from stacks.inputs import StackInputs
from stacks.names import DRIFT_CHECK_REQUEST_ANNOTATION, ROLE_MAP_CONFIGMAP
from doubles.factories import NAMESPACES, cluster_doc, hub_doc
from doubles.service_env import on_kmock, quiet, wait_until

RESOLVING = ("get", "take_changed", "publish", "seed_routes", "_put", "_pin", "_take_shared", "_answer")


def test_workers_never_resolve_through_the_real_service(monkeypatch):
    """Create, edit and delete Clusters through the real Service (kmock, recording engine): every entry into
    FleetPublisher comes from the mapper's thread. On the old code the workers' `desired.inputs(key)` resolved (get())."""
    entered: list[tuple[str, str]] = []
    for name in RESOLVING:
        original = getattr(FleetPublisher, name)

        def recording(self, *args, __original=original, __name=name, **kwargs):
            entered.append((__name, threading.current_thread().name))
            return __original(self, *args, **kwargs)

        monkeypatch.setattr(FleetPublisher, name, recording)
    engine = RecordingEngine()
    with on_kmock() as env:
        env.create("prod-1")
        env.create("prod-2")
        with env.running(engine) as service:
            wait_until(lambda: env.ready("prod-1") and env.ready("prod-2"), what="both Ready")
            env.patch("prod-1", {"spec": {"apiURL": "https://api.edited.prod-1.example.com:6443"}})
            wait_until(lambda: engine.count("up") >= 3, what="the edit's run")
            env.delete("prod-2")
            wait_until(lambda: env.get("prod-2") is None, what="prod-2 gone")
            # gone from the API first, then from the service's cache (its watch event): quiet() is only then true
            # of the mapper's last pass (before, it could pass with the cache one event behind; 1 run in 10)
            wait_until(lambda: service.pipeline.cache.get("acme/prod-2") is None, what="prod-2 gone from the cache")
            quiet(service)
            desired = service.pipeline.desired
    assert engine.count("up") == 3 and engine.count("destroy") == 1
    assert {name for name, _ in entered} >= {"get", "take_changed", "_put"}
    resolving_threads = {thread for name, thread in entered if name != "seed_routes"}
    assert resolving_threads == {"mapper"}, f"FleetPublisher entered from {resolving_threads - {'mapper'}}"
    published = desired.view.current
    assert isinstance(published, Snapshot) and published.number > 0
    assert isinstance(published.inputs("acme/prod-1"), StackInputs) and published.inputs("acme/prod-2") is None


def _cache() -> Cache:
    cache = Cache(hub_name="default", role_map_name=ROLE_MAP_CONFIGMAP, role_map_namespace="hubwright-system",
                  parse_role_map=lambda raw: {})
    cache.on_hub("ADDED", hub_doc())
    for name, owned in NAMESPACES.items():
        cache.on_namespace("ADDED", {"metadata": {"name": name, "annotations": owned}})
    return cache


def _cluster(n: int) -> dict:
    doc = cluster_doc(f"c{n}", network={"vpcID": f"vpc-0c{n}", "cidr": f"10.{n}.0.0/16", "routeTableIDs": ["rtb-1"],
                                        "nodeSecurityGroupIDs": ["sg-1"]})
    doc["metadata"].update(uid=f"u-{n}", generation=1, creationTimestamp=f"2025-01-01T00:{n // 60:02d}:{n % 60:02d}Z")
    return doc


def test_desired_entered_from_another_thread_than_the_mappers_is_refused():
    cache = _cache()
    cache.apply("ADDED", _cluster(1))
    desired = FleetPublisher(cache)
    owner = threading.Thread(target=desired.own, name="mapper")
    owner.start()
    owner.join()
    for call in (desired.get, desired.take_changed, lambda: desired.seed_routes({})):
        with pytest.raises(WrongThread, match="only the mapper resolves"):
            call()
    assert desired.resolves == 0  # nothing was resolved on the way to the refusal
    assert desired.view.inputs("acme/c1") is None  # and nothing was published: the workers' view is untouched


def test_a_key_is_queued_only_after_the_snapshot_that_motivated_it_is_published():
    cache = _cache()
    desired = FleetPublisher(cache)
    seen: dict[str, object] = {}
    mapper = Mapper(cache, desired, add=lambda key: seen.setdefault(key, desired.view.inputs(key)),
                    add_after=lambda key, due: None, triage=lambda key, raw, wanted: 0)
    for n in range(3):
        cache.apply("ADDED", _cluster(n))
    mapper.map_once()
    edited = _cluster(1)
    edited["spec"]["apiURL"] = "https://api.edited.c1.example.com:6443"
    edited["metadata"]["generation"] = 2
    cache.apply("MODIFIED", edited)
    before = seen.pop("acme/c1")
    mapper.map_once()
    assert set(seen) == {"acme/c0", "acme/c1", "acme/c2"}
    assert all(isinstance(value, StackInputs) for value in seen.values())
    assert seen["acme/c1"].digest() != before.digest()  # the worker reads the edit, not the answer before it


def test_a_new_cluster_is_placed_without_a_pass_over_its_region(monkeypatch):
    """The fleet scan per create: placing a region whole (stacks.placement.place_endpoints) on every new cluster made
    the service's own work before its run grow with the fleet. With every placement pinned, a create places only
    itself."""
    cache = _cache()
    desired = FleetPublisher(cache)
    mapper = Mapper(cache, desired, add=lambda key: None, add_after=lambda key, due: None,
                    triage=lambda key, raw, wanted: 0)
    for n in range(40):
        cache.apply("ADDED", _cluster(n))
    mapper.map_once()
    passes: list[int] = []
    whole = stacks.incremental.place_endpoints

    def counted(hub, wants, *args):
        wants = list(wants)
        passes.append(len(wants))
        return whole(hub, wants, *args)

    monkeypatch.setattr(stacks.incremental, "place_endpoints", counted)
    cache.apply("ADDED", _cluster(40))
    mapper.map_once()
    assert passes == []
    assert isinstance(desired.view.inputs("acme/c40"), StackInputs)
    assert desired.view.inputs("acme/c40").private_link.endpoint_vpc is not None


def test_frozen_answers_as_a_dict_would_and_never_changes_once_made():
    rng = random.Random(7)
    model: dict[int, int] = {}
    frozen: Frozen[int, int] = Frozen()
    history: list[tuple[Frozen[int, int], dict[int, int]]] = []
    for step in range(3000):
        keys = rng.sample(range(400), rng.randint(0, 6))
        changes = {k: step for k in keys[: len(keys) // 2]}
        dropped = keys[len(keys) // 2:]
        frozen = frozen.updated(changes, dropped)
        for k in dropped:
            model.pop(k, None)
        model.update(changes)
        assert len(frozen) == len(model) and dict(frozen) == model
        if step % 97 == 0:
            history.append((frozen, dict(model)))
    for old, then in history:  # every map made earlier still answers as it did
        assert dict(old) == then and len(old) == len(then) and all((k in old) == (k in then) for k in range(400))


def test_a_cluster_added_and_deleted_before_the_mapper_looks_is_still_queued_as_gone():
    """The CI failure (test_registry_revoke, registered-only): a Cluster deleted between the cache's sync and the
    mapper's first pass was never queued, so its facts agent kept its hub identity until the next service start.
    A key the cache let go is queued once as gone, whether or not the mapper saw it held."""
    cache = _cache()
    desired = FleetPublisher(cache)
    queued: list[str] = []
    mapper = Mapper(cache, desired, add=queued.append, add_after=lambda key, due: None,
                    triage=lambda key, raw, wanted: 0)
    cache.apply("ADDED", _cluster(1))
    cache.apply("DELETED", _cluster(1))
    mapper.map_once()
    assert queued == ["acme/c1"]  # the reconciler finds it gone: it revokes the agent and checks for an orphan
    mapper.map_once()
    assert queued == ["acme/c1"]  # once


def test_the_mapper_hooks_run_in_their_order_each_pass_and_one_that_raises_stops_no_other():
    """One ordered hook list (the shared-ingress sync, discovery, the mesh's group states): each pass, after its
    Snapshot is published, with the answer, whether it is new, and the keys the pass found."""
    cache = _cache()
    desired = FleetPublisher(cache)
    heard: list[tuple[str, bool, frozenset[str]]] = []

    def failing(passed):
        heard.append(("failing", passed.new, passed.keys))
        raise RuntimeError("a hook's bug")

    mapper = Mapper(cache, desired, add=lambda key: None, add_after=lambda key, due: None,
                    triage=lambda key, raw, wanted: 0,
                    hooks=[lambda passed: heard.append(("first", passed.new, passed.keys)), failing,
                           lambda passed: heard.append(("last", passed.new, passed.keys))])
    cache.apply("ADDED", _cluster(0))
    mapper.map_once()
    assert [name for name, _, _ in heard] == ["first", "failing", "last"]
    assert all(new and keys == {"acme/c0"} for _, new, keys in heard)
    heard.clear()
    mapper.map_once()  # nothing changed: the same answer, no keys
    assert heard == [(name, False, frozenset()) for name in ("first", "failing", "last")]


def test_a_new_drift_check_request_queues_the_key_at_once_with_a_fresh_backoff():
    """Like the reconcile request: the annotation is in the mapper's fingerprint (not the status, not an input), so a
    new value queues the key now and resets its backoff; the same value, with another edit, queues nothing."""
    cache = _cache()
    desired = FleetPublisher(cache)
    queued: list[str] = []
    reset: list[str] = []
    mapper = Mapper(cache, desired, add=queued.append, add_after=lambda key, due: None,
                    triage=lambda key, raw, wanted: None, reset=reset.append)  # seen first: nothing to do
    doc = _cluster(1)
    cache.apply("ADDED", doc)
    mapper.map_once()
    before = desired.view.inputs("acme/c1")
    assert queued == [] and isinstance(before, StackInputs)
    asked = copy.deepcopy(doc)
    asked["metadata"]["annotations"][DRIFT_CHECK_REQUEST_ANNOTATION] = "2026-12-01T09:00"
    cache.apply("MODIFIED", asked)
    mapper.map_once()
    assert queued == reset == ["acme/c1"]
    assert desired.view.inputs("acme/c1").digest() == before.digest()  # a request, not an input: no stack moves
    again = copy.deepcopy(asked)
    again["metadata"]["annotations"]["example.com/note"] = "unrelated"
    cache.apply("MODIFIED", again)
    mapper.map_once()
    assert queued == reset == ["acme/c1"]
    newer = copy.deepcopy(again)
    newer["metadata"]["annotations"][DRIFT_CHECK_REQUEST_ANNOTATION] = "2026-12-01T10:00"
    cache.apply("MODIFIED", newer)
    mapper.map_once()
    assert queued == reset == ["acme/c1", "acme/c1"]
