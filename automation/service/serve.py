"""The service: watch -> queue -> reconcile -> engine, behind a Lease, with probes and metrics.

    Informers ──► Cache ──► Mapper ──► WorkQueue ──► Workers ──► Reconciler ──► Engine
    adapters/     service/  service/   service/      service/    service/       adapters/
    kube/         cache.py  mapper.py  queue.py      queue.py    clusters/      engine/
    informer.py

The informers, the queues and their workers are the runtime's (service/runtime.py: one informer per kind,
one start-when-synced). Beside the stacks' controller, the tenant controller (service/tenants.py) turns Tenants
into Namespaces over the same informers (--no-tenants: off), and the Git repository controllers
(service/gitrepos.py, service/gitrepo_templates.py) keep HubGitRepos and their forges (--no-gitrepos: off).
Only the leader runs the pipeline; a follower keeps its probes up and runs nothing.
Losing the Lease starts nothing more, kills the runs in flight and exits, before
another replica may take the Lease; the next leader recovers their locks. The engine
runs every Pulumi operation in a worker process (automation.adapters.engine.pool). Its options are
ServiceOptions (automation/service/options.py); the `serve` command around it is automation/service/command.py.
"""
from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Any, Callable, Iterable, Mapping

import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from automation.adapters.kube.agent import sweep_agents
from automation.adapters.aws.audit import audit_stack
from automation.adapters.backoff import Backoff
from automation.adapters.engine import Engine
from automation.adapters.kube.ingress_sync import IngressSync
from automation.adapters.kube.leader import LeaderElector, default_identity
from automation.adapters.kube.clusters import KubeClusters
from automation.adapters.kube.network_status import NetworkStatus
from automation.adapters.kube.sources import SourceClient, not_served, selected, served, source_of
from automation.adapters.kube.status import EventRecorder, StatusWriter
from stacks.conditions import state_of
from automation.adapters.kube.informer import Informer, sources
from automation.adapters.loop import Every
from automation.service.cache import Cache
from automation.service.census import Count, EndpointCensus
from automation.adapters.aws.discovery import NetworkLookup
from automation.service.discovery import Discovery
from automation.service.executor import RunnerEngine
from automation.service.mapper import FleetPublisher, Hook, Mapper, Pass
from automation.service.options import ServiceOptions
from automation.kit.queue import Outcome, WorkQueue
from automation.kit.runtime import Manager
from automation.service.clusters import Audit, Guard, ReconcileOptions, Reconciler
from automation.service.server import Metrics, ProbeServer
from automation.service.gitrepo_templates import GitRepoTemplates
from automation.service.gitrepos import GitRepoController
from automation.service.tenants import TenantController
from automation.service.runs import Runs
from automation.service.sources import Sources
from automation.service.transit import MeshStates, MeshStatusWriter, TransitReconciler
from stacks.guards import check_move
from stacks.model.hub import HubConfig
from stacks.monitoring import metric_reason
from stacks.rolemap import from_configmap
from stacks.sources.kinds import SourceKind
from stacks.status import DRIFT_CONDITION
from stacks.transit import is_transit_stack

LOG = logging.getLogger("hubwright.service")

# After the engine cancelled every run, a worker thread still writes its run's status: this bounds the wait.
WORKERS_STOP_TIMEOUT = 10.0


def role_map_entries(raw: Mapping[str, Any] | None) -> Mapping[str, str]:
    """The role-map ConfigMap's entries (account -> role ARN); stacks.rolemap validates them."""
    if raw is None:
        return {}
    parsed = from_configmap(raw)
    for error in parsed.errors:
        LOG.warning("role map: %s", error)
    return parsed.entries


def shared_ingress_sync(api_client: client.ApiClient) -> Hook:
    """Keeps the central proxy's ConfigMap in step with the Clusters (automation.adapters.kube.ingress_sync): a
    mapper hook, on each new answer."""
    sync = IngressSync(api_client)

    def observe(passed: Pass) -> None:
        if passed.new:  # whether it wrote is the sync's business (and its log's)
            sync.sync(passed.answer.hub, passed.answer.routes)
    return observe


def default_guards() -> list[Guard]:
    """Refusals checked before every up: moving a stack to another account or region."""
    return [check_move]


def default_audit() -> Audit:
    return audit_stack


