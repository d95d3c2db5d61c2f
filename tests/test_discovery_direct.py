"""The discovery controller called directly: `reconcile(key) -> Outcome`, no service, no queue, no HTTP, no AWS.

automation/service/discovery.py's Discovery over doubles.objects.FakeObjects (its HubClusters handed to a real Cache
as the informer would), a lookup that answers what a test says (the moto-backed AWS lookup has its own tests,
tests/test_discovery.py) and a clock the test moves. Each test states the Outcome, what status.network and
status.networkError say, and the Events on the HubCluster. `setup` is shown feeding its queue from the mapper's
passes.
"""
from __future__ import annotations

from typing import Any

import pytest

from automation.adapters.aws.lookups import LookupFailed, LookupRefused
from automation.kit.objects import HUBCLUSTERS
from automation.kit.queue import Outcome
from automation.kit.runtime import Manager
from automation.kit.status import StatusWriter
from automation.service.cache import Cache
from automation.service.clusters import ClusterClient, cluster_writer
from automation.service.discovery import LOAD_BALANCER_RECHECK, Discovery, setup
from automation.service.mapper import FleetAnswer, Pass
from doubles.clusters import StaticDesired
from doubles.factories import cluster_doc
from doubles.objects import FakeObjects
from stacks.network.found import FoundLoadBalancer, FoundNetwork, FoundSubnet
from stacks.network.query import NetworkQuery
from stacks.status import ClusterStatus
from stacks.targets import AwsTarget
from stacks.times import rfc3339_seconds

KEY = "acme/prod-1"
ACCOUNT = "222222222222"
START = 1_767_000_000.0
INTERVAL = 600.0  # the query's interval: 10m


def network(*route_tables: str, load_balancer: str | None = None) -> FoundNetwork:
    tables = route_tables or ("rtb-0a",)
    return FoundNetwork(
        account_id=ACCOUNT, region="us-east-1", vpc_id="vpc-0c1", cidrs=("10.1.0.0/16",),
        subnets=tuple(FoundSubnet(subnet_id=f"subnet-0{n}", availability_zone="us-east-1a", route_table_id=table)
                      for n, table in enumerate(tables)),
        route_table_ids=tables, security_group_ids=("sg-0node",), node_security_group_ids=("sg-0node",),
        load_balancer=FoundLoadBalancer(name=load_balancer, type="network", scheme="internal", vpc_id="vpc-0c1")
        if load_balancer else None)


class Lookup:
    """Answers what the test put in it: a network, or a failure to raise; every read counted."""

    def __init__(self) -> None:
        self.answer: FoundNetwork | Exception = network()
        self.reads: list[str] = []

    def discover(self, query: NetworkQuery, *, now: str) -> FoundNetwork:
        self.reads.append(query.key)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer.model_copy(update={"observed_at": now})


class Queries(StaticDesired):
    """A DesiredView whose network_query answers from `queries`."""

    def __init__(self) -> None:
        super().__init__()
        self.queries: dict[str, NetworkQuery] = {}

    def network_query(self, key: str) -> NetworkQuery | None:  # type: ignore[override]
        return self.queries.get(key)


class World:
    def __init__(self, *, load_balancer: str | None = None):
        self.now = START
        self.store = FakeObjects()
        self.cache = Cache(hub_name="default", role_map_name="role-map", role_map_namespace="hubwright-system",
                           parse_role_map=lambda raw: {})
        self.store.watch(HUBCLUSTERS, self.cache.apply)
        self.store.create(HUBCLUSTERS, cluster_doc())
        self.desired = Queries()
        self.desired.queries[KEY] = NetworkQuery(
            key=KEY, target=AwsTarget(account_id=ACCOUNT, region="us-east-1"), infra_id="prod-1-x7k2p",
            vpc_id="vpc-0c1", load_balancer_name=load_balancer)
        self.lookup = Lookup()
        self.writer = StatusWriter(self.store, HUBCLUSTERS)
        self.discovery = Discovery(desired=self.desired, cache=self.cache, lookup=self.lookup, objects=self.store,
                                   writer=self.writer, stalled_recheck=60.0, clock=lambda: self.now)

    def reconcile(self) -> Outcome:
        return self.discovery.reconcile(KEY)

    def status(self) -> dict[str, Any]:
        return (self.store.get(HUBCLUSTERS, "prod-1", "acme") or {}).get("status") or {}

    def reasons(self) -> list[tuple[str, str]]:
        return self.store.events_of(KEY)


@pytest.fixture
def world():
    return World()


def test_a_first_read_is_written_to_status_network_and_said_once(world):
    assert world.reconcile() == Outcome.done(INTERVAL)
    assert world.status()["network"] == network().model_copy(update={"observed_at": rfc3339_seconds(START)}).to_status()
    assert "networkError" not in world.status()
    assert world.reasons() == [("Normal", "NetworkDiscovered")]
    [write] = world.store.status_writes
    assert write.status == {"network": world.status()["network"], "networkError": None}  # its own fields, no other


