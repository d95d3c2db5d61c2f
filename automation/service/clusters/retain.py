"""What happens on delete with deletionPolicy Retain, and when a HubCluster adopts a retained stack
(stacks/retention.py decides what is kept; docs/service.md "Deletion policy").

- Retain: one `up` of the stack's last applied inputs, retained (stacks.retention.retained_inputs): it removes
  everything the cluster holds outside its own account (the hub's endpoint, zone and associations, the mesh pairs it
  owns, its Transit Gateway attachment) and changes nothing it keeps. Then the HubRetainedStack is written (it
  holds the cluster's claims and its slot from then on) and only then our finalizer goes, so no moment passes in
  which nothing holds them. A failed run keeps the finalizer and is retried, like a failed destroy.
- A stack never applied has nothing to keep: it is destroyed as with Delete, and that is said.
- Adoption: after the first successful `up` of a HubCluster that admission let adopt the retained stack of its
  name, the record goes (the cluster's own status now holds the stack, its claims and its slot).
"""
from __future__ import annotations

import logging

from automation.adapters.kube.informer import Raw
from automation.kit.objects import HUBRETAINEDSTACKS, Conflict
from automation.kit.queue import Outcome
from automation.service.clusters import delete
from automation.service.clusters.context import Context
from automation.service.clusters.status import generation_of, stack_of
from stacks import status as reasons
from stacks.errors import Failure, InvalidSpec
from stacks.inputs import StackInputs
from stacks.names import RETAINED
from stacks.runs.cause import Cause
from stacks.keep import kept_of, retained_inputs
from stacks.retention import STACK_RETAINED, RetainedStack, record_of
from stacks.status import ClusterStatus
from stacks.times import rfc3339_seconds

LOG = logging.getLogger("hubwright.reconcile")


def retain(r: Context, key: str, raw: Raw, status: ClusterStatus) -> Outcome:
    """A deleted Cluster with deletionPolicy Retain (what a killed run left recovered): keep its own account's part,
    record it, then let it go."""
    stack = stack_of(raw, status)
    applied = r.engine.applied(stack)
    if not isinstance(applied, StackInputs):
        r.kube.event(raw, "Normal", "NothingToRetain",
                     f"deletionPolicy Retain, but stack {stack} was never applied: nothing to keep, destroying it")
        return delete.destroy(r, key, raw, status)
    namespace_uid = r.cache.namespace_uid(applied.namespace)
    if namespace_uid is None:  # the record is bound to it: never written without it
        return r.fail(raw, status, "destroy", Failure(
            f"cannot retain stack {stack} yet: namespace {applied.namespace} is not in the cache"), r.clock())
    kept = retained_inputs(applied)
    account = applied.cluster.account_id
    why = (f"the Cluster was deleted with deletionPolicy Retain: keeping its resources in account {account}, "
           "removing what it holds elsewhere (hub endpoint and zone, mesh pairs, Transit Gateway attachment)")
    ran = delete.deletion_run(r, key, raw, status, operation="up", reason=reasons.RETAINING,
                              cause=Cause.of("Retain", why, generation_of(raw)),
                              event="RetainStarted", audited=lambda: kept,
                              run=lambda: r.engine.up(kept, message=why))
    if isinstance(ran, Outcome):
        return ran
    running, last = ran
    r.write(raw, running, running.model_copy(update={"last_update": last}))
    claims = status.claims.model_dump(by_alias=True, exclude_none=True) if status.claims is not None else {}
    doc = record_of(key, namespace_uid, account, applied.cluster.region, claims, kept_of(kept),
                    rfc3339_seconds(r.clock()))
    try:
        r.kube.objects.create(HUBRETAINEDSTACKS, doc)
    except Conflict:  # written by an earlier try of this same delete: it must be this cluster's
        found = r.kube.objects.get(HUBRETAINEDSTACKS, stack)
        spec = (found or {}).get("spec") or {}
        if spec.get("namespaceUID") != namespace_uid or spec.get("cluster") != applied.name:
            return r.fail(raw, running, "destroy", InvalidSpec.one(
                f"HubCluster {key}", "metadata.name", f"{RETAINED.kind} {stack} exists and is another cluster's: the hub "
                "administrator releases it first", condition=STACK_RETAINED), r.clock())
    told = delete.let_go(r, key, raw)
    message = (f"stack {stack} retained ({RETAINED.kind} {stack}): kept {', '.join(kept_of(kept)) or 'nothing'} in "
               f"account {account}; removed what it held elsewhere; its claims and its slot stay held until the hub "
               f"administrator releases it (spec.release: Destroy or Forget); {told}")
    LOG.info("%s: %s", key, message)
    r.kube.event(raw, "Normal", "Retained", message)
    return Outcome.done()


def adopted(r: Context, key: str, raw: Raw) -> None:
    """After an `up` succeeded: the retained stack of this cluster's name, if any, is now this cluster's (admission
    let it adopt it: stacks.retention.Retention.adoption_refusal), so its record goes. Best effort: a record left
    behind is removed after the next success."""
    record = r.cache.retained_of(key)
    if record is None or record.spec.release is not None:
        return
    try:
        if r.kube.objects.delete(HUBRETAINEDSTACKS, record.metadata.name, uid=record.metadata.uid):
            r.kube.event(raw, "Normal", "Adopted", _adopted_message(record))
    except Exception as exc:  # noqa: BLE001 - the API server may be away: the next success tries again
        LOG.warning("%s: could not remove %s %s after adopting it: %s", key, RETAINED.kind, record.metadata.name, exc)


def _adopted_message(record: RetainedStack) -> str:
    return (f"adopted the retained stack {record.spec.stack} (retained at {record.spec.retained_at}): what Retain "
            f"removed was created again; {RETAINED.kind} {record.metadata.name} removed")