class Service:
    def __init__(self, options: ServiceOptions, *, api_client: client.ApiClient, engine: Engine,
                 guards: Iterable[Guard] | None = None, audit: Audit | None = None,
                 census: Count | None = None, on_lost_leadership: Callable[[], None] | None = None,
                 discovery: NetworkLookup | None = None, not_ready: str | None = None):
        self.options = options
        # Why this replica can never do its work (automation.adapters.engine.plugins: the AWS plugin missing from the
        # image), or None: /readyz says it and answers 503, follower or leader.
        self.not_ready = not_ready
        self.discovery = discovery  # reads each cluster's network (None: the declared network is taken as is)
        self.census = census  # counts other endpoints in the inventory VPCs (None: placement assumes none)
        self.api_client = api_client
        self.engine = engine
        self.guards = list(default_guards() if guards is None else guards)
        self.audit = default_audit() if audit is None else audit
        self.on_lost_leadership = on_lost_leadership
        self.identity = options.identity or default_identity()
        self.metrics = Metrics()
        self.server = ProbeServer(self.metrics, healthy=self.healthy, ready=self.ready,
                                  bind=options.metrics_bind, port=options.metrics_port)
        self.elector: LeaderElector | None = None
        if options.leader_election:
            self.elector = LeaderElector(
                api_client, name=options.leader_election_id, namespace=options.namespace, identity=self.identity,
                lease_duration=options.lease_duration, renew_deadline=options.renew_deadline,
                retry_period=options.retry_period, on_started_leading=self._start_pipeline,
                on_stopped_leading=self._lost)
        self.metrics.track_leader(self.leading)
        self._lock = threading.Lock()
        self.pipeline: Pipeline | None = None
        self._stopping = False

    # -- lifecycle
    def start(self) -> None:
        self.server.start()
        if self.elector is not None:
            self.elector.start()
        else:
            self._start_pipeline()

    def stop(self) -> None:
        """Shut down within the pod's grace period: no new runs; the runs in flight get --cancel-grace to
        cancel gracefully before their process trees are killed; then the Lease is released."""
        self._stopping = True
        self._stop_pipeline(grace=self.options.cancel_grace)
        if self.elector is not None:
            self.elector.stop()
        self.server.stop()

    def leading(self) -> bool:
        return self.elector.is_leader if self.elector is not None else self.pipeline is not None

    # -- probes
    def healthy(self) -> tuple[bool, dict]:
        if self.elector is not None and not self.elector.alive() and not self._stopping:
            return False, {"problem": "leader election stopped"}
        pipeline = self.pipeline
        if pipeline is not None and not pipeline.alive():
            return False, {"problem": "a watch or worker thread died"}
        return True, {}

    def ready(self) -> tuple[bool, dict]:
        if self.not_ready is not None:
            return False, {"problem": self.not_ready}
        if self.elector is not None and not self.elector.is_leader:
            return True, {"role": "follower", "leader": self.elector.holder,
                          "detail": "not the leader: runs nothing, takes over if the leader goes"}
        pipeline = self.pipeline
        if pipeline is None:
            return False, {"role": "leader", "detail": "starting"}
        synced = pipeline.synced()
        detail = {"role": "leader", "synced": synced, "queue": pipeline.queue.depth}
        if pipeline.unwatched_sources:  # said, not failed: a hub without Hive is ready
            detail["sourcesNotWatched"] = dict(pipeline.unwatched_sources)
        return all(synced.values()), detail

    # -- leadership
    def _start_pipeline(self) -> None:
        with self._lock:
            if self.pipeline is not None or self._stopping:
                return
            try:
                self.pipeline = Pipeline(self.options, api_client=self.api_client, engine=self.engine,
                                         guards=self.guards, audit=self.audit, metrics=self.metrics,
                                         identity=self.identity, census=self.census, discovery=self.discovery)
                self.pipeline.start()
            except Exception:
                # The elector then gives the Lease up and the CLI exits ("lost the Lease"): say why first.
                LOG.exception("%s: could not start the leader's controllers", self.identity)
                raise

    def _stop_pipeline(self, grace: float) -> None:
        with self._lock:
            pipeline, self.pipeline = self.pipeline, None
        if pipeline is not None:
            pipeline.stop(grace)

    def _lost(self) -> None:
        """The Lease was not renewed by its deadline: before anyone else may take it (lease duration minus renew
        deadline later), start nothing more and kill the runs in flight, then (the CLI) exit."""
        pipeline = self.pipeline
        if pipeline is not None:
            pipeline.halt()
            pipeline.cancel_runs(0)
        else:
            self.engine.cancel(0)
        if self.on_lost_leadership is not None and not self._stopping:
            self.on_lost_leadership()  # the CLI exits here: nothing of this term outlives the Lease
        self._stop_pipeline(grace=0)


