"""The hold on a source object that is not taken any more (deleted, opted out): what our finalizer
`hubwright.io/source` waits for before it leaves the object, and when it stops waiting (docs/sources.md). Pure.

It waits for the source's own part (its HubCluster until it is gone, its stack until the fleet is resolved
without it) and for the admitted members of the source's mesh group, the group as plan_mesh keys it: "G" when
HubConfig spec.mesh.groups.G.namespaces spans it across namespaces (the source's among them), "<namespace>/G"
otherwise. A cluster of another namespace wearing the same label is in another group: it never holds the source,
so one tenant cannot keep another's deleted object (and its namespace) Terminating. A member that is refused,
registered only or not admitted runs nothing for the group and is not waited for.

The hold is bounded: HubConfig spec.sources.releaseAfter after it began (the source's deletionTimestamp, else
when the service first held it), the finalizer is left with a Warning Event naming what had not converged. The
finalizer cannot stop its project's own deletion anyway; it only keeps the object visible.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable, Iterable, Mapping

from stacks.mesh.membership import key_in
from stacks.model.hub import HubConfig
from stacks.names import MESH_LABEL, SOURCE_FINALIZER
from stacks.registry import seconds

SETTING = "HubConfig spec.sources.releaseAfter"


@dataclass(frozen=True)
class Hold:
    waiting: tuple[str, ...]  # what has not converged: the source's own part first, then its group's stacks
    expired: bool  # the bound has passed with something still waiting
    bound: str  # HubConfig spec.sources.releaseAfter, as written

    @property
    def release(self) -> bool:
        return not self.waiting or self.expired

    def waiting_message(self) -> str:
        """The Event on the held source while it waits: what it waits for, and until when at most."""
        shown = ", ".join(self.waiting[:10]) + (f" and {len(self.waiting) - 10} more" if len(self.waiting) > 10
                                                else "")
        return (f"held by the {SOURCE_FINALIZER} finalizer until {shown} no longer build toward it (released "
                f"anyway after {self.bound}, {SETTING})")

    def message(self) -> str:
        """The Warning Event of a release at the bound."""
        shown = ", ".join(self.waiting[:10]) + (f" and {len(self.waiting) - 10} more" if len(self.waiting) > 10
                                                else "")
        return f"released after {self.bound} ({SETTING}) with {len(self.waiting)} not converged without it: {shown}"


def source_group(namespace: str, labels: Mapping[str, Any], hub: HubConfig) -> str | None:
    """The key of the mesh group the source's HubCluster is (or was) in; None: in none."""
    group = labels.get(MESH_LABEL)
    return key_in(namespace, group, hub) if isinstance(group, str) and group else None


def members(group: str | None, shares: Mapping[str, str | None], hub: HubConfig) -> list[str]:
    """The admitted members of `group`. `shares`: cluster key -> the mesh group its desired inputs give it a share
    of (MeshShare.group; only admitted members have one), or None."""
    if group is None:
        return []
    return sorted(key for key, name in shares.items()
                  if name and key_in(key.split("/", 1)[0], name, hub) == group)


def held_since(deletion_timestamp: Any, first_held: datetime) -> datetime:
    """When the hold began: the source's deletionTimestamp (RFC 3339), else when the service first held it."""
    if isinstance(deletion_timestamp, str) and deletion_timestamp:
        try:
            return datetime.fromisoformat(deletion_timestamp.replace("Z", "+00:00"))
        except ValueError:
            pass
    return first_held


def hold(*, own: Iterable[str], namespace: str, labels: Mapping[str, Any], shares: Mapping[str, str | None],
         converged: Callable[[str], bool], hub: HubConfig, since: datetime, now: datetime) -> Hold:
    """What the hold on a source of `namespace` with `labels` waits for now, and whether its bound has passed.
    `own`: what of the source's own is not gone yet; `converged(key)`: whether that member's last up applied
    its desired inputs (asked of the group's members only)."""
    waiting = tuple(own) + tuple(key for key in members(source_group(namespace, labels, hub), shares, hub)
                                 if not converged(key))
    bound = hub.spec.sources.release_after
    expired = bool(waiting) and now - since >= timedelta(seconds=seconds(bound))
    return Hold(waiting=waiting, expired=expired, bound=bound)
