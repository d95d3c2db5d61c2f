"""The mesh's shared state: transit stacks and group states, kept in HubConfig status.mesh (stacks.transit).

    setup(manager, ...)  the transit controller: its own queue and workers on the Manager, its reconciles sharing
                        the engine's bound with the clusters' controller (`Slots`), and the two mapper hooks that
                        feed it and keep the groups' states (`Transit.hooks`, in this order):
    TransitKeys         on every mapper pass, each transit stack (`_tgw_<account>`) whose inputs changed, appeared
                        or went (recorded in status.mesh.transit, no longer wanted) into the transit queue
    MeshStates          on every mapper pass: status.mesh.groups says what each group is built for; a
                        migration step is recorded done (`advance`) once every stack of the group applied it
                        (stacks.status.applied, the one rule). An entry the model cannot parse is reported (a log
                        line and an InvalidMeshStatus Event), then rewritten whole.
    TransitReconciler   `reconcile(stack) -> Outcome`: up when its inputs changed, destroy when no group uses its
                        network account any more; its outputs (the gateways' and route tables' IDs) go to
                        status.mesh.transit, where the members' StackInputs read them. Runs go through the service's
                        `Runs` (automation/service/runs.py), failures through `outcomes.judge` (the clusters' rule),
                        and each step is an Event on the HubConfig.
    MeshHub             the HubConfig as these see it: the informer's copy, its status.mesh entries written through
                        the controller kit's one status writer (automation/kit/status.py: each entry whole, typed by
                        stacks.status's GroupStatus and TransitStatus, the others left alone), Events on it.

The order of a join is the data's, not a queue's: a member's StackInputs carry its attachment only once the
transit stack's gateway is recorded in status.mesh.transit (so its stack waits for the transit stack's first up),
and the transit stack's inputs carry the attachments only once the members' stacks recorded them in their status
(status.outputs.transitAttachment): transit, members, transit. Each write moves the cache, the mapper resolves
again and queues whatever moved, each key in its own controller's queue.
Only the leader runs these (they are part of the Pipeline), so there is one writer.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping

from pydantic import ValidationError

from automation.adapters.engine import Engine, RunResult
from automation.kit.objects import HUBCONFIGS, Objects
from automation.kit.queue import Outcome, WorkQueue
from automation.kit.runtime import Controller, Manager, Slots
from automation.kit.status import Path, StatusWriter
from automation.service.cache import Cache
from automation.service.mapper import FleetAnswer, Hook, Pass
from automation.service.outcomes import judge
from automation.service.runs import Runs
from automation.service.snapshot import DesiredView
from stacks import status as reasons
from stacks.runs.cause import Cause
from stacks.errors import Failure
from stacks.status import GroupStatus, LastUpdate, MeshHubStatus, TransitOutputsStatus, TransitStatus, applied
from stacks.times import rfc3339_seconds
from stacks.transit import TransitInputs, advance

LOG = logging.getLogger("hubwright.transit")

Raw = dict[str, Any]


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _dump(entry: GroupStatus | TransitStatus | None) -> Raw | None:
    return None if entry is None else entry.model_dump(by_alias=True, exclude_none=True, mode="json")


class MeshHub:
    """The HubConfig as the mesh's controllers see it (module docstring). `raw()` is the copy the hubconfigs
    informer keeps (the Cache's store): it names the object (name, uid) for the status writer and for Events."""

    def __init__(self, objects: Objects, cache: Cache, *, writer: StatusWriter | None = None):
        self.objects, self.cache = objects, cache
        self.writer = writer if writer is not None else StatusWriter(objects, HUBCONFIGS)

    @property
    def name(self) -> str:
        return self.cache.hub_name

    def raw(self) -> Raw:
        raw = self.cache.stores()["hubconfigs"].get(self.name)
        return raw if raw is not None else {"metadata": {"name": self.name}, "status": self.cache.hub_status}

    def patch(self, *, groups: Mapping[str, GroupStatus | None] | None = None,
              transit: Mapping[str, TransitStatus | None] | None = None) -> bool:
        """One merge patch of the named entries of status.mesh.groups and .transit, each whole (None removes one);
        False when the HubConfig is gone."""
        entries: dict[Path, Raw | None] = {}
        for field, named in (("groups", groups or {}), ("transit", transit or {})):
            entries.update({("mesh", field, key): _dump(entry) for key, entry in named.items()})
        return self.writer.write_entries(self.raw(), entries) is not None

    def event(self, type_: Literal["Normal", "Warning"], reason: str, message: str) -> None:
        """An Event on the HubConfig (a cluster-scoped object's go to `default`); never raises."""
        self.objects.event(HUBCONFIGS, self.raw(), type_, reason, message)


def recorded_transit(cache: Cache, stack: str) -> TransitStatus | None:
    """The transit stack's entry in status.mesh.transit, as the cache has it (None: no entry). An entry the model
    cannot parse reads as an empty one: nothing applied and no outputs, so the stack runs again and the entry is
    rewritten whole (MeshStates reports it)."""
    raw = _mapping(_mapping(cache.hub_status.get("mesh")).get("transit")).get(stack)
    if raw is None:
        return None
    try:
        return TransitStatus.model_validate(raw)
    except ValidationError:
        return TransitStatus()


def transit_applied(entry: TransitStatus | None, inputs: TransitInputs) -> bool:
    return entry is not None and applied(entry.inputs_hash, entry.last_update, inputs.digest())


class TransitReconciler:
    """Reconcile one transit stack: level-triggered, like the clusters' Reconciler, with its status in the hub."""

    def __init__(self, *, desired: DesiredView, cache: Cache, engine: Engine, hub: MeshHub, runs: Runs,
                 lock_retry: float = 15.0, stalled_recheck: float = 300.0, clock: Callable[[], float] = time.time):
        """`runs`: the service's one gate for engine runs (shared with the clusters' Reconciler), so a halted
        service starts no transit run either, and the run metrics count these runs too."""
        self.desired = desired
        self.cache = cache
        self.engine = engine
        self.hub = hub
        self.runs = runs
        self.lock_retry = lock_retry
        self.stalled_recheck = stalled_recheck
        self.clock = clock

    def reconcile(self, stack: str) -> Outcome:
        wanted = self.desired.transit(stack)
        recorded = recorded_transit(self.cache, stack)
        if wanted is None:
            if recorded is None:
                return Outcome.done()
            return self._run(stack, "destroy", "no mesh group uses this network account's gateways any more",
                             lambda why: self.engine.destroy(stack, message=why), None, recorded)
        if transit_applied(recorded, wanted):
            return Outcome.done()
        before = recorded.inputs_hash if recorded is not None else None
        why = "first update of the transit stack" if before is None else \
            f"inputs changed (mesh groups on account {wanted.account_id}): {before[:8]} -> {wanted.digest()[:8]}"
        return self._run(stack, "up", why, lambda message: self.engine.up(wanted, message=message), wanted,
                         recorded or TransitStatus())

    def _run(self, stack: str, operation: Literal["up", "destroy"], why: str, run: Callable[[str], RunResult],
             wanted: TransitInputs | None, recorded: TransitStatus) -> Outcome:
        started = self.clock()
        word = "Update" if operation == "up" else "Destroy"
        self._event("Normal", f"{word}Started", f"transit stack {stack}: {why}")
        try:
            result = self.runs.run(operation, lambda: run(why), stack=stack, cause=Cause.of("Transit", why))
        except Failure as exc:
            return self._failed(stack, operation, why, exc, started, recorded)
        if operation == "destroy" or wanted is None:
            self.hub.patch(transit={stack: None})
            LOG.info("transit stack %s destroyed", stack)
            self._event("Normal", "DestroySucceeded", f"transit stack {stack} destroyed")
            return Outcome.done()
        self.hub.patch(transit={stack: TransitStatus(
            inputs_hash=wanted.digest(),
            last_update=self._last(operation, "Succeeded", f"{why}: {result.message}".rstrip(": "), started),
            outputs=TransitOutputsStatus.from_stack(result.outputs))})
        self._event("Normal", "UpdateSucceeded", f"transit stack {stack}: {why}: {result.message or 'applied'}")
        return Outcome.done()

    def _failed(self, stack: str, operation: Literal["up", "destroy"], why: str, exc: Failure, started: float,
                recorded: TransitStatus) -> Outcome:
        """A failed run reported by its class (automation/service/outcomes.py `judge`, the clusters' rule too): a
        locked stack ran nothing (an Event, no status); any other failure is the entry's lastUpdate and an Event."""
        judged = judge(exc, operation=operation, lock_retry=self.lock_retry, stalled_recheck=self.stalled_recheck)
        if judged.state == "progressing":  # locked: nothing ran
            self._event(judged.event_type, judged.reason, f"transit stack {stack}: {judged.condition}")
            return judged.outcome
        LOG.warning("transit stack %s: %s failed (%s): %s", stack, operation, judged.reason, judged.condition)
        self.hub.patch(transit={stack: recorded.model_copy(update={
            "last_update": self._last(operation, "Failed", f"{why}: {exc}", started)})})
        self._event(judged.event_type, judged.reason, f"transit stack {stack}: {operation} failed: {judged.condition}")
        return judged.outcome

    def _event(self, type_: Literal["Normal", "Warning"], reason: str, message: str) -> None:
        self.hub.event(type_, reason, message)

    def _last(self, operation: Literal["up", "destroy"], result: Literal["Succeeded", "Failed"], message: str,
              started: float) -> LastUpdate:
        return LastUpdate(operation=operation, result=result, message=message[:32768], start_time=rfc3339_seconds(started),
                          end_time=rfc3339_seconds(self.clock()))


def _cluster_applied(raw: Mapping[str, Any] | None, digest: str | None) -> bool:
    status = _mapping((raw or {}).get("status"))
    return applied(status.get("inputsHash"), status.get("lastUpdate"), digest)


class MeshStates:
    """Keeps status.mesh.groups equal to the plan's states, advancing a migration step once it is applied: a mapper
    hook (automation.service.mapper.Hook), called on every pass."""

    def __init__(self, cache: Cache, hub: MeshHub):
        self.cache = cache
        self.hub = hub
        self.advanced = 0
        self._seen: tuple[Mapping[str, Any] | None, MeshHubStatus] = (None, MeshHubStatus())
        self._reported: tuple[str, ...] = ()

    def recorded(self) -> MeshHubStatus:
        """status.mesh as the cache has it, through the model (parsed again only when the HubConfig changed); what
        the model cannot parse is reported once (a log line and a Warning Event on the HubConfig), never raised."""
        raw = self.cache.hub_status
        if raw is self._seen[0]:
            return self._seen[1]
        parsed, problems = MeshHubStatus.read(raw)
        self._seen = (raw, parsed)
        if problems and problems != self._reported:
            LOG.warning("HubConfig %s: status.mesh entries left out (rewritten by the next write): %s",
                        self.hub.name, "; ".join(problems))
            self.hub.event("Warning", reasons.INVALID_MESH_STATUS,
                           f"status.mesh entries the service cannot read, left out: {'; '.join(problems)}")
        self._reported = problems
        return parsed

    def __call__(self, passed: Pass) -> None:
        resolution = passed.answer
        mesh = resolution.mesh
        if mesh is None or resolution.hub is None:
            return
        recorded = resolution.recorded_groups
        written = self.recorded().groups
        patch: dict[str, GroupStatus | None] = {}
        for key, view in mesh.groups.items():
            state = view.state
            if state.migrating_to is not None and recorded.get(key) == state and self._applied(resolution, key):
                state = advance(state)
                self.advanced += 1
                LOG.info("mesh group %s: %s applied by every stack; now %s", key, view.state.describe(),
                         state.describe())
            entry = state.entry(members=len(view.members), message=view.note)
            if written.get(key) != entry:
                patch[key] = entry
        raw_groups = _mapping(_mapping(self.cache.hub_status.get("mesh")).get("groups"))
        for key in set(raw_groups) - set(mesh.groups):
            patch[key] = None  # no members left: the group's state goes with it (readable or not)
        if patch:
            self.hub.patch(groups=patch)

    def _applied(self, resolution: FleetAnswer, key: str) -> bool:
        """Every member's stack and the transit stack applied the group's current state."""
        mesh = resolution.mesh
        if mesh is None:
            return False
        view = mesh.groups[key]
        if view.phase.attachments:
            if view.transit_stack is None or view.transit_stack not in mesh.transit or not transit_applied(
                    recorded_transit(self.cache, view.transit_stack), mesh.transit[view.transit_stack]):
                return False
            if any(mesh.shares[m].attachment is None for m in view.members):
                return False  # a member has not attached yet (its gateway is not made)
            attached = {a.cluster for r in mesh.transit[view.transit_stack].regions for g in r.groups
                        if g.group == key for a in g.attachments}
            if attached != set(view.members):
                return False  # an attachment is not associated yet
        return all(_cluster_applied(self.cache.get(m), resolution.digests.get(m)) for m in view.members)


class TransitKeys:
    """The transit controller's watch, a mapper hook: on every pass, each transit stack whose inputs changed,
    appeared or went (recorded in status.mesh.transit but no longer wanted) goes into `add` (its queue)."""

    def __init__(self, cache: Cache, add: Callable[[str], None]):
        self.cache, self.add = cache, add
        self._seen: dict[str, str | None] = {}  # transit stack -> digest last queued for (None: to go)
        self.enqueued = 0

    def __call__(self, passed: Pass) -> None:
        transit = passed.answer.transit
        recorded = set(_mapping(_mapping(self.cache.hub_status.get("mesh")).get("transit")))
        for stack in sorted(set(transit) | recorded | set(self._seen)):
            wanted = transit.get(stack)
            digest = wanted.digest() if wanted is not None else None
            if digest is None and stack not in recorded:
                self._seen.pop(stack, None)
                continue
            if self._seen.get(stack, "") != digest:
                self._seen[stack] = digest
                self.enqueued += 1
                self.add(stack)


@dataclass(frozen=True)
class Transit:
    """What `setup` declared: the controller, its reconciler, the groups' states, and the mapper hooks (in order)."""

    controller: Controller
    reconciler: TransitReconciler
    states: MeshStates
    hooks: tuple[Hook, ...]


def setup(manager: Manager, *, desired: DesiredView, cache: Cache, engine: Engine, objects: Objects, runs: Runs,
          slots: Slots, queue: WorkQueue | None = None, workers: int = 1, lock_retry: float = 15.0,
          stalled_recheck: float = 300.0) -> Transit:
    """The transit controller on `manager`: its queue (`queue`, else a new one) served by `workers` threads whose
    reconciles each take one of `slots` (the engine's bound, shared with the clusters' controller), and the mapper
    hooks that feed it (TransitKeys) and keep the groups' states (MeshStates), for the Mapper, in this order."""
    hub = MeshHub(objects, cache)
    reconciler = TransitReconciler(desired=desired, cache=cache, engine=engine, hub=hub, runs=runs,
                                   lock_retry=lock_retry, stalled_recheck=stalled_recheck)
    controller = manager.controller("transit", slots.bound(reconciler.reconcile), queue=queue, workers=workers,
                                    threads="transit-worker")
    states = MeshStates(cache, hub)
    return Transit(controller, reconciler, states, (TransitKeys(cache, controller.queue.add), states))
