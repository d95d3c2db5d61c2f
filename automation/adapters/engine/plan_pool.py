"""Stacks planned under the mock runtime across the cores: each worker process plans a stack and renders it.

    parent: inputs, in order ──► PlanPool.map ──► worker: plan_stack(inputs) ──► render(plan) ──► Planned
                                                                 (text, outputs)
    parent ◄── Planned, in input order (imap): written at once, never held

A worker sends back the rendered text and the stack's outputs (which the next pass of the fleet's plan reads),
never the plan itself, so the parent holds one stack at a time whatever the fleet's size. Workers come from a
fork server that has imported Pulumi once (`forkserver`), so they hold no copy of the parent's fleet. With one
job (or a handful of stacks) nothing is started: the same functions run in this process. Either way the output is
the same bytes.
"""
from __future__ import annotations

import multiprocessing
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping

from automation.adapters.engine.plan import StackPlan, plan_stack
from automation.adapters.engine.policy import plan_violations
from policy.rules.enforcement import Setting
from policy.rules.view import Violation
from stacks.inputs import StackInputs
from stacks.transit import TransitInputs

Render = Callable[[StackPlan], str]
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


Task = tuple[StackInputs | TransitInputs, Render, Mapping[str, Setting] | None]


def plan_one(task: Task) -> Planned:
    inputs, render, rules = task
    plan = plan_stack(inputs)
    violations = tuple(plan_violations(inputs, plan, rules)) if rules is not None else ()
    return Planned(plan.stack, plan.cluster, render(plan), plan.outputs, len(plan.resources), violations)


def default_jobs() -> int:
    """The cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class PlanPool:
    """`map(inputs)`: each stack planned and rendered (and checked against the policy `rules`, unless None), in input
    order; `jobs` worker processes (1: in this one)."""

    def __init__(self, jobs: int, render: Render, rules: Mapping[str, Setting] | None = None):
        self.jobs = max(1, jobs)
        self.render = render
        self.rules = rules
        self._pool: Any = None

    def __enter__(self) -> "PlanPool":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.terminate()  # an error mid-way: no worker goes on planning for nobody
            self._pool.join()
            self._pool = None

    def map(self, inputs: Iterable[StackInputs | TransitInputs]) -> Iterator[Planned]:
        tasks = [(one, self.render, self.rules) for one in inputs]
        if self.jobs == 1 or len(tasks) < SERIAL_BELOW:
            yield from map(plan_one, tasks)
            return
        if self._pool is None:
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload([__name__])
            self._pool = context.Pool(self.jobs)
        yield from self._pool.imap(plan_one, tasks, chunksize=CHUNK)
