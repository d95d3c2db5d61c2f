"""What the offline plan records of a stack: each resource as the engine would receive it, and the stack's outputs.
Plain data (automation.adapters.engine.plan fills it under Pulumi's mock runtime), so what only reads a plan (the
policy rules, the renderers, the pool's parent) never imports Pulumi.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stacks.plandiff.compare import AFTER_APPLY_KEY


@dataclass
class Registered:
    urn: str
    type: str
    name: str
    parent: str | None
    dependencies: list[str]
    provider: str | None
    custom: bool
    inputs: dict[str, Any]
    account: str | None = None
    region: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    id: str = ""  # the ID the stand-ins gave it (policy rules match a route's peering by it)
    shown: dict[str, Any] | None = None  # the inputs as the plan prints them, when a secret is among them

    def to_json(self) -> dict[str, Any]:
        """The resource as the plan prints it: secrets masked, and its options only where one is not the default
        (the fleet diff reads ignoreChanges and replaceOnChanges from them)."""
        doc = {
            "urn": self.urn, "type": self.type, "name": self.name, "parent": self.parent,
            "dependencies": self.dependencies, "account": self.account, "region": self.region,
            "inputs": self.inputs if self.shown is None else self.shown,
        }
        options = {k: v for k, v in self.options.items() if v}
        if options:
            doc["options"] = options
        return doc


@dataclass
class StackPlan:
    stack: str
    cluster: str
    resources: list[Registered]
    outputs: dict[str, Any]
    key: str | None = None  # what it was planned from (automation.adapters.engine.plan_cache.plan_key)
    # The inputs' values the stand-ins made up (stacks.plandiff.compare.AFTER_APPLY shows them as unknown).
    after_apply: list[str] = field(default_factory=list)

    def of_type(self, type_: str) -> list[Registered]:
        return [r for r in self.resources if r.type == type_]

    def one(self, type_: str) -> Registered:
        """The one resource of `type_`; a LookupError naming the stack, the type and how many there are."""
        found = self.of_type(type_)
        if len(found) != 1:
            raise LookupError(f"stack {self.stack}: expected one {type_}, found {len(found)}")
        return found[0]

    def to_json(self) -> dict[str, Any]:
        head = {"stack": self.stack, "cluster": self.cluster}
        if self.key is not None:  # first after the names: a baseline's keys are read without parsing it
            head["planKey"] = self.key
        doc = {**head, "outputs": self.outputs, "resources": [r.to_json() for r in self.resources]}
        if self.after_apply:
            doc[AFTER_APPLY_KEY] = self.after_apply
        return doc


def render_stack(plan: StackPlan) -> str:
    """One stack's resources as a tree, and a blank line: the plan's `tree` format, and the console's resources of a
    cluster."""
    lines: list[str] = [f"stack {plan.stack}  (cluster {plan.cluster}, {len(plan.resources)} resources)"]
    children: dict[str | None, list] = {}
    for res in plan.resources:
        children.setdefault(res.parent, []).append(res)
    known = {r.urn for r in plan.resources}
    roots = [r for r in plan.resources if r.parent not in known]

    def walk(res, prefix: str, last: bool) -> None:
        where = f"  [{res.account} {res.region}]" if res.account else ""
        lines.append(f"{prefix}{'└── ' if last else '├── '}{res.type} {res.name}{where}")
        kids = children.get(res.urn, [])
        for i, kid in enumerate(kids):
            walk(kid, prefix + ("    " if last else "│   "), i == len(kids) - 1)

    for i, root in enumerate(roots):
        walk(root, "", i == len(roots) - 1)
    return "\n".join(lines) + "\n\n"
