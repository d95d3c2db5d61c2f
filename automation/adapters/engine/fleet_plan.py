"""The order a fleet is planned in, as the service converges on it, and what a failed plan raises; no Pulumi here
(automation.adapters.engine.plan records each stack under the mock runtime), so a plan whose stacks all come from
the cache or the baseline never imports it.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Generator, Iterable, Protocol, Sequence, TypeVar

from stacks.errors import FieldError, InvalidSpec
from stacks.inputs import StackInputs
from stacks.resolve import Fleet, Resolved, resolve_all
from stacks.transit import TransitInputs, TransitOutputs


class PlanError(Exception):
    """The program failed under the mock runtime; the message is the root cause, not Pulumi's wrapping."""


class PlannedStack(Protocol):
    """What converge() reads of a planned stack (a StackPlan, or automation.adapters.engine.plan_pool.Planned)."""
    stack: str
    cluster: str
    outputs: dict[str, Any]


P = TypeVar("P", bound=PlannedStack)
PlanMany = Callable[[Sequence[StackInputs | TransitInputs]], Iterable[P]]


def converge(fleet: Fleet, plan_many: PlanMany, earlier: list | None = None,
             only: Iterable[str] | None = None, refused: "Refused | None" = None) -> Generator[P, None, Resolved]:
    """Every stack of a fleet, as the service converges on it, yielded as `plan_many` plans them: a transit stack
    first (its members read its gateways' IDs; not yielded), then the clusters' stacks, then the transit stack
    again with their attachments. Returns the last resolution. Raises InvalidSpec with every cluster's errors (and
    any `earlier` ones) before planning anything.

    `only`: these cluster keys' stacks alone (and the transit stacks their inputs read, not yielded). `refused`
    (--keep-going): the errors are appended to it, each once, and the valid clusters are planned, as the service
    stalls only the clusters that are refused."""
    wanted = _selected(fleet, only)
    resolved = resolve_all(fleet)

    def checked(found: dict[str, StackInputs | InvalidSpec]) -> list[StackInputs]:
        return valid(found, earlier, refused) if refused is not None else raise_invalid(found, earlier)

    inputs = checked(wanted(resolved.inputs))
    transit = dict(resolved.mesh.transit) if resolved.mesh is not None else {}
    if not transit:
        yield from plan_many(inputs)
        return resolved
    status = fleet.mesh_status
    made = {p.stack: TransitOutputs.from_stack(p.outputs) for p in plan_many(list(transit.values()))}
    status = dataclasses.replace(status, transit={**status.transit, **made})
    resolved = resolve_all(dataclasses.replace(fleet, mesh_status=status))
    attached: dict[str, str] = {}
    for plan in plan_many(checked(wanted(resolved.inputs))):
        mesh = plan.outputs.get("mesh")
        if isinstance(mesh, dict) and mesh.get("transitAttachment"):
            attached[plan.cluster] = mesh["transitAttachment"]
        yield plan
    if only is not None:
        return resolved
    status = dataclasses.replace(status, attachments={**status.attachments, **attached})
    resolved = resolve_all(dataclasses.replace(fleet, mesh_status=status))
    final = resolved.mesh.transit if resolved.mesh is not None else {}
    yield from plan_many([t for _, t in sorted(final.items())])
    return resolved


def _selected(fleet: Fleet, only: Iterable[str] | None) -> Callable[[dict], dict]:
    """A filter of resolved inputs down to `only` (every key must be a cluster of the fleet)."""
    if only is None:
        return lambda resolved: resolved
    keys = list(dict.fromkeys(only))
    known = {cluster.key for cluster in fleet.clusters}
    missing = [key for key in keys if key not in known]
    if missing:
        raise InvalidSpec([FieldError(f"--cluster {key}", "", "no such cluster in the fleet (namespace/name)")
                           for key in missing])

    def wanted(resolved: dict) -> dict:
        unplanned = [key for key in keys if key not in resolved]
        if unplanned:
            raise InvalidSpec([FieldError(f"--cluster {key}", "", "the cluster has no stack (not provisioned)")
                               for key in unplanned])
        return {key: resolved[key] for key in keys}

    return wanted


R = TypeVar("R")


def drain(stream: Generator[P, None, R], each: Callable[[P], Any]) -> R:
    """Hand every item of `stream` to `each`; the generator's return value."""
    while True:
        try:
            item = next(stream)
        except StopIteration as stop:
            return stop.value
        each(item)


@dataclasses.dataclass
class Refused:
    """What --keep-going left out: every error, once each, and the keys of the clusters refused."""

    errors: list[FieldError] = dataclasses.field(default_factory=list)
    keys: set[str] = dataclasses.field(default_factory=set)


def valid(resolved: dict[str, StackInputs | InvalidSpec], earlier: list | None, refused: Refused) -> list[StackInputs]:
    """The valid inputs; every error (and the `earlier` ones) recorded in `refused`, each once."""
    refused.keys.update(key for key, value in resolved.items() if isinstance(value, InvalidSpec))
    refused.errors += [err for err in dict.fromkeys(_errors(resolved, earlier)) if err not in refused.errors]
    return [value for value in resolved.values() if isinstance(value, StackInputs)]


def _errors(resolved: dict[str, StackInputs | InvalidSpec], earlier: list | None) -> list[FieldError]:
    """The `earlier` errors, then every refused cluster's."""
    return [*(earlier or []), *(err for value in resolved.values() if isinstance(value, InvalidSpec)
                                for err in value.errors)]


def raise_invalid(resolved: dict[str, StackInputs | InvalidSpec], earlier: list | None = None) -> list[StackInputs]:
    """All inputs, or one InvalidSpec carrying every cluster's errors (and any `earlier` ones)."""
    errors = _errors(resolved, earlier)
    if errors:
        raise InvalidSpec(errors)
    return [value for value in resolved.values() if isinstance(value, StackInputs)]  # every one, errors raised
