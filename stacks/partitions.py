"""The bookkeeping of stacks.incremental.FleetResolver's steps: which clusters share a partition (an account, a
namespace, a region, a mesh unit, an API host, an ingress ID), so a change re-runs a step over the clusters it can
affect and no others; and the answers kept per key, each write saying whether it changed anything. Pure."""
from __future__ import annotations

from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Index:
    """Partition (an account, namespace, region, mesh unit, API host or ingress ID) -> the cluster keys in it, and
    each cluster's partition (None: in none)."""

    def __init__(self) -> None:
        self.members: dict[str, set[str]] = {}
        self.of: dict[str, str] = {}

    def move(self, key: str, part: str | None) -> tuple[str | None, str | None]:
        """Put `key` in `part`; (the part it left, the part it joined), or (None, None) when it stays."""
        old = self.of.get(key)
        if old == part:
            return None, None
        if old is not None:
            self.members[old].discard(key)
            if not self.members[old]:
                del self.members[old]
            del self.of[key]
        if part is not None:
            self.members.setdefault(part, set()).add(key)
            self.of[key] = part
        return old, part


def assign(mapping: dict[K, V], key: K, value: V | None) -> bool:
    """mapping[key] = value (None: absent); True when that changed it."""
    old = mapping.get(key)
    if value is None:
        mapping.pop(key, None)
    else:
        mapping[key] = value
    return old != value


def present(parts: set[str | None]) -> set[str]:
    """The partitions a step touched, without None (a cluster that left every partition)."""
    return {part for part in parts if part is not None}
