"""RecordingEngine: the automation.adapters.engine.Engine protocol, in memory.

Records every run, takes a configurable time per run, and fails, locks, drifts or leaves a killed run
behind on request. Used by the tests and by bench/.

Like PulumiEngine, every run hands back its Trace (RunResult.trace; a raised EngineError's .trace): a small
diff, one resource per stack (TRACE_TYPE, named after the stack): an up adds it the first time, then updates its
`inputsDigest` (old → new) when the inputs changed; a destroy removes it; a preview updates it when the stack
drifted (`drift`, changed in the cloud) or its inputs changed; and a log of a line or two naming the operation
and the stack.
"""
from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

from automation.adapters.engine import EngineError, RunCancelled, RunResult, StackLocked, Trace
from stacks.inputs import StackInputs, StackProgramInputs
from stacks.plandiff.compare import Change, PropertyChange, ResourceChange, ResourceChangeKind, StackDiff
from stacks.transit import TransitInputs


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------- engine

@dataclass
class Call:
    operation: str
    stack: str
    inputs: StackProgramInputs | None = None
    message: str = ""
    started: float = 0.0  # time.monotonic()
    ended: float = 0.0
    ok: bool | None = None
    refresh: bool = False  # up: with refresh


@dataclass
class _Fault:
    operation: str
    stack: str | None
    times: int
    error: Callable[[], EngineError]


def fake_outputs(inputs: StackProgramInputs) -> dict[str, Any]:
    """Outputs shaped like components.program's, derived from the inputs."""
    if isinstance(inputs, TransitInputs):  # a transit stack: a gateway and a route table per group, per region
        return {"transit": inputs.stack, "inputsDigest": inputs.digest(), "regions": {
            r.region: {"transitGatewayId": f"tgw-{inputs.account_id}-{r.region}",
                       "routeTables": {g.group: f"tgw-rtb-{g.group.replace('/', '-')}-{r.region}" for g in r.groups}}
            for r in inputs.regions}}
    if not isinstance(inputs, StackInputs):
        raise TypeError(f"stack {inputs.stack}: no fake outputs for {type(inputs).__name__}")
    outputs: dict[str, Any] = {"cluster": inputs.key, "inputsDigest": inputs.digest()}
    if inputs.mesh is not None and inputs.mesh.attachment is not None:
        outputs["mesh"] = {"transitAttachment": f"tgw-attach-{inputs.stack}"}
    link = inputs.private_link
    if link is not None:
        outputs["privateLink"] = {
            "serviceName": f"com.amazonaws.vpce.{inputs.cluster.region}.vpce-svc-{link.infra_id}",
            "serviceId": f"vpce-svc-{link.infra_id}",
            "endpointId": f"vpce-{link.infra_id}",
            "endpointDnsName": f"vpce-{link.infra_id}.vpce-svc.{link.endpoint_vpc.region}.vpce.amazonaws.com",
            "endpointVpcId": link.endpoint_vpc.vpc_id,
            "zoneId": f"Z{link.infra_id.upper()}",
            "infraID": link.infra_id,
        }
    return outputs


TRACE_TYPE = "test:index:Stack"  # the one resource of a stack in the double's diffs


def trace_urn(stack: str) -> str:
    return f"urn:pulumi:{stack}::hubwright::{TRACE_TYPE}::{stack}"


def fake_trace(operation: str, stack: str, change: ResourceChangeKind,
               properties: Mapping[str, tuple[Any, Any]] | None, log: str) -> Trace:
    """A Trace as the recording engine hands it back: `properties` None: no resource changed, else the stack's
    resource with `change` (add, update, remove) and these properties ({name: (old, new)})."""
    resources = () if properties is None else (ResourceChange(
        trace_urn(stack), TRACE_TYPE, change,
        {name: PropertyChange(old, new) for name, (old, new) in sorted(properties.items())}),)
    kind: Change = "removed" if operation == "destroy" else "changed" if resources else "unchanged"
    return Trace(diff=StackDiff(stack, kind, resources).to_json(),
                 log=f"{operation} {stack}: {log} (recording engine)\n")


