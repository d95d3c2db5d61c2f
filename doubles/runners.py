"""Runners for tests and benchmarks (automation/runner/): N runners in threads of this process against an API
server, and the objects the service creates for a run (a HubStackRun and its inputs Secret), so a test can make
runs, and forge them, without a service.

    with running_runners(api_client, engine, n=2, claim_ttl=6) as runners:
        create_run(api_client, stack_inputs, "up")
        wait_until(lambda: phase(api_client, key) == "Succeeded")

`python -m doubles.runners [runner flags] --run-seconds S` is the runner process (automation.runner.command)
with the engine double instead of the Pulumi worker pool: the process tests SIGKILL it. It is reachable only from
doubles/, never from the production command line.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import secrets
import sys
from datetime import datetime, timedelta, timezone
from typing import Any, Iterator, Sequence

from kubernetes import client

from automation.adapters.engine import Engine
from automation.adapters.kube.stackruns import StackRunClient
from automation.runner.runner import Runner
from stacks.inputs import StackProgramInputs
from stacks.runs.model import Operation, documents, run_name

SERVICE_NAMESPACE = "hubwright-system"


def identity(index: int) -> str:
    """A runner name that --runner-hosts' default matches, as a pod of the runners' Deployment has."""
    return f"hubwright-runner-t{secrets.token_hex(3)}-{index}"


@contextlib.contextmanager
def running_runners(api_client: client.ApiClient, engine: Engine | Sequence[Engine], n: int = 1,
                    **opts: Any) -> Iterator[list[Runner]]:
    """`n` runners (each with `engine`, or engine[i]) started in this process; stopped on exit. `opts`: Runner's
    keyword arguments (namespace defaults to SERVICE_NAMESPACE, identity to `identity(i)`)."""
    engines = list(engine) if isinstance(engine, Sequence) else [engine] * n
    opts.setdefault("namespace", SERVICE_NAMESPACE)
    runners = [Runner(api_client, engines[i], **{"identity": identity(i), **opts}) for i in range(n)]
    for runner in runners:
        runner.start()
    try:
        yield runners
    finally:
        for runner in runners:
            runner.stop(timeout=5)


def run_objects(operation: Operation, *, namespace: str, stack: str, cluster: str | None,
                inputs: StackProgramInputs | None = None, service_namespace: str = SERVICE_NAMESPACE,
                refresh: bool = False, timeout: float = 600.0, message: str = "test",
                name: str | None = None) -> tuple[dict, dict]:
    """(the HubStackRun, its inputs Secret) as the service creates them (stacks.runs.model.documents)."""
    now = datetime.now(timezone.utc)
    return documents(operation=operation, namespace=namespace,
                     name=name or run_name(stack, operation, now, secrets.token_hex(4)), stack=stack, cluster=cluster,
                     inputs_config=inputs.to_config() if inputs is not None else None,
                     digest=inputs.digest() if inputs is not None else None, message=message, refresh=refresh,
                     deadline=now + timedelta(seconds=timeout), requested_by="test",
                     service_namespace=service_namespace)


def create_run(api_client: client.ApiClient, operation: str, inputs: StackProgramInputs | None = None, *,
               namespace: str | None = None, stack: str | None = None, cluster: str | None = None,
               service_namespace: str = SERVICE_NAMESPACE, **kw: Any) -> str:
    """Create a run (and its Secret) as the service does; returns its key (namespace/name)."""
    namespace = namespace or getattr(inputs, "namespace", None) or "default"
    stack = stack or (inputs.stack if inputs is not None else "")
    cluster = cluster if cluster is not None else getattr(inputs, "name", None)
    run, secret = run_objects(operation, namespace=namespace, stack=stack, cluster=cluster, inputs=inputs,
                              service_namespace=service_namespace, **kw)
    created = StackRunClient(api_client, service_namespace).create(run, secret)
    return f"{namespace}/{created['metadata']['name']}"


def run_status(api_client: client.ApiClient, key: str) -> dict:
    found = StackRunClient(api_client, SERVICE_NAMESPACE).get(key)
    return (found or {}).get("status") or {}


def phase(api_client: client.ApiClient, key: str) -> str | None:
    return run_status(api_client, key).get("phase")


# --------------------------------------------------------------------------- the runner process, engine double

def main(argv: list[str] | None = None) -> int:
    """The runner command with the engine double (doubles.engine.RecordingEngine, `--run-seconds` per run)."""
    from automation.runner.command import add_runner_command, serve_runner
    from doubles.engine import RecordingEngine
    parser = argparse.ArgumentParser(prog="python -m doubles.runners")
    sub = parser.add_subparsers(dest="command", required=True)
    add_runner_command(sub)
    parser.add_argument("--run-seconds", type=float, default=1.0, help="how long each run of the double takes")
    parser.add_argument("--program", help="instead of the double: the real worker pool and pulumi CLI, running "
                                          "this test program (doubles.pulumi_programs, module:function)")
    parser.add_argument("--program-options", default="{}", help="the program's keyword arguments, JSON")
    args = parser.parse_args(argv)
    from automation.adapters import logs
    logs.configure(args.log_level, args.log_format)
    if not args.program:
        return serve_runner(args, RecordingEngine(run_seconds=args.run_seconds))
    from automation.adapters.engine.pool import WorkerPool
    from automation.adapters.engine.settings import PulumiSettings
    from automation.runner.command import limits_from
    from stacks.options import RUNNER, values
    limits = limits_from(args)
    pool = WorkerPool(PulumiSettings.from_options(values(args, RUNNER), limits=limits), program=args.program,
                      program_options=json.loads(args.program_options), size=args.workers, limits=limits)
    try:
        return serve_runner(args, pool)
    finally:
        pool.close()


if __name__ == "__main__":
    sys.exit(main())
