"""What an engine run did, in the plan diff's model (compare.py): the steps the Pulumi engine announced during an
`up`, `preview`, `destroy` or `refresh` turned into a StackDiff for the run's history entry. Pure: a step is plain
data (automation/adapters/engine/trace.py reads it off the Automation API's engine events).

- Only steps that change something count: same, read, refresh, discard, import (and their -replaced /
  -replacement forms) and remove-pending-replace are skipped; so are the root stack (`pulumi:pulumi:Stack`) and the
  providers (`pulumi:providers:*`), as the plan diff has neither.
- create: add, with every new input; delete: remove, with every old input; update: update; replace,
  create-replacement and delete-replaced: one replace per URN (the engine sends up to three steps for it).
- An update's or replace's properties: the keys the provider named (`diffs`; else the top-level keys of
  `detailed_diff`'s paths); a provider that names none (a dynamic provider) gets every top-level input whose value
  differs between the old and new inputs, else (drift: a refresh read the cloud into the old *outputs*, the inputs
  stay as they were) every new input the old outputs hold otherwise, old output → new input; else (only a secret
  changed, which the engine shows masked on both sides) every secret input, "[secret]" → "[secret]".
- Values are masked as compare.masked masks them; the engine's own secret envelope ({SECRET_SIG: ...,
  "ciphertext": "[secret]"} or with "plaintext") reads "[secret]" too. A dynamic provider's serialised self
  (DYNAMIC_PROVIDER_KEY, an input of every dynamic resource) is no property.
"""
from __future__ import annotations

import json
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

from stacks.plandiff.compare import (SECRET, Change, PropertyChange, ResourceChange, ResourceChangeKind, StackDiff,
                                     masked, same_value, top_property)

ROOT_TYPE = "pulumi:pulumi:Stack"
PROVIDER_TYPE = "pulumi:providers:"
SECRET_SIG = "4dabf18193072939515e22adb298388d"  # Pulumi's special-value key; its secret value is SECRET_SIG_VALUE
SECRET_SIG_VALUE = "1b47061264138c4ac30d75fd1eb44270"
DYNAMIC_PROVIDER_KEY = "__provider"

KIND_OF_OP: Mapping[str, ResourceChangeKind] = {
    "create": "add",
    "delete": "remove",
    "update": "update",
    "replace": "replace",
    "create-replacement": "replace",
    "delete-replaced": "replace",
}


class Step(NamedTuple):
    """One engine step (a resourcePreEvent's metadata). `diffs`: the top-level keys the provider said change;
    `detailed_diff`: its property paths (`tags.Name`, `rules[0]`); either None when it named none. `old_outputs`:
    the old state's outputs (what a refresh read from the cloud), for drift."""

    op: str
    urn: str
    type: str
    old_inputs: Mapping[str, Any] | None
    new_inputs: Mapping[str, Any] | None
    diffs: Sequence[str] | None = None
    detailed_diff: Sequence[str] | None = None
    old_outputs: Mapping[str, Any] | None = None


def shown(value: Any) -> Any:
    """`value` as a diff shows it: the engine's secret envelopes and compare.masked's secrets read "[secret]"."""
    if isinstance(value, Mapping):
        if value.get(SECRET_SIG) == SECRET_SIG_VALUE:
            return SECRET
        return {key: shown(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [shown(item) for item in value]
    return masked(value)


def _secret_in(value: Any) -> bool:
    return f'"{SECRET}"' in json.dumps(shown(value), default=str)


def _inputs(values: Mapping[str, Any] | None) -> dict[str, Any]:
    return {key: value for key, value in (values or {}).items() if key != DYNAMIC_PROVIDER_KEY}


def _changed(step: Step) -> dict[str, PropertyChange]:
    """An update's or a replace's properties (module docstring)."""
    old, new, outputs = _inputs(step.old_inputs), _inputs(step.new_inputs), _inputs(step.old_outputs)
    named = list(step.diffs or ()) or [top_property(path) for path in step.detailed_diff or ()]
    keys = [key for key in dict.fromkeys(named) if key != DYNAMIC_PROVIDER_KEY]
    if not keys:
        keys = [key for key in sorted(set(old) | set(new)) if not same_value(old.get(key), new.get(key))]
    if not keys:  # drift: the refresh put the cloud's values into the outputs, the inputs are as they were
        drifted = [key for key in sorted(new) if key in outputs and not same_value(outputs[key], new[key])]
        if drifted:
            return {key: PropertyChange(shown(outputs[key]), shown(new[key])) for key in drifted}
        keys = [key for key in sorted(set(old) | set(new)) if _secret_in(old.get(key)) or _secret_in(new.get(key))]
    properties: dict[str, PropertyChange] = {}
    for key in sorted(keys):
        before = old.get(key)
        if key in outputs and key in new and same_value(before, new[key]):  # named, but only the cloud's value moved
            before = outputs[key]
        properties[key] = PropertyChange(shown(before), shown(new.get(key)))
    return properties


def _one(step: Step, kind: ResourceChangeKind) -> ResourceChange:
    if kind == "add":
        new = _inputs(step.new_inputs)
        properties = {key: PropertyChange(None, shown(new[key])) for key in sorted(new)}
    elif kind == "remove":
        old = _inputs(step.old_inputs)
        properties = {key: PropertyChange(shown(old[key]), None) for key in sorted(old)}
    else:
        properties = _changed(step)
    return ResourceChange(step.urn, step.type, kind, properties)


def _merged(steps: list[Step]) -> Step:
    """A replace's steps as one: the first old and new sides any of them has, the keys any of them names."""
    def first(attr: str) -> Any:
        return next((getattr(s, attr) for s in steps if getattr(s, attr) is not None), None)

    def union(attr: str) -> list[str] | None:
        keys = [key for s in steps for key in getattr(s, attr) or ()]
        return list(dict.fromkeys(keys)) or None

    head = steps[0]
    return Step("replace", head.urn, head.type, first("old_inputs"), first("new_inputs"), union("diffs"),
                union("detailed_diff"), first("old_outputs"))


def counted(step: Step) -> bool:
    """A step that changes a resource the plan diff shows (module docstring)."""
    return (step.op in KIND_OF_OP and step.type != ROOT_TYPE and not step.type.startswith(PROVIDER_TYPE))


def stack_diff(stack: str, steps: Iterable[Step], *, operation: str) -> StackDiff:
    """The run's steps as a StackDiff: one resource per URN, sorted by URN. `operation` "destroy": the stack is
    "removed"; else "changed" when a resource changed, "unchanged" when none did."""
    by_urn: dict[str, list[Step]] = {}
    for step in steps:
        if counted(step):
            by_urn.setdefault(step.urn, []).append(step)
    resources = []
    for urn in sorted(by_urn):
        found = by_urn[urn]
        kinds = [KIND_OF_OP[step.op] for step in found]
        if "replace" in kinds:
            resources.append(_one(_merged([s for s in found if KIND_OF_OP[s.op] == "replace"]), "replace"))
        else:
            resources.append(_one(found[0], kinds[0]))
    change: Change = "removed" if operation == "destroy" else "changed" if resources else "unchanged"
    return StackDiff(stack, change, tuple(resources))
