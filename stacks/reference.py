"""The reference pages of the kinds people write, generated from the model: docs/reference/hubconfig.md and
docs/reference/hubcluster.md.

Each page lists every field of the kind's spec and status by its path (`spec.mesh.groups.*.rules[].protocol`), with
its type, whether it is required, its default, its constraints and its description, as the CRD's OpenAPI schema
gives them (stacks.crds, generated from the pydantic models: the schema the API server checks and `kubectl explain`
reads). One thing a JSON schema leaves out, a default made by a factory (an empty list or map, a part of the spec,
discovery's node-group tags), is taken from the model's field. A schema keyword this module does not know is an
error, not a constraint left out.

Pure: the pages are strings. `python -m automation reference --write` (automation/cli/reference.py) writes them;
`--check` names a stale one and exits 1 (tests/test_reference_docs.py fails on one too, with the command).
"""
from __future__ import annotations

import json
import re
import types
import typing
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from pydantic import BaseModel, TypeAdapter
from pydantic.fields import FieldInfo

from stacks.crds import cluster_crd, hubconfig_crd
from stacks.model.cluster import ClusterSpec
from stacks.model.hub import HubConfigSpec
from stacks.status import ClusterStatus, HubStatus

COMMAND = "python -m automation reference --write"


@dataclass(frozen=True)
class Page:
    """One kind's page: where it is kept (relative to the repository), the CRD it is rendered from, and the models
    its spec and status are generated from."""

    path: str
    crd: Callable[[], dict[str, Any]]
    spec: type[BaseModel]
    status: type[BaseModel]


PAGES = (
    Page("docs/reference/hubconfig.md", hubconfig_crd, HubConfigSpec, HubStatus),
    Page("docs/reference/hubcluster.md", cluster_crd, ClusterSpec, ClusterStatus),
)


# --------------------------------------------------------------------------- the model's fields, by path

