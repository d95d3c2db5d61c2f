"""Labels and annotations under hubwright.io/ that nothing reads. Pure.

A misspelled key is otherwise silently ignored: `hubwright.io/mesh-enable: "true"` dropped a cluster out of its
mesh with exit 0 in the trial. The known keys are every one stacks/names.py defines (those the service writes
itself too); any other under the prefix is named, with the nearest known key, by the plan (on stderr) and by the
service (an UnknownKeys Warning condition and one Event on the HubCluster), and, on our own kinds, by the API
server at `kubectl apply` as a warning (stacks.keys_policy, which asks `unknown` for its suggestions).
"""
from __future__ import annotations

import difflib
from typing import Iterable, Mapping

from stacks import names

UNKNOWN_KEYS = "UnknownKeys"
KNOWN_KEYS = frozenset(value for name, value in vars(names).items()
                       if name.isupper() and isinstance(value, str) and value.startswith(names.ANNOTATION_PREFIX)
                       and value != names.ANNOTATION_PREFIX)


def unknown(keys: Iterable[str]) -> list[tuple[str, str | None]]:
    """(key, the nearest known key or None) for each key under the prefix that is not a known one, sorted."""
    found = sorted(k for k in keys if k.startswith(names.ANNOTATION_PREFIX) and k not in KNOWN_KEYS)
    prefix = len(names.ANNOTATION_PREFIX)
    known = {key[prefix:]: key for key in KNOWN_KEYS}  # compared without the prefix they all share
    return [(key, next((known[m] for m in difflib.get_close_matches(key[prefix:], known, n=1, cutoff=0.7)), None))
            for key in found]


def unknown_key_messages(labels: Mapping[str, str], annotations: Mapping[str, str]) -> list[str]:
    """One line per unknown key of an object's metadata, '<field>: <reason>' (a FieldError's words without the
    object, which the plan puts first and a condition on the object leaves out)."""
    lines = []
    for where, keys in (("labels", labels), ("annotations", annotations)):
        for key, near in unknown(keys):
            hint = f"; did you mean {near}?" if near else " (the keys it reads: stacks/names.py)"
            lines.append(f"metadata.{where}[{key}]: not a key hubwright reads, so it is ignored{hint}")
    return lines