class Pipeline:
    """One leader term: fresh cache, queue and workers (nothing carried over from an earlier term)."""

    def __init__(self, options: ServiceOptions, *, api_client: client.ApiClient, engine: Engine,
                 guards: Iterable[Guard], audit: Audit | None, metrics: Metrics, identity: str,
                 census: Count | None = None, discovery: NetworkLookup | None = None):
        self._api_client, self._watch_namespace = api_client, options.watch_namespace
        self.cache = Cache(hub_name=options.hub_name, role_map_name=options.role_map_configmap,
                           role_map_namespace=options.namespace, parse_role_map=role_map_entries)
        self.desired = FleetPublisher(self.cache, discovery=discovery is not None)
        self._ingress = IngressSync(api_client)  # reads the published routes once, at start
        self.engine = engine
        self.queue = WorkQueue(Backoff(options.backoff_base, options.backoff_cap), settle=options.settle)
        self.status = StatusWriter(api_client)
        self.events = EventRecorder(api_client, instance=identity)
        # Every engine run, the clusters' and the transit stacks', passes one gate (automation/service/runs.py).
        self.runs = Runs(metrics)
        self.reconciler = Reconciler(
            desired=self.desired.view, cache=self.cache, engine=engine,
            kube=KubeClusters(api_client, status=self.status, events=self.events),
            options=options.part(ReconcileOptions),
            guards=guards, audit=audit, runs=self.runs)
        # The mesh's shared state (automation/service/transit.py): transit stacks are queue keys of their own.
        mesh_status = MeshStatusWriter(api_client, options.hub_name, recorded=lambda: self.cache.hub_status)
        self.transit = TransitReconciler(desired=self.desired.view, cache=self.cache, engine=engine, writer=mesh_status,
                                         runs=self.runs, events=self.events, lock_retry=options.lock_retry,
                                         stalled_recheck=options.stalled_recheck)
        self.mesh_states = MeshStates(self.cache, mesh_status, self.events)
        # Discovery (automation/service/discovery.py): each admitted cluster's network read into status.network,
        # on a queue of its own, fed by the mapper's passes (the snapshot says where to look) and requeued when due.
        self.discovery: Discovery | None = None
        self.discovery_queue = WorkQueue(Backoff(options.backoff_base, options.backoff_cap))
        if discovery is not None:
            self.discovery = Discovery(desired=self.desired.view, cache=self.cache, lookup=discovery,
                                       sink=NetworkStatus(api_client, self.events),
                                       stalled_recheck=options.stalled_recheck)
        self.mapper = Mapper(self.cache, self.desired, add=self.queue.add, add_after=self.queue.add_after,
                             triage=self.reconciler.triage, reset=self.queue.forget, hooks=[
                                 shared_ingress_sync(api_client),
                                 *([self._discover] if discovery is not None else []),
                                 lambda passed: self.mesh_states(passed.answer)])
        # The runtime (automation/kit/runtime.py): one informer per kind, the Cache the store of the four the
        # stacks read, shared with the tenant controller; one start-when-synced for both controllers.
        self.manager = Manager(watch_timeout=options.watch_timeout, on_restart=metrics.watch_restarted)
        stores = self.cache.stores()
        for kind, source in sources(api_client, hub_name=options.hub_name, role_map_name=options.role_map_configmap,
                                    role_map_namespace=options.namespace, watch_namespace=options.watch_namespace,
                                    tenants=options.tenants).items():
            self.manager.source(source, stores[kind])
        # One queue for every stack (clusters' and transit stacks'), served by --workers threads: both share the
        # engine's bound (the WorkerPool has as many processes).
        if isinstance(engine, RunnerEngine):  # --executor runners: the runs' informer is this term's too
            engine.attach(self.manager, identity=identity)
            metrics.track_stackruns(engine.counts)
        self.stacks = self.manager.controller("stacks", self.reconcile, queue=self.queue, workers=options.workers,
                                              threads="worker")
        self.workers = self.stacks.workers
        self.unwatched_sources: dict[str, str] = {}  # source kind -> why it is not watched (/readyz says it)
        self.sources = self._sources(options, api_client)
        if self.discovery is not None:
            self.manager.controller("discovery", self.discovery.reconcile, queue=self.discovery_queue,
                                    workers=max(1, options.workers))
        self.census = EndpointCensus(self.cache, census, interval=options.endpoint_census_interval) \
            if census is not None and options.endpoint_census_interval > 0 else None
        self.tenants = TenantController(
            api_client, self.manager, hub_account=self._hub_account,
            backoff=Backoff(options.backoff_base, options.backoff_cap)) if options.tenants else None
        # HubGitRepos (automation/service/gitrepos.py) and the ones a HubTenant's templates make, over the tenant
        # controller's Tenants (automation/service/gitrepo_templates.py): both with --tenants and --gitrepos. In every
        # namespace even with --watch-namespace, as the Tenants: a tenant's repository is in its namespace, any.
        self.gitrepos: GitRepoController | None = None
        self.gitrepo_templates: GitRepoTemplates | None = None
        if options.gitrepos and self.tenants is not None:
            self.gitrepos = GitRepoController(
                api_client, self.manager, namespace=options.namespace,
                backoff=Backoff(options.backoff_base, options.backoff_cap), resync=options.gitrepo_resync)
            self.gitrepo_templates = GitRepoTemplates(
                api_client, self.manager, tenants=self.tenants.tenants,
                backoff=Backoff(options.backoff_base, options.backoff_cap), resync=options.gitrepo_resync)
        # The mapper waits for every list, so a cluster is never judged against a half-filled cache.
        self.manager.on_synced(self._seed_routes)
        self.manager.on_synced(self._first_census)
        self.manager.on_synced(self._sweep_agents)
        if self.census is not None:  # placed with the counts from the first resolution on
            self.manager.runnable(self.census)
        self.manager.runnable(self.mapper)
        metrics.track_queue(lambda: self.queue.depth, lambda: self.queue.in_flight, lambda: self.queue.scheduled)
        metrics.track_clusters(self.cluster_counts)
        self._stopped = threading.Event()

    def _sources(self, options: ServiceOptions, api_client: client.ApiClient) -> Sources | None:
        """Other projects' cluster objects (--sources): one informer per kind, one controller keeping a HubCluster
        per opted-in object (automation/service/sources.py)."""
        kinds, related, unwatched = selected(api_client, options.sources)
        for source in unwatched:
            self.unwatched_sources[source.qualified] = why = not_served(source)
            LOG.warning("not watching cluster source %s: %s", source.qualified, why)
        if unwatched:
            missing = {source.qualified: source for source in unwatched}
            self.manager.runnable(Every("source-crds", options.sources_recheck,
                                        functools.partial(self._source_crds, api_client, missing)))
        if not kinds:
            return None
        stores = {kind.qualified: self.manager.source(source_of(api_client, kind, options.watch_namespace))
                  for kind in (*kinds, *related)}
        sources = Sources(kinds=kinds, stores=stores, cache=self.cache, desired=self.desired.view,
                          kube=SourceClient(api_client), events=self.events)
        controller = self.manager.controller("sources", sources.reconcile)
        for kind in kinds:
            controller.watches(kind.qualified, sources.keys_of_source(kind))
        for kind in related:
            controller.watches(kind.qualified, sources.keys_of_related(kind))
        controller.watches("clusters", sources.keys_of_cluster)
        controller.watches("namespaces", sources.keys_of_namespace)
        controller.watches("hubconfigs", sources.keys_of_hub)
        LOG.info("watching cluster sources: %s", ", ".join(k.qualified for k in kinds))
        return sources

    def _source_crds(self, api_client: client.ApiClient, missing: dict[str, SourceKind]) -> None:
        """A source kind not served at start that is served now: said once, loudly, and on /readyz (its objects
        are taken in after a restart)."""
        for name, kind in list(missing.items()):
            try:
                here = served(api_client, [kind])
            except (ApiException, urllib3.exceptions.HTTPError, OSError):
                return  # the API server away: the next look
            if here:
                del missing[name]
                self.unwatched_sources[name] = (f"{kind.plural}.{kind.group} is served now, since after the service "
                                                "started: restart the service to watch it")
                LOG.warning("cluster source %s was installed after the service started and is not watched: restart "
                            "the service (kubectl rollout restart) to take in its objects", name)

    def _discover(self, passed: Pass) -> None:
        """Discovery reads the snapshot each pass published: its keys, once published."""
        for key in passed.keys:
            self.discovery_queue.add(key)

    def _hub_account(self) -> str | None:
        """The hub account, as the valid HubConfig in the cache says (None: none valid yet)."""
        hub = self.cache.hub
        return hub.spec.account_id if isinstance(hub, HubConfig) else None

    def reconcile(self, key: str) -> Outcome:
        """A queue key: a transit stack's (`_tgw_<account>`) or a cluster's (namespace/name)."""
        return self.transit.reconcile(key) if is_transit_stack(key) else self.reconciler(key)

    @property
    def informers(self) -> list[Informer]:
        return list(self.manager.informers.values())

    def start(self) -> None:
        self.manager.start()

    def _seed_routes(self) -> bool:
        """Before the first resolution: the routes the shared ingress publishes now (FleetPublisher.seed_routes), so the
        clusters routed before their IDs were recorded keep them. Retried until read (False: stopped meanwhile):
        resolving without them could move a live route."""
        hub = self.cache.shared().hub
        if not isinstance(hub, HubConfig):
            return True
        attempt = 0
        while not self._stopped.is_set():
            try:
                self.desired.seed_routes(self._ingress.published(hub))
                return True
            except Exception as exc:  # noqa: BLE001 - the API server may be away: try again
                LOG.warning("could not read the shared ingress's published routes (%s); retrying", exc)
            self._stopped.wait(Backoff(0.5, 10.0).delay(attempt))
            attempt += 1
        return False

    def _first_census(self) -> bool:
        if self.census is not None:
            self.census.count_once()
        return True

    def _sweep_agents(self) -> bool:
        """Agents whose Cluster went while no service ran: revoked now (the garbage collector does it too, where
        kube-controller-manager runs); a failure is logged, never fatal (the next term sweeps again)."""
        try:
            sweep_agents(self._api_client, self._watch_namespace)
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            LOG.warning("could not sweep the facts agents of deleted Clusters: %s", getattr(exc, "reason", exc))
        LOG.info("watches synced: %d clusters", len(self.cache.entries()))
        return True

    def halt(self) -> None:
        """Start no more runs (the runs in flight go on)."""
        self._stopped.set()
        self.manager.halt()
        self.runs.halt()

    def cancel_runs(self, grace: float) -> None:
        """After halt(): cancel until no engine call is left, including one that passed the halt check just
        before it and reaches the engine only now."""
        deadline = time.monotonic() + grace + 5
        self.engine.cancel(grace)
        while self.runs.active() and time.monotonic() < deadline:
            time.sleep(0.01)
            self.engine.cancel(grace)

    def stop(self, grace: float) -> None:
        """Halt, cancel the runs in flight (killed after `grace` seconds), then stop every thread."""
        self.halt()
        self.cancel_runs(grace)
        self.manager.stop(timeout=WORKERS_STOP_TIMEOUT)  # the mapper, the census, the workers, the informers
        self.reconciler.close()
        self.events.close()

    def synced(self) -> dict[str, bool]:
        return self.manager.synced()

    def alive(self) -> bool:
        return self._stopped.is_set() or self.manager.alive()

    def cluster_counts(self) -> tuple[dict[str, int], int, dict[str, int]]:
        """The clusters by condition (one story each), how many stacks have uncorrected drift, and the Stalled
        clusters by reason: one pass."""
        counts: dict[str, int] = {}
        stalled: dict[str, int] = {}
        drifted = 0
        for key, entry in self.cache.entries().items():
            status = self.status.current(key, entry.raw)
            state = state_of(status)
            counts[state] = counts.get(state, 0) + 1
            if state == "Stalled" and (cond := status.condition("Stalled")) is not None:
                reason = metric_reason(cond.reason)
                stalled[reason] = stalled.get(reason, 0) + 1
            drift = status.condition(DRIFT_CONDITION)
            drifted += drift is not None and drift.status == "True"
        return counts, drifted, stalled
