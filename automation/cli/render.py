"""Human-readable views of a plan."""
from __future__ import annotations

import json

from automation.adapters.engine.plan_model import StackPlan


def render_summary(mesh: dict[str, dict]) -> str:
    """The mesh groups (stacks.mesh.summary.summary): where each is, and the steps still ahead of it."""
    if not mesh:
        return ""
    lines = ["mesh groups"]
    for key, group in mesh.items():
        lines.append(f"  {key}: {group['state']}, {group['members']} members"
                     + (f", {group['rejected']} left out" if group["rejected"] else ""))
        for step in group.get("migration", [])[1:]:
            lines.append(f"    next: {step}")
        for field in ("auto", "transitStack", "routesPerTable", "mtu", "note"):
            if field in group:
                lines.append(f"    {field}: {group[field]}")
    return "\n".join(lines) + "\n\n"


def stack_json(plan: StackPlan) -> str:
    """One stack as it appears in the plan's JSON document (automation.cli.plan.JsonDocument): indented for its
    place in the "stacks" list, so the streamed document reads as json.dump(indent=2) of the whole."""
    return "    " + json.dumps(plan.to_json(), indent=2).replace("\n", "\n    ")
