"""The fleet as the service resolves it, from the console's cache: what the mesh page draws and what a cluster's
stack builds (the plan's tree of it).

The fleet (the hub, the clusters with their recorded join stamps, claims and networks, the namespaces, the role
map, the mesh's recorded state) is resolved by stacks.resolve.resolve_all, the service's own rules, once per change
of what it reads in the cache (ConsoleCache.fleet_version: a status write, an Event or a run is none) and only when
a page asks. A cluster's resources are its inputs planned under Pulumi's mock runtime
(automation.adapters.engine.plan, the offline plan's), once per inputs digest: what the program builds from the
inputs now, with each resource's account and region. For a viewer who is not a hub administrator the tree's text
is redacted by the one rule (stacks.disclosure): a pair owner's stack builds the peer's side, in the peer's account.
"""
from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor, TimeoutError as FutureTimeout
from dataclasses import dataclass, field

from automation.adapters.engine.plan import plan_stack
from automation.adapters.engine.plan_model import render_stack
from automation.console.cache import ConsoleCache
from stacks.disclosure import known_to, redact
from stacks.errors import InvalidSpec
from stacks.hub_state import records_of, with_records
from stacks.inputs import StackInputs
from stacks.mesh.plan import MeshPlan
from stacks.model.cluster import Cluster
from stacks.model.hub import HubConfig
from stacks.model.loading import parse
from stacks.resolve import Fleet, resolve_all
from stacks.transit import MeshStatus

PLANS_KEPT = 256  # planned trees kept, by inputs digest
PLAN_TIMEOUT = 60.0  # seconds a page waits for its cluster's plan


def _own_loop() -> None:
    """The planning thread's event loop: Pulumi's mock runtime runs the program on the thread's current loop."""
    asyncio.set_event_loop(asyncio.new_event_loop())


@dataclass(frozen=True)
class Resolved:
    version: int  # the cache's fleet_version it was resolved at
    fleet: Fleet | None
    mesh: MeshPlan | None
    inputs: dict[str, StackInputs | InvalidSpec] = field(default_factory=dict)
    problem: str = ""  # why there is no fleet ("" when there is one)


def fleet_of(cache: ConsoleCache) -> tuple[Fleet | None, str]:
    hub_doc = cache.hubconfig()
    if hub_doc is None:
        return None, "There is no HubConfig: the service has nothing to mesh."
    try:
        hub = parse(hub_doc)
    except InvalidSpec as exc:
        return None, f"The HubConfig is refused: {exc}"
    if not isinstance(hub, HubConfig):
        return None, "The HubConfig is not one."
    docs = cache.cluster_docs()
    clusters: list[Cluster] = []
    for doc in docs:
        try:
            found = parse(doc)
        except InvalidSpec:
            continue  # refused as it stands: its page says why; it is in no group and builds nothing
        if isinstance(found, Cluster):
            clusters.append(found)
    namespaces = {name: dict((doc.get("metadata") or {}).get("annotations") or {})
                  for name, doc in cache.namespace_docs().items()}
    # discovery=False: a network the service's discovery recorded is used, and a declared one stands in for it
    # where none is recorded yet (the console reads no cloud).
    fleet = Fleet(hub=hub, clusters=tuple(clusters), namespaces=namespaces, role_map=cache.role_map(),
                  mesh_status=MeshStatus.from_hub_status(hub_doc.get("status")), discovery=False,
                  stacks=frozenset(c.key for c in clusters if (c.status or {}).get("stack")))
    fleet, _ = with_records(fleet, records_of(docs, where="the console's cache"))
    return fleet, ""


class FleetModel:
    def __init__(self, cache: ConsoleCache):
        self.cache = cache
        self._lock = threading.Lock()
        self._last: Resolved | None = None
        self._plans: OrderedDict[str, str] = OrderedDict()  # inputs digest -> the tree's text
        # Pulumi's mock runtime is the process's: one plan at a time, on one thread with its own event loop.
        self._planner = ThreadPoolExecutor(1, thread_name_prefix="console-plan", initializer=_own_loop)

    def resolved(self) -> Resolved:
        version = self.cache.fleet_version
        with self._lock:
            if self._last is not None and self._last.version == version:
                return self._last
            fleet, problem = fleet_of(self.cache)
            if fleet is None:
                self._last = Resolved(version, None, None, problem=problem)
            else:
                answer = resolve_all(fleet)
                self._last = Resolved(version, fleet, answer.mesh, dict(answer.inputs))
            return self._last

    def resources(self, key: str, *, whole: bool) -> tuple[str, str]:
        """(the plan's tree of the cluster's stack, "") or ("", why there is none). `whole`: a hub administrator's
        view; else redacted to what the cluster's own inputs hold (stacks.disclosure)."""
        now = self.resolved()
        inputs = now.inputs.get(key)
        if inputs is None:
            return "", now.problem or "Its stack builds nothing: the cluster is registered only, or not resolved."
        if isinstance(inputs, InvalidSpec):
            return "", f"Nothing is built while it is refused ({inputs.reason})."
        digest = inputs.digest()
        with self._lock:
            text = self._plans.get(digest)
        if text is None:
            try:
                text = self._planner.submit(lambda: render_stack(plan_stack(inputs))).result(PLAN_TIMEOUT)
            except FutureTimeout:
                return "", "Its plan is taking long; reload the page in a moment."
            with self._lock:
                self._plans[digest] = text
                while len(self._plans) > PLANS_KEPT:
                    self._plans.popitem(last=False)
        if whole:
            return text, ""
        known = known_to(inputs)
        return "\n".join(redact(line, known) for line in text.splitlines()), ""

    def close(self) -> None:
        self._planner.shutdown(wait=False, cancel_futures=True)
