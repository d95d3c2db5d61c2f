"""The mesh's shared state: transit stacks and group states, kept in HubConfig status.mesh (stacks.transit).

    TransitReconciler   `reconcile(key) -> Outcome` for a transit stack key (`_tgw_<account>`): up when its inputs
                        changed, destroy when no group uses its network account any more; its outputs (the
                        gateways' and route tables' IDs) go to status.mesh.transit, where the members' StackInputs
                        read them. Runs go through the service's `Runs` (automation/service/runs.py), failures
                        through `outcomes.judge` (the clusters' rule), and each step is an Event on the HubConfig.
    MeshStates          on every mapper pass: status.mesh.groups says what each group is built for; a
                        migration step is recorded done (`advance`) once every stack of the group applied it
                        (stacks.status.applied, the one rule). An entry the model cannot parse is reported (a log
                        line and an InvalidMeshStatus Event), then rewritten whole.
    MeshStatusWriter    the one writer of HubConfig status.mesh: typed entries (stacks.status: GroupStatus,
                        TransitStatus, the one model the CRD's schema comes from) as a JSON merge patch on the
                        status subresource; None removes an entry.

Only the leader runs these (they are part of the Pipeline), so there is one writer.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Literal, Mapping, Protocol

from kubernetes import client
from kubernetes.client.rest import ApiException
from pydantic import ValidationError

from automation.adapters.engine import Engine, RunResult
from stacks.conditions import status_patch
from stacks.times import rfc3339_seconds
from automation.service.cache import Cache
from automation.service.mapper import FleetAnswer
from automation.kit.queue import Outcome
from automation.service.outcomes import judge
from automation.service.runs import Runs
from automation.service.snapshot import DesiredView
from stacks import status as reasons
from stacks.errors import Failure
from stacks.names import GROUP, HUBCONFIGS, VERSION
from stacks.status import GroupStatus, LastUpdate, MeshHubStatus, TransitOutputsStatus, TransitStatus, applied
from stacks.transit import TransitInputs, advance

LOG = logging.getLogger("hubwright.transit")
TIMEOUT = 10.0  # seconds, every API call here

Entry = GroupStatus | TransitStatus


class Events(Protocol):
    """Where Events go (automation.adapters.kube.status.EventRecorder)."""

    def event(self, raw: dict[str, Any], type_: Literal["Normal", "Warning"], reason: str, message: str, *,
              kind: str = ...) -> None: ...


class MeshStatusWriter:
    """Writes HubConfig status.mesh from typed entries: `groups` and `transit`, by key (None removes one).

    An entry is written whole: the patch carries it and a null for every field, at any depth, that the entry had
    (as the cache saw it, `recorded()`, or as this writer last sent it, in case the cache lags) and the new one
    lacks, so no stale field outlives a write (a region gone from a transit stack's outputs, a migration's
    `migratingTo` once it is done). Entries not named are left as they are."""

    def __init__(self, api_client: client.ApiClient, hub_name: str, *,
                 recorded: Callable[[], Mapping[str, Any]] = dict, timeout: float = TIMEOUT):
        """`recorded()`: the HubConfig's whole status as last seen (the cache's)."""
        self._custom = client.CustomObjectsApi(api_client)
        self.hub_name = hub_name
        self._recorded = recorded
        self._timeout = timeout
        self._lock = threading.Lock()
        self._sent: dict[tuple[str, str], dict[str, Any]] = {}  # (field, key) -> the entry last sent
        self._meta: dict[str, Any] | None = None  # the HubConfig's metadata, from the last answer

    def patch(self, *, groups: Mapping[str, GroupStatus | None] | None = None,
              transit: Mapping[str, TransitStatus | None] | None = None) -> bool:
        """One merge patch of the named entries; False when the HubConfig is gone."""
        with self._lock:
            body = self.body(groups=groups or {}, transit=transit or {})
            if not body:
                return True
            try:
                answer = self._custom.patch_cluster_custom_object_status(
                    GROUP, VERSION, HUBCONFIGS, self.hub_name, {"status": {"mesh": body}},
                    _request_timeout=self._timeout)
            except ApiException as exc:
                if exc.status == 404:
                    return False
                self._unsure(body)
                raise
            except Exception:
                self._unsure(body)
                raise
            self._remember(body, groups or {}, transit or {})
            if isinstance(answer, dict) and isinstance(answer.get("metadata"), dict):
                self._meta = answer["metadata"]
            return True

    def body(self, *, groups: Mapping[str, GroupStatus | None],
             transit: Mapping[str, TransitStatus | None]) -> dict[str, Any]:
        """status.mesh's merge patch for these entries (empty: nothing to write)."""
        mesh = self._recorded().get("mesh")
        mesh = mesh if isinstance(mesh, Mapping) else {}
        out: dict[str, Any] = {}
        for field, entries in (("groups", groups), ("transit", transit)):
            before = mesh.get(field)
            before = before if isinstance(before, Mapping) else {}
            part: dict[str, Any] = {}
            for key, entry in entries.items():
                if entry is None:
                    part[key] = None
                    continue
                new = entry.model_dump(by_alias=True, exclude_none=True, mode="json")
                olds = [doc for doc in (before.get(key), self._sent.get((field, key))) if isinstance(doc, dict)]
                part[key] = status_patch(new, *olds)
            if part:
                out[field] = part
        return out

    def _remember(self, body: dict[str, Any], groups: Mapping[str, Entry | None],
                  transit: Mapping[str, Entry | None]) -> None:
        for field, entries in (("groups", groups), ("transit", transit)):
            for key, entry in entries.items():
                if entry is None:
                    self._sent.pop((field, key), None)
                else:
                    self._sent[(field, key)] = entry.model_dump(by_alias=True, exclude_none=True, mode="json")

    def _unsure(self, body: dict[str, Any]) -> None:
        """A write that may or may not have landed: the next write of these entries nulls what either had."""
        for field, part in body.items():
            for key, value in part.items():
                if isinstance(value, dict):
                    old = self._sent.get((field, key), {})
                    self._sent[(field, key)] = {**old, **{k: v for k, v in value.items() if v is not None}}

    def ref(self) -> dict[str, Any]:
        """The HubConfig as Events name it (its metadata: name, uid): from the last write's answer, else read once."""
        with self._lock:
            meta = self._meta
        if meta is None:
            try:
                hub = self._custom.get_cluster_custom_object(GROUP, VERSION, HUBCONFIGS, self.hub_name,
                                                             _request_timeout=self._timeout)
                meta = hub.get("metadata") if isinstance(hub, dict) else None
            except Exception as exc:  # noqa: BLE001 - an Event is best effort: it names the hub by name alone
                LOG.debug("could not read HubConfig %s for an Event: %s", self.hub_name, exc)
            with self._lock:
                self._meta = self._meta or meta
        meta = meta or {"name": self.hub_name}
        return {"metadata": {k: meta.get(k) for k in ("name", "uid", "resourceVersion")}}


