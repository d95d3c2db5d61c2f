"""What the service watches of other projects' cluster objects (docs/sources.md), and the RBAC that takes. Pure.

Each kind is watched at the version its project stores (the last of its versions): an API server without the
project's conversion webhook (envtest, a hub without Cluster API's controllers) serves what was stored. Its
informer, its store and its queue keys go by kubectl's unambiguous name, `Kind.group`. The families, their
names (`--sources`) and their kinds are stacks.sources.families' table.
"""
from __future__ import annotations

from typing import Any

from stacks.sources.families import FAMILIES
from stacks.sources.kinds import SourceKind


def watched_version(kind: SourceKind) -> str:
    return kind.versions[-1]


def rules() -> list[dict[str, Any]]:
    """The RBAC the sources controller needs: its finalizer and its condition (stacks.sources.held) on the sources,
    a read of what they read."""
    out = []
    for family in FAMILIES:
        source = family.source
        out.append({"apiGroups": [source.group], "resources": [source.plural],
                    "verbs": ["get", "list", "watch", "update", "patch"]})
        out.append({"apiGroups": [source.group], "resources": [f"{source.plural}/status"], "verbs": ["get", "patch"]})
        out += [{"apiGroups": [r.group], "resources": [r.plural], "verbs": ["get", "list", "watch"]}
                for r in family.related]
    return out
