"""python -m automation {plan,inputs,ingress render,iam,serve,api,runner,agent,install,history,sandbox,reference}:
the command line."""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any

from automation.adapters.files.inputs import load_fleet
from automation.adapters.engine.fleet_plan import PlanError
from stacks.errors import FieldError, InvalidSpec
from stacks.haproxy import (CONFIG_FILE, GUEST_FOLDER, MAP_FILE, CentralSettings, dropped_lines, guest_files,
                            rendered_by_us, render_central)
from stacks.release import NAME, version
from stacks.resolve import resolve_all, resolve_fleet


def _inputs(args: argparse.Namespace) -> int:
    resolved = resolve_fleet(load_fleet(args.hub, args.clusters))
    wanted = resolved.get(args.cluster)
    if wanted is None:
        raise InvalidSpec.one(args.clusters, "metadata", f"no cluster {args.cluster} (known: {', '.join(resolved)})")
    if isinstance(wanted, InvalidSpec):
        raise wanted
    sys.stdout.write(wanted.to_config() + "\n")
    return 0


def _ingress_render(args: argparse.Namespace) -> int:
    """Write the routes that pass every check; list the clusters left out and exit 2 if there are any."""
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise InvalidSpec.one(f"--out {args.out}", "", "a file, not a folder")
    invalid: list = []  # Cluster files that do not parse: left out, listed
    fleet = load_fleet(args.hub, args.clusters, invalid)
    central_spec = fleet.hub.spec.shared_ingress
    if central_spec is None:
        raise InvalidSpec([*invalid, FieldError(fleet.hub.ref, "spec.sharedIngress",
                                                "not set: this hub has no shared ingress")])
    resolved = resolve_all(fleet)
    central_dir = os.path.join(args.out, "central")
    # The map is written beside the config; the config names it where the proxy will see it.
    map_seen_at = os.path.join(args.map_dir or os.path.abspath(central_dir), MAP_FILE)
    central = render_central(CentralSettings.from_hub(central_spec, map_path=map_seen_at), resolved.routes)
    not_rendered = {route.cluster for route, _ in central.dropped}
    guests = [(key, guest) for key, guest in resolved.guests.items()
              if key not in not_rendered and not guest.external_proxy]  # another project writes those
    files = {os.path.join("central", CONFIG_FILE): central.config, os.path.join("central", MAP_FILE): central.map,
             **guest_files(guests)}
    written, removed = _write_tree(args.out, files)
    for path in written:
        print(path)
    for path in removed:
        print(f"removed {path}", file=sys.stderr)
    left_out = [str(err) for err in invalid]
    left_out += [str(err) for problem in resolved.unrouted.values() for err in problem.errors]
    left_out += dropped_lines(central.dropped)
    if left_out:
        print(f"error: {len(left_out)} problem(s); these clusters are not routed (the others are written):",
              file=sys.stderr)
        for line in left_out:
            print(f"  {line}", file=sys.stderr)
        return 2
    return 0


