"""`python -m automation install --render DIR [--values FILE] [--set key=value ...] [--cluster-wide-only]`: the install as plain
manifests and a kustomization.yaml (automation.adapters.files.install), from the values of stacks.deployment (the keys
and defaults: docs/install.md). Bad values exit 2, naming each key and why; nothing is written then."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from automation.adapters.files import chart, install
from stacks.deployment import InstallValues, load_values, set_value
from stacks.errors import InvalidSpec


def _values(args: argparse.Namespace) -> InstallValues:
    """--values (the administrator's file, one YAML map), then each --set over it."""
    doc: dict = {}
    if args.values:
        try:
            with open(args.values, encoding="utf-8") as fh:
                loaded = yaml.safe_load(fh)
        except OSError as exc:
            raise InvalidSpec.one(f"install values ({args.values})", "--values", exc.strerror or str(exc)) from None
        except yaml.YAMLError as exc:
            raise InvalidSpec.one(f"install values ({args.values})", "--values", f"not valid YAML: {exc}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise InvalidSpec.one(f"install values ({args.values})", "values", "expected a map of keys")
        doc = loaded or {}
    for assignment in args.set or []:
        set_value(doc, assignment)
    source = " and ".join([*([args.values] if args.values else []), *(["--set"] if args.set else [])])
    return load_values(doc, source=source or "defaults")


def _render(args: argparse.Namespace) -> int:
    if args.chart:
        return _chart(args)
    if args.check:
        raise InvalidSpec.one("install", "--check", "goes with --chart DIR (the committed chart's check)")
    if not args.render:
        raise InvalidSpec.one("install", "--render", "one of --render DIR or --chart DIR is needed")
    out = Path(args.render)
    if out.exists() and not out.is_dir():
        raise InvalidSpec.one("--render", "--render", f"{out} is a file, not a folder")
    values = _values(args)
    objs = install.render(values)
    if args.cluster_wide_only:  # what a service run outside the cluster needs (the docs' walkthroughs)
        objs = [obj for obj in objs if obj["kind"] in install.CLUSTER_SCOPED]
    for path in install.write(out, objs):
        print(path)
    return 0


def _chart(args: argparse.Namespace) -> int:
    """The Helm chart, generated from the same renderer (automation.adapters.files.chart): no values are read,
    they are the chart's own (values.yaml holds the defaults, values.schema.json the model)."""
    if args.render or args.values or args.set or args.cluster_wide_only:
        raise InvalidSpec.one("install --chart", "--chart", "takes no --render, --values, --set or "
                              "--cluster-wide-only: the chart's values are given to helm")
    out = Path(args.chart)
    if out.exists() and not out.is_dir():
        raise InvalidSpec.one("--chart", "--chart", f"{out} is a file, not a folder")
    if args.check:
        differ = chart.stale(out)
        if differ:
            print(f"{out} is stale ({', '.join(differ)}): python -m automation install --chart {out}",
                  file=sys.stderr)
            return 1
        return 0
    for path in chart.write(out):
        print(path)
    return 0


def add_install_command(sub: argparse._SubParsersAction) -> None:
    cmd = sub.add_parser("install", help="render the install (CRDs, RBAC, admission policies, the service, the "
                                         "registry API) as plain manifests for kubectl apply -k, kustomize, Argo CD")
    cmd.add_argument("--render", metavar="DIR", help="write DIR/<kind>-<name>.yaml and DIR/kustomization.yaml")
    cmd.add_argument("--chart", metavar="DIR",
                     help="write the Helm chart generated from the same renderer into DIR (deploy/helm/hubwright)")
    cmd.add_argument("--check", action="store_true",
                     help="with --chart: write nothing; exit 1 naming each file of DIR that is not what the "
                          "renderer generates now")
    cmd.add_argument("--values", metavar="FILE", help="a YAML file of values (docs/install.md)")
    cmd.add_argument("--set", action="append", metavar="KEY=VALUE",
                     help="one value, after --values (repeatable), e.g. serviceAccount.roleArn=arn:aws:iam::...")
    cmd.add_argument("--cluster-wide-only", action="store_true",
                     help="only the namespace and the cluster-scoped objects (CRDs, ClusterRoles and their bindings, "
                          "admission policies): for a service and an API run outside the cluster, as in the docs")
    cmd.set_defaults(func=_render)