def _inner(annotation: Any) -> tuple[str, Any] | None:
    """What a field's type holds that has fields of its own: ("", a model), ("[]", an item's type) or (".*", a map
    value's type); None for a scalar (or a free-form value)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _inner(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        kinds = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _inner(kinds[0]) if len(kinds) == 1 else None
    if origin in (list, tuple, set, frozenset):
        return "[]", typing.get_args(annotation)[0]
    if origin is dict:
        return ".*", typing.get_args(annotation)[1]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "", annotation
    return None


def _models_within(annotation: Any, path: str) -> Iterator[tuple[str, type[BaseModel]]]:
    """(the path of its fields' parent, a model) for the model a field's type holds, through lists and maps."""
    inner = _inner(annotation)
    while inner is not None:
        suffix, held = inner
        path += suffix
        if suffix == "":
            yield path, held
            return
        inner = _inner(held)


def model_fields(model: type[BaseModel], prefix: str) -> Iterator[tuple[str, FieldInfo]]:
    """Every field of `model` and of the models within it, depth first, as (path, field): `prefix.alias`, `[]` for
    a list's item and `.*` for a map's value, the paths the pages are written with."""
    for name, info in model.model_fields.items():
        path = f"{prefix}.{info.alias or name}"
        yield path, info
        for parent, held in _models_within(info.annotation, path):
            yield from model_fields(held, parent)


def undescribed(model: type[BaseModel], prefix: str) -> list[str]:
    """The paths of the fields (of `model` and within it) that have no description."""
    return [path for path, info in model_fields(model, prefix) if not (info.description or "").strip()]


def _factory_default(info: FieldInfo) -> Any:
    """The default a field's factory makes, as it is written in YAML (camelCase, defaults within left out)."""
    value = info.get_default(call_default_factory=True)
    adapter: TypeAdapter[Any] = TypeAdapter(info.annotation if info.annotation is not None else Any)
    return adapter.dump_python(value, mode="json", by_alias=True, exclude_defaults=True)


# --------------------------------------------------------------------------- Markdown

def _code(text: str) -> str:
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" or text.startswith(" ") or text.endswith(" ") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


_SPECIAL = re.compile(r"[\\*\[\]<]|(?<!\w)_|_(?!\w)")


def _prose(text: str) -> str:
    """A description as Markdown: its lines joined into paragraphs, its `code` kept, the rest escaped (an
    <infraID> would be read as an HTML tag, a * as emphasis)."""
    paragraphs = [" ".join(line.strip() for line in part.splitlines()) for part in re.split(r"\n\s*\n", text.strip())]
    escaped = []
    for paragraph in paragraphs:
        pieces = re.split(r"(`[^`]*`)", paragraph)
        escaped.append("".join(p if p.startswith("`") else _SPECIAL.sub(lambda m: "\\" + m[0], p) for p in pieces))
    return "\n\n".join(escaped)


def _json(value: Any) -> str:
    return _code(json.dumps(value, ensure_ascii=False))


def _type(node: dict[str, Any]) -> str:
    kind = node.get("type")
    if kind == "array":
        return "[]" + _type(node["items"])
    if kind == "object":
        if "properties" in node:
            return "object"
        if isinstance(node.get("additionalProperties"), dict):
            return "map[string]" + _type(node["additionalProperties"])
        if node.get("x-kubernetes-preserve-unknown-fields"):
            return "object (any fields)"
    if not isinstance(kind, str):
        raise ValueError(f"no type in schema node {sorted(node)}")
    return kind


def _between(low: Any, high: Any, unit: str = "") -> str:
    unit = f" {unit}" if unit else ""
    if low is not None and high is not None:
        return f"{low} to {high}{unit}"
    return f"at least {low}{unit}" if low is not None else f"at most {high}{unit}"


# Schema keywords that are not constraints: how the node is rendered, or its children.
_STRUCTURE = {"type", "description", "default", "nullable", "properties", "required", "items", "additionalProperties",
              "x-kubernetes-preserve-unknown-fields"}
_BOUNDS = (("minLength", "maxLength", "characters"), ("minimum", "maximum", ""), ("minItems", "maxItems", "items"),
           ("minProperties", "maxProperties", "entries"))


def _constraints(node: dict[str, Any]) -> list[str]:
    """The rules a node's own keywords state, in words; ValueError on a keyword this module cannot render."""
    known = _STRUCTURE | {"enum", "pattern", "x-kubernetes-validations"} | {k for b in _BOUNDS for k in b[:2]}
    unknown = sorted(set(node) - known)
    if unknown:
        raise ValueError(f"schema keywords the reference cannot render: {', '.join(unknown)}")
    out = []
    if "enum" in node:
        out.append("one of " + ", ".join(_json(v) for v in node["enum"]))
    if "pattern" in node:
        out.append("pattern " + _code(node["pattern"]))
    for low, high, unit in _BOUNDS:
        if low in node or high in node:
            out.append(_between(node.get(low), node.get(high), unit))
    for rule in node.get("x-kubernetes-validations", []):
        out.append(f"rule {_code(rule['rule'])} (refused: {_prose(rule['message'])})")
    return out


def _facts(node: dict[str, Any], required: bool, default: tuple[Any] | None) -> str:
    """The line under a field's heading: type, required or optional, default, constraints."""
    parts = [_code(_type(node)), "required" if required else "optional"]
    if default is not None:
        parts.append("default " + _json(default[0]))
    parts += _constraints(node)
    held = [("each item", node["items"])] if node.get("type") == "array" else []
    if node.get("type") == "object" and isinstance(node.get("additionalProperties"), dict):
        held = [("each value", node["additionalProperties"])]
    for what, inner in held:  # an item or value with fields of its own has entries of its own
        rules = _constraints(inner) if "properties" not in inner else []
        if rules:
            parts.append(f"{what}: {', '.join(rules)}")
    return " · ".join(parts)


def _fields(node: dict[str, Any], path: str, factories: dict[str, FieldInfo]) -> Iterator[str]:
    """The entries of the fields of an object node (and of those within them), depth first."""
    required = set(node.get("required", []))
    for name, child in node.get("properties", {}).items():
        child_path = f"{path}.{name}"
        default: tuple[Any] | None = (child["default"],) if "default" in child else None
        info = factories.get(child_path)
        if default is None and info is not None and info.default_factory is not None:
            default = (_factory_default(info),)
        description = (child.get("description") or "").strip()
        if not description:
            raise ValueError(f"{child_path} has no description: give its Field one (stacks/model/)")
        yield f"### {_code(child_path)}\n\n{_facts(child, name in required, default)}\n\n{_prose(description)}\n"
        yield from _within(child, child_path, factories)


def _within(node: dict[str, Any], path: str, factories: dict[str, FieldInfo]) -> Iterator[str]:
    """The entries of what a field holds: an object's fields, a list item's, a map value's."""
    if node.get("type") == "array":
        yield from _within(node["items"], path + "[]", factories)
    elif node.get("type") == "object":
        if "properties" in node:
            yield from _fields(node, path, factories)
        elif isinstance(node.get("additionalProperties"), dict):
            yield from _within(node["additionalProperties"], path + ".*", factories)


def _section(title: str, node: dict[str, Any], model: type[BaseModel], intro: str) -> str:
    factories = dict(model_fields(model, title))
    head = [f"## {title}", _prose(node["description"]), intro]
    head += [f"The API server refuses a {title} that breaks {_code(r['rule'])}: {_prose(r['message'])}."
             for r in node.get("x-kubernetes-validations", [])]
    extra = sorted(set(node) - {"type", "description", "properties", "required", "x-kubernetes-validations"})
    if extra:
        raise ValueError(f"{title}: schema keywords the reference cannot render: {', '.join(extra)}")
    return "\n\n".join(part for part in head if part) + "\n\n" + "\n".join(_fields(node, title, factories))


def _columns(columns: list[dict[str, Any]]) -> str:
    return ", ".join(f"{c['name']} ({_code(c['jsonPath'])})" for c in columns if not c.get("priority"))


def render(page: Page) -> str:
    """The page, as Markdown."""
    crd = page.crd()
    spec = crd["spec"]
    version = spec["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    kind, plural = spec["names"]["kind"], spec["names"]["plural"]
    name = schema["properties"]["metadata"].get("properties", {}).get("name", {})
    name_rule = f"; {_code('metadata.name')}: {', '.join(_constraints(name))}" if name else ""
    rows = [("apiVersion", _code(f"{spec['group']}/{version['name']}")), ("kind", _code(kind)),
            ("scope", f"{spec['scope']}{name_rule}"),
            ("names", f"{_code(plural)}, short {', '.join(_code(s) for s in spec['names']['shortNames'])}, "
                      f"category {', '.join(_code(c) for c in spec['names']['categories'])}"),
            (_code(f"kubectl get {plural}"), _columns(version["additionalPrinterColumns"]))]
    lines = [
        f"<!-- Generated by `{COMMAND}` from the model: edit stacks/model/ (or stacks/status.py), not this page. -->",
        f"# {kind} reference",
        f"*Generated from the model by {_code(COMMAND)}: a field's words are its description in the pydantic model, "
        f"the same the CRD carries ({_code(f'kubectl explain {plural}.spec')}). Edit the model and run the command "
        "again; tests/test_reference_docs.py fails on a page that is not what it writes.*",
        _prose(schema["description"]),
        "| | |\n| --- | --- |\n" + "\n".join(f"| {k} | {v} |" for k, v in rows),
        "A field is written as its path: `a.b` is the field `b` of the object `a`, `a[]` an item of the list `a`, "
        "`a.*` the value at any key of the map `a`. Under each path: its type, whether it must be given, its default "
        "(what an omitted field means; none: it stays unset), and the rules the CRD's schema states, which the API "
        "server checks (the service checks them too, and more: what needs several fields or objects).",
    ]
    top = "\n\n".join(lines) + "\n\n"
    status_intro = ("Written by the service through the status subresource, not by people: what it saw, did and "
                    "decided (`kubectl get -o yaml` shows it).")
    return (top + _section("spec", schema["properties"]["spec"], page.spec, "")
            + "\n" + _section("status", schema["properties"]["status"], page.status, status_intro))


def pages() -> dict[str, str]:
    """Every page, by its path relative to the repository."""
    return {page.path: render(page) for page in PAGES}