def recorded_transit(cache: Cache, stack: str) -> TransitStatus | None:
    """The transit stack's entry in status.mesh.transit, as the cache has it (None: no entry). An entry the model
    cannot parse reads as an empty one: nothing applied and no outputs, so the stack runs again and the entry is
    rewritten whole (MeshStates reports it)."""
    mesh = cache.hub_status.get("mesh")
    entries = mesh.get("transit") if isinstance(mesh, Mapping) else None
    raw = entries.get(stack) if isinstance(entries, Mapping) else None
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

    def __init__(self, *, desired: DesiredView, cache: Cache, engine: Engine, writer: MeshStatusWriter, runs: Runs,
                 events: Events, lock_retry: float = 15.0, stalled_recheck: float = 300.0,
                 clock: Callable[[], float] = time.time):
        """`runs`: the service's one gate for engine runs (shared with the clusters' Reconciler), so a halted
        service starts no transit run either, and the run metrics count these runs too."""
        self.desired = desired
        self.cache = cache
        self.engine = engine
        self.writer = writer
        self.runs = runs
        self.events = events
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
            result = self.runs.run(operation, lambda: run(why), stack=stack)
        except Failure as exc:
            return self._failed(stack, operation, why, exc, started, recorded)
        if operation == "destroy" or wanted is None:
            self.writer.patch(transit={stack: None})
            LOG.info("transit stack %s destroyed", stack)
            self._event("Normal", "DestroySucceeded", f"transit stack {stack} destroyed")
            return Outcome.done()
        self.writer.patch(transit={stack: TransitStatus(
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
        self.writer.patch(transit={stack: recorded.model_copy(update={
            "last_update": self._last(operation, "Failed", f"{why}: {exc}", started)})})
        self._event(judged.event_type, judged.reason, f"transit stack {stack}: {operation} failed: {judged.condition}")
        return judged.outcome

    def _event(self, type_: Literal["Normal", "Warning"], reason: str, message: str) -> None:
        self.events.event(self.writer.ref(), type_, reason, message, kind="HubConfig")

    def _last(self, operation: Literal["up", "destroy"], result: Literal["Succeeded", "Failed"], message: str,
              started: float) -> LastUpdate:
        return LastUpdate(operation=operation, result=result, message=message[:32768], start_time=rfc3339_seconds(started),
                          end_time=rfc3339_seconds(self.clock()))


def _cluster_applied(raw: Mapping[str, Any] | None, digest: str | None) -> bool:
    status = (raw or {}).get("status") or {}
    return applied(status.get("inputsHash"), status.get("lastUpdate"), digest)


class MeshStates:
    """Keeps status.mesh.groups equal to the plan's states, advancing a migration step once it is applied."""

    def __init__(self, cache: Cache, writer: MeshStatusWriter, events: Events | None = None):
        self.cache = cache
        self.writer = writer
        self.events = events
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
                        self.writer.hub_name, "; ".join(problems))
            if self.events is not None:
                self.events.event(self.writer.ref(), "Warning", reasons.INVALID_MESH_STATUS,
                                  f"status.mesh entries the service cannot read, left out: {'; '.join(problems)}",
                                  kind="HubConfig")
        self._reported = problems
        return parsed

    def __call__(self, resolution: FleetAnswer) -> None:
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
        raw_mesh = self.cache.hub_status.get("mesh")
        raw_groups = raw_mesh.get("groups") if isinstance(raw_mesh, Mapping) else None
        for key in set(raw_groups if isinstance(raw_groups, Mapping) else ()) - set(mesh.groups):
            patch[key] = None  # no members left: the group's state goes with it (readable or not)
        if patch:
            self.writer.patch(groups=patch)

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
