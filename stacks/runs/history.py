"""Which finished runs are deleted: a stack keeps its last `keep` (--keep-runs, default 10) finished runs; a run
that has not finished is never deleted. Their Secrets go with them."""
from __future__ import annotations

from typing import Iterable

from stacks.runs.claims import RunView


def beyond(runs: Iterable[RunView], keep: int) -> list[RunView]:
    """The finished runs past the newest `keep` of each stack, oldest first."""
    by_stack: dict[str, list[RunView]] = {}
    for run in runs:
        if run.finished:
            by_stack.setdefault(run.stack, []).append(run)
    old: list[RunView] = []
    for finished in by_stack.values():
        finished.sort(key=lambda r: (r.created, r.key), reverse=True)
        old += finished[max(keep, 0):]
    return sorted(old, key=lambda r: (r.created, r.key))
