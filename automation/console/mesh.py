"""The mesh page's pictures: the fleet resolved as the service resolves it (model.py), each group drawn by the
plan's picture rules (stacks.mesh.picture) as SVG (stacks.mesh.svg), with only the members the viewer may see (and
no account but theirs, unless they are a hub administrator)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from automation.console.model import FleetModel
from stacks.mesh.picture import empty_reason, groups
from stacks.mesh.svg import render_svg


@dataclass(frozen=True)
class Picture:
    label: str
    svg: str


def _href(key: str) -> str:
    namespace, _, name = key.partition("/")
    return f"/clusters/{namespace}/{name}"


def mesh_pictures(model: FleetModel, namespaces: list[str] | None, administrator: bool) -> dict[str, Any]:
    """{"pictures": [Picture...], "empty": why there is none ("" when there are)} for a viewer who may see
    `namespaces` (None: every one)."""
    now = model.resolved()
    if now.mesh is None or now.fleet is None:
        return {"pictures": [], "empty": now.problem}
    allowed = None if namespaces is None else set(namespaces)

    def shown(key: str) -> bool:
        return allowed is None or key.partition("/")[0] in allowed

    drawn = groups(now.mesh, shown=None if allowed is None else shown, hide_accounts=not administrator)
    pictures = [Picture(group.label, render_svg(group, lambda key: _href(key) if shown(key) else None))
                for group in drawn]
    empty = "" if pictures else (empty_reason(now.mesh, now.fleet, shown=None if allowed is None else shown)
                                 or "No mesh group has a member you may see.")
    return {"pictures": pictures, "empty": empty}
