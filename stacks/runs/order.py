"""Which claimable run a runner takes first: fair between namespaces, as the service's in-process queue is
(automation/kit/queue.py). The namespace served least recently goes first; within one, the oldest run.
A tenant that asks for a thousand runs delays another tenant's one run by at most one run per runner."""
from __future__ import annotations

from typing import Iterable, Mapping

from stacks.runs.claims import RunView


def fair(candidates: Iterable[RunView], served: Mapping[str, float]) -> list[RunView]:
    """`candidates` in the order to try them. `served`: namespace -> when this runner last started one of its
    runs (monotonic; never: first). Round robin: each namespace's oldest run, least recently served first, then
    each one's second, and so on."""
    queues: dict[str, list[RunView]] = {}
    for run in sorted(candidates, key=lambda r: (r.created, r.key)):
        queues.setdefault(run.namespace, []).append(run)
    namespaces = sorted(queues, key=lambda ns: (served.get(ns, float("-inf")), queues[ns][0].created, ns))
    ordered: list[RunView] = []
    depth = 0
    while len(ordered) < sum(len(q) for q in queues.values()):
        ordered += [queues[ns][depth] for ns in namespaces if depth < len(queues[ns])]
        depth += 1
    return ordered
