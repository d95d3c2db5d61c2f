"""What one stack run costs: `python -m bench.run_cost --json`.

Two parts, because the pulumi-aws provider plugin is not available here (no download of plugins):

1. Providers and AssumeRole calls per run, counted from what each bundled example's stacks declare (the offline
   plan, `python -m automation plan --format json`: components.program under the mock runtime): every explicit
   aws.Provider is one provider plugin process per run and, with a role, one sts:AssumeRole per run (the provider
   assumes its role when it is configured).
   `before` is the rule stack_targets had until a stack declared only the providers its resources or lookups
   use (every associated hub VPC's region given without a CIDR had a provider for the lookup; a mesh member had
   its own-side provider even when it owns nothing there); `after` is the code as it is.
2. Processes and memory of one run under the real `pulumi` CLI, as a runner runs it: a WorkerPool worker, the CLI,
   the language host and the provider plugins (here the dynamic provider, `pulumi-resource-pulumi-python`: one
   plugin process per explicit provider, as for aws). /proc is sampled every 20 ms during the run: the peak of
   RSS and of PSS summed over every process under this one (the bench itself excluded), and every process seen.

Prints one JSON object:

  examples.<ex>.stacks.<stack>       {before, after}: providers declared (= plugin processes, = AssumeRoles: every
                                     provider here assumes a role)
  examples.<ex>.providers_before/_after, assume_roles_before/_after   summed over the example's stacks
  runs.providers_<k>                 per run of a stack with k explicit providers (create, then no-op):
                                     plugin_processes, processes (by name), peak_rss_mb, peak_pss_mb, seconds
  per_provider_rss_mb / per_provider_pss_mb   the peak's growth per extra provider process (no-op runs)
  runner_floor_rss_mb / runner_floor_pss_mb   the peak of a no-op run with one provider: the worker, the CLI, the
                                     language host and one plugin
  examples.<ex>.largest_stack_providers / largest_stack_peak_rss_mb   the example's stack with the most providers,
                                     and the peak of its run: the floor plus one measured plugin per extra provider
  examples.<ex>.plugin_rss_mb_saved_per_fleet_pass   the providers dropped, times the plugin measured here, over
                                     one run of every stack of the example

With --lock-race N (moto's S3 in server mode, the real CLI): N times, two runners' engines (each its own workspace
and PULUMI_HOME) start a no-op `up` of one stack on the S3 backend at the same instant (a barrier):

  lock_race.tries, .one_ran (the other refused: StackLocked), .both_refused (both wrote a lock and backed off),
  .both_ran_in_turn (the second locked after the first had finished), .both_ran_at_once (their updates overlap:
  the lock excluded nothing), .other (an error other than the lock; its messages in .errors)

The plugin measured is the dynamic provider (Python); the aws plugin is a Go binary of its own size, which only a
machine with it can measure: run this with it installed and an aws stack, or add its RSS per provider to the floor.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Mapping

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, Resource, ResourceProvider

from automation.adapters.engine.pool import WorkerPool
from automation.adapters.engine.settings import PulumiSettings
from stacks.inputs import StackInputs, inputs_from_config, stack_targets
from stacks.targets import AwsTarget

ROOT = Path(__file__).resolve().parent.parent
TOOLS_BIN = ROOT / ".tools" / "bin"
PASSPHRASE = "hubwright-bench"
EXAMPLES = {"main": "examples/hub.yaml", "mesh": "examples/mesh/hub.yaml", "transit": "examples/transit/hub.yaml"}
PROGRAM = "bench.run_cost:program"  # what the worker runs (importable by name)


# --------------------------------------------------------------------------- 1. providers declared per run


def legacy_targets(inputs: StackInputs) -> list[AwsTarget]:
    """The targets stack_targets gave before a stack declared only the providers it uses (for the comparison)."""
    link, share = inputs.private_link, inputs.mesh
    if link is None and share is None:
        return []
    ordered = [inputs.cluster]
    if link is not None:
        ordered.append(inputs.hub.in_region(link.endpoint_vpc.region))
        ordered += [inputs.hub.in_region(vpc.region) for vpc in link.associated_vpcs if vpc.cidr is None]
    if share is not None:
        ordered += [pair.peer.target for pair in share.pairs]
    return list({target.key: target for target in ordered}.values())


def declared(example: str) -> dict[str, Any]:
    """The example's offline plan as `python -m automation plan --format json` gives it (transit stacks and the
    converged members included): each stack's providers now, and what the earlier rule gave for its inputs."""
    hub_path = ROOT / EXAMPLES[example]
    plan = json.loads(subprocess.run(
        [sys.executable, "-m", "automation", "plan", "--hub", str(hub_path),
         "--clusters", str(hub_path.parent / "clusters"), "--format", "json"],
        cwd=ROOT, check=True, capture_output=True, text=True).stdout)
    stacks: dict[str, dict[str, int]] = {}
    roles = {"before": 0, "after": 0}
    for planned in plan["stacks"]:
        inputs = inputs_from_config(planned["outputs"]["inputs"])
        providers = [r for r in planned["resources"] if r["type"] == "pulumi:providers:aws"]
        if isinstance(inputs, StackInputs):
            after = stack_targets(inputs).all()
            assert {(p["account"], p["region"]) for p in providers} == {(t.account_id, t.region) for t in after}
            before = legacy_targets(inputs)
            key = inputs.stack
        else:  # a transit stack: its providers did not change (components.transit makes them as it uses them)
            after = before = [target for target in {t.key: t for t in inputs.targets()}.values()
                              if (target.account_id, target.region) in {(p["account"], p["region"]) for p in providers}]
            key = inputs.stack
        stacks[key] = {"before": len(before), "after": len(providers)}
        roles["before"] += sum(1 for t in before if t.role_arn)
        roles["after"] += sum(1 for t in after if t.role_arn)
    return {"stacks": stacks,
            "providers_before": sum(s["before"] for s in stacks.values()),
            "providers_after": sum(s["after"] for s in stacks.values()),
            "assume_roles_before": roles["before"], "assume_roles_after": roles["after"]}


