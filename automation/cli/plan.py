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

Before anything resolves, each provisioned cluster without a status.network gets one, as the service's discovery
writes it: from the deterministic stand-in (automation.adapters.aws.discovery_standin: what the cluster declares,
the rest made up), or with --discover from AWS itself (automation.adapters.aws.discovery, with the ambient
credentials and the hub's role map, in each cluster's admitted account only). A cluster whose network cannot be
read is refused like any invalid cluster, naming it and the reason.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from datetime import datetime, timezone
from typing import Any, Iterator, Sequence, TextIO

from automation.adapters.aws.discovery import AwsDiscovery, NetworkLookup, discover_all
from automation.adapters.aws.discovery_standin import StandInDiscovery
from automation.adapters.aws.sessions import AwsSessions
from automation.adapters.files.inputs import load_fleet
from automation.adapters.engine.plan import converge, drain, raise_invalid
from automation.adapters.engine.plan_pool import Planned, PlanPool, default_jobs
from automation.adapters.engine.policy import POLICY_LEVELS, PolicySettings, fleet_violations
from automation.adapters.progress import Progress
from automation.cli.picture import empty_reason, render_dot, render_mermaid
from automation.cli.render import render_stack, render_summary, stack_json
from policy.rules.view import Violation
from stacks.errors import FieldError, InvalidSpec
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
    rules = policy.rules() if policy.enabled else None
    invalid: list = []
    fleet = load_fleet(args.hub, args.clusters, invalid)
    lookup = AwsDiscovery(AwsSessions.from_env()) if args.discover else \
        StandInDiscovery({c.key: c.spec.network for c in fleet.clusters})
    fleet = discovered(fleet, lookup, invalid, workers=args.jobs)
    if args.format in ("dot", "mermaid"):  # the mesh only: no stack is planned
        resolved = resolve_all(fleet)
        raise_invalid(resolved.inputs, invalid)
        draw = render_dot if args.format == "dot" else render_mermaid
        sys.stdout.write(draw(resolved.mesh, empty_reason(resolved.mesh, fleet)))
        return 0
    document = JsonDocument(sys.stdout) if args.format == "json" else TreeDocument(sys.stdout)
    render = stack_json if args.format == "json" else render_stack
    violations: list[Violation] = []

    def write(planned: Planned) -> None:
        violations.extend(planned.violations)
        document.stack(planned)

    with PlanPool(args.jobs, render, rules) as pool, Progress("planned", "stacks") as progress:

        def plan_many(inputs: Sequence[StackInputs | TransitInputs]) -> Iterator[Planned]:
            progress.expect(len(inputs))
            for planned in pool.map(inputs):
                progress.advance()
                yield planned

        resolved = drain(converge(fleet, plan_many, invalid, only=args.cluster), write)
    document.end(summary(resolved.mesh, fleet.hub) if resolved.mesh is not None else {})
    if rules is not None:
        violations += fleet_violations(resolved.inputs.values(), rules)
    return report(violations)


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
    plan.add_argument("--format", choices=["json", "tree", "dot", "mermaid"], default="tree",
                      help="tree or json: every stack's resources; dot or mermaid: a picture of each mesh group")
    plan.add_argument("--cluster", action="append", metavar="NAMESPACE/NAME",
                      help="plan only this cluster's stack (repeatable); the whole fleet is still read, since "
                           "a cluster's inputs depend on the others (claims, placement, its mesh group)")
    plan.add_argument("--jobs", type=_jobs, default=default_jobs(), metavar="N",
                      help="processes planning stacks side by side (default: the cores this process may use, "
                           f"{default_jobs()} here); the output is the same whatever N")
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
