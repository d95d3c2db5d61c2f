"""`python -m automation runner`: its flags (generated from the one table of options, stacks/options.py
`of(RUNNER)`), the engine built from them (the service's worker processes: timeouts, process-tree kill, lock
recovery), the probes and metrics, and SIGTERM: drain (finish or hand back the runs in flight within
--cancel-grace), then exit 0."""
from __future__ import annotations

import argparse
import logging
import os
import socket
from typing import Any, Mapping

from automation.adapters import logs
from automation.adapters.engine import Engine, RunLimits
from automation.adapters.engine.plugins import aws_plugin_problem
from automation.adapters.engine.pool import WorkerPool
from automation.adapters.engine.settings import PulumiSettings
from automation.adapters.history.options import store_from
from automation.adapters.kube.kubeconfig import kube_client
from automation.adapters.probes import ProbeServer
from automation.adapters.signals import StopSignals
from automation.runner.runner import Runner, hosts_problem
from stacks.options import RUNNER, HelpFormatter, add_options, values
from stacks.runs.admission import OUTSIDE_A_POD

LOG = logging.getLogger("hubwright.runner")


def add_runner_command(subparsers: Any, environ: Mapping[str, str] | None = None) -> None:
    """Register `runner` on the CLI's subparsers: one flag per `runner` option of the table, each named with the
    environment variable that sets its default."""
    runner = subparsers.add_parser(
        "runner", formatter_class=HelpFormatter,
        help="run a runner: execute the HubStackRuns the service creates with --executor runners",
        description="Claim pending HubStackRuns (fair between namespaces), execute each with the Pulumi engine in "
                    "a worker process, renew the claim while it runs and write the result into the run's status "
                    "(outputs into its Secret). A runner that cannot renew its claim kills its run before the "
                    "claim lapses; another runner takes over a lapsed claim. SIGTERM drains: the runs in flight "
                    "get --cancel-grace to finish, then are handed back. Every option may be given by its "
                    "environment variable instead (a flag wins). Secrets (PULUMI_CONFIG_PASSPHRASE[_FILE], "
                    "PULUMI_ACCESS_TOKEN, AWS credentials) come from the environment, never from flags.")
    add_options(runner, RUNNER, os.environ if environ is None else environ)
    runner.set_defaults(func=runner_command)


def limits_from(args: argparse.Namespace) -> RunLimits:
    return RunLimits(timeout=args.run_timeout, grace=args.cancel_grace)


def identity_problem(args: argparse.Namespace) -> str | None:
    """Why this runner cannot take part under its name (None: it can). Its name is the holder of its claims (a
    HubStackRun's status.claim.holder) and the host its stack locks carry, so it is its host name: a pod's name is
    its host name (POD_NAME), and outside a pod --identity is left unset; the name must match --runner-hosts."""
    host = socket.gethostname()
    if args.identity and args.identity != host:
        return (f"runner --identity {args.identity!r} (or POD_NAME) is not this host's name {host!r}: a runner's "
                f"name is the holder of its claims and must be the host its stack locks carry. In a pod, POD_NAME is "
                f"the pod's name, its host name; outside a pod, leave --identity and POD_NAME unset (this runner is "
                f"then {host!r}) and pass --runner-hosts {host!r} to every runner and to the service ({OUTSIDE_A_POD})")
    return hosts_problem(args.identity or host, args.runner_hosts or None)


def refuse_identity(args: argparse.Namespace) -> None:
    """Exit 2 saying why this runner's name cannot be used, before anything starts (workers, watches, claims)."""
    problem = identity_problem(args)
    if problem is not None:
        LOG.error("not started: %s", problem)
        raise SystemExit(2)


def runner_command(args: argparse.Namespace) -> int:
    logs.configure(args.log_level, args.log_format)
    refuse_identity(args)
    os.environ.update(logs.environment(args.log_level, args.log_format))  # the engine's workers log the same way
    limits = limits_from(args)
    settings = PulumiSettings.from_options(values(args, RUNNER), limits=limits)
    # Checks the backend, the passphrase and the stale-lock age before anything runs; starts the workers.
    engine = WorkerPool(settings, size=args.workers, limits=limits, max_runs=args.worker_runs)
    try:
        return serve_runner(args, engine)
    finally:
        engine.close()


def serve_runner(args: argparse.Namespace, engine: Engine) -> int:
    """The runner process around `engine`: probes, metrics, signals, drain. doubles/runners.py runs it with the
    engine double (tests only)."""
    refuse_identity(args)
    missing = aws_plugin_problem()  # the image's AWS plugin: without it, no claims, and said here and on /readyz
    if missing is not None:
        LOG.error("not ready, claiming no run: %s", missing)
    runner = Runner(kube_client(args.kubeconfig, args.context), engine, namespace=args.namespace,
                    identity=args.identity, claim_ttl=args.claim_ttl, workers=args.workers,
                    cancel_grace=args.cancel_grace, runner_hosts=args.runner_hosts or None, not_ready=missing,
                    history=store_from(args, "python -m automation runner"))
    server = ProbeServer(runner.metrics, healthy=runner.healthy, ready=runner.ready, bind=args.metrics_bind,
                         port=args.metrics_port)
    stop = StopSignals()
    server.start()
    runner.start()
    LOG.info("runner %s: claiming runs (claim ttl %.0fs, %d at once); probes and metrics on %s:%d",
             runner.identity, args.claim_ttl, args.workers, args.metrics_bind, server.port)
    stop.wait()
    LOG.info("runner %s: draining: no more claims; the runs in flight get %.0fs, then are handed back",
             runner.identity, args.cancel_grace)
    clean = runner.drain(args.cancel_grace)
    runner.stop()
    server.stop()
    return 0 if clean else 1
