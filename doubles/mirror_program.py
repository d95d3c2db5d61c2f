"""The real stack program, mirrored: for the real `pulumi` CLI where the pulumi-aws provider plugin is not installed.

`mirror(inputs, cloud=...)` plans `inputs` offline (automation.adapters.engine.plan.plan_stack: the real components
under Pulumi's mock runtime) and registers, for every resource the real program would register,

- a component resource: a plain ComponentResource of the same type and name, under the same parent;
- a custom resource (not a `pulumi:providers:*`): a `Mirrored` dynamic resource named as the planned one, of a
  dynamic type derived from the planned type (`aws:ec2/route:Route` -> `pulumi-python:dynamic/aws/ec2/route:Route`),
  under the same parent, depending on the mirrors of what the planned one depends on;

so the same planned resource always gets the same mirrored URN. A mirrored resource's inputs hold the planned one's
inputs as sorted JSON, and its planned provider, account and region: a change the real program would make to a
resource's inputs is an update in the mirror; one to its provider, account or region, a replacement.

Its "cloud" is a directory: a create writes `<id>.json` (the planned URN, type, name and inputs) under a fresh ID,
an update rewrites it, a delete removes it, and each of them appends a line to `ops.log`. A test reads what exists
(`in_cloud`) and what was done to each resource (`operations`): a kept resource keeps its ID and file, created once.

    PulumiEngine(settings, program_factory=mirror_program(cloud))   # in this process
    WorkerPool(settings, program=MIRROR, program_options={"cloud": str(cloud)})   # by name

The plan runs in a process of its own (`python -m doubles.mirror_program plan`, the inputs on stdin): the mock
runtime sets Pulumi's settings, which the running program is using. The dynamic provider process imports this
module to unpickle `MirrorProvider`: it imports only the standard library and pulumi at the top (as
doubles/providers.py), the planner's imports are inside the functions that need them.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource, ResourceProvider, UpdateResult

if TYPE_CHECKING:
    from stacks.inputs import StackProgramInputs

ROOT = Path(__file__).resolve().parent.parent
MIRROR = "doubles.mirror_program:mirror"  # by name, as a WorkerPool's program
OPS_LOG = "ops.log"
PROVIDERS = "pulumi:providers:"
REPLACED_BY = ("type", "name", "provider", "account", "region")  # a change of one of these is a replacement
UPDATED_BY = ("inputs", "providerInputs", "replaceOnChanges")  # of one of these, an update (or replaceOnChanges)


@dataclasses.dataclass(frozen=True)
class Planned:
    """One registration of the offline plan (automation.adapters.engine.plan_model.Registered), as the mirror uses it."""

    urn: str
    type: str
    name: str
    parent: str | None
    dependencies: tuple[str, ...]
    provider: str | None
    custom: bool
    inputs: Mapping[str, Any]
    account: str | None
    region: str | None
    options: Mapping[str, Any]

    @property
    def mirrored(self) -> bool:
        """Whether the mirror registers it: every resource but the providers."""
        return not self.type.startswith(PROVIDERS)

    def props(self, cloud: str, provider: Planned | None) -> dict[str, Any]:
        """The mirrored resource's inputs: its planned inputs as sorted JSON (ignoreChanges' keys left out: a change
        there is no change, as in the real engine), its provider's inputs (the provider is not mirrored: a change
        of its inputs, default tags say, is an update of each resource it serves) and what a replacement
        follows (its provider, account and region)."""
        ignored = set(self.options.get("ignoreChanges") or ())
        inputs = {k: v for k, v in self.inputs.items() if k not in ignored}
        return {"cloud": cloud, "urn": self.urn, "type": self.type, "name": self.name, "provider": self.provider or "",
                "account": self.account or "", "region": self.region or "", "inputs": _json(inputs),
                "providerInputs": _json(provider.inputs) if provider is not None else "",
                "replaceOnChanges": sorted(self.options.get("replaceOnChanges") or ())}


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


# --------------------------------------------------------------------------- the plan, in a process of its own

def _serialised(inputs: StackProgramInputs) -> str:
    from pydantic import BaseModel  # StackInputs and TransitInputs are its models

    assert isinstance(inputs, BaseModel), type(inputs)
    return json.dumps({"kind": type(inputs).__name__, "inputs": inputs.model_dump_json(), "digest": inputs.digest()})


@functools.lru_cache(maxsize=16)
def _plan_of(serialised: str) -> tuple[Planned, ...]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}
    done = subprocess.run([sys.executable, "-m", "doubles.mirror_program", "plan"], input=serialised, cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"the offline plan failed ({done.returncode}): {done.stderr[-2000:]}")
    return tuple(Planned(**{**r, "dependencies": tuple(r["dependencies"])}) for r in json.loads(done.stdout))


def planned(inputs: StackProgramInputs) -> tuple[Planned, ...]:
    """What the real program registers for `inputs` (plan_stack), sorted by URN; the same inputs are planned once
    per process."""
    return _plan_of(_serialised(inputs))


def _plan_main() -> int:
    """`python -m doubles.mirror_program plan`: the inputs (`_serialised`) on stdin, the plan's resources on stdout."""
    from automation.adapters.engine.plan import plan_stack
    from stacks.inputs import StackInputs
    from stacks.transit import TransitInputs

    doc = json.loads(sys.stdin.read())
    kinds: dict[str, type[StackInputs] | type[TransitInputs]] = {"StackInputs": StackInputs,
                                                                 "TransitInputs": TransitInputs}
    inputs = kinds[doc["kind"]].model_validate_json(doc["inputs"])
    if inputs.digest() != doc["digest"]:
        raise SystemExit(f"{inputs.stack}: the inputs did not survive the way here (digest {inputs.digest()}, "
                         f"sent {doc['digest']})")
    keys = {f.name for f in dataclasses.fields(Planned)}
    resources = [{k: v for k, v in dataclasses.asdict(r).items() if k in keys} for r in plan_stack(inputs).resources]
    json.dump(resources, sys.stdout, sort_keys=True)
    return 0


