"""The offline plan: run the real stack program under Pulumi's mock runtime and record what it registers.

Nothing here talks to AWS; lookups get deterministic stand-ins (automation.adapters.engine.standins).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Generator, Iterable, Protocol, Sequence, TypeVar

import pulumi
from pulumi.runtime import rpc, settings
from pulumi.runtime.mocks import MockMonitor

from automation.adapters.engine.standins import StandIns, provider_location
from stacks.errors import FieldError, InvalidSpec
from stacks.inputs import StackInputs
from stacks.resolve import Fleet, Resolved, resolve_all
from stacks.transit import TransitInputs, TransitOutputs
from components.program import program


@dataclass
class Registered:
    urn: str
    type: str
    name: str
    parent: str | None
    dependencies: list[str]
    provider: str | None
    custom: bool
    inputs: dict[str, Any]
    account: str | None = None
    region: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    id: str = ""  # the ID the stand-ins gave it (policy rules match a route's peering by it)
    shown: dict[str, Any] | None = None  # the inputs as the plan prints them, when a secret is among them

    def to_json(self) -> dict[str, Any]:
        """The resource as the plan prints it: secrets masked, and its options only where one is not the default
        (the fleet diff reads ignoreChanges and replaceOnChanges from them)."""
        doc = {
            "urn": self.urn, "type": self.type, "name": self.name, "parent": self.parent,
            "dependencies": self.dependencies, "account": self.account, "region": self.region,
            "inputs": self.inputs if self.shown is None else self.shown,
        }
        options = {k: v for k, v in self.options.items() if v}
        if options:
            doc["options"] = options
        return doc


@dataclass
class StackPlan:
    stack: str
    cluster: str
    resources: list[Registered]
    outputs: dict[str, Any]
    key: str | None = None  # what it was planned from (automation.adapters.engine.plan_cache.plan_key)

    def of_type(self, type_: str) -> list[Registered]:
        return [r for r in self.resources if r.type == type_]

    def one(self, type_: str) -> Registered:
        """The one resource of `type_`; a LookupError naming the stack, the type and how many there are."""
        found = self.of_type(type_)
        if len(found) != 1:
            raise LookupError(f"stack {self.stack}: expected one {type_}, found {len(found)}")
        return found[0]

    def to_json(self) -> dict[str, Any]:
        head = {"stack": self.stack, "cluster": self.cluster}
        if self.key is not None:  # first after the names: a baseline's keys are read without parsing it
            head["planKey"] = self.key
        return {**head, "outputs": self.outputs, "resources": [r.to_json() for r in self.resources]}


class PlanError(Exception):
    """The program failed under the mock runtime; the message is the root cause, not Pulumi's wrapping."""


def _root_cause(exc: BaseException) -> str:
    return str(exc).rsplit("has risen: ", 1)[-1].strip()


class RecordingMonitor(MockMonitor):
    """The mock monitor, keeping each registration as the engine would receive it."""

    def __init__(self, mocks: StandIns, *, project: str, stack: str):
        super().__init__(mocks)
        self.standins = mocks
        self.project, self.stack = project, stack
        self.registered: list[Registered] = []

    def make_urn(self, parent: str, type_: str, name: str) -> str:
        """The URN the engine gives the resource in this stack. MockMonitor reads the project and stack from
        Pulumi's context variables, which the thread registering the resource may not share (it answers what
        an earlier program in this process left there): a plan must not depend on what ran before it."""
        if parent:
            type_ = parent.split("::")[2].split("$")[-1] + "$" + type_
        return f"urn:pulumi:{self.stack}::{self.project}::{type_}::{name}"

    def RegisterResource(self, request):
        response = super().RegisterResource(request)
        if request.type == "pulumi:pulumi:Stack":
            return response
        raw = rpc.deserialize_properties(request.object)
        inputs = _plain(raw)
        shown = _masked(raw)
        account, region = self.standins.location(request.provider) if request.custom else (None, None)
        if request.type == "pulumi:providers:aws":
            account, region = provider_location(inputs)
        self.registered.append(Registered(
            urn=response.urn,
            type=request.type,
            name=request.name,
            parent=request.parent or None,
            dependencies=sorted(set(request.dependencies)),
            provider=request.provider.rsplit("::", 1)[0] if request.provider else None,
            custom=request.custom,
            inputs=inputs,
            account=account,
            region=region,
            options={
                "deleteBeforeReplace": request.deleteBeforeReplace,
                "ignoreChanges": list(request.ignoreChanges),
                "replaceOnChanges": list(request.replaceOnChanges),
            },
            id=response.id,
            shown=shown if shown != inputs else None,
        ))
        return response


