"""`python -m automation plan`: what `pulumi up` would create for each cluster, with no cloud account.

    load_fleet ──► converge (resolve; transit, clusters, transit) ──► PlanPool (--jobs processes) ──► stdout
                                                                         each stack written as it comes
                                                  policy.rules over each stack's resources ──► stderr, exit 3
                                                  and over the whole plan (check_fleet)

Stacks are written one by one as they are planned (in the order a serial run plans them, so the output is the
same bytes whatever --jobs), and the mesh summary last. Progress goes to stderr when it is a terminal.
The policy pack's rules (--policy, --policy-config) run over every stack's recorded resources in the worker that
planned it, and the rules that span stacks over the whole plan; each violation is printed on stderr with its rule,
URN and reason, and a mandatory one makes the plan exit 3 (after the whole plan is written).

With --baseline OLD.json or --baseline-ref REF, the output is not the plan but what it changes (automation.cli.plan_diff:
per stack unchanged, new, removed or changed, with each resource's change and properties), as json, diff or
markdown. Every stack's plan key (its inputs, this program's source, the policy settings, the format) decides
whether it is planned at all: a stack the baseline planned from the same key is unchanged, one in the cache
(automation.adapters.engine.plan_cache, --cache) is read back, and only the rest are planned.

Before anything resolves, each provisioned cluster without a status.network gets one, as the service's discovery
writes it: from the deterministic stand-in (automation.adapters.aws.discovery_standin: what the cluster declares,
the rest made up), or with --discover from AWS itself (automation.adapters.aws.discovery, with the ambient
credentials and the hub's role map, in each cluster's admitted account only). A cluster whose network cannot be
read is refused like any invalid cluster, naming it and the reason.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import sys
import tempfile
from pathlib import Path
from datetime import datetime, timezone
from typing import Any, Callable, Iterator, Sequence, TextIO

from automation.adapters.aws.discovery import AwsDiscovery, NetworkLookup, discover_all
from automation.adapters.aws.discovery_standin import StandInDiscovery
from automation.adapters.aws.sessions import AwsSessions
from automation.adapters.files.inputs import fleet_stamp, load_fleet, yaml_files
from automation.adapters.engine.baseline import Baseline
from automation.adapters.engine.fleet_plan import PlanError, Refused, converge, drain, raise_invalid
from automation.adapters.engine.plan_cache import (PlanCache, default_dir, fleet_key, plan_key, program_digest,
                                                   violation_json, violation_of)
from automation.adapters.engine.plan_pool import SERIAL_BELOW, Known, Planned, PlanPool, default_jobs, from_cache
from automation.adapters.engine.policy import POLICY_LEVELS, PolicySettings, fleet_violations
from automation.adapters.progress import Progress
from automation.cli.picture import empty_reason, render_dot, render_mermaid
from automation.cli.plan_baseline import INVALID_INPUT, plan_at_ref
from automation.cli.plan_diff import CHANGES, FORMATS, DiffDocument, color_wanted
from automation.adapters.engine.plan_model import render_stack
from automation.cli.render import render_summary, stack_json
from policy.rules.view import Violation
from stacks.accounts import REGION_OVERRIDDEN, overridden_regions
from stacks.errors import FieldError, InvalidSpec
from stacks.hub_state import LIVE, records_of, with_records
from stacks.keys import unknown_key_messages
from stacks.inputs import StackInputs
from stacks.mesh.summary import summary
from stacks.network.found import found_of
from stacks.network.query import query_of
from stacks.names import NETWORK_STATUS_KEY
from stacks.resolve import Fleet, fleet_targets, resolve_all
from stacks.targets import AwsTarget
from stacks.transit import TransitInputs

POLICY_FAILED = 3  # exit status: a mandatory rule of the policy pack is broken


class JsonDocument:
    """{"stacks": [...], "mesh": {...}} written a stack at a time, byte for byte as json.dump(indent=2) of it."""

    def __init__(self, out: TextIO):
        self.out = out
        self.count = 0

    def stack(self, planned: Planned) -> None:
        self.out.write(("{\n  \"stacks\": [\n" if self.count == 0 else ",\n") + planned.text)
        self.count += 1

    def end(self, mesh: dict[str, Any]) -> None:
        closing = "{\n  \"stacks\": []," if self.count == 0 else "\n  ],"
        self.out.write(closing + "\n  \"mesh\": " + json.dumps(mesh, indent=2).replace("\n", "\n  ") + "\n}\n")


class TreeDocument:
    """Each stack's tree, then the mesh groups."""

    def __init__(self, out: TextIO):
        self.out = out

    def stack(self, planned: Planned) -> None:
        self.out.write(planned.text)

    def end(self, mesh: dict[str, Any]) -> None:
        self.out.write(render_summary(mesh))


