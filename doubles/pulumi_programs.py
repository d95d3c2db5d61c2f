"""Tiny stack programs for the live PulumiEngine tests and bench/: a dynamic resource whose create can sleep.

Dynamic providers run in `pulumi-resource-pulumi-python` (no provider plugin to
download); the provider class is pickled by reference, so the provider process
needs the repository root on PYTHONPATH (`engine_settings` sets it).

Also a command line, so a test can run an update in a process it can SIGKILL,
and so the timings in docs/engine.md can be measured:

    python -m doubles.pulumi_programs up --state DIR --stack acme.prod-1 --sleep 60 --marker FILE [--pool]
    python -m doubles.pulumi_programs measure
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import pulumi
from pulumi import automation as auto
from pulumi.dynamic import Resource

from doubles.providers import FileCloudProvider, LoggedProvider, MarkerProvider, SleepProvider
from automation.adapters.engine.pool import WorkerPool
from automation.adapters.engine.pulumi_engine import PulumiEngine
from automation.adapters.engine.settings import PulumiSettings
from stacks.inputs import AwsTarget, StackInputs

ROOT = Path(__file__).resolve().parent.parent
PASSPHRASE = "hubwright-live-tests"  # a throwaway passphrase for temp file backends


class Sleeper(Resource):
    label: pulumi.Output[str]

    def __init__(self, name: str, *, sleep: float, marker: str = "", hold: str = "",
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(SleepProvider(), name, {"label": name, "sleep": sleep, "marker": marker, "hold": hold}, opts)


def sleepy(inputs: StackInputs, *, sleep: float = 0.0, marker: str = "", hold: str = "") -> Mapping[str, Any]:
    """A program like components.program.program: one Sleeper named after the cluster. Importable by name
    (`doubles.pulumi_programs:sleepy`), as the worker pool needs. With `hold`, its create lasts while that file
    exists (at most `sleep` s): a test ends it when it has seen what it waits for, not after a guessed time."""
    thing = Sleeper(f"{inputs.name}-thing", sleep=sleep, marker=marker, hold=hold)
    return {"cluster": inputs.key, "inputsDigest": inputs.digest(), "thing": thing.id}


SLEEPY = "doubles.pulumi_programs:sleepy"


# --------------------------------------------------------------------------- an AWS resource, imitated
#
# The policy pack checks a dynamic resource named after an AWS type as that type (policy.rules.kinds.kind_of), so this
# program shows the engine refusing a wildcard principal without the AWS plugin. Its create leaves a file behind,
# so a test sees whether the engine let it run.


class VpcEndpointService(Resource, module="ec2", name="VpcEndpointService"):
    """Checked by the pack as aws:ec2/vpcEndpointService:VpcEndpointService."""

    def __init__(self, name: str, *, principals: list[str], marker: str = ""):
        super().__init__(MarkerProvider(), name, {"label": name, "allowedPrincipals": principals,
                                                  "acceptanceRequired": False, "marker": marker})


def endpoint_service(inputs: StackInputs, *, principal: str, marker: str = "") -> Mapping[str, Any]:
    """A program of one endpoint service that allows `principal`."""
    service = VpcEndpointService(f"{inputs.name}-svc", principals=[principal], marker=marker)
    return {"cluster": inputs.key, "service": service.id}


# --------------------------------------------------------------------------- a "cloud" a test can change
#
# A CloudThing's "cloud" is a directory with one file per resource, holding its value. The provider writes the
# file on create/update and reads it back on refresh (read), so a test that edits the file changes the cloud
# behind Pulumi's back: drift, which only a refresh can see. One file per resource: creates run in parallel.


class CloudThing(Resource):
    value: pulumi.Output[str]

    def __init__(self, name: str, *, cloud: str, value: str, fail: bool = False,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(FileCloudProvider(), name, {"cloud": cloud, "name": name, "value": value, "fail": fail}, opts)


def cloudy(inputs: StackInputs, *, cloud: str, count: int = 1, value: str = "v1", fail: bool = False) -> Mapping[str, Any]:
    """`count` CloudThings named after the cluster, each with `value`, in the "cloud" directory `cloud`; with
    `fail`, one more whose create fails (the program itself completes: its outputs are registered).
    Outputs like components.program.program's. Importable by name (`CLOUDY`), as a worker pool needs."""
    Path(cloud).mkdir(parents=True, exist_ok=True)
    things = [CloudThing(f"{inputs.name}-thing-{i}", cloud=cloud, value=value) for i in range(count)]
    if fail:
        things.append(CloudThing(f"{inputs.name}-refused", cloud=cloud, value=value, fail=True))
    return {"cluster": inputs.key, "inputsDigest": inputs.digest(), "inputs": inputs.to_config(),
            "things": len(things)}


CLOUDY = "doubles.pulumi_programs:cloudy"


def cloud_value(cloud: Path, name: str) -> str:
    return (cloud / name).read_text()


def change_cloud(cloud: Path, name: str, value: str) -> None:
    """Change a resource behind Pulumi's back, as a person in the cloud console would."""
    (cloud / name).write_text(value)


# --------------------------------------------------------------------------- a run a test can kill half way
#
# Two resources: `first`, then `held` (after it). Each create appends its name to a log, so a test counts the
# creates; `held`'s create then waits while the file `hold` exists (at most 120 s), so a test can kill the run
# with `first` created and `held` in flight (a pending operation in the state), then let the next run through.


class Logged(Resource):
    def __init__(self, name: str, *, log: str, hold: str = "", opts: pulumi.ResourceOptions | None = None):
        super().__init__(LoggedProvider(), name, {"name": name, "log": log, "hold": hold}, opts)