def _write_tree(out: str, files: dict[str, str]) -> tuple[list[str], list[str]]:
    """Write {relative path: text} under `out`; remove the guest folders of clusters no longer rendered.

    A guest folder is removed only when it holds nothing but a config this command wrote (its header),
    so a folder someone keeps files in is left alone.
    """
    written = []
    for rel, text in sorted(files.items()):
        path = os.path.join(out, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        written.append(path)
    removed = []
    guests = os.path.join(out, GUEST_FOLDER)
    keep = {rel.split("/")[1] for rel in files if rel.startswith(GUEST_FOLDER + "/")}
    for folder in sorted(os.listdir(guests)) if os.path.isdir(guests) else []:
        path = os.path.join(guests, folder)
        config = os.path.join(path, CONFIG_FILE)
        if folder in keep or os.path.islink(path) or not os.path.isdir(path) or os.listdir(path) != [CONFIG_FILE]:
            continue
        with open(config, encoding="utf-8", errors="replace") as fh:
            ours = rendered_by_us(fh.read(4096))
        if ours:
            os.unlink(config)
            os.rmdir(path)
            removed.append(path)
    return written, removed


def _add_inputs_command(sub: Any) -> None:
    inputs = sub.add_parser("inputs", help="print one cluster's StackInputs JSON (the stack config hubwright:inputs)")
    inputs.add_argument("--hub", required=True)
    inputs.add_argument("--clusters", required=True)
    inputs.add_argument("--cluster", required=True, help="namespace/name")
    inputs.set_defaults(func=_inputs)


def _add_ingress_command(sub: Any) -> None:
    ingress = sub.add_parser("ingress", help="the shared ingress (one load balancer, routed by PROXY protocol v2)")
    ingress_sub = ingress.add_subparsers(dest="ingress_command", required=True)
    render = ingress_sub.add_parser("render", help="write the central and node-side HAProxy configs")
    render.add_argument("--hub", required=True, help="the HubConfig YAML file (spec.sharedIngress)")
    render.add_argument("--clusters", required=True, help="a Cluster YAML file or a folder of them")
    render.add_argument("--out", required=True,
                        help="writes OUT/central/haproxy.cfg, OUT/central/clusters.map, OUT/guest/<name>/haproxy.cfg")
    render.add_argument("--map-dir", help="the folder the central proxy reads the map from (default: OUT/central, "
                                          "absolute)")
    render.set_defaults(func=_ingress_render)


# Each command: the module that defines it and the function adding its parser. Only the command being run is
# imported: `plan` does not load the service's, the API's or the runner's libraries (the Kubernetes client, the web
# server, boto3: about 80 MB and a second of start-up).
COMMANDS: dict[str, tuple[str, str]] = {
    "plan": ("automation.cli.plan", "add_plan_command"),
    "inputs": (__name__, "_add_inputs_command"),
    "ingress": (__name__, "_add_ingress_command"),
    "iam": ("automation.cli.iam", "add_iam_command"),
    "serve": ("automation.service.command", "add_serve_command"),  # one flag per ServiceOptions field
    "api": ("automation.api.serve", "add_api_command"),  # the registry's REST API
    "console": ("automation.console.serve", "add_console_command"),  # the fleet console (docs/console.md)
    "runner": ("automation.runner.command", "add_runner_command"),  # executes the HubStackRuns of --executor runners
    "agent": ("automation.cli.agent", "add_agent_command"),  # the facts agent a registered cluster runs
    "install": ("automation.cli.install", "add_install_command"),  # the install as plain manifests (docs/install.md)
    "history": ("automation.cli.history", "add_history_command"),  # a cluster's run history (stacks/runs/record.py)
    "sandbox": ("automation.sandbox.command", "add_sandbox_command"),  # the hub's pieces on a laptop (up, env, down)
    "reference": ("automation.cli.reference", "add_reference_command"),  # docs/reference/, generated from the model
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Every command's parser; with `command`, that one's alone (the others' modules are not imported)."""
    parser = argparse.ArgumentParser(prog="python -m automation", description=__doc__)
    parser.add_argument("--version", action="version", version=f"{NAME} {version()}")  # pyproject.toml's
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, add) in COMMANDS.items():
        if command is None or name == command:
            getattr(importlib.import_module(module), add)(sub)
    return parser


def _command(argv: list[str]) -> str | None:
    """The command `argv` runs, when it names one (its first word that is not an option)."""
    first = next((arg for arg in argv if not arg.startswith("-")), None)
    return first if first in COMMANDS else None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(_command(argv)).parse_args(argv)
    try:
        return args.func(args)
    except PlanError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader stopped early (`| head`): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except InvalidSpec as exc:
        print(f"error: invalid input ({exc.reason}):", file=sys.stderr)
        for err in exc.errors:
            print(f"  {err}", file=sys.stderr)
        return 2
