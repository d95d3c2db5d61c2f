"""`plan --baseline`: what a change does to every stack, compared with a baseline plan (stacks.plandiff).

    Planned stacks, in the plan's order ──► DiffDocument.stack ──► unchanged (the baseline's key: not planned again)
                                                                └─► compare_stack(baseline's, this plan's)
    end ──► the baseline's stacks this plan no longer has (removed), the mesh summaries compared, the counts

The whole plan is not kept: a stack's JSON is parsed only to be compared, and only its changes stay.
"""
from __future__ import annotations

import json
import os
from typing import Any, Iterable, TextIO

from automation.adapters.engine.baseline import Baseline
from automation.adapters.engine.plan_pool import Planned
from stacks.plandiff.render import RERUN, render_diff, render_markdown
from stacks.plandiff.compare import StackDiff, compare_mesh, compare_stack, summary

CHANGES = 4  # --detailed-exitcode: the plan differs from the baseline (1: an error, 2: invalid input, 3: policy)
FORMATS = ("diff", "markdown", "json")


# What the diff assumed of the mesh's join order (stacks.mesh.membership.join_key): the files' own stamps, else
# the baseline's clusters before the rest, as the hub's stamps would order them.
JOIN_ORDER = ("mesh join order assumed: recorded join stamps (status.meshJoin in the files, else --hub-state's) "
              "first, then the clusters "
              "the baseline plans, then the rest by creationTimestamp, then namespace/name")


class DiffDocument:
    def __init__(self, baseline: Baseline, out: TextIO, fmt: str, *, only: Iterable[str] | None = None,
                 color: bool = False, rerun: str = RERUN):
        self.baseline = baseline
        self.out = out
        self.format = fmt
        self.only = only is not None  # a selection: the baseline's other stacks are not "removed"
        self.color = color
        self.rerun = rerun  # the command that shows it all, for a Markdown comment cut short
        self.seen: set[str] = set()
        self.diffs: list[StackDiff] = []
        self.doc: dict[str, Any] = {}
        self.left_out: set[str] = set()  # stacks of clusters --keep-going did not plan: left as they are, not removed

    def stack(self, planned: Planned) -> None:
        name = planned.stack
        self.seen.add(name)
        if planned.origin == "baseline" or self.baseline.planned_from(name, planned.key):
            self.diffs.append(StackDiff(name, "unchanged", ()))
            return
        old = self.baseline.stack(name) if name in self.baseline else None
        self.diffs.append(compare_stack(old, json.loads(planned.text)))

    def end(self, mesh: dict[str, Any]) -> None:
        if not self.only:
            for name in self.baseline.names:
                if name not in self.seen and name not in self.left_out:
                    self.diffs.append(compare_stack(self.baseline.stack(name), None))
        self.doc = {"stacks": [d.to_json() for d in self.diffs], "mesh": compare_mesh(self.baseline.mesh, mesh),
                    "summary": summary(self.diffs)}
        if mesh or self.baseline.mesh:
            self.doc["joinOrder"] = JOIN_ORDER
        if self.format == "json":
            self.out.write(json.dumps(self.doc, indent=2) + "\n")
        elif self.format == "markdown":
            self.out.write(render_markdown(self.doc, rerun=self.rerun))
        else:
            self.out.write(render_diff(self.doc, color=self.color))

    @property
    def changed(self) -> bool:
        return any(d.change != "unchanged" for d in self.diffs) or any(
            group.get("change") != "unchanged" for group in self.doc.get("mesh", {}).values())


def color_wanted(out: TextIO) -> bool:
    """Colour on a terminal, unless NO_COLOR is set (https://no-color.org)."""
    return out.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