class RecordingEngine:
    """An in-memory Engine that records what it was asked to do."""

    def __init__(self, run_seconds: float = 0.0, *, on_start: Callable[[Call], None] | None = None,
                 on_end: Callable[[Call], None] | None = None, progress: int = 0):
        self.run_seconds = run_seconds
        self.progress = progress  # an up reports this many resources, done one by one over run_seconds
        self.on_start = on_start
        self.on_end = on_end
        self.calls: list[Call] = []
        self.stacks: dict[str, StackProgramInputs] = {}  # what `up` last applied, per stack
        self.drifted: set[str] = set()
        self.stale: set[str] = set()  # stacks a killed run left locked with pending operations
        self.gates: dict[str, threading.Event] = {}  # runs of these stacks wait for the event
        self._faults: list[_Fault] = []
        self._lock = threading.Lock()
        self._running: Counter = Counter()
        self._running_total = 0  # sum(self._running.values()), kept: a run's cost must not grow with the fleet
        self.max_concurrent_per_stack = 0
        self.max_concurrent = 0
        self._cancelled = threading.Event()  # set by cancel(): runs in flight stop with RunCancelled
        self.cancels: list[float] = []  # the grace of each cancel() call

    # -- configuring faults
    def fail(self, operation: str, stack: str | None = None, *, times: int = 1,
             message: str = "simulated failure", reason: str | None = None,
             error: type[EngineError] = EngineError) -> None:
        """The next `times` runs raise `error` (PolicyViolation: the policy pack refused the run, as
        PulumiEngine raises it)."""
        self._faults.append(_Fault(operation, stack, times, lambda: error(message, reason=reason)))

    def lock(self, stack: str | None = None, *, times: int = 1, message: str = "the stack is locked") -> None:
        """The next `times` runs raise StackLocked (another update holds the stack)."""
        self._faults.append(_Fault("*", stack, times, lambda: StackLocked(message)))

    def kill_mid_run(self, stack: str) -> None:
        """Leave the stack as a killed run would: locked, with pending operations, until recover()."""
        self.stale.add(stack)

    def gate(self, stack: str) -> threading.Event:
        """Runs of `stack` block until the returned event is set."""
        self.gates[stack] = threading.Event()
        return self.gates[stack]

    # -- reading the record
    def runs(self, operation: str | None = None, stack: str | None = None) -> list[Call]:
        with self._lock:
            return [c for c in self.calls
                    if (operation is None or c.operation == operation) and (stack is None or c.stack == stack)]

    def count(self, operation: str | None = None, stack: str | None = None) -> int:
        return len(self.runs(operation, stack))

    # -- the protocol
    def up(self, inputs: StackProgramInputs, *, message: str, refresh: bool = False,
           on_progress: Callable[[int, int], None] | None = None) -> RunResult:
        """`refresh` (an up that first reads the cloud) is recorded on the call. As with the real engine, only an
        up with refresh puts the cloud's drift back (tests/test_engine_drift_live.py): a plain up diffs the state.
        With `progress` steps, `on_progress` hears (0..steps, steps) spread over the run's `run_seconds`."""
        call = self._begin("up", inputs.stack, inputs, message, refresh=refresh)
        try:
            if self.progress and on_progress is not None:
                for done in range(self.progress):
                    on_progress(done, self.progress)
                    if self._cancelled.wait(self.run_seconds / self.progress):
                        raise RunCancelled(f"up {inputs.stack}: cancelled")
                on_progress(self.progress, self.progress)
            self._check(call)
            with self._lock:
                before = self.stacks.get(inputs.stack)
                self.stacks[inputs.stack] = inputs
                corrected = refresh and inputs.stack in self.drifted
                if refresh:
                    self.drifted.discard(inputs.stack)
            trace = _up_trace(inputs, before, corrected)
            return self._end(call, RunResult("up", True, "applied", outputs=fake_outputs(inputs),
                                             changes={"same": 1}, trace=trace))
        except EngineError as err:
            self._end(call, None)
            _traced(err, "up", inputs.stack)
            raise

    def destroy(self, stack: str, *, message: str) -> RunResult:
        call = self._begin("destroy", stack, None, message)
        try:
            self._check(call)
            with self._lock:
                had = self.stacks.pop(stack, None)
            gone = None if had is None else {"inputsDigest": (had.digest(), None)}
            trace = fake_trace("destroy", stack, "remove", gone, "no stack" if had is None else "destroyed")
            return self._end(call, RunResult("destroy", True, "destroyed", trace=trace))
        except EngineError as err:
            self._end(call, None)
            _traced(err, "destroy", stack)
            raise

    def forget(self, stack: str) -> str:
        call = self._begin("forget", stack, None, "forget")
        with self._lock:
            had = self.stacks.pop(stack, None)
        self._end(call, RunResult("forget", True, "forgotten"))
        return f"removed stack {stack}" if had is not None else f"no stack {stack}: nothing to forget"

    def preview(self, inputs: StackProgramInputs) -> RunResult:
        call = self._begin("preview", inputs.stack, inputs, "drift check")
        try:
            self._check(call)
            with self._lock:
                applied = self.stacks.get(inputs.stack)
                cloud_changed = inputs.stack in self.drifted
            same = applied == inputs and not cloud_changed
            # Like PulumiEngine.preview: `drifted` names what would change ("name (type)"); here one resource
            # stands for what the cloud changed (self.drifted), another for changed inputs.
            drifted = sorted(([f"{inputs.stack} (test:Drifted)"] if cloud_changed else [])
                             + ([f"{inputs.stack} (test:Inputs)"] if applied is not None and applied.digest() != inputs.digest() else []))
            properties: dict[str, tuple[Any, Any]] = {}
            if cloud_changed:
                properties["drift"] = ("changed in the cloud", "as the program has it")
            if applied is not None and applied.digest() != inputs.digest():
                properties["inputsDigest"] = (applied.digest(), inputs.digest())
            trace = fake_trace("preview", inputs.stack, "update", properties or None,
                               "no changes" if same else "changes expected")
            return self._end(call, RunResult("preview", same, "no changes" if same else "drift",
                                             changes={} if same else {"update": 1}, drifted=drifted, trace=trace))
        except EngineError as err:
            self._end(call, None)
            _traced(err, "preview", inputs.stack)
            raise

    def recover(self, stack: str, *, live_runners: Mapping[str, str] | None = None) -> RunResult:
        call = self._begin("recover", stack, None, "recover")
        with self._lock:
            was_stale = stack in self.stale
            self.stale.discard(stack)
        message = "cancelled a stale lock" if was_stale else "nothing to do"
        trace = fake_trace("recover", stack, "update", None, message)
        return self._end(call, RunResult("recover", True, message, trace=trace))

    def applied(self, stack: str) -> StackProgramInputs | None:
        with self._lock:
            return self.stacks.get(stack)

    def cancel(self, grace: float) -> None:
        """Runs in flight (sleeping or at a gate) stop at once with RunCancelled; later runs start as usual."""
        with self._lock:
            self.cancels.append(grace)
            running = self._running_total
        self._cancelled.set()
        deadline = time.monotonic() + 5
        while running and time.monotonic() < deadline:
            time.sleep(0.01)
            with self._lock:
                running = self._running_total
        self._cancelled.clear()

    # -- internals
    def _begin(self, operation: str, stack: str, inputs: StackProgramInputs | None, message: str, *,
               refresh: bool = False) -> Call:
        call = Call(operation, stack, inputs, message, started=time.monotonic(), refresh=refresh)
        with self._lock:
            self.calls.append(call)
            self._running[stack] += 1
            self._running_total += 1
            self.max_concurrent_per_stack = max(self.max_concurrent_per_stack, self._running[stack])
            self.max_concurrent = max(self.max_concurrent, self._running_total)
        if self.on_start is not None:
            self.on_start(call)
        return call

    def _check(self, call: Call) -> None:
        gate = self.gates.get(call.stack)
        deadline = time.monotonic() + 30
        while gate is not None and not gate.is_set() and time.monotonic() < deadline:
            if self._cancelled.wait(0.01):
                raise RunCancelled(f"{call.operation} {call.stack}: cancelled")
        if self.run_seconds and self._cancelled.wait(self.run_seconds):
            raise RunCancelled(f"{call.operation} {call.stack}: cancelled")
        with self._lock:
            if call.stack in self.stale and call.operation != "recover":
                raise StackLocked(f"stack {call.stack} is locked by a run that did not finish")
            for fault in self._faults:
                if fault.times > 0 and fault.operation in (call.operation, "*") and fault.stack in (None, call.stack):
                    fault.times -= 1
                    raise fault.error()

    def _end(self, call: Call, result: RunResult | None) -> RunResult | None:
        call.ended = time.monotonic()
        call.ok = result.ok if result is not None else False
        with self._lock:
            self._running[call.stack] -= 1
            self._running_total -= 1
        if self.on_end is not None:
            self.on_end(call)
        if result is not None:
            result.started = result.started or utc_now()
            result.ended = utc_now()
        return result


def _up_trace(inputs: StackProgramInputs, before: StackProgramInputs | None, corrected: bool) -> Trace:
    """An up's trace: the stack's resource added (its first up), else updated where its inputs changed or (an up
    with refresh of a drifted stack) the drift was put back."""
    if before is None:
        return fake_trace("up", inputs.stack, "add", {"inputsDigest": (None, inputs.digest())}, "created")
    properties: dict[str, tuple[Any, Any]] = {}
    if corrected:
        properties["drift"] = ("changed in the cloud", "as the program has it")
    if before.digest() != inputs.digest():
        properties["inputsDigest"] = (before.digest(), inputs.digest())
    return fake_trace("up", inputs.stack, "update", properties or None, "updated" if properties else "no changes")


def _traced(err: EngineError, operation: str, stack: str) -> None:
    """The raised error gets its Trace (as PulumiEngine's): no diff, a log naming the run and its error."""
    if err.trace is None:
        err.trace = Trace(diff=None, log=f"{operation} {stack}: failed (recording engine)\nerror: {err}\n")


# --------------------------------------------------------------------------- Kubernetes API