def run(args: argparse.Namespace) -> int:
    try:
        policy = PolicySettings.load(args.policy, args.policy_config)
    except ValueError as err:
        raise InvalidSpec.one(f"--policy-config {args.policy_config}", "", str(err)) from None
    fmt = _format(args)
    rules = policy.rules() if policy.enabled else None
    with tempfile.TemporaryDirectory(prefix="hubwright-plan-") as tmp:
        baseline = _baseline(args, Path(tmp))
        if fmt in ("dot", "mermaid"):  # the mesh only: no stack is planned
            invalid: list = []
            fleet = _fleet(args, invalid)
            resolved = resolve_all(fleet)
            raise_invalid(resolved.inputs, invalid)
            draw = render_dot if fmt == "dot" else render_mermaid
            sys.stdout.write(draw(resolved.mesh, empty_reason(resolved.mesh, fleet)))
            return 0
        rendered = "json" if baseline is not None else fmt  # a diff compares the stacks' JSON
        document: JsonDocument | TreeDocument | DiffDocument
        if baseline is not None:
            against = f"--baseline-ref {args.baseline_ref}" if args.baseline_ref else f"--baseline {args.baseline}"
            document = DiffDocument(baseline, sys.stdout, fmt, only=args.cluster, color=color_wanted(sys.stdout),
                                    rerun=f"python -m automation plan --hub {args.hub} --clusters {args.clusters} "
                                          f"{against} --format diff")
        else:
            document = JsonDocument(sys.stdout) if fmt == "json" else TreeDocument(sys.stdout)
        render = stack_json if rendered == "json" else render_stack
        violations: list[Violation] = []
        cache = None if args.no_cache else PlanCache(Path(args.cache), program_digest())
        settings = json.dumps([policy.level, policy.engine_config() if policy.enabled else {}], sort_keys=True)

        def key(inputs: StackInputs | TransitInputs) -> str:
            return plan_key(inputs, program=program_digest(), policy=settings, render=rendered)

        def write(planned: Planned) -> None:
            violations.extend(planned.violations)
            document.stack(planned)

        known = _known(baseline)
        files, unreadable = yaml_files(args.clusters)
        refused = Refused() if args.keep_going else None
        # No replay of the whole fleet when something outside the files is read (AWS, the hub's records).
        stamp = fleet_stamp(args.hub, files) if cache is not None and not args.discover and not unreadable \
            and refused is None and args.hub_state is None else None
        held = _held(baseline)
        snapshot_key = None if stamp is None else fleet_key(stamp, program=program_digest(), policy=settings,
                                                            render=rendered, only=args.cluster, held=held)
        fleet_found = _replayed(cache, snapshot_key, known, write, document) \
            if cache is not None and snapshot_key is not None else None
        if fleet_found is None:
            with PlanPool(args.jobs, render, rules, keys=key, cache=cache, known=known) as pool, \
                    Progress("planned", "stacks") as progress:
                if len(files) >= SERIAL_BELOW:
                    pool.prestart()  # a big folder: the workers get ready on the other cores while it is read
                invalid = []
                fleet = dataclasses.replace(_fleet(args, invalid), held=held)
                order: list[list[str]] = []

                def plan_many(inputs: Sequence[StackInputs | TransitInputs]) -> Iterator[Planned]:
                    progress.expect(len(inputs))
                    for planned in pool.map(inputs):
                        progress.advance()
                        yield planned

                def written(planned: Planned) -> None:
                    order.append([planned.stack, planned.cluster, planned.key or ""])
                    write(planned)

                resolved = drain(converge(fleet, plan_many, invalid, only=args.cluster, refused=refused), written)
            mesh = summary(resolved.mesh, fleet.hub) if resolved.mesh is not None else {}
            if isinstance(document, DiffDocument) and refused is not None:
                document.left_out = {key.replace("/", ".", 1) for key in refused.keys}
            document.end(mesh)
            shown = [c for c in fleet.clusters if not args.cluster or c.key in args.cluster]
            warnings = [f"{ref}: {REGION_OVERRIDDEN}: {why}"
                        for ref, why in overridden_regions(fleet.hub, shown, fleet.namespaces)]
            warnings += [f"{c.ref}: {line}" for c in shown
                         for line in unknown_key_messages(c.metadata.labels, c.metadata.annotations)]
            warnings += [f"Namespace {ns}: {line}" for ns, annotations in sorted(fleet.namespaces.items())
                         for line in unknown_key_messages({}, annotations)]
            fleet_found = fleet_violations(resolved.inputs.values(), rules) if rules is not None else []
            if cache is not None and snapshot_key is not None:
                cache.put_fleet(snapshot_key, {"stacks": order, "mesh": mesh, "warnings": warnings,
                                               "fleetViolations": [violation_json(v) for v in fleet_found]})
            warn(warnings)
            if (cache is not None and cache.hits) or baseline is not None:
                print(f"plan: {pool.planned} stack(s) planned"
                      + (f", {cache.hits} read from the cache ({cache.root})" if cache is not None else "")
                      + (f", {pool.reused} unchanged from the baseline" if baseline is not None else ""),
                      file=sys.stderr)
    status = report(violations + fleet_found)
    if refused is not None and refused.errors:
        print(f"error: invalid input ({len(refused.errors)} problem(s)): --keep-going planned the valid clusters; "
              "these were not, and their stacks are left as they are, as the service stalls only them:",
              file=sys.stderr)
        for problem in refused.errors:
            print(f"  {problem}", file=sys.stderr)
        return INVALID_INPUT if status == 0 else status
    if status == 0 and args.detailed_exitcode and isinstance(document, DiffDocument) and document.changed:
        return CHANGES
    return status