# --------------------------------------------------------------------------- 2. one run under the real CLI


class _Provider(ResourceProvider):
    def create(self, props: dict) -> CreateResult:
        return CreateResult(id_=f"{props['label']}-id", outs=dict(props))

    def diff(self, _id: str, olds: dict, news: dict) -> DiffResult:
        return DiffResult(changes=olds.get("label") != news.get("label"))


class _Thing(Resource):
    def __init__(self, name: str, opts: pulumi.ResourceOptions):
        super().__init__(_Provider(), name, {"label": name}, opts)


def program(inputs: StackInputs, *, providers: int = 1, things: int = 3) -> Mapping[str, Any]:
    """`providers` explicit providers of the dynamic package (each its own plugin process, as each explicit
    aws.Provider is), `things` resources through each."""
    for p in range(providers):
        provider = pulumi.ProviderResource("pulumi-python", f"provider-{p}", {})
        for t in range(things):
            _Thing(f"{inputs.name}-{p}-{t}", pulumi.ResourceOptions(provider=provider))
    return {"cluster": inputs.key, "inputsDigest": inputs.digest(), "inputs": inputs.to_config()}


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _kb(path: Path, field: str) -> int:
    try:
        for line in path.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class Sampler:
    """Every process under this one, sampled every `period` s: the peak of RSS and PSS summed, and who ran."""

    def __init__(self, period: float = 0.02):
        self.period = period
        self.peak_rss_kb = self.peak_pss_kb = 0
        self.seen: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            rss = pss = 0
            for pid in _descendants(os.getpid()):
                proc = Path(f"/proc/{pid}")
                try:
                    self.seen.setdefault(pid, (proc / "comm").read_text().strip())
                except OSError:
                    continue
                rss += _kb(proc / "status", "VmRSS")
                pss += _kb(proc / "smaps_rollup", "Pss")
            self.peak_rss_kb, self.peak_pss_kb = max(self.peak_rss_kb, rss), max(self.peak_pss_kb, pss)
            self._stop.wait(self.period)

    def processes(self, exclude: set[int]) -> dict[str, int]:
        names: dict[str, int] = {}
        for pid, name in self.seen.items():
            if pid not in exclude:
                names[name] = names.get(name, 0) + 1
        return dict(sorted(names.items()))