def held(inputs: StackInputs, *, log: str, hold: str) -> Mapping[str, Any]:
    """A program like components.program.program (its outputs too): `first`, then `held`, which waits on `hold`."""
    first = Logged(f"{inputs.name}-first", log=log)
    Logged(f"{inputs.name}-held", log=log, hold=hold, opts=pulumi.ResourceOptions(depends_on=[first]))
    return {"cluster": inputs.key, "inputsDigest": inputs.digest()}


HELD = "doubles.pulumi_programs:held"


def sleepy_program(sleep: float = 0.0, marker: str = "", hold: str = "") -> Callable[[StackInputs], Mapping[str, Any]]:
    """The sleepy program as an in-process PulumiEngine's program_factory."""
    return functools.partial(sleepy, sleep=sleep, marker=marker, hold=hold)


def make_inputs(name: str = "prod-1", namespace: str = "acme", **tags: str) -> StackInputs:
    return StackInputs(
        stack=f"{namespace}.{name}",
        namespace=namespace,
        name=name,
        tenant="acme-corp",
        cluster=AwsTarget(account_id="222222222222", region="eu-west-1"),
        hub=AwsTarget(account_id="111111111111", region="us-east-1"),
        tags=dict(tags),
    )


TOOLS_BIN = ROOT / ".tools" / "bin"


def human_stack(engine: PulumiEngine, stack: str, tmp: Path) -> auto.Stack:
    """The stack as a person at a terminal sees it: another workspace, the same backend, the Automation API
    directly (no PulumiEngine in between)."""
    work = tmp / "human"
    work.mkdir(exist_ok=True)
    ws = auto.LocalWorkspace(
        work_dir=str(work),
        pulumi_home=str(engine.settings.pulumi_home),
        env_vars={"PULUMI_CONFIG_PASSPHRASE": PASSPHRASE, "PYTHONPATH": str(ROOT), "PULUMI_SKIP_UPDATE_CHECK": "true",
                  "PULUMI_PYTHON_CMD": sys.executable},  # dynamic providers run in this interpreter
        project_settings=auto.ProjectSettings(name="hubwright", runtime="python",
                                              backend=auto.ProjectBackend(engine.settings.backend)),
    )
    return auto.Stack.select(stack, ws)


# The policy pack of a test's engine: off, unless the test is about what the pack decides (PACK). The pack is a
# process of its own on every up and preview, about a quarter of a no-op up's time (docs/engine.md); the engine's
# other tests (locks, drift, pools, backends) do not read what it says. The service's default stays "mandatory".
PACK = "mandatory"


def engine_settings(state_dir: Path, *, backend_url: str | None = None, home: Path | None = None,
                    policy: str = "off") -> PulumiSettings:
    return PulumiSettings(
        state_dir=state_dir,
        backend_url=backend_url,
        pulumi_home=home or state_dir / "home",
        env={"PULUMI_CONFIG_PASSPHRASE": PASSPHRASE, "PYTHONPATH": str(ROOT)},
        policy=policy,
    )


def _up(args: argparse.Namespace) -> int:
    settings = engine_settings(Path(args.state), backend_url=args.backend, home=Path(args.home) if args.home else None)
    if args.pool:  # the service's way: the run in a worker process of a WorkerPool
        engine = WorkerPool(settings, program=SLEEPY, program_options={"sleep": args.sleep, "marker": args.marker},
                            size=1)
    else:
        engine = PulumiEngine(settings, program_factory=sleepy_program(args.sleep, args.marker))
    namespace, _, name = args.stack.partition(".")
    result = engine.up(make_inputs(name, namespace), message=args.message)
    print(json.dumps({"ok": result.ok, "message": result.message}))
    return 0


def _measure(args: argparse.Namespace) -> int:
    """Wall time of a first `up`, no-op `up`s (median of --noops) and a destroy of a one-resource dynamic stack (file
    backend), with the policy pack at `--policy` (off: the engine starts no pack)."""
    with tempfile.TemporaryDirectory(prefix="hubwright-measure-") as tmp:
        settings = dataclasses.replace(engine_settings(Path(tmp)), policy=args.policy)
        engine = PulumiEngine(settings, program_factory=sleepy_program())
        inputs = make_inputs()
        times: dict[str, Any] = {"policy": args.policy}
        t0 = time.perf_counter()
        times["up_create_changes"] = engine.up(inputs, message="measure create").changes
        times["up_create_s"] = round(time.perf_counter() - t0, 2)
        noops = []
        for n in range(args.noops):
            t0 = time.perf_counter()
            engine.up(inputs, message=f"measure no-op {n}")
            noops.append(time.perf_counter() - t0)
        times["up_noop_s_p50"] = round(statistics.median(noops), 2)
        t0 = time.perf_counter()
        engine.destroy(inputs.stack, message="measure destroy")
        times["destroy_s"] = round(time.perf_counter() - t0, 2)
    print(json.dumps(times))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m doubles.pulumi_programs")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="one PulumiEngine.up of the sleepy program")
    up.add_argument("--state", required=True)
    up.add_argument("--backend")
    up.add_argument("--home")
    up.add_argument("--stack", default="acme.prod-1")
    up.add_argument("--sleep", type=float, default=0.0)
    up.add_argument("--marker", default="")
    up.add_argument("--message", default="live test: an update that will be killed")
    up.add_argument("--pool", action="store_true", help="run it through a WorkerPool, as the service does")
    up.set_defaults(func=_up)
    measure = sub.add_parser("measure", help="time a first and a no-op up")
    measure.add_argument("--policy", choices=("off", "advisory", "mandatory"), default="mandatory",
                         help="the policy pack on each run, as HUBWRIGHT_POLICY (default mandatory, as deployed)")
    measure.add_argument("--noops", type=int, default=5, help="no-op ups to take the median of")
    measure.set_defaults(func=_measure)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
