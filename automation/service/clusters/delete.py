"""What happens on delete: the finalizer, the destroy, the facts agent's revocation, the orphan check.

- The finalizer `hubwright.io/stack` is added before the first `up` (clusters/reconciler.py), so a delete
  cannot skip the destroy.
- A deleted Cluster (deletionTimestamp) that carries it: `destroy` of its stack (recovering a killed run's
  lock first); on success the finalizer is removed and the Cluster goes. A failed destroy keeps the finalizer,
  says why (DestroyFailed) and is retried with backoff.
- When the Cluster has left the cache: its facts agent loses its hub identity (so its tokens); if our
  finalizer was removed by hand while the stack still has resources, that is logged with how to destroy it.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Literal

from automation.adapters.kube.informer import Raw
from automation.kit.objects import Obj
from automation.service.clusters.context import Context
from automation.service.clusters.status import deletion_mark, generation_of, stack_of, succeeded
from automation.kit.queue import Outcome
from stacks import status as reasons
from stacks.errors import Failure
from stacks.inputs import StackInputs
from stacks.names import FINALIZER, stack_name
from stacks.runs.cause import Cause
from stacks.status import ClusterStatus, LastUpdate

LOG = logging.getLogger("hubwright.reconcile")


def has_finalizer(raw: Raw) -> bool:
    return FINALIZER in Obj(raw).finalizers


def ensure_finalizer(r: Context, raw: Raw) -> bool:
    """Our finalizer on the Cluster (False: the Cluster is gone): automation/kit/finalizers.py, through the client."""
    return r.kube.ensure_finalizer(raw, FINALIZER)


def deletion_run(r: Context, key: str, raw: Raw, status: ClusterStatus, *, operation: Literal["up", "destroy"],
                 reason: str, cause: Cause, event: str, audited: Callable[[], StackInputs | None],
                 run: Callable[[], Any]) -> tuple[ClusterStatus, LastUpdate] | Outcome:
    """The one run a deletion makes (a destroy, or a retain's up): marked on the status, said in an Event, audited
    (`audited()`: the inputs the audit records, asked only when there is an audit), run. (the status while it ran,
    its successful last update), or the Outcome to return: the mark not written, or the run failed (StackLocked
    included: one rule, automation/service/outcomes.py)."""
    stack = stack_of(raw, status)
    started = r.clock()
    why = cause.message
    running = deletion_mark(status, raw, operation, reason, cause, started)
    if not r.write(raw, status, running):
        return Outcome.done()
    r.kube.event(raw, "Normal", event, why)
    try:
        if r.audit is not None and (inputs := audited()) is not None:
            r.audit(inputs, operation)
        result = r.runs.run(operation, run, stack=stack, cluster=key, shown_to=r.known(key, stack), cause=cause)
    except Failure as exc:
        return r.fail(raw, running, operation, exc, started, before=status)
    return running, succeeded(result, result.message or why, started, r.clock(), cause=cause)


def destroy(r: Context, key: str, raw: Raw, status: ClusterStatus) -> Outcome:
    """A deleted Cluster with deletionPolicy Delete (what a killed run left recovered): destroy its stack, then let
    it go."""
    stack = stack_of(raw, status)
    why = "the Cluster was deleted: destroying its stack"

    def applied() -> StackInputs | None:  # a cluster's stack holds a cluster's inputs
        inputs = r.engine.applied(stack)
        return inputs if isinstance(inputs, StackInputs) else None

    ran = deletion_run(r, key, raw, status, operation="destroy", reason=reasons.DESTROYING,
                       cause=Cause.of("Delete", why, generation_of(raw)),
                       event="DestroyStarted", audited=applied, run=lambda: r.engine.destroy(stack, message=why))
    if isinstance(ran, Outcome):
        return ran
    running, last = ran
    r.write(raw, running, running.model_copy(update={"inputs_hash": None, "outputs": None, "last_update": last}))
    r.kube.event(raw, "Normal", "DestroySucceeded", f"stack {stack} destroyed; {let_go(r, key, raw)}")
    return Outcome.done()


def let_go(r: Context, key: str, raw: Raw) -> str:
    """Remove our finalizer (its stack was destroyed or retained): what became of the Cluster, to be said after
    (a FinalizerConflict raises before it, so the Event is true when it is sent)."""
    others: list[str] = []

    def release(names: list[str]) -> list[str]:
        others[:] = [n for n in names if n != FINALIZER]
        return others

    if not r.kube.edit_finalizers(raw, release):
        return "the Cluster was already gone"
    r.kube.forget(key)
    r.released.add(key)
    return (f"our finalizer removed; the Cluster waits for its other finalizers: {', '.join(others)}"
            if others else "the Cluster released")


def gone(r: Context, key: str) -> Outcome:
    """The Cluster left the cache: its facts agent loses its hub identity (so its tokens), and when our
    finalizer was removed by hand, a stack that still has resources is reported."""
    r.kube.forget(key)
    namespace, _, name = key.partition("/")
    try:
        r.kube.revoke_agent(namespace, name)
    except Exception as exc:  # noqa: BLE001 - the API server may be away: try again
        LOG.warning("%s: could not revoke the facts agent's identity (%s); retrying", key, exc)
        return Outcome.retry()
    if key in r.released:  # we destroyed its stack and let it go
        r.released.discard(key)
        return Outcome.done()
    stack = stack_name(namespace, name)
    try:
        applied = r.engine.applied(stack)
    except Exception:  # noqa: BLE001 - best effort: the object is gone either way
        applied = None
    if applied is not None:
        LOG.warning("Cluster %s is gone but stack %s still has resources: its finalizer %s was removed "
                    "by hand. Destroy the stack yourself (pulumi destroy -s %s) or re-create the Cluster "
                    "and delete it.", key, stack, FINALIZER, stack)
    return Outcome.done()
