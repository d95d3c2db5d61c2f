"""The retained stacks' controller: the hub administrator's release of a HubRetainedStack (stacks/retention.py,
docs/service.md "Deletion policy").

A HubRetainedStack holds its cluster's claims and slot until the hub administrator sets spec.release:
- Destroy: `destroy` of the stack (its kept resources, in the cluster's account), through the engine like every run;
- Forget: the stack is removed from the state backend, its resources left in the account, unmanaged.
Either way the record is deleted (at the UID read, so a newer record of the same name is never taken for it; and
read from the API server first, so a release is carried out once however the informer lags), and what was done is
said out loud: a log line and an Event on the record, naming what stays in the cloud for Forget.
A failed destroy or forget keeps the record (its claims and slot held), says why, and is retried with backoff.

It watches HubRetainedStacks (the cache's informer, automation/service/cache.py) and runs in the clusters' slots:
a destroy is an engine run like any other.
"""
from __future__ import annotations

import logging
from typing import Any

from automation.adapters.engine import Engine
from automation.kit.objects import HUBRETAINEDSTACKS, Obj, Objects
from automation.kit.queue import Outcome, WorkQueue
from automation.kit.runtime import Controller, Manager, Slots
from automation.service.cache import Cache
from automation.service.runs import Runs
from stacks.runs.cause import Cause
from stacks.errors import Failure
from stacks.names import RETAINED, RETAINEDS
from stacks.retention import RetainedStack

LOG = logging.getLogger("hubwright.retained")


class Releases:
    """Carries out spec.release of a HubRetainedStack, by the key of the cluster it was."""

    def __init__(self, *, cache: Cache, engine: Engine, objects: Objects, runs: Runs):
        self.cache, self.engine, self.objects, self.runs = cache, engine, objects, runs

    def reconcile(self, key: str) -> Outcome:
        record = self.cache.retained_of(key)
        if record is None or record.spec.release is None:
            return Outcome.done()
        live = self.objects.get(HUBRETAINEDSTACKS, record.metadata.name)  # the cache may lag a release just done
        if live is None or Obj(live).uid != record.metadata.uid:
            return Outcome.done()
        stack, raw = record.spec.stack, _raw(record)
        try:
            if record.spec.release == "Destroy":
                why = f"{RETAINED.kind} {record.metadata.name} released: Destroy"
                result = self.runs.run("destroy", lambda: self.engine.destroy(stack, message=why), stack=stack,
                                       cluster=key, cause=Cause.of("Release", why))
                done = f"stack {stack} destroyed in account {record.spec.account_id} ({result.message})"
            else:
                done = (f"{self.engine.forget(stack)}: left in account {record.spec.account_id}, region "
                        f"{record.spec.region}: {', '.join(record.spec.kept) or 'nothing listed'}")
        except Failure as exc:
            why = f"release ({record.spec.release}) of stack {stack} failed, the record keeps holding its claims: {exc}"
            LOG.warning("%s %s: %s", RETAINED.kind, record.metadata.name, why)
            self.objects.event(HUBRETAINEDSTACKS, raw, "Warning", "ReleaseFailed", why[:1024])
            return Outcome.retry()
        freed = (f"the claims of HubCluster {key} ({', '.join(record.spec.claims.by_kind().values()) or 'none'}) and "
                 f"its slot in namespace {record.spec.namespace} are free")
        message = f"released ({record.spec.release}): {done}; {freed}"
        LOG.warning("%s %s %s", RETAINED.kind, record.metadata.name, message)  # said out loud, whichever it was
        self.objects.event(HUBRETAINEDSTACKS, raw, "Normal", f"Released{record.spec.release}", message[:1024])
        self.objects.delete(HUBRETAINEDSTACKS, record.metadata.name, uid=record.metadata.uid)
        return Outcome.done()


def _raw(record: RetainedStack) -> dict[str, Any]:
    return record.model_dump(by_alias=True, exclude_none=True, mode="json")


def keys_of(event: str, raw: dict[str, Any]) -> list[str]:
    """The key of the cluster a HubRetainedStack was (its spec's namespace/cluster)."""
    found = raw.get("spec")
    spec = found if isinstance(found, dict) else {}
    namespace, cluster = spec.get("namespace"), spec.get("cluster")
    return [f"{namespace}/{cluster}"] if isinstance(namespace, str) and isinstance(cluster, str) else []


def setup(manager: Manager, *, cache: Cache, engine: Engine, objects: Objects, runs: Runs, slots: Slots,
          queue: WorkQueue | None = None) -> Controller:
    """The controller on `manager`, in `slots` (the engine's bound), watching the HubRetainedStacks the cache's
    informer feeds (automation/adapters/kube/informer.py)."""
    releases = Releases(cache=cache, engine=engine, objects=objects, runs=runs)
    controller = manager.controller("retained", slots.bound(releases.reconcile), queue=queue)
    controller.watches(RETAINEDS, keys_of)
    return controller
