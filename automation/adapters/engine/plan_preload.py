"""What the plan's fork server loads once, so the workers it forks share it instead of each loading a copy.

A worker's first stack registers resources from a few pulumi_aws packages (ec2, route53, vpc, ...), and a package's
first use executes its whole __init__: about 330 modules, some 40 MB a process. Loaded here, in the fork server,
before any worker is forked, those pages are shared copy-on-write by every worker (their summed PSS counts them
once). gc.freeze() then moves everything loaded so far out of the collector's sight, so a collection in a worker
does not write to (and so copy) the shared pages.

The packages are the ones the stack program creates resources from (stacks.plandiff.replace.REPLACE_ON, which a
test keeps complete over components/), and the ones it only reads from (READ_FROM).
"""
from __future__ import annotations

import gc
import importlib
import pkgutil

import pulumi_aws

import automation.adapters.engine.plan  # noqa: F401  (Pulumi, its mock runtime, the stack program)
import automation.adapters.engine.plan_pool  # noqa: F401  (what a worker runs)
from stacks.plandiff.replace import REPLACE_ON

READ_FROM = ("lb",)  # the program's lookups: the cluster's internal NLB (aws.lb.get_load_balancer)


def packages() -> list[str]:
    created = {type_.split(":")[1].split("/")[0] for type_ in REPLACE_ON if type_.startswith("aws:")}
    return sorted(created | set(READ_FROM))


def preload() -> int:
    """Import every module of those packages; how many modules were loaded."""
    loaded = 0
    for name in packages():
        package = importlib.import_module(f"{pulumi_aws.__name__}.{name}")
        for info in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{package.__name__}.{info.name}")
            loaded += 1
    return loaded


preload()
gc.freeze()