def test_nothing_is_read_before_it_is_due_and_the_same_facts_are_not_said_again(world):
    world.reconcile()
    world.now += 100
    assert world.reconcile() == Outcome.done(INTERVAL - 100) and world.lookup.reads == [KEY]
    world.now += INTERVAL
    assert world.reconcile() == Outcome.done(INTERVAL) and len(world.lookup.reads) == 2
    assert world.status()["network"]["observedAt"] == rfc3339_seconds(START + 100 + INTERVAL)
    assert world.reasons() == [("Normal", "NetworkDiscovered")]  # the same facts: said once


def test_a_route_table_added_is_said_and_a_load_balancer_gone_is_gone_from_the_status():
    world = World(load_balancer="api-int")
    world.lookup.answer = network(load_balancer="api-int")
    world.reconcile()
    assert world.status()["network"]["loadBalancer"]["name"] == "api-int"
    world.now += INTERVAL
    world.lookup.answer = network("rtb-0a", "rtb-0b")  # a subnet's table more, and the load balancer went
    assert world.reconcile() == Outcome.done(LOAD_BALANCER_RECHECK)  # awaited: looked at again sooner
    assert "loadBalancer" not in world.status()["network"]
    assert world.status()["network"]["routeTableIDs"] == ["rtb-0a", "rtb-0b"]
    assert world.reasons() == [("Normal", "NetworkDiscovered"), ("Normal", "NetworkDiscovered")]


def test_a_failed_read_is_recorded_said_once_retried_and_cleared_by_the_next_read(world):
    world.lookup.answer = LookupFailed("throttled", reason="Throttling")
    assert world.reconcile() == Outcome.retry()
    error = world.status()["networkError"]
    assert (error["reason"], error["refused"]) == ("Throttling", False) and "network" not in world.status()
    assert world.reconcile() == Outcome.retry()  # the same failure: not said again
    assert world.reasons() == [("Warning", "Throttling")]
    world.lookup.answer = network()
    assert world.reconcile() == Outcome.done(INTERVAL)
    assert "networkError" not in world.status() and world.status()["network"]["vpcID"] == "vpc-0c1"


def test_a_refusal_stalls_the_key_and_is_said_by_the_cluster_when_it_has_no_network_yet(world):
    world.lookup.answer = LookupRefused("not authorized to describe VPCs", reason="AccessDenied")
    assert world.reconcile() == Outcome.stall("AccessDenied", 60.0)
    assert world.status()["networkError"]["refused"] is True
    assert world.reasons() == []  # no network: the cluster is Stalled with this reason, and its reconciler says it

    world.lookup.answer = network()
    world.reconcile()
    world.now += INTERVAL
    world.lookup.answer = LookupRefused("not authorized to describe VPCs", reason="AccessDenied")
    assert world.reconcile() == Outcome.stall("AccessDenied", 60.0)
    assert world.reasons()[-1] == ("Warning", "AccessDenied")  # it keeps its network: this is the only word of it
    assert world.status()["network"]["vpcID"] == "vpc-0c1"  # its last network kept meanwhile


def test_a_cluster_gone_deleting_or_not_to_be_read_is_left_alone(world):
    world.desired.queries.clear()
    assert world.reconcile() == Outcome.done() and world.lookup.reads == []  # registered only, or refused
    world.desired.queries[KEY] = World().desired.queries[KEY]
    world.store.patch(HUBCLUSTERS, "prod-1", {"metadata": {"finalizers": ["hubwright.io/stack"]}}, "acme")
    world.store.delete(HUBCLUSTERS, "prod-1", "acme")
    assert world.reconcile() == Outcome.done() and world.lookup.reads == []  # going: its network no longer matters
    assert world.store.status_writes == []


def test_its_fields_and_the_cluster_reconcilers_never_touch_each_other_through_one_writer(world):
    """One status writer of HubClusters (automation/kit/status.py), shared as serve.py shares it: the reconciler's
    whole status never carries or nulls status.network, the discovery's entries never touch the rest."""
    clusters = ClusterClient(world.store, writer=cluster_writer(world.store, background=False))
    discovery = Discovery(desired=world.desired, cache=world.cache, lookup=world.lookup, objects=world.store,
                          writer=clusters.writer, stalled_recheck=60.0, clock=lambda: world.now)
    raw = world.cache.get(KEY)
    running = ClusterStatus.model_validate({"lastUpdate": {"operation": "up", "result": "Running", "message": "m"}})
    assert clusters.write(raw, running, previous=ClusterStatus())
    discovery.reconcile(KEY)
    assert world.status()["lastUpdate"]["result"] == "Running" and world.status()["network"]["vpcID"] == "vpc-0c1"
    assert clusters.write(raw, ClusterStatus(), previous=running)  # over a copy without the network
    assert "lastUpdate" not in world.status() and world.status()["network"]["vpcID"] == "vpc-0c1"


def test_setup_feeds_its_queue_with_each_mapper_pass_keys():
    world = World()
    manager = Manager()
    controller, hook = setup(manager, desired=world.desired, cache=world.cache, lookup=world.lookup,
                             objects=world.store, stalled_recheck=60.0)
    assert [c.name for c in manager.controllers] == ["discovery"]
    answer = FleetAnswer(inputs={}, digests={})
    hook(Pass(answer, True, frozenset({KEY, "acme/prod-2"})))
    assert controller.queue.depth == 2
    assert controller.reconcile(controller.queue.get(timeout=0)) is not None
