"""Finalizers, in one place, the way controller-runtime's controllerutil does them.

    ensure_finalizer(objects, kind, raw, name)   -> the object holding `name` (None: it is gone)
    release_finalizer(objects, kind, raw, name)  -> the object without it (None: it is gone)
    edit_finalizers(objects, kind, raw, change)  -> the general form: `change(finalizers) -> finalizers`

Each write is a merge patch of metadata.finalizers carrying the resourceVersion the list was read at, so a
concurrent writer's change is never lost: a 409 reads the object again and applies `change` to what it has now,
at most FINALIZER_ATTEMPTS times (FinalizerConflict after: transient, retried with backoff by the caller's queue).
The first try uses the copy the caller holds (usually the informer's, usually current): a conflict costs one read.
"""
from __future__ import annotations

from typing import Callable

from automation.kit.objects import Conflict, Kind, Obj, Objects, Raw
from stacks.errors import Failure
from stacks.status import UPDATE_FAILED

FINALIZER_ATTEMPTS = 5  # conflicts (409) in a row before an edit of the finalizers gives up


class FinalizerConflict(Failure):
    """The finalizers could not be written: another writer won every one of FINALIZER_ATTEMPTS tries (transient:
    retried with backoff, reported like a failed run)."""

    reason = UPDATE_FAILED


def edit_finalizers(objects: Objects, kind: Kind, raw: Raw, change: Callable[[list[str]], list[str]]) -> Raw | None:
    """Apply `change` to the live finalizers and write them at the resourceVersion they were read at; the object
    as written (or as it was, when nothing changes), None when it is gone."""
    live: Raw | None = raw
    for _ in range(FINALIZER_ATTEMPTS):
        if live is None:
            return None
        obj = Obj(live)
        names = obj.finalizers
        wanted = change(list(names))
        if wanted == names:
            return live
        try:
            return objects.patch(kind, obj.name, {"metadata": {"finalizers": wanted or None,
                                                               "resourceVersion": obj.resource_version}},
                                 obj.namespace)
        except Conflict:
            live = objects.get(kind, obj.name, obj.namespace)
    obj = Obj(raw)
    raise FinalizerConflict(f"could not update the finalizers of {kind.kind} {obj.key}: {FINALIZER_ATTEMPTS} "
                            "conflicts")


def ensure_finalizer(objects: Objects, kind: Kind, raw: Raw, name: str) -> Raw | None:
    """`name` among the object's finalizers (added last when missing)."""
    return edit_finalizers(objects, kind, raw, lambda names: names if name in names else [*names, name])


def release_finalizer(objects: Objects, kind: Kind, raw: Raw, name: str) -> Raw | None:
    """`name` no longer among the object's finalizers (the others kept in their order)."""
    return edit_finalizers(objects, kind, raw, lambda names: [n for n in names if n != name])
