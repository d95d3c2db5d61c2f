"""A stack's plan against its baseline: what `pulumi up` would add, remove, replace or update. Pure.

Both sides are a stack as `python -m automation plan --format json` prints it ({"stack", "cluster", "outputs",
"resources": [{"urn", "type", "name", "parent", "dependencies", "account", "region", "inputs", "options"?}]}).

- Resources are matched by URN. Only in the baseline: remove; only in the new plan: add (each with every input).
- In both: the top-level inputs are compared (a nested difference reports the top-level input's whole old and new
  value), and the resource's account and region. A moved account or region is a replace (another provider manages
  it); so is a changed input the provider replaces on (replace.REPLACE_ON) or one the program lists in the new
  resource's options.replaceOnChanges. Any other change is an update. An input in the new resource's
  options.ignoreChanges is no change (Pulumi keeps the old value); names match the top-level input only.
- parent, dependencies and name alone are no change (the parent is in the URN), nor are the stack's outputs.
- A secret is never shown: every string starting with "[secret" (the plan's mask, possibly with a digest) reads
  "[secret]" in the reported values. Two masks that differ (digests) are a change, shown "[secret]" → "[secret]".
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import AbstractSet as Set, Any, Iterable, Literal, Mapping, get_args

from stacks.plandiff.replace import forces_replace

Change = Literal["unchanged", "new", "removed", "changed"]
ResourceChangeKind = Literal["add", "remove", "replace", "update"]

STACK_CHANGES: tuple[Change, ...] = get_args(Change)
RESOURCE_CHANGES: tuple[ResourceChangeKind, ...] = get_args(ResourceChangeKind)

SECRET = "[secret]"
AFTER_APPLY = "(known after apply)"  # what a value the offline plan made up reads (a peering's ID, a zone's ID)
AFTER_APPLY_KEY = "afterApply"  # a stack plan's list of those values (automation.adapters.engine.plan.after_apply)
LOCATION = ("account", "region")  # reported as properties of these names; a change of either is a replace


@dataclass(frozen=True)
class PropertyChange:
    old: Any  # masked (secrets read "[secret]"); None when this side has no value
    new: Any

    def to_json(self) -> dict[str, Any]:
        return {"old": self.old, "new": self.new}


@dataclass(frozen=True)
class ResourceChange:
    urn: str
    type: str
    change: ResourceChangeKind
    properties: Mapping[str, PropertyChange]  # by name, sorted

    def to_json(self) -> dict[str, Any]:
        return {"urn": self.urn, "type": self.type, "change": self.change,
                "properties": {name: prop.to_json() for name, prop in self.properties.items()}}


@dataclass(frozen=True)
class StackDiff:
    stack: str
    change: Change
    resources: tuple[ResourceChange, ...]  # sorted by URN; () when unchanged

    def to_json(self) -> dict[str, Any]:
        return {"stack": self.stack, "change": self.change, "resources": [r.to_json() for r in self.resources]}


def masked(value: Any, invented: Set[str] = frozenset()) -> Any:
    """`value` with every string that starts with "[secret" (at any depth) replaced by "[secret]", and every one of
    `invented` (a plan's AFTER_APPLY_KEY: the input strings that hold a made-up value) by "(known after apply)"."""
    if isinstance(value, str):
        if value.startswith("[secret"):
            return SECRET
        return AFTER_APPLY if value in invented else value
    if isinstance(value, Mapping):
        return {key: masked(item, invented) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [masked(item, invented) for item in value]
    return value


def _canonical(value: Any) -> str:
    """Equal values, equal text: JSON tells true from 1 and "1" from 1, which == does not."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def same_value(old: Any, new: Any) -> bool:
    return _canonical(old) == _canonical(new)


def top_property(path: str) -> str:
    """The top-level property of a Pulumi property path: `tags.Name`, `tags["a.b"]`, `subnets[0]`, `["a.b"].c`."""
    if path.startswith('["'):
        end = path.find('"]')
        return path[2:end] if end > 0 else path
    for i, char in enumerate(path):
        if char in ".[":
            return path[:i]
    return path


def _options(resource: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    """The top-level names in the resource's ignoreChanges (exact names only: ignoring `tags.Name` does not hide a
    change of another tag) and in its replaceOnChanges (any path under an input counts for the input; "*": all)."""
    options = resource.get("options") or {}
    ignore = {path for path in options.get("ignoreChanges") or () if top_property(path) == path}
    replace = {top_property(path) for path in options.get("replaceOnChanges") or ()}
    return ignore, replace


def _one_side(resource: Mapping[str, Any], change: ResourceChangeKind,
              invented: Set[str] = frozenset()) -> ResourceChange:
    inputs = resource.get("inputs") or {}
    properties = {name: PropertyChange(masked(inputs[name], invented), None) if change == "remove" else
                  PropertyChange(None, masked(inputs[name], invented)) for name in sorted(inputs)}
    return ResourceChange(resource["urn"], resource["type"], change, properties)


def compare_resource(old: Mapping[str, Any], new: Mapping[str, Any],
                     invented: Set[str] = frozenset()) -> ResourceChange | None:
    """One resource (the same URN) in the baseline and in the new plan: None when `pulumi up` leaves it be.
    Raises replace.UnknownType when an input of a type replace.REPLACE_ON does not know has changed. Values are
    compared as planned (a made-up ID that moved is a change) and shown masked."""
    type_ = new["type"]
    ignore, replace_on = _options(new)
    old_inputs, new_inputs = old.get("inputs") or {}, new.get("inputs") or {}
    changed: dict[str, PropertyChange] = {}
    replace = False
    for name in sorted(set(old_inputs) | set(new_inputs)):
        before, after = old_inputs.get(name), new_inputs.get(name)
        if name in ignore or same_value(before, after):
            continue
        changed[name] = PropertyChange(masked(before, invented), masked(after, invented))
        if forces_replace(type_, name, before, after) or name in replace_on or "*" in replace_on:
            replace = True
    for name in LOCATION:
        before, after = old.get(name), new.get(name)
        if not same_value(before, after):
            # a provider's region input is its location: one property (an input's own change, if any, wins)
            changed.setdefault(name, PropertyChange(masked(before), masked(after)))
            replace = True
    if not changed:
        return None
    return ResourceChange(new["urn"], type_, "replace" if replace else "update", dict(sorted(changed.items())))


def _by_urn(stack: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    resources: dict[str, Mapping[str, Any]] = {}
    for resource in stack.get("resources") or ():
        if resource["urn"] in resources:
            raise ValueError(f"stack {stack.get('stack')}: resource {resource['urn']} appears twice")
        resources[resource["urn"]] = resource
    return resources


def compare_stack(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> StackDiff:
    """A stack of the baseline plan (None: the stack is new) against the same stack of the new plan (None: it is
    removed)."""
    if old is None and new is None:
        raise ValueError("compare_stack: no stack on either side")
    if old is not None and new is not None and old["stack"] != new["stack"]:
        raise ValueError(f"compare_stack: stack {old['stack']} compared with stack {new['stack']}")
    name = new["stack"] if new is not None else old["stack"] if old is not None else ""
    before = _by_urn(old) if old is not None else {}
    after = _by_urn(new) if new is not None else {}
    invented = {*(old or {}).get(AFTER_APPLY_KEY, ()), *(new or {}).get(AFTER_APPLY_KEY, ())}
    changes: list[ResourceChange] = []
    for urn in sorted(set(before) | set(after)):
        if urn not in after:
            changes.append(_one_side(before[urn], "remove", invented))
        elif urn not in before:
            changes.append(_one_side(after[urn], "add", invented))
        else:
            change = compare_resource(before[urn], after[urn], invented)
            if change is not None:
                changes.append(change)
    if old is None:
        return StackDiff(name, "new", tuple(changes))
    if new is None:
        return StackDiff(name, "removed", tuple(changes))
    return StackDiff(name, "changed" if changes else "unchanged", tuple(changes))


def compare_mesh(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The plans' mesh summaries (stacks.mesh.summary), group by group (sorted): {"change": "unchanged" | "new" |
    "removed" | "changed", FIELD: {"old", "new"} for every field that differs} (a new group: all its fields, old
    None; a removed one: all, new None)."""
    out: dict[str, dict[str, Any]] = {}
    for key in sorted(set(old) | set(new)):
        before, after = old.get(key), new.get(key)
        change: Change = "new" if before is None else "removed" if after is None else "changed"
        before, after = before or {}, after or {}
        fields = {field: {"old": masked(before.get(field)), "new": masked(after.get(field))}
                  for field in sorted(set(before) | set(after)) if not same_value(before.get(field), after.get(field))}
        out[key] = {"change": "unchanged" if change == "changed" and not fields else change, **fields}
    return out


def summary(stacks: Iterable[StackDiff]) -> dict[str, dict[str, int]]:
    """{"stacks": {change: count}, "resources": {kind: count}}, every change and kind present (0 when none)."""
    by_change: dict[str, int] = {change: 0 for change in STACK_CHANGES}
    by_kind: dict[str, int] = {kind: 0 for kind in RESOURCE_CHANGES}
    for stack in stacks:
        by_change[stack.change] += 1
        for resource in stack.resources:
            by_kind[resource.change] += 1
    return {"stacks": by_change, "resources": by_kind}


def compare_plans(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """Two whole plan documents ({"stacks": [...], "mesh": {...}}) → the diff document the renderers read:
    {"stacks": [StackDiff.to_json(), ...], "mesh": compare_mesh(...), "summary": summary(...)}. Stacks are paired
    by name, in the new plan's order, then the baseline's stacks that are gone, in its order."""
    before = {stack["stack"]: stack for stack in old.get("stacks") or ()}
    after = {stack["stack"]: stack for stack in new.get("stacks") or ()}
    names = list(after) + [name for name in before if name not in after]
    diffs = [compare_stack(before.get(name), after.get(name)) for name in names]
    mesh = compare_mesh(old.get("mesh") or {}, new.get("mesh") or {})
    return {"stacks": [diff.to_json() for diff in diffs], "mesh": mesh, "summary": summary(diffs)}
