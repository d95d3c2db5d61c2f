"""`python -m automation serve`: its flags (generated from the one table of options, stacks/options.py), the
options and engine settings built from them by name, and the process around the Service (automation/service/
serve.py): the worker pool, the AWS preflights, signals, and an exit when the Lease is lost."""
from __future__ import annotations

import argparse
import os
import threading
from typing import Any, Mapping

from automation.adapters import logs
from automation.adapters.aws.lookups import foreign_endpoint_counts
from automation.adapters.aws.discovery import AwsDiscovery
from automation.adapters.aws.mesh_cidrs import MeshCidrPreflight
from automation.adapters.aws.mesh_quotas import MeshQuotaPreflight
from automation.adapters.aws.preflight import Preflight
from automation.adapters.aws.sessions import AwsSessions
from automation.adapters.engine import Engine, RunLimits
from automation.adapters.engine.pool import WorkerPool
from automation.adapters.engine.settings import PulumiSettings
from automation.adapters.history.options import store_from
from automation.adapters.kube.calls import ApiClient, error_text, user_of
from automation.adapters.kube.kubeconfig import kube_client
from automation.adapters.signals import StopSignals
from automation.service.executor import RunnerEngine
from automation.service.options import ServiceOptions
from automation.adapters.engine.plugins import aws_plugin_problem
from automation.service.clusters import Guard
from automation.service.serve import LOG, Service, default_guards
from stacks.accounts import hub_target
from stacks.model.hub import HubConfig
from stacks.options import SERVE, HelpFormatter, add_options, values
from stacks.runs.admission import author_problem


def add_serve_command(subparsers: Any, environ: Mapping[str, str] | None = None) -> None:
    """Register `serve` on the CLI's subparsers: one flag per `serve` option of the table, each named with the
    environment variable that sets its default (read here, once)."""
    serve = subparsers.add_parser(
        "serve", formatter_class=HelpFormatter,
        help="run the service: watch Clusters and keep one Pulumi stack per cluster up to date",
        description="Watch Clusters (and their Namespaces, the HubConfig and the role-map ConfigMap) and keep one "
                    "Pulumi stack per cluster up to date: watch -> queue -> reconcile -> engine. Only the holder "
                    "of the Lease runs anything. Every option may be given by its environment variable instead "
                    "(a flag wins). Secrets (PULUMI_CONFIG_PASSPHRASE[_FILE], PULUMI_ACCESS_TOKEN, AWS "
                    "credentials) come from the environment, never from flags.")
    add_options(serve, SERVE, os.environ if environ is None else environ)
    serve.set_defaults(func=serve_command)


def options_from(args: argparse.Namespace) -> ServiceOptions:
    return ServiceOptions.from_args(args)


def settings_from(args: argparse.Namespace, limits: RunLimits) -> PulumiSettings:
    """The engine's settings: the Pulumi state and policy options, by name."""
    return PulumiSettings.from_options(values(args, SERVE), limits=limits)


def say_author(api_client: ApiClient, namespace: str) -> None:
    """--executor runners: said once, at start, when the user this service acts as is not the ServiceAccount the
    admission policy lets create HubStackRuns (stacks.runs.admission.author_problem): every run would be refused."""
    try:
        user = user_of(api_client)
    except Exception as exc:  # noqa: BLE001 - only a warning ahead: each refused run still says why
        LOG.info("could not ask which user this service acts as: %s", error_text(exc))
        return
    problem = author_problem(user, namespace)
    if problem is not None:
        LOG.error("%s", problem)


def serve_command(args: argparse.Namespace) -> int:
    logs.configure(args.log_level, args.log_format)
    os.environ.update(logs.environment(args.log_level, args.log_format))  # the engine's workers log the same way
    options = options_from(args)
    limits = RunLimits(timeout=options.run_timeout, grace=options.cancel_grace)
    settings = settings_from(args, limits)
    # Checks the backend, the passphrase and the stale-lock age before anything runs; starts the workers.
    # --executor runners: every run is a HubStackRun the runner pods execute; only `applied` (a read of the
    # stack's state) stays here, in one worker process.
    local = WorkerPool(settings, size=1 if options.executor == "runners" else options.workers, limits=limits,
                       max_runs=options.worker_runs)
    api_client = kube_client(options.kubeconfig, options.context)
    engine: Engine = local
    if options.executor == "runners":
        engine = RunnerEngine(api_client, local=local, namespace=options.namespace, limits=limits,
                              keep_runs=options.keep_runs)
        # Off the start's path: the API server may be slow to answer, and the probes must come up regardless.
        threading.Thread(target=say_author, args=(api_client, options.namespace), name="author-check",
                         daemon=True).start()

    def lost() -> None:
        LOG.error("lost the Lease: runs in flight killed; exiting")
        os._exit(1)

    sessions = AwsSessions(endpoint_url=args.aws_endpoint_url or None)
    # Reach every account, find the NLB; then count what is already in a mesh member's VPC against its quotas;
    # then check its CIDR against its VPC's and the hub's, and its pair routes against the routes already there.
    guards: list[Guard] = [*default_guards(), Preflight(sessions), MeshQuotaPreflight(sessions),
                           MeshCidrPreflight(sessions)]

    def census(hub: HubConfig) -> Mapping[str, int]:
        return foreign_endpoint_counts(sessions, hub_target(hub), hub.spec.endpoint_vpc_inventory)

    # Each cluster's network read from its own account into status.network (automation/service/discovery.py):
    # what it declares is verified against it, what it leaves out is taken from it.
    # The image's AWS plugin (automation/adapters/engine/plugins.py): without it, said here and on /readyz (503).
    missing = aws_plugin_problem()
    if missing is not None:
        LOG.error("not ready: %s", missing)
    service = Service(options, api_client=api_client, engine=engine, guards=guards, census=census,
                      on_lost_leadership=lost, discovery=AwsDiscovery(sessions), not_ready=missing,
                      history=store_from(args, "python -m automation serve"))
    stop = StopSignals()
    service.start()
    LOG.info("serving probes and metrics on %s:%d (identity %s)", options.metrics_bind, service.server.port,
             service.identity)
    stop.wait()
    LOG.info("stopping: cancelling the runs in flight (killed after %.0fs), releasing the Lease",
             options.cancel_grace)
    service.stop()
    local.close()
    return 0
