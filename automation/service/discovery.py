"""The discovery controller: each HubCluster's network read from its own account into status.network.

One controller on the shared runtime (automation/kit/runtime.py), keyed by cluster: `setup(manager, ...)` declares it
and its watch, a mapper hook that queues each pass's cluster keys once the pass's snapshot is published. For
each admitted cluster the mapper's snapshot says where to look (DesiredView.network_query: the account, region and
role the tenancy gate admitted, the declared VPC or the installer tag). The lookup (automation.adapters.aws.discovery,
or its stand-in) reads the VPC's CIDR blocks, subnets, route tables, security groups and the API's load balancer
there; what it found is written to status.network with observedAt, through the controller kit's status writer
(automation/kit/status.py: the entry whole, nulling what the last network had and this one lacks; status.network
and status.networkError are this controller's alone, stacks.status.OTHER_WRITERS_STATUS_FIELDS). The mapper re-resolves the cluster when the
facts change (observedAt alone changes no stack: stacks.model.loading.resolved_part), and stacks.network.merge
compares them with what the cluster declares.

The network is read again every HubConfig spec.discovery.interval (a new subnet's route table is meshed within
one interval, at the cost of one run), at once when the query changes (another account, region, VPC or load
balancer), and sooner while a PrivateLink cluster's load balancer is not there yet.

A failed read is recorded in status.networkError (removed by the next read that succeeds) and said once, in a
Warning Event and a log line, when it is new or another failure than the last. A lookup AWS refuses (NoCredentials,
AccessDenied, two VPCs with the installer's tag) stalls this controller's key with the reason, looked at again
every --stalled-recheck; a transient failure is retried with backoff. Neither touches the stack. A cluster with no
network yet shows the failure (stacks.network.merge): Stalled with the lookup's reason when a person must act (so
hubwright_stalled_clusters counts it and the alert fires), else waiting (NetworkNotDiscovered) with the last
failure in its message; a cluster with a network keeps its last one meanwhile.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Literal

from automation.adapters.aws.discovery import NetworkLookup
from automation.adapters.aws.lookups import LookupFailed, LookupRefused
from automation.kit.objects import HUBCLUSTERS, Obj, Objects
from automation.kit.queue import Outcome, WorkQueue
from automation.kit.runtime import Controller, Manager
from automation.kit.status import StatusWriter
from automation.service.cache import Cache
from automation.service.mapper import Hook, Pass
from automation.service.snapshot import DesiredView
from stacks.names import NETWORK_ERROR_STATUS_KEY, NETWORK_STATUS_KEY
from stacks.times import parse_seconds, rfc3339_seconds
from stacks.network.found import FoundNetwork, NetworkError, error_of, found_of, stale
from stacks.network.query import NetworkQuery
from stacks.registry import seconds

LOG = logging.getLogger("hubwright.discovery")
LOAD_BALANCER_RECHECK = 30.0  # seconds: a PrivateLink cluster whose load balancer is not there yet


def _awaits_load_balancer(query: NetworkQuery, found: FoundNetwork) -> bool:
    """A PrivateLink cluster whose load balancer was not there (or by another name) at the last read."""
    return query.load_balancer_name is not None and (found.load_balancer is None
                                                     or found.load_balancer.name != query.load_balancer_name)


def due_in(query: NetworkQuery, found: FoundNetwork, interval: float, now: float) -> float:
    """Seconds until the next read (<= 0: now): an interval after the last, sooner while a load balancer is awaited."""
    observed = parse_seconds(found.observed_at)
    age = now - observed if observed is not None else interval
    wait = min(interval, LOAD_BALANCER_RECHECK) if _awaits_load_balancer(query, found) else interval
    return wait - age


class Discovery:
    """The controller's reconcile: one key, one read when due, one status write when the facts moved."""

    def __init__(self, *, desired: DesiredView, cache: Cache, lookup: NetworkLookup, objects: Objects,
                 stalled_recheck: float, writer: StatusWriter | None = None, clock: Callable[[], float] = time.time):
        """`writer`: HubClusters' status writer for status.network and status.networkError (a new one over
        `objects` when not given); Events go through `objects`."""
        self.desired, self.cache, self.lookup, self.objects = desired, cache, lookup, objects
        self.writer = writer if writer is not None else StatusWriter(objects, HUBCLUSTERS)
        self.stalled_recheck = stalled_recheck
        self.clock = clock
        # What was last said per key (a failure, or the facts found), so that a fact is said once even when the
        # cache has not yet seen this controller's own write of it (a second pass reads the old status).
        self._told: dict[str, NetworkError | FoundNetwork] = {}

    def reconcile(self, key: str) -> Outcome:
        raw = self.cache.get(key)
        if raw is None or Obj(raw).deleting:
            self._told.pop(key, None)
            return Outcome.done()  # gone or going: its network no longer matters
        query = self.desired.network_query(key)
        if query is None:
            return Outcome.done()  # registered only, or refused at the gate: nothing to read, nowhere admitted
        found = found_of(Obj(raw).status)
        now = self.clock()
        interval = max(float(seconds(query.interval)), 1.0)
        why = stale(found, query.target.account_id, query.target.region, query.vpc_id)
        usable = why is None  # the same rule as stacks.network.merge: without it, the cluster's conditions wait on this
        if why is None and found is not None:
            due = due_in(query, found, interval, now)
            if due > 0:
                return Outcome.done(due)
            why = "due"
        try:
            fresh = self.lookup.discover(query, now=rfc3339_seconds(now))
        except LookupFailed as exc:
            refused = isinstance(exc, LookupRefused)
            error = NetworkError(reason=exc.reason, message=str(exc)[:4096], refused=refused, observed_at=rfc3339_seconds(now))
            if not self._failed(key, raw, error, refusal_said=refused and not usable):
                return Outcome.done()
            return Outcome.stall(exc.reason, self.stalled_recheck) if refused else Outcome.retry()
        # status.network, and no status.networkError (nulled whatever the cached copy shows: it may not show this
        # controller's last write yet).
        if not self.writer.write_entries(raw, {(NETWORK_STATUS_KEY,): fresh.to_status(),
                                               (NETWORK_ERROR_STATUS_KEY,): None}):
            return Outcome.done()
        told = self._told.get(key)
        self._told[key] = fresh
        if not fresh.same_as(found) and not (isinstance(told, FoundNetwork) and fresh.same_as(told)):
            LOG.info("%s: network read (%s): VPC %s, %d CIDR blocks, %d route tables", key, why, fresh.vpc_id,
                     len(fresh.cidrs), len(fresh.route_table_ids))
            self._event(raw, "Normal", "NetworkDiscovered",
                            f"VPC {fresh.vpc_id}: {', '.join(fresh.cidrs)}; {len(fresh.route_table_ids)} route "
                            f"tables, {len(fresh.node_security_group_ids)} node security groups")
        return Outcome.done(due_in(query, fresh, interval, now))

    def _failed(self, key: str, raw: dict[str, Any], error: NetworkError, *, refusal_said: bool) -> bool:
        """Record a failed read in status.networkError, which the cluster's conditions show (stacks.network.merge);
        said once per fact: an Event and a log line when the failure is new or another, not at every retry.
        `refusal_said`: the cluster has no usable network, so merge stalls it with this reason and the cluster
        reconciler's refusal Event says it; this one would say it twice. False: the HubCluster is gone."""
        timeless = error.model_copy(update={"observed_at": None})
        before, told = error_of(Obj(raw).status), self._told.get(key)
        same = any(isinstance(last, NetworkError) and last.model_copy(update={"observed_at": None}) == timeless
                   for last in (before, told))
        self._told[key] = error
        if not same:
            if error.refused:
                LOG.warning("%s: discovery refused (%s): %s", key, error.reason, error.message)
            else:
                LOG.info("%s: discovery failed, retried (%s): %s", key, error.reason, error.message)
            if not refusal_said:
                self._event(raw, "Warning", error.reason, f"discovery: {error.message}")
        return self.writer.write_entries(raw, {(NETWORK_ERROR_STATUS_KEY,): error.to_status()}) is not None

    def _event(self, raw: dict[str, Any], type_: Literal["Normal", "Warning"], reason: str, message: str) -> None:
        self.objects.event(HUBCLUSTERS, raw, type_, reason, message)

    __call__ = reconcile


def setup(manager: Manager, *, desired: DesiredView, cache: Cache, lookup: NetworkLookup, objects: Objects,
          stalled_recheck: float, queue: WorkQueue | None = None, workers: int = 1,
          writer: StatusWriter | None = None) -> tuple[Controller, Hook]:
    """The discovery controller on `manager` (its queue, `queue` else a new one, served by `workers` threads) and
    its watch: the mapper hook that queues each pass's cluster keys (the snapshot says where to look)."""
    discovery = Discovery(desired=desired, cache=cache, lookup=lookup, objects=objects, writer=writer,
                          stalled_recheck=stalled_recheck)
    controller = manager.controller("discovery", discovery.reconcile, queue=queue, workers=workers)

    def follow(passed: Pass) -> None:
        for key in passed.keys:
            controller.queue.add(key)
    return controller, follow
