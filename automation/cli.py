"""python -m automation {plan,inputs}: the command line."""
from __future__ import annotations

import argparse
import json
import sys

from stacks.errors import InvalidSpec


def _plan(args: argparse.Namespace) -> int:
    from automation.files import load_fleet
    from automation.plan import plan_all, raise_invalid
    from automation.render import render_tree
    from stacks.resolve import resolve_fleet

    invalid: list = []
    fleet = load_fleet(args.hub, args.clusters, invalid)
    inputs = raise_invalid(resolve_fleet(fleet), invalid)
    plans = plan_all(inputs)
    if args.format == "json":
        json.dump({"stacks": [p.to_json() for p in plans]}, sys.stdout, indent=2, sort_keys=False)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_tree(plans))
    return 0


def _inputs(args: argparse.Namespace) -> int:
    from automation.files import load_fleet
    from stacks.resolve import resolve_fleet

    resolved = resolve_fleet(load_fleet(args.hub, args.clusters))
    wanted = resolved.get(args.cluster)
    if wanted is None:
        raise InvalidSpec.one(args.clusters, "metadata", f"no cluster {args.cluster} (known: {', '.join(resolved)})")
    if isinstance(wanted, InvalidSpec):
        raise wanted
    sys.stdout.write(wanted.to_config() + "\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m automation", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    plan = sub.add_parser("plan", help="print what `pulumi up` would create for each cluster, with no cloud account")
    plan.add_argument("--hub", required=True, help="the HubConfig YAML file")
    plan.add_argument("--clusters", required=True, help="a Cluster YAML file or a folder of them (Namespaces too)")
    plan.add_argument("--format", choices=["json", "tree"], default="tree")
    plan.set_defaults(func=_plan)

    inputs = sub.add_parser("inputs", help="print one cluster's StackInputs JSON (the stack config clusternet:inputs)")
    inputs.add_argument("--hub", required=True)
    inputs.add_argument("--clusters", required=True)
    inputs.add_argument("--cluster", required=True, help="namespace/name")
    inputs.set_defaults(func=_inputs)
    return parser


def main(argv: list[str] | None = None) -> int:
    from automation.plan import PlanError

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except PlanError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except InvalidSpec as exc:
        print(f"error: invalid input ({exc.reason}):", file=sys.stderr)
        for err in exc.errors:
            print(f"  {err}", file=sys.stderr)
        return 2
