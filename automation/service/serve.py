"""The service: watch -> queue -> reconcile -> engine, behind a Lease, with probes and metrics.

    Informers ──► Cache ──► Mapper ──► WorkQueue ──► Workers ──► Slots ──► Reconciler ──► Engine
    adapters/     service/  service/   kit/          kit/        kit/      service/       adapters/
    kube/         cache.py  mapper.py  queue.py      queue.py    runtime   clusters/      engine/

`Pipeline` is one leader term: the Manager (automation/kit/runtime.py: one informer per kind, one start-when-synced)
and the list of each controller's `setup`, which declares its own watches: the clusters' stacks (service/fleet.py),
discovery (service/discovery.py), the transit stacks (service/transit.py), the sources (service/sources.py), the
endpoint census, the tenants (service/tenants.py, --no-tenants: off) and the Git repositories (service/gitrepos.py,
service/gitrepo_templates.py, --no-gitrepos: off); docs/architecture.md shows the kit and how to add one.
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
from typing import Callable, Iterable

from automation.adapters.aws.audit import audit_stack
from automation.adapters.aws.discovery import NetworkLookup
from automation.adapters.backoff import Backoff
from automation.adapters.engine import Engine
from automation.adapters.kube.calls import API_ERRORS, ApiClient
from automation.adapters.kube.informer import Informer
from automation.adapters.kube.kit_sources import gitrepo_source, tenant_source
from automation.adapters.kube.leader import LeaderElector, default_identity
from automation.adapters.kube.objects import KubeObjects
from automation.adapters.kube.sources import not_served, selected, served, source_of
from automation.adapters.kube.status import EventRecorder
from automation.adapters.loop import Every
from automation.kit.queue import WorkQueue
from automation.kit.runtime import Controller, Manager, Slots
from automation.service.cache import Cache
from automation.service.census import Count, setup as setup_census
from automation.service.clusters import Audit, Guard, Reconciler
from automation.service.discovery import setup as setup_discovery
from automation.service.executor import RunnerEngine
from automation.service.fleet import setup as setup_fleet
from automation.service.gitrepo_templates import GitRepoTemplates, setup as setup_gitrepo_templates
from automation.service.gitrepos import GitRepoController, setup as setup_gitrepos
from automation.service.mapper import FleetPublisher, Mapper
from automation.service.options import ServiceOptions
from automation.service.runs import Runs
from automation.service.history import Recorder
from automation.adapters.history import HistoryStore
from automation.service.server import Metrics, ProbeServer
from automation.service.retained import setup as setup_retained
from automation.service.sources import Sources, setup as setup_sources
from automation.service.tenants import setup as setup_tenants
from automation.service.transit import setup as setup_transit
from stacks.conditions import state_of
from stacks.guards import check_move
from stacks.model.hub import HubConfig
from stacks.monitoring import metric_reason
from stacks.sources.kinds import SourceKind
from stacks.status import DRIFT_CONDITION

LOG = logging.getLogger("hubwright.service")

# After the engine cancelled every run, a worker thread still writes its run's status: this bounds the wait.
WORKERS_STOP_TIMEOUT = 10.0


def default_guards() -> list[Guard]:
    """Refusals checked before every up: moving a stack to another account or region."""
    return [check_move]


def default_audit() -> Audit:
    return audit_stack


class Service:
    def __init__(self, options: ServiceOptions, *, api_client: ApiClient, engine: Engine,
                 guards: Iterable[Guard] | None = None, audit: Audit | None = None,
                 census: Count | None = None, on_lost_leadership: Callable[[], None] | None = None,
                 discovery: NetworkLookup | None = None, not_ready: str | None = None,
                 history: HistoryStore | None = None):
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
        # Every run's record, diff and log (automation/service/history.py), in the store the runners share.
        self.recorder = Recorder(history, executor="runners" if options.executor == "runners" else "local",
                                 keep=options.history_keep, metrics=self.metrics)
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
                                         identity=self.identity, census=self.census, discovery=self.discovery,
                                         recorder=self.recorder)
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
    """One leader term: fresh informers, queues and workers (nothing carried over from an earlier term). Each
    controller declares its own watches on the one Manager (its `setup`); this is the list of them, in order."""

    def __init__(self, options: ServiceOptions, *, api_client: ApiClient, engine: Engine,
                 guards: Iterable[Guard], audit: Audit | None, metrics: Metrics, identity: str,
                 census: Count | None = None, discovery: NetworkLookup | None = None,
                 recorder: Recorder | None = None):
        self.engine = engine
        self.manager = Manager(watch_timeout=options.watch_timeout, on_restart=metrics.watch_restarted)
        self.events = EventRecorder(api_client, instance=identity)
        # The object port every controller here writes through (automation/kit/objects.py), its Events included.
        self.objects = KubeObjects(api_client, events=self.events)
        backoff = Backoff(options.backoff_base, options.backoff_cap)
        # The clusters' stacks (automation/service/fleet.py): the cache, the mapper, the engine's bound.
        self.fleet = setup_fleet(self.manager, options=options, api_client=api_client, objects=self.objects,
                                 engine=engine, guards=guards, audit=audit, metrics=metrics,
                                 discovery=discovery is not None, recorder=recorder)
        # Discovery (automation/service/discovery.py): each admitted cluster's network read into status.network.
        self.discovery: Controller | None = None
        if discovery is not None:
            self.discovery, follow = setup_discovery(
                self.manager, desired=self.fleet.desired.view, cache=self.fleet.cache, lookup=discovery,
                objects=self.objects, writer=self.fleet.status, stalled_recheck=options.stalled_recheck,
                queue=WorkQueue(backoff), workers=max(1, options.workers))
            self.fleet.mapper.hooks.append(follow)
        # The transit stacks (automation/service/transit.py): their own controller, in the clusters' slots.
        self.transit = setup_transit(
            self.manager, desired=self.fleet.desired.view, cache=self.fleet.cache, engine=engine,
            objects=self.objects, runs=self.fleet.runs, slots=self.fleet.slots,
            queue=WorkQueue(backoff, settle=options.settle), workers=options.workers, lock_retry=options.lock_retry,
            stalled_recheck=options.stalled_recheck)
        self.fleet.mapper.hooks.extend(self.transit.hooks)
        # The retained stacks' releases (automation/service/retained.py): engine runs, in the same slots.
        self.retained = setup_retained(self.manager, cache=self.fleet.cache, engine=engine, objects=self.objects,
                                       runs=self.fleet.runs, slots=self.fleet.slots, queue=WorkQueue(backoff))
        # Other projects' cluster objects (--sources, automation/service/sources.py).
        self.unwatched_sources: dict[str, str] = {}  # source kind -> why it is not watched (/readyz says it)
        self.sources = self._sources(options, api_client)
        # The endpoint census: placed with the counts from the first resolution on.
        self.census = setup_census(self.manager, self.fleet.cache, census, interval=options.endpoint_census_interval)
        # Tenants (automation/service/tenants.py), and with --gitrepos the HubGitRepos and the ones a HubTenant's
        # templates make (automation/service/gitrepos.py, gitrepo_templates.py): in every namespace even with
        # --watch-namespace, as the Tenants: a tenant's repository is in its namespace, any.
        self.tenants = setup_tenants(
            self.manager, objects=self.objects, source=tenant_source(api_client), hub_account=self._hub_account,
            backoff=backoff) if options.tenants else None
        self.gitrepos: GitRepoController | None = None
        self.gitrepo_templates: GitRepoTemplates | None = None
        if options.gitrepos and self.tenants is not None:
            self.gitrepos = setup_gitrepos(
                self.manager, objects=self.objects, source=gitrepo_source(api_client), namespace=options.namespace,
                backoff=backoff, resync=options.gitrepo_resync)
            self.gitrepo_templates = setup_gitrepo_templates(
                self.manager, objects=self.objects, tenants=self.tenants.tenants, backoff=backoff,
                resync=options.gitrepo_resync)
        if isinstance(engine, RunnerEngine):  # --executor runners: the runs' informer is this term's too
            engine.attach(self.manager, identity=identity)
            metrics.track_stackruns(engine.counts)
        stack_queues = (self.fleet.queue, self.transit.controller.queue)  # the clusters' and the transit stacks'
        metrics.track_queue(lambda: sum(q.depth for q in stack_queues), lambda: sum(q.in_flight for q in stack_queues),
                            lambda: sum(q.scheduled for q in stack_queues))
        metrics.track_clusters(self.cluster_counts)

    # What tests, probes and metrics read of the term (the fleet's, by their names).
    @property
    def cache(self) -> Cache:
        return self.fleet.cache

    @property
    def desired(self) -> FleetPublisher:
        return self.fleet.desired

    @property
    def queue(self) -> WorkQueue:
        return self.fleet.queue

    @property
    def mapper(self) -> Mapper:
        return self.fleet.mapper

    @property
    def reconciler(self) -> Reconciler:
        return self.fleet.reconciler

    @property
    def runs(self) -> Runs:
        return self.fleet.runs

    @property
    def slots(self) -> Slots:
        return self.fleet.slots

    def _sources(self, options: ServiceOptions, api_client: ApiClient) -> Sources | None:
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
        return setup_sources(self.manager, kinds=kinds, related=related,
                             source=functools.partial(source_of, api_client, namespace=options.watch_namespace),
                             cache=self.cache, desired=self.desired.view, objects=self.objects)

    def _source_crds(self, api_client: ApiClient, missing: dict[str, SourceKind]) -> None:
        """A source kind not served at start that is served now: said once, loudly, and on /readyz (its objects
        are taken in after a restart)."""
        for name, kind in list(missing.items()):
            try:
                here = served(api_client, [kind])
            except API_ERRORS:
                return  # the API server away: the next look
            if here:
                del missing[name]
                self.unwatched_sources[name] = (f"{kind.plural}.{kind.group} is served now, since after the service "
                                                "started: restart the service to watch it")
                LOG.warning("cluster source %s was installed after the service started and is not watched: restart "
                            "the service (kubectl rollout restart) to take in its objects", name)

    def _hub_account(self) -> str | None:
        """The hub account, as the valid HubConfig in the cache says (None: none valid yet)."""
        hub = self.cache.hub
        return hub.spec.account_id if isinstance(hub, HubConfig) else None

    def idle(self, horizon: float = 0.0) -> bool:
        """Nothing to do within `horizon` seconds: every cache change mapped, no stack key (a cluster's or a transit
        stack's) ready or in flight, none scheduled sooner (what a test waits for before saying "no run")."""
        if self.mapper.mapped_revision != self.cache.revision:
            return False
        queues = (self.queue, self.transit.controller.queue)
        return all(q.idle() for q in queues) and all((due := q.next_due()) is None or due > horizon for q in queues)

    @property
    def informers(self) -> list[Informer]:
        return list(self.manager.informers.values())

    def start(self) -> None:
        self.manager.start()

    def halt(self) -> None:
        """Start no more runs (the runs in flight go on)."""
        self.fleet.stopped.set()
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
        self.fleet.status.close()
        self.objects.close()  # its Events

    def synced(self) -> dict[str, bool]:
        return self.manager.synced()

    def alive(self) -> bool:
        return self.fleet.stopped.is_set() or self.manager.alive()

    def cluster_counts(self) -> tuple[dict[str, int], int, dict[str, int]]:
        """The clusters by condition (one story each), how many stacks have uncorrected drift, and the Stalled
        clusters by reason: one pass."""
        counts: dict[str, int] = {}
        stalled: dict[str, int] = {}
        drifted = 0
        for key, entry in self.cache.entries().items():
            status = self.fleet.clusters.status(key, entry.raw)
            state = state_of(status)
            counts[state] = counts.get(state, 0) + 1
            if state == "Stalled" and (cond := status.condition("Stalled")) is not None:
                reason = metric_reason(cond.reason)
                stalled[reason] = stalled.get(reason, 0) + 1
            drift = status.condition(DRIFT_CONDITION)
            drifted += drift is not None and drift.status == "True"
        return counts, drifted, stalled
