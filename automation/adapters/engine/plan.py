"""The offline plan: run the real stack program under Pulumi's mock runtime and record what it registers.

Nothing here talks to AWS; lookups get deterministic stand-ins (automation.adapters.engine.standins).
"""
from __future__ import annotations

import re
from typing import Any, Callable, Iterator

import pulumi
from pulumi.runtime import rpc, settings
from pulumi.runtime.mocks import MockMonitor

from automation.adapters.engine.fleet_plan import PlanError, converge, drain, raise_invalid
from automation.adapters.engine.plan_model import Registered, StackPlan
from automation.adapters.engine.standins import COMPUTED_KEYS, StandIns, provider_location
from stacks.inputs import StackInputs
from stacks.resolve import Fleet, Resolved
from stacks.transit import TransitInputs
from components.program import program

__all__ = ["PlanError", "Registered", "StackPlan", "converge", "drain", "plan_fleet", "plan_stack", "raise_invalid",
           "record"]  # the fleet's order (fleet_plan) with the recorder, for one import of the whole offline plan


def _root_cause(exc: BaseException) -> str:
    return str(exc).rsplit("has risen: ", 1)[-1].strip()


class RecordingMonitor(MockMonitor):
    """The mock monitor, keeping each registration as the engine would receive it."""

    def __init__(self, mocks: StandIns, *, project: str, stack: str):
        super().__init__(mocks)
        self.standins = mocks
        self.project, self.stack = project, stack
        self.registered: list[Registered] = []
        self.invented: set[str] = set()  # what the stand-ins made up for this stack's resources (IDs, computed outputs)

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
        secrets: list[bool] = []
        inputs = _plain(raw, secrets=secrets)
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
            shown=_plain(raw, mask=True) if secrets else None,  # a second walk only where a secret is
        ))
        if request.custom and request.type != "pulumi:providers:aws":
            made = _plain(rpc.deserialize_properties(response.object))
            self.invented.update(v for v in (response.id, *_strings([made.get(k) for k in COMPUTED_KEYS if k not in
                                                                     inputs])) if v)
        return response


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


_TOKENS = re.compile(r"[^/:,.\s\"'=@]+")  # an ID inside an ARN, a service name or a DNS name


def _holds(value: str, invented: set[str]) -> bool:
    """Whether `value` is, or holds as a part of an ARN or a name, a value the stand-ins made up."""
    return value in invented or any(token in invented for token in _TOKENS.findall(value))


def after_apply(resources: list[Registered], invented: set[str]) -> list[str]:
    """The input strings of this stack that hold a made-up value, sorted: a real `pulumi preview` knows them only
    after apply (a peering's ID in its routes, an endpoint service's name in the endpoint, a zone's ID in its
    records). The diff shows exactly these as unknown (stacks.plandiff.compare.masked)."""
    if not invented:
        return []
    return sorted({value for r in resources for value in _strings(r.inputs) if _holds(value, invented)})


SECRET = "[secret]"


def _plain(value: Any, *, mask: bool = False, secrets: list[bool] | None = None) -> Any:
    """Protobuf-deserialised values → plain JSON types (sorted keys, no secrets wrappers). A secret is its value, or
    with `mask` "[secret]": neither the plan nor a diff of two plans (a pull request's comment) ever prints one. No
    digest either: a low-entropy secret's hash can be guessed offline, so a diff sees a secret appear or go, not
    change its value (the stack's plan key still does: it is planned again). `secrets` is appended to per secret."""
    if isinstance(value, dict):
        if rpc._special_sig_key in value and value[rpc._special_sig_key] == rpc._special_secret_sig:
            if secrets is not None:
                secrets.append(True)
            return SECRET if mask else _plain(value.get("value"), secrets=secrets)
        return {k: _plain(v, mask=mask, secrets=secrets) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [_plain(v, mask=mask, secrets=secrets) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


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
    return StackPlan(stack, cluster, resources, _plain(outputs), after_apply=after_apply(resources, monitor.invented))


def plan_stack(inputs: StackInputs | TransitInputs, standins: StandIns | None = None) -> StackPlan:
    """Run program(inputs) under the mock runtime; return every registration and the stack outputs."""
    return record(lambda: program(inputs), stack=inputs.stack, cluster=inputs.key, standins=standins)


def plan_fleet(fleet: Fleet, earlier: list | None = None,
               standins: StandIns | None = None) -> tuple[Resolved, list[StackPlan]]:
    """converge(), planned in this process and kept: every StackPlan, in order, and the last resolution."""
    plans: list[StackPlan] = []
    resolved = drain(converge(fleet, lambda inputs: (plan_stack(i, standins) for i in inputs), earlier),
                     plans.append)
    return resolved, plans