def _replayed(cache: PlanCache, key: str, known: Known | None, write: Callable[[Planned], None],
              document: JsonDocument | TreeDocument | DiffDocument) -> list[Violation] | None:
    """Nothing the plan reads moved since the fleet's last plan (`key`: automation.adapters.engine.plan_cache
    .fleet_key): its stacks written as last time, each the baseline's or the cache's, and the fleet-wide violations
    it found. None, with nothing written, when there is no such plan or one of its stacks is no longer at hand."""
    snapshot = cache.fleet(key)
    if snapshot is None:
        return None
    last = [(known(stack, was) if known is not None else None, was) for stack, _, was in snapshot["stacks"]]
    if not all(ready is not None or cache.holds(was) for ready, was in last):
        return None
    for ready, was in last:
        write(ready or _cached(cache, was))
    document.end(snapshot["mesh"])
    warn([str(w) for w in snapshot.get("warnings") or []])
    print(f"plan: 0 stack(s) planned; no file, setting or program source changed since the last plan "
          f"({cache.root})", file=sys.stderr)
    return [violation_of(v) for v in snapshot["fleetViolations"]]


def warn(warnings: list[str]) -> None:
    """Each cluster the plan warns about (it is planned as shown, but something will change it), on stderr."""
    for line in warnings:
        print(f"plan: warning: {line}", file=sys.stderr)


def _cached(cache: PlanCache, key: str) -> Planned:
    entry = cache.get(key)
    if entry is None:
        raise PlanError(f"the cache entry {key} went away during the plan (was {cache.root} cleaned?): run it again")
    return from_cache(entry, key)


def _fleet(args: argparse.Namespace, invalid: list) -> Fleet:
    """The fleet of --hub and --clusters, each provisioned cluster with its network (discovered, or the stand-in's),
    and with the join stamps and claims --hub-state records; the clusters that cannot be read are appended to
    `invalid`."""
    fleet = load_fleet(args.hub, args.clusters, invalid, cache_dir=None if args.no_cache else Path(args.cache))
    if args.hub_state is not None:
        fleet, taken = with_records(fleet, hub_records(args.hub_state))
        print(f"plan: --hub-state {args.hub_state}: the join stamps and claims of {taken} cluster(s) taken from "
              "the hub", file=sys.stderr)
    lookup = AwsDiscovery(AwsSessions.from_env()) if args.discover else \
        StandInDiscovery({c.key: c.spec.network for c in fleet.clusters})
    return discovered(fleet, lookup, invalid, workers=args.jobs if args.discover else 1)  # the stand-in: no I/O


