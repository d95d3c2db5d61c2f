"""The mesh's shared state: transit stacks and group states, kept in HubConfig status.mesh (stacks.transit).

    TransitReconciler   a transit stack key (`_tgw_<account>`): up when its inputs changed, destroy when no
                        group uses its network account any more; its outputs (the gateways' and route tables'
                        IDs) go to status.mesh.transit, where the members' StackInputs read them.
    MeshStates          on every mapper pass: status.mesh.groups says what each group is built for; a
                        migration step is recorded done (`advance`) once every stack of the group applied it.
    HubStatus           the one writer of HubConfig status.mesh (a JSON merge patch on the status subresource).

Only the leader runs these (they are part of the Pipeline), so there is one writer.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Mapping

from kubernetes import client
from kubernetes.client.rest import ApiException

from automation.adapters.engine import Engine, RunResult, StackLocked
from automation.adapters.kube.status import rfc3339
from automation.service.cache import Cache
from automation.service.mapper import Resolution
from automation.service.snapshot import DesiredView
from automation.service.queue import Outcome
from stacks.errors import Failure
from stacks.names import HUBCONFIGS, GROUP, VERSION
from stacks.status import LastUpdate, applied
from stacks.transit import TransitInputs, TransitOutputs, advance

LOG = logging.getLogger("hubwright.transit")


class HubStatus:
    """Writes HubConfig status.mesh: `groups` and `transit` entries, merged (None removes one)."""

    def __init__(self, api_client: client.ApiClient, hub_name: str):
        self._custom = client.CustomObjectsApi(api_client)
        self.hub_name = hub_name
        self._lock = threading.Lock()

    def patch(self, *, groups: Mapping[str, Any] | None = None, transit: Mapping[str, Any] | None = None) -> bool:
        mesh: dict[str, Any] = {}
        if groups:
            mesh["groups"] = dict(groups)
        if transit:
            mesh["transit"] = dict(transit)
        if not mesh:
            return True
        with self._lock:
            try:
                self._custom.patch_cluster_custom_object_status(GROUP, VERSION, HUBCONFIGS, self.hub_name,
                                                                {"status": {"mesh": mesh}})
                return True
            except ApiException as exc:
                if exc.status == 404:
                    return False
                raise


def recorded_transit(cache: Cache, stack: str) -> Mapping[str, Any]:
    entry = ((cache.hub_status.get("mesh") or {}).get("transit") or {}).get(stack)
    return entry if isinstance(entry, Mapping) else {}


def transit_applied(cache: Cache, inputs: TransitInputs) -> bool:
    entry = recorded_transit(cache, inputs.stack)
    return applied(entry.get("inputsHash"), entry.get("lastUpdate"), inputs.digest())


class TransitReconciler:
    """Reconcile one transit stack: level-triggered, like the clusters' Reconciler, with its status in the hub."""

    def __init__(self, *, desired: DesiredView, cache: Cache, engine: Engine, hub_status: HubStatus,
                 run_engine: Callable[..., RunResult], lock_retry: float = 15.0,
                 clock: Callable[[], float] = time.time):
        """`run_engine(operation, call)`: the clusters' Reconciler's, so a halted service starts no transit run
        either, and the run metrics count these runs too."""
        self.desired = desired
        self.cache = cache
        self.engine = engine
        self.run_engine = run_engine
        self.hub_status = hub_status
        self.lock_retry = lock_retry
        self.clock = clock

    def __call__(self, stack: str) -> Outcome:
        wanted = self.desired.transit(stack)
        if wanted is None:
            if not recorded_transit(self.cache, stack):
                return Outcome.done()
            return self._run(stack, "destroy", "no mesh group uses this network account's gateways any more",
                             lambda why: self.engine.destroy(stack, message=why), None)
        if transit_applied(self.cache, wanted):
            return Outcome.done()
        before = recorded_transit(self.cache, stack).get("inputsHash")
        why = "first update of the transit stack" if before is None else \
            f"inputs changed (mesh groups on account {wanted.account_id}): {str(before)[:8]} -> {wanted.digest()[:8]}"
        return self._run(stack, "up", why, lambda message: self.engine.up(wanted, message=message), wanted)

    def _run(self, stack: str, operation: str, why: str, run: Callable[[str], RunResult],
             wanted: TransitInputs | None) -> Outcome:
        started = self.clock()
        try:
            result = self.run_engine(operation, lambda: run(why), stack=stack)
        except StackLocked:
            return Outcome.done(self.lock_retry)
        except Failure as exc:
            LOG.warning("transit stack %s: %s failed: %s", stack, operation, exc)
            self.hub_status.patch(transit={stack: {"lastUpdate": self._last(operation, "Failed", f"{why}: {exc}",
                                                                             started)}})
            return Outcome.retry()
        if operation == "destroy":
            self.hub_status.patch(transit={stack: None})
            LOG.info("transit stack %s destroyed", stack)
            return Outcome.done()
        self.hub_status.patch(transit={stack: {
            "inputsHash": wanted.digest(),
            "lastUpdate": self._last(operation, "Succeeded", f"{why}: {result.message}".rstrip(": "), started),
            "outputs": TransitOutputs.from_stack(result.outputs).to_status()}})
        return Outcome.done()

    def _last(self, operation: str, result: str, message: str, started: float) -> dict[str, Any]:
        return LastUpdate(operation=operation, result=result, message=message[:32768], start_time=rfc3339(started),
                          end_time=rfc3339(self.clock())).model_dump(by_alias=True, exclude_none=True)