def _inputs(name: str) -> StackInputs:
    return StackInputs(stack=f"bench.{name}", namespace="bench", name=name, tenant="bench",
                       cluster=AwsTarget(account_id="222222222222", region="eu-west-1"),
                       hub=AwsTarget(account_id="111111111111", region="us-east-1"), tags={})


def one_run(tmp: Path, providers: int) -> dict[str, Any]:
    """A create and a no-op `up` of a stack with `providers` explicit providers, each in a fresh worker's
    WorkerPool run; the no-op's figures are the steady state of a periodic run."""
    settings = PulumiSettings(state_dir=tmp / f"state-{providers}", pulumi_home=tmp / "home",
                              env={"PULUMI_CONFIG_PASSPHRASE": PASSPHRASE, "PYTHONPATH": str(ROOT)})
    pool = WorkerPool(settings, program=PROGRAM, program_options={"providers": providers}, size=1)
    out: dict[str, Any] = {}
    try:
        pool.ping()  # the worker is up: it is part of what is measured, its start is not
        worker = set(_descendants(os.getpid()))
        inputs = _inputs(f"p{providers}")
        for what, run in (("create", lambda: pool.up(inputs, message="bench: create")),
                          ("noop", lambda: pool.up(inputs, message="bench: no-op"))):
            t0 = time.perf_counter()
            with Sampler() as sampler:
                result = run()
            assert result.ok, result.message
            procs = sampler.processes(exclude=worker)
            out[what] = {"seconds": round(time.perf_counter() - t0, 2), "changes": result.changes,
                         "plugin_processes": sum(n for name, n in procs.items()
                                                 if name.startswith("pulumi-resourc")),
                         "processes": procs,
                         "peak_rss_mb": round(sampler.peak_rss_kb / 1024, 1),
                         "peak_pss_mb": round(sampler.peak_pss_kb / 1024, 1)}
        pool.destroy(inputs.stack, message="bench: destroy")
    finally:
        pool.close()
    return out