def _plain(value: Any) -> Any:
    """Protobuf-deserialised values → plain JSON types (sorted keys, no secrets wrappers)."""
    if isinstance(value, dict):
        if rpc._special_sig_key in value and value[rpc._special_sig_key] == rpc._special_secret_sig:
            return _plain(value.get("value"))
        return {k: _plain(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


SECRET = "[secret]"


def _masked(value: Any) -> Any:
    """_plain(value), with every secret shown as "[secret]": neither the plan nor a diff of two plans (a pull
    request's comment) ever prints one. No digest either: a low-entropy secret's hash can be guessed offline. So a
    diff sees a secret appear or go, not change its value (the stack's plan key still does: it is planned again)."""
    if isinstance(value, dict):
        if rpc._special_sig_key in value and value[rpc._special_sig_key] == rpc._special_secret_sig:
            return SECRET
        return {k: _masked(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [_masked(v) for v in value]
    return _plain(value)


def record(build: Callable[[], Any], *, stack: str, cluster: str = "", standins: StandIns | None = None,
           project: str = "hubwright") -> StackPlan:
    """Run `build()` under the mock runtime as stack `stack`; return every registration and what it returned."""
    standins = standins or StandIns()
    monitor = RecordingMonitor(standins, project=project, stack=stack)
    settings.ROOT.set(None)  # set_mocks keeps an earlier stack's root resource otherwise
    pulumi.runtime.set_mocks(standins, project=project, stack=stack, preview=False, monitor=monitor)
    outputs: dict[str, Any] = {}

    @pulumi.runtime.test
    def run():
        return pulumi.Output.from_input(build() or {}).apply(outputs.update)

    try:
        run()
    except Exception as exc:  # the program's own errors arrive wrapped in Pulumi's input-processing chain
        raise PlanError(f"{stack}: {_root_cause(exc)}") from exc
    resources = sorted(monitor.registered, key=lambda r: r.urn)  # registration order is async
    return StackPlan(stack, cluster, resources, _plain(outputs))


def plan_stack(inputs: StackInputs | TransitInputs, standins: StandIns | None = None) -> StackPlan:
    """Run program(inputs) under the mock runtime; return every registration and the stack outputs."""
    return record(lambda: program(inputs), stack=inputs.stack, cluster=inputs.key, standins=standins)


class PlannedStack(Protocol):
    """What converge() reads of a planned stack (a StackPlan, or automation.adapters.engine.plan_pool.Planned)."""
    stack: str
    cluster: str
    outputs: dict[str, Any]


P = TypeVar("P", bound=PlannedStack)
PlanMany = Callable[[Sequence[StackInputs | TransitInputs]], Iterable[P]]


def converge(fleet: Fleet, plan_many: PlanMany, earlier: list | None = None,
             only: Iterable[str] | None = None) -> Generator[P, None, Resolved]:
    """Every stack of a fleet, as the service converges on it, yielded as `plan_many` plans them: a transit stack
    first (its members read its gateways' IDs; not yielded), then the clusters' stacks, then the transit stack
    again with their attachments. Returns the last resolution. Raises InvalidSpec with every cluster's errors (and
    any `earlier` ones) before planning anything.

    `only`: these cluster keys' stacks alone (and the transit stacks their inputs read, not yielded)."""
    wanted = _selected(fleet, only)
    resolved = resolve_all(fleet)
    inputs = raise_invalid(wanted(resolved.inputs), earlier)
    transit = dict(resolved.mesh.transit) if resolved.mesh is not None else {}
    if not transit:
        yield from plan_many(inputs)
        return resolved
    status = fleet.mesh_status
    made = {p.stack: TransitOutputs.from_stack(p.outputs) for p in plan_many(list(transit.values()))}
    status = dataclasses.replace(status, transit={**status.transit, **made})
    resolved = resolve_all(dataclasses.replace(fleet, mesh_status=status))
    attached: dict[str, str] = {}
    for plan in plan_many(raise_invalid(wanted(resolved.inputs), earlier)):
        mesh = plan.outputs.get("mesh")
        if isinstance(mesh, dict) and mesh.get("transitAttachment"):
            attached[plan.cluster] = mesh["transitAttachment"]
        yield plan
    if only is not None:
        return resolved
    status = dataclasses.replace(status, attachments={**status.attachments, **attached})
    resolved = resolve_all(dataclasses.replace(fleet, mesh_status=status))
    final = resolved.mesh.transit if resolved.mesh is not None else {}
    yield from plan_many([t for _, t in sorted(final.items())])
    return resolved


def _selected(fleet: Fleet, only: Iterable[str] | None) -> Callable[[dict], dict]:
    """A filter of resolved inputs down to `only` (every key must be a cluster of the fleet)."""
    if only is None:
        return lambda resolved: resolved
    keys = list(dict.fromkeys(only))
    known = {cluster.key for cluster in fleet.clusters}
    missing = [key for key in keys if key not in known]
    if missing:
        raise InvalidSpec([FieldError(f"--cluster {key}", "", "no such cluster in the fleet (namespace/name)")
                           for key in missing])

    def wanted(resolved: dict) -> dict:
        unplanned = [key for key in keys if key not in resolved]
        if unplanned:
            raise InvalidSpec([FieldError(f"--cluster {key}", "", "the cluster has no stack (not provisioned)")
                               for key in unplanned])
        return {key: resolved[key] for key in keys}

    return wanted


def plan_fleet(fleet: Fleet, earlier: list | None = None,
               standins: StandIns | None = None) -> tuple[Resolved, list[StackPlan]]:
    """converge(), planned in this process and kept: every StackPlan, in order, and the last resolution."""
    plans: list[StackPlan] = []
    resolved = drain(converge(fleet, lambda inputs: (plan_stack(i, standins) for i in inputs), earlier),
                     plans.append)
    return resolved, plans


R = TypeVar("R")


def drain(stream: Generator[P, None, R], each: Callable[[P], Any]) -> R:
    """Hand every item of `stream` to `each`; the generator's return value."""
    while True:
        try:
            item = next(stream)
        except StopIteration as stop:
            return stop.value
        each(item)


def raise_invalid(resolved: dict[str, StackInputs | InvalidSpec], earlier: list | None = None) -> list[StackInputs]:
    """All inputs, or one InvalidSpec carrying every cluster's errors (and any `earlier` ones)."""
    errors = list(earlier or [])
    errors += [err for value in resolved.values() if isinstance(value, InvalidSpec) for err in value.errors]
    if errors:
        raise InvalidSpec(errors)
    return [value for value in resolved.values() if isinstance(value, StackInputs)]  # every one, errors raised

