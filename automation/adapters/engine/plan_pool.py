"""Stacks planned under the mock runtime across the cores: each worker process plans a stack and renders it.

    parent: inputs, in order ──► PlanPool.map ──► key ──► known (the baseline's stack of that key)
                                                      └─► the cache (automation.adapters.engine.plan_cache)
                                                      └─► worker: plan_stack(inputs) ──► render(plan) ──► Planned
                                                                 (text, outputs) and into the cache
    parent ◄── Planned, in input order (imap over the misses): written at once, never held

A stack whose key (its inputs, the program's source, the policy settings, the format) is known is not planned again:
it comes from the baseline the plan is compared with, or from the cache.

A worker sends back the rendered text and the stack's outputs (which the next pass of the fleet's plan reads),
never the plan itself, so the parent holds one stack at a time whatever the fleet's size. Workers come from a
fork server that has imported Pulumi once (`forkserver`), so they hold no copy of the parent's fleet. With one
job (or a handful of stacks) nothing is started: the same functions run in this process. Either way the output is
the same bytes.
"""
from __future__ import annotations

import importlib
import multiprocessing
import os
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Literal, Mapping

from automation.adapters.engine.plan_cache import PlanCache, violations_of
from automation.adapters.engine.plan_model import StackPlan
from automation.adapters.engine.policy import plan_violations
from policy.rules.enforcement import Setting
from policy.rules.view import Violation
from stacks.inputs import StackInputs
from stacks.transit import TransitInputs

Render = Callable[[StackPlan], str]
PRELOAD = ["automation.adapters.engine.plan_preload"]  # what the fork server loads once for every worker
# The recorder (Pulumi and its mock runtime, ~35 MB and 0.4 s) is loaded where a stack is planned, and only then: a
# plan whose stacks all come from the cache or the baseline never loads it. By name, so the parent never imports it
# for nothing; the fork server preloads it for the workers.
RECORDER = "automation.adapters.engine.plan"
CHUNK = 4  # stacks per task: fewer round trips, and a worker never idles long at the end
SERIAL_BELOW = 64  # fewer stacks than this: starting workers (about 1 s) costs more than they save


@dataclass(frozen=True)
class Planned:
    """One stack planned: what the output shows of it, and what the rest of the fleet's plan reads."""
    stack: str
    cluster: str
    text: str
    outputs: dict[str, Any]
    resources: int
    violations: tuple[Violation, ...] = ()  # the policy pack's rules over this stack's resources
    key: str | None = None  # automation.adapters.engine.plan_cache.plan_key
    origin: Literal["planned", "cache", "baseline"] = "planned"  # baseline: text is "", it is the baseline's


Keys = Callable[[StackInputs | TransitInputs], str]
Known = Callable[[str, str], "Planned | None"]  # (stack, key): the baseline's stack when it was planned from key
Task = tuple[StackInputs | TransitInputs, Render, Mapping[str, Setting] | None, str | None, PlanCache | None]


def plan_one(task: Task) -> Planned:
    inputs, render, rules, key, cache = task
    plan: StackPlan = importlib.import_module(RECORDER).plan_stack(inputs)
    plan.key = key
    violations = tuple(plan_violations(inputs, plan, rules)) if rules is not None else ()
    planned = Planned(plan.stack, plan.cluster, render(plan), plan.outputs, len(plan.resources), violations, key)
    if cache is not None and key is not None:
        cache.put(key, stack=planned.stack, cluster=planned.cluster, text=planned.text, outputs=planned.outputs,
                  resources=planned.resources, violations=violations)
    return planned


def from_cache(entry: dict[str, Any], key: str) -> Planned:
    return Planned(entry["stack"], entry["cluster"], entry["text"], entry["outputs"], entry["resources"],
                   violations_of(entry), key, "cache")


def default_jobs() -> int:
    """The cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class PlanPool:
    """`map(inputs)`: each stack planned and rendered (and checked against the policy `rules`, unless None), in input
    order; `jobs` worker processes (1: in this one). With `keys`, each stack's plan key is computed first, and a
    stack `known` (the baseline's) or in `cache` is not planned again."""

    def __init__(self, jobs: int, render: Render, rules: Mapping[str, Setting] | None = None, *,
                 keys: Keys | None = None, cache: PlanCache | None = None, known: Known | None = None):
        self.jobs = max(1, jobs)
        self.render = render
        self.rules = rules
        self.keys = keys
        self.cache = cache
        self.known = known
        self.planned = 0  # stacks this pool planned (not known, not cached)
        self.reused = 0  # stacks known from the baseline
        self._pool: Any = None
        self._starting: threading.Thread | None = None

    def __enter__(self) -> "PlanPool":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._starting is not None:
            self._starting.join()
        if self._pool is not None:
            self._pool.terminate()  # an error mid-way: no worker goes on planning for nobody
            self._pool.join()
            self._pool = None

    def map(self, inputs: Iterable[StackInputs | TransitInputs]) -> Iterator[Planned]:
        """Each stack in order: the known and cached ones read as their turn comes (one at a time in memory), the
        rest planned by the workers meanwhile."""
        order: list[tuple[StackInputs | TransitInputs, str | None, Planned | None, bool]] = []
        tasks: list[Task] = []
        for one in inputs:
            key = self.keys(one) if self.keys is not None else None
            known = self.known(one.stack, key) if key is not None and self.known is not None else None
            cached = known is None and key is not None and self.cache is not None and self.cache.holds(key)
            order.append((one, key, known, cached))
            if known is None and not cached:
                tasks.append((one, self.render, self.rules, key, self.cache))
        self.planned += len(tasks)
        misses = self._run(tasks)
        for one, key, known, cached in order:
            if known is not None:
                self.reused += 1
                yield known
            elif cached and key is not None and self.cache is not None:
                entry = self.cache.get(key)
                if entry is not None and entry.get("stack") == one.stack:
                    yield from_cache(entry, key)
                else:  # torn or foreign since it was seen: planned here, as if it had never been there
                    self.planned += 1
                    yield plan_one((one, self.render, self.rules, key, self.cache))
            else:
                yield next(misses)

    def prestart(self) -> None:
        """Start the workers now, in the background (a big fleet: while this process reads and resolves it, the fork
        server loads what they share on another core); the plan then uses them whatever the number of misses."""
        if self.jobs > 1 and self._pool is None and self._starting is None:
            self._starting = threading.Thread(target=self._start, name="plan-pool-start", daemon=True)
            self._starting.start()

    def _start(self) -> None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        self._pool = context.Pool(self.jobs)

    def _run(self, tasks: list[Task]) -> Iterator[Planned]:
        """The misses' plans, in order; workers start now (not at the first miss's turn)."""
        if self._starting is not None:
            self._starting.join()
        if not tasks:
            return iter(())
        if self._pool is None and (self.jobs == 1 or len(tasks) < SERIAL_BELOW):
            return map(plan_one, tasks)
        if self._pool is None:
            self._start()
        return self._pool.imap(plan_one, tasks, chunksize=CHUNK)