def lock_race(tries: int) -> dict[str, Any]:
    """Two simultaneous no-op `up`s of one stack on S3 (moto), `tries` times: what the backend's lock let through."""
    import boto3

    from automation.adapters.engine import StackLocked
    from automation.adapters.engine.pulumi_engine import PulumiEngine
    from bench.discovery import moto_server
    from doubles.pulumi_programs import engine_settings, human_stack, make_inputs, sleepy_program

    credentials = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1",
                   "AWS_EC2_METADATA_DISABLED": "true"}
    os.environ.update(credentials)  # the CLI human_stack runs inherits them
    counts = {"tries": tries, "one_ran": 0, "both_refused": 0, "both_ran_in_turn": 0, "both_ran_at_once": 0,
              "other": 0}
    errors: list[str] = []
    with moto_server() as url, tempfile.TemporaryDirectory(prefix="hubwright-bench-race-") as tmp:
        boto3.client("s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id="testing",
                     aws_secret_access_key="testing").create_bucket(Bucket="state")
        backend = f"s3://state?endpoint=127.0.0.1:{url.rsplit(':', 1)[1]}&disableSSL=true&s3ForcePathStyle=true" \
                  "&region=us-east-1"
        engines = []
        for name in ("a", "b"):
            settings = engine_settings(Path(tmp) / name, backend_url=backend, home=Path(tmp) / f"home-{name}")
            settings = dataclasses.replace(settings, env={**settings.env, **credentials})
            factory: Any = sleepy_program()  # a program of StackInputs (a cluster's)
            engines.append(PulumiEngine(settings, program_factory=factory))
        inputs = make_inputs()
        engines[0].up(inputs, message="created")
        for n in range(tries):
            barrier, outcomes = threading.Barrier(2), list[Any]([None, None])

            def run(i: int, n: int = n, barrier: threading.Barrier = barrier, outcomes: list[Any] = outcomes) -> None:
                barrier.wait()
                try:
                    outcomes[i] = engines[i].up(inputs, message=f"try {n} runner {i}")
                except Exception as exc:  # the outcome is what is counted
                    outcomes[i] = exc

            threads = [threading.Thread(target=run, args=(i,)) for i in (0, 1)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            ran = [o for o in outcomes if not isinstance(o, Exception)]
            refused = [o for o in outcomes if isinstance(o, StackLocked)]
            if len(ran) == 1 and len(refused) == 1:
                counts["one_ran"] += 1
            elif len(refused) == 2:
                counts["both_refused"] += 1
            elif len(ran) == 2:
                spans = [h for h in human_stack(engines[0], inputs.stack, Path(tmp)).history(page_size=2)]
                (s1, e1), (s2, e2) = [(h.start_time, h.end_time) for h in spans]
                overlap = e1 is not None and e2 is not None and s1 < e2 and s2 < e1
                counts["both_ran_at_once" if overlap else "both_ran_in_turn"] += 1
            else:
                counts["other"] += 1
                errors += [str(o)[:200] for o in outcomes if isinstance(o, Exception) and o not in refused]
    return {**counts, "errors": errors}


def measure(counts: list[int]) -> dict[str, Any]:
    if TOOLS_BIN.is_dir():
        os.environ["PATH"] = f"{TOOLS_BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    report: dict[str, Any] = {"examples": {name: declared(name) for name in EXAMPLES}}
    with tempfile.TemporaryDirectory(prefix="hubwright-bench-run-cost-") as tmp:
        runs = {f"providers_{k}": one_run(Path(tmp), k) for k in counts}
    report["runs"] = runs
    lo, hi = runs[f"providers_{counts[0]}"]["noop"], runs[f"providers_{counts[-1]}"]["noop"]
    extra = counts[-1] - counts[0]
    report["per_provider_rss_mb"] = round((hi["peak_rss_mb"] - lo["peak_rss_mb"]) / extra, 1) if extra else None
    report["per_provider_pss_mb"] = round((hi["peak_pss_mb"] - lo["peak_pss_mb"]) / extra, 1) if extra else None
    floor = runs[f"providers_{counts[0]}"]["noop"]
    report["runner_floor_rss_mb"], report["runner_floor_pss_mb"] = floor["peak_rss_mb"], floor["peak_pss_mb"]
    if report["per_provider_rss_mb"] is not None:
        # One run of each example's largest stack, with plugins the size of the one measured here.
        for example in report["examples"].values():
            most = max(s["after"] for s in example["stacks"].values())
            example["largest_stack_providers"] = most
            example["largest_stack_peak_rss_mb"] = round(
                floor["peak_rss_mb"] + max(most - counts[0], 0) * report["per_provider_rss_mb"], 1)
            example["plugin_rss_mb_saved_per_fleet_pass"] = round(
                (example["providers_before"] - example["providers_after"]) * report["per_provider_rss_mb"], 1)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object (the default output)")
    parser.add_argument("--providers", type=int, nargs="+", default=[1, 2, 4],
                        help="explicit provider counts to run a stack with (default 1 2 4)")
    parser.add_argument("--lock-race", type=int, default=0, metavar="N",
                        help="also race two no-op ups of one stack on S3 (moto) N times (default 0: not run)")
    args = parser.parse_args(argv)
    report = measure(sorted(args.providers))
    if args.lock_race:
        report["lock_race"] = lock_race(args.lock_race)
    json.dump(report, sys.stdout, indent=None if args.json else 2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