# --------------------------------------------------------------------------- the program

class MirrorProvider(ResourceProvider):
    def create(self, props: dict) -> CreateResult:
        id_ = f"{props['type'].rsplit(':', 1)[-1].lower()}-{uuid.uuid4().hex[:12]}"
        _write(props, id_)
        _log(props, "create", id_)
        return CreateResult(id_=id_, outs=dict(props))

    def read(self, id_: str, props: dict) -> ReadResult:
        if not _file(props, id_).exists():
            return ReadResult(None, {})
        return ReadResult(id_, dict(props))

    def diff(self, _id: str, olds: dict, news: dict) -> DiffResult:
        replaces = [k for k in REPLACED_BY if olds.get(k) != news.get(k)]
        if olds.get("inputs") != news.get("inputs"):
            before, after = json.loads(olds.get("inputs") or "{}"), json.loads(news["inputs"])
            if any(before.get(k) != after.get(k) for k in news.get("replaceOnChanges") or ()):
                replaces.append("inputs")
        changed = bool(replaces) or any(olds.get(k) != news.get(k) for k in UPDATED_BY)
        return DiffResult(changes=changed, replaces=replaces)

    def update(self, id_: str, _olds: dict, news: dict) -> UpdateResult:
        _write(news, id_)
        _log(news, "update", id_)
        return UpdateResult(outs=dict(news))

    def delete(self, id_: str, props: dict) -> None:
        _file(props, id_).unlink(missing_ok=True)
        _log(props, "delete", id_)


def _file(props: Mapping[str, Any], id_: str) -> Path:
    return Path(props["cloud"]) / f"{id_}.json"


def _write(props: Mapping[str, Any], id_: str) -> None:
    doc = {"id": id_, "urn": props["urn"], "type": props["type"], "name": props["name"],
           "inputs": json.loads(props["inputs"])}
    _file(props, id_).write_text(json.dumps(doc, sort_keys=True, indent=1))


def _log(props: Mapping[str, Any], op: str, id_: str) -> None:
    line = json.dumps({"op": op, "urn": props["urn"], "id": id_}, sort_keys=True) + "\n"
    fd = os.open(Path(props["cloud"]) / OPS_LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND)  # one write: whole lines
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


class Mirrored(Resource):
    """A planned custom resource; its subclasses (`_kind`) carry the planned type in their dynamic type."""

    def __init__(self, planned: Planned, cloud: str, provider: Planned | None, opts: pulumi.ResourceOptions):
        super().__init__(MirrorProvider(), planned.name, planned.props(cloud, provider), opts)


@functools.lru_cache(maxsize=None)
def _kind(type_: str) -> type[Mirrored]:
    """The dynamic resource class of a planned type: `pkg:mod/x:Name` -> `pulumi-python:dynamic/pkg/mod/x:Name`."""
    package, module, name = type_.split(":")
    return type(name, (Mirrored,), {}, module=f"{package}/{module}", name=name)


def mirror(inputs: StackProgramInputs, *, cloud: str) -> Mapping[str, Any]:
    """The real program's resources for `inputs`, mirrored (module docstring), in the "cloud" directory `cloud`.
    Outputs like components.program.program's, and how many resources it mirrored."""
    Path(cloud).mkdir(parents=True, exist_ok=True)
    everything = {r.urn: r for r in planned(inputs)}
    plan = {urn: r for urn, r in everything.items() if r.mirrored}
    made: dict[str, pulumi.Resource] = {}

    def build(urn: str) -> pulumi.Resource:  # what a resource names (its parent, its dependencies) first
        if urn not in made:
            r = plan[urn]
            opts = pulumi.ResourceOptions(
                parent=build(r.parent) if r.parent in plan else None,
                depends_on=[build(d) for d in r.dependencies if d in plan],
                delete_before_replace=bool(r.options.get("deleteBeforeReplace")))
            if r.custom:
                made[urn] = _kind(r.type)(r, cloud, everything.get(r.provider or ""), opts)
            else:
                component = pulumi.ComponentResource(r.type, r.name, None, opts)
                component.register_outputs({})
                made[urn] = component
        return made[urn]

    for urn in plan:
        build(urn)
    return {"cluster": inputs.key, "inputsDigest": inputs.digest(), "mirrored": len(made)}


def mirror_program(cloud: Path | str) -> Callable[[StackProgramInputs], Mapping[str, Any]]:
    """The mirror as an in-process PulumiEngine's program_factory."""
    return functools.partial(mirror, cloud=str(cloud))


# --------------------------------------------------------------------------- what a test reads

def in_cloud(cloud: Path) -> dict[str, dict[str, Any]]:
    """What exists in the cloud now: planned URN -> its file (id, urn, type, name, inputs)."""
    found = [json.loads(f.read_text()) for f in sorted(Path(cloud).glob("*.json"))]
    return {doc["urn"]: doc for doc in found}


def operations(cloud: Path) -> list[dict[str, str]]:
    """Every create, update and delete the cloud saw, in order: {"op", "urn" (planned), "id"}."""
    log = Path(cloud) / OPS_LOG
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


if __name__ == "__main__":
    if sys.argv[1:] != ["plan"]:
        raise SystemExit("usage: python -m doubles.mirror_program plan < inputs.json")
    raise SystemExit(_plan_main())
