"""The clusters' stacks controller, declared on the Manager: `setup(manager, ...) -> Fleet`.

    informers (clusters, hubconfigs, namespaces, configmaps) ─► Cache ─► Mapper (a runnable: FleetPublisher, then
    the hooks in order, then the keys) ─► WorkQueue "stacks" ─► --workers threads ─► Slots ─► Reconciler ─► Engine

It owns what every other stack controller reads: the Cache (the store of the four kinds the stacks read), the
FleetPublisher and its published Snapshot, the Mapper and its hook list (the shared ingress's ConfigMap first;
discovery and the transit stacks add theirs with `fleet.mapper.hooks`), the engine's bound (`Slots`, which the
transit stacks' controller shares) and the one run gate (`Runs`). Before the mapper's first pass (on_synced): the
shared ingress's published routes are read, so no live route moves, and the facts agents of Clusters deleted while no
service ran are revoked.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from automation.adapters.backoff import Backoff
from automation.adapters.engine import Engine
from automation.adapters.kube.agent import sweep_agents
from automation.adapters.kube.calls import API_ERRORS, ApiClient, error_text
from automation.adapters.kube.informer import sources
from automation.adapters.kube.ingress_sync import IngressSync
from automation.kit.objects import Objects
from automation.kit.queue import WorkQueue
from automation.kit.runtime import Controller, Manager, Slots
from automation.kit.status import StatusWriter
from automation.service.cache import Cache
from automation.service.clusters import Audit, ClusterClient, Guard, ReconcileOptions, Reconciler, cluster_writer
from automation.service.mapper import FleetPublisher, Hook, Mapper, Pass
from automation.service.options import ServiceOptions
from automation.service.runs import Metrics, Runs
from automation.service.history import Recorder
from stacks.model.hub import HubConfig
from stacks.rolemap import from_configmap
from stacks.sources.families import named

LOG = logging.getLogger("hubwright.service")


def role_map_entries(raw: Mapping[str, Any] | None) -> Mapping[str, str]:
    """The role-map ConfigMap's entries (account -> role ARN); stacks.rolemap validates them."""
    if raw is None:
        return {}
    parsed = from_configmap(raw)
    for error in parsed.errors:
        LOG.warning("role map: %s", error)
    return parsed.entries


def shared_ingress_sync(api_client: ApiClient) -> Hook:
    """Keeps the central proxy's ConfigMap in step with the Clusters (automation.adapters.kube.ingress_sync): a
    mapper hook, on each new answer."""
    sync = IngressSync(api_client)

    def observe(passed: Pass) -> None:
        if passed.new:  # whether it wrote is the sync's business (and its log's)
            sync.sync(passed.answer.hub, passed.answer.routes)
    return observe


@dataclass
class Fleet:
    """What `setup` declared: the clusters' stacks controller and what the other stack controllers read of it."""

    cache: Cache
    desired: FleetPublisher
    clusters: ClusterClient  # the HubClusters' status, finalizers, Events and agents, through the port
    status: StatusWriter  # the HubClusters' one status writer (the reconciler's status, the discovery's network)
    runs: Runs
    slots: Slots  # the engine's bound: --workers reconciles at once, this controller's and the transit stacks'
    reconciler: Reconciler
    controller: Controller
    mapper: Mapper
    stopped: threading.Event = field(default_factory=threading.Event)

    @property
    def queue(self) -> WorkQueue:
        return self.controller.queue


def setup(manager: Manager, *, options: ServiceOptions, api_client: ApiClient, objects: Objects, engine: Engine,
          guards: Iterable[Guard], audit: Audit | None, metrics: Metrics, discovery: bool,
          recorder: Recorder | None = None) -> Fleet:
    """The clusters' stacks controller on `manager` (module docstring); `discovery`: whether a discovery controller
    reads the clusters' networks (the publisher then waits for status.network)."""
    cache = Cache(hub_name=options.hub_name, role_map_name=options.role_map_configmap,
                  role_map_namespace=options.namespace, parse_role_map=role_map_entries)
    stores = cache.stores()
    for kind, source in sources(api_client, hub_name=options.hub_name, role_map_name=options.role_map_configmap,
                                role_map_namespace=options.namespace, watch_namespace=options.watch_namespace,
                                every_namespace=options.tenants or any(
                                    family.reads_elsewhere for family in named(options.sources))).items():
        manager.source(source, stores[kind])
    desired = FleetPublisher(cache, discovery=discovery)
    status = cluster_writer(objects)
    clusters = ClusterClient(objects, writer=status)
    runs, slots = Runs(metrics, recorder), Slots(options.workers)
    reconciler = Reconciler(desired=desired.view, cache=cache, engine=engine, kube=clusters,
                            options=options.part(ReconcileOptions), guards=guards, audit=audit, runs=runs)
    queue = WorkQueue(Backoff(options.backoff_base, options.backoff_cap), settle=options.settle)
    controller = manager.controller("stacks", slots.bound(reconciler), queue=queue, workers=options.workers,
                                    threads="worker")
    mapper = Mapper(cache, desired, add=queue.add, add_after=queue.add_after, triage=reconciler.triage,
                    reset=queue.forget, hooks=[shared_ingress_sync(api_client)])
    fleet = Fleet(cache, desired, clusters, status, runs, slots, reconciler, controller, mapper)
    ingress = IngressSync(api_client)  # reads the published routes once, at start
    manager.on_synced(lambda: _seed_routes(fleet, ingress))
    manager.on_synced(lambda: _sweep_agents(fleet, api_client, options.watch_namespace))
    manager.runnable(mapper)
    return fleet


def _seed_routes(fleet: Fleet, ingress: IngressSync) -> bool:
    """Before the first resolution: the routes the shared ingress publishes now (FleetPublisher.seed_routes), so the
    clusters routed before their IDs were recorded keep them. Retried until read (False: stopped meanwhile):
    resolving without them could move a live route."""
    hub = fleet.cache.shared().hub
    if not isinstance(hub, HubConfig):
        return True
    attempt = 0
    while not fleet.stopped.is_set():
        try:
            fleet.desired.seed_routes(ingress.published(hub))
            return True
        except Exception as exc:  # noqa: BLE001 - the API server may be away: try again
            LOG.warning("could not read the shared ingress's published routes (%s); retrying", error_text(exc))
        fleet.stopped.wait(Backoff(0.5, 10.0).delay(attempt))
        attempt += 1
    return False


def _sweep_agents(fleet: Fleet, api_client: ApiClient, namespace: str | None) -> bool:
    """Agents whose Cluster went while no service ran: revoked now (the garbage collector does it too, where
    kube-controller-manager runs); a failure is logged, never fatal (the next term sweeps again)."""
    try:
        sweep_agents(api_client, namespace)
    except API_ERRORS as exc:
        LOG.warning("could not sweep the facts agents of deleted Clusters: %s", error_text(exc))
    LOG.info("watches synced: %d clusters", len(fleet.cache.entries()))
    return True