def hub_records(source: str) -> dict[str, dict]:
    """The hub's records (stacks.hub_state) from `source`: "kube", the live hub through the kubeconfig (one list of
    HubClusters, read-only), or a file `kubectl get hubclusters -A -o json` wrote."""
    if source == LIVE:  # by name: a plan without it never loads the Kubernetes client
        live = importlib.import_module("automation.adapters.kube.hub_state")
        return records_of(live.listed_clusters("--hub-state kube"), where="--hub-state kube")
    try:
        doc = json.loads(Path(source).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidSpec.one("--hub-state", source, f"not readable as JSON: {exc}") from None
    items = doc.get("items") if isinstance(doc, dict) and "items" in doc else [doc]
    return records_of(items if isinstance(items, list) else [], where=f"--hub-state {source}")


def _format(args: argparse.Namespace) -> str:
    """The output format: the plan's (tree by default), or with a baseline, the diff's (diff by default)."""
    comparing = args.baseline is not None or args.baseline_ref is not None
    if args.baseline is not None and args.baseline_ref is not None:
        raise InvalidSpec.one("--baseline-ref", "", "give --baseline or --baseline-ref, not both")
    if not comparing:
        if args.format in ("diff", "markdown"):
            raise InvalidSpec.one("--format", args.format, "a diff needs a baseline (--baseline or --baseline-ref)")
        if args.detailed_exitcode:
            raise InvalidSpec.one("--detailed-exitcode", "", "needs a baseline (--baseline or --baseline-ref)")
        return args.format or "tree"
    if args.format is not None and args.format not in FORMATS:
        raise InvalidSpec.one("--format", args.format, f"with a baseline, one of {', '.join(FORMATS)}")
    return args.format or "diff"


def _baseline(args: argparse.Namespace, tmp: Path) -> Baseline | None:
    if args.baseline is not None:
        return Baseline.read(args.baseline)
    if args.baseline_ref is not None:
        out = tmp / "baseline.json"
        plan_at_ref(args.baseline_ref, args, out)
        return Baseline.read(str(out))
    return None


def _held(baseline: Baseline | None) -> frozenset[str]:
    """The clusters whose stacks the baseline planned: they keep their claims before new ones (stacks.claims), as
    the service's records would say; the offline plan has no records."""
    if baseline is None:
        return frozenset()
    return frozenset(name.replace(".", "/", 1) for name in baseline.names if not name.startswith("_"))


def _known(baseline: Baseline | None) -> Known | None:
    """The baseline's stack, when it was planned from the same key: its outputs are all the fleet's next pass
    reads, and the diff needs nothing else of it."""
    if baseline is None:
        return None

    def known(stack: str, key: str) -> Planned | None:
        if not baseline.planned_from(stack, key):
            return None
        return Planned(stack, "", "", baseline.outputs(stack), 0, (), key, "baseline")

    return known


def discovered(fleet: Fleet, lookup: NetworkLookup, invalid: list, *, workers: int = 1) -> Fleet:
    """The fleet with status.network written into every provisioned cluster that has none, as discovery reads it
    in the cluster's admitted account (a cluster its namespace may not have is left for resolve to refuse). A
    network that cannot be read is appended to `invalid`, naming the cluster, the reason and AWS's message."""
    targets = fleet_targets(dataclasses.replace(fleet, clusters=tuple(c for c in fleet.clusters
                                                                       if c.spec.provisioned)))
    queries = {}
    for cluster in fleet.clusters:
        target = targets.get(cluster.key)
        query = query_of(cluster, target, fleet.hub) if isinstance(target, AwsTarget) else None
        if query is not None and found_of(cluster.status) is None:
            queries[cluster.key] = query
    if not queries:
        return dataclasses.replace(fleet, discovery=True)  # a network is read for every cluster that needs one
    now = datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    found = discover_all(lookup, queries.values(), now=now, workers=workers)
    clusters = []
    for cluster in fleet.clusters:
        network = found.get(cluster.key)
        if network is None:
            clusters.append(cluster)
        elif isinstance(network, Exception):
            invalid.append(FieldError(cluster.ref, f"status.{NETWORK_STATUS_KEY}",
                                      f"discovery failed ({network.reason}): {network}"))
            clusters.append(cluster)
        else:
            clusters.append(cluster.model_copy(
                update={"status": {**(cluster.status or {}), NETWORK_STATUS_KEY: network.to_status()}}))
    return dataclasses.replace(fleet, clusters=tuple(clusters), discovery=True)


def report(violations: list[Violation]) -> int:
    """Each violation on stderr; exit 3 when one of them is mandatory."""
    for violation in violations:
        print(f"policy: {violation}", file=sys.stderr)
    mandatory = sorted({v.rule for v in violations if v.level == "mandatory"})
    if mandatory:
        print(f"error: the plan breaks {len(mandatory)} mandatory policy rule(s): {', '.join(mandatory)}",
              file=sys.stderr)
        return POLICY_FAILED
    return 0


def add_plan_command(subparsers: Any) -> None:
    plan = subparsers.add_parser("plan", help="print what `pulumi up` would create for each cluster, "
                                              "with no cloud account")
    plan.add_argument("--hub", required=True, help="the HubConfig YAML file")
    plan.add_argument("--clusters", required=True, help="a Cluster YAML file or a folder of them (Namespaces too)")
    plan.add_argument("--format", choices=["json", "tree", "dot", "mermaid", "diff", "markdown"], default=None,
                      help="tree (default) or json: every stack's resources; dot or mermaid: a picture of each mesh "
                           "group. With a baseline: diff (default; coloured on a terminal), markdown (a pull "
                           "request's comment) or json (per stack: unchanged, new, removed or changed, with each "
                           "resource's change and properties)")
    plan.add_argument("--baseline", metavar="OLD.json",
                      help="compare with this plan (a `plan --format json` of the same fleet, e.g. main's): print "
                           "what changes, per stack and resource, instead of the plan")
    plan.add_argument("--baseline-ref", metavar="REF",
                      help="compare with the plan of git REF (e.g. origin/main): REF's own program on REF's copy of "
                           "--hub and --clusters, in a temporary worktree; the working tree is not touched")
    plan.add_argument("--detailed-exitcode", action="store_true",
                      help=f"with a baseline: exit {CHANGES} when anything changes (0: nothing does; 1: an error; "
                           "2: invalid input; 3: a mandatory policy rule is broken, which wins over changes)")
    plan.add_argument("--cache", default=str(default_dir()), metavar="DIR",
                      help="stacks planned before, by plan key: inputs, this program's source, policy, format "
                           f"(default {default_dir()}; safe to delete; share it only among trusted writers)")
    plan.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    plan.add_argument("--keep-going", action="store_true",
                      help=f"plan the valid clusters when some are invalid (as the service stalls only those), list "
                           f"the invalid ones with their reasons and exit {INVALID_INPUT}; without it an invalid "
                           "cluster stops the plan before anything is written. With a baseline, the invalid "
                           "clusters' stacks are not shown as removed, and REF's plan keeps going too")
    plan.add_argument("--cluster", action="append", metavar="NAMESPACE/NAME",
                      help="plan only this cluster's stack (repeatable); the whole fleet is still read, since "
                           "a cluster's inputs depend on the others (claims, placement, its mesh group)")
    plan.add_argument("--jobs", type=_jobs, default=default_jobs(), metavar="N",
                      help="processes planning stacks side by side (default: the cores this process may use, "
                           f"{default_jobs()} here); the output is the same whatever N")
    plan.add_argument("--hub-state", metavar="FILE|kube",
                      help="the join stamps (status.meshJoin) and claims (status.claims) the hub recorded, for the "
                           "clusters whose files carry none: read from a file `kubectl get hubclusters -A -o json` "
                           "wrote (a trusted job exports it; a pull request's job needs no credentials), or with "
                           "'kube' from the live hub through the kubeconfig (one list, read-only). Nothing else of "
                           "the hub is read. Without it, the clusters the baseline plans join first")
    plan.add_argument("--discover", action="store_true",
                      help="read each cluster's network from AWS (its admitted account, through the hub's role "
                           "map, with this shell's AWS credentials) instead of the offline stand-in, for the "
                           "clusters whose file has no status.network: what the service will see")
    plan.add_argument("--policy", choices=POLICY_LEVELS, default="mandatory",
                      help="the policy pack's rules over every stack (policy/, docs/security.md): mandatory (default: "
                           "each rule at its own level; a mandatory violation exits 3), advisory (printed, never "
                           "fails) or off")
    plan.add_argument("--policy-config", metavar="FILE",
                      help="the pack's config, as `pulumi --policy-pack-config` takes it: {\"all\": level, "
                           "\"<rule>\": level or {\"enforcementLevel\": level, ...}}")
    plan.set_defaults(func=run)


def _jobs(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return value