def _cluster_applied(raw: Mapping[str, Any] | None, digest: str | None) -> bool:
    status = (raw or {}).get("status") or {}
    return applied(status.get("inputsHash"), status.get("lastUpdate"), digest)


class MeshStates:
    """Keeps status.mesh.groups equal to the plan's states, advancing a migration step once it is applied."""

    def __init__(self, cache: Cache, hub_status: HubStatus):
        self.cache = cache
        self.hub_status = hub_status
        self.advanced = 0

    def __call__(self, resolution: Resolution) -> None:
        mesh = resolution.mesh
        if mesh is None or resolution.hub is None:
            return
        recorded = resolution.recorded_groups
        raw_groups = (self.cache.hub_status.get("mesh") or {}).get("groups") or {}
        patch: dict[str, Any] = {}
        for key, view in mesh.groups.items():
            state = view.state
            if state.migrating_to is not None and recorded.get(key) == state and self._applied(resolution, key):
                state = advance(state)
                self.advanced += 1
                LOG.info("mesh group %s: %s applied by every stack; now %s", key, view.state.describe(),
                         state.describe())
            entry = {"topology": state.topology, "migratingTo": state.migrating_to, "step": state.step,
                     "members": len(view.members), "message": view.note or None}  # None: merge patch removes it
            if raw_groups.get(key) != {k: v for k, v in entry.items() if v is not None}:
                patch[key] = entry
        for key in set(raw_groups) - set(mesh.groups):
            patch[key] = None  # no members left: the group's state goes with it
        if patch:
            self.hub_status.patch(groups=patch)

    def _applied(self, resolution: Resolution, key: str) -> bool:
        """Every member's stack and the transit stack applied the group's current state."""
        mesh = resolution.mesh
        view = mesh.groups[key]
        if view.phase.attachments:
            if view.transit_stack not in mesh.transit or not transit_applied(self.cache, mesh.transit[view.transit_stack]):
                return False
            if any(mesh.shares[m].attachment is None for m in view.members):
                return False  # a member has not attached yet (its gateway is not made)
            attached = {a.cluster for r in mesh.transit[view.transit_stack].regions for g in r.groups
                        if g.group == key for a in g.attachments}
            if attached != set(view.members):
                return False  # an attachment is not associated yet
        return all(_cluster_applied(self.cache.get(m), resolution.digests.get(m)) for m in view.members)
