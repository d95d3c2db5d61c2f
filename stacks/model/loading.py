"""Loading documents: parse() validates one HubConfig, HubCluster or Namespace and names object, field and reason
for each error (the field located along the model, with a hint where YAML read a number for text); resolved_part()
is the part of a Cluster document that resolve() reads."""
from __future__ import annotations

import difflib
from types import UnionType
from typing import Annotated, Any, Mapping, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from stacks.errors import FieldError, InvalidSpec
from stacks.model.cluster import Cluster
from stacks.model.hub import HubConfig
from stacks.model.resource import Namespace
from stacks.names import (API_VERSION, DRIFT_CHECK_REQUEST_ANNOTATION, INGRESS_STATUS_KEY, JOIN_STATUS_KEY,
                          NETWORK_ERROR_STATUS_KEY, NETWORK_STATUS_KEY, RECONCILE_REQUEST_ANNOTATION)


def _describe(doc: Any) -> str:
    if isinstance(doc, dict):
        meta = doc.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        name, ns, kind = meta.get("name"), meta.get("namespace"), doc.get("kind")
        name = name if isinstance(name, str) else "?"  # a document is described before it is validated
        ns = ns if isinstance(ns, str) else None
        return f"{kind if isinstance(kind, str) else 'object'} {ns + '/' if ns else ''}{name}"
    return "object"


def _inner(tp: Any) -> Any:
    """`tp` without Annotated's metadata and without `| None`."""
    while True:
        if get_origin(tp) is Annotated:
            tp = get_args(tp)[0]
        elif get_origin(tp) in (Union, UnionType) and type(None) in get_args(tp):
            rest = [a for a in get_args(tp) if a is not type(None)]
            if len(rest) != 1:
                return tp
            tp = rest[0]
        else:
            return tp


def _field_of(model: type[BaseModel], name: str) -> Any:
    """The type of `model`'s field named `name` on the wire (its alias), or None."""
    for attr, info in model.model_fields.items():
        if name in (info.alias, attr):
            return info.annotation
    return None


def _wire_fields(model: type[BaseModel]) -> list[str]:
    return [info.alias or attr for attr, info in model.model_fields.items()]


def _locate(loc: tuple, model: type[BaseModel]) -> tuple[str, Any, bool]:
    """(the field path as people write it, the type that holds the last part, whether the error is in a map key).

    Fields are dotted (spec.network.cidr), list items and map keys in brackets (spec.network.routeTableIDs[2],
    metadata.annotations[hubwright.io/owner-account-id]): walked along the model, so a key with dots is one key.
    """
    path, parent, in_key = "", None, False
    tp: Any = model
    for part in loc:
        tp = _inner(tp)
        if part == "[key]":  # pydantic's marker: the map key itself is wrong, not its value
            in_key = True
            continue
        parent = tp
        if isinstance(part, int):
            path += f"[{part}]"
            args = get_args(tp)
            tp = args[0] if args else None
        elif isinstance(tp, type) and issubclass(tp, BaseModel):
            path += f".{part}" if path else str(part)
            tp = _field_of(tp, part)
        elif get_origin(tp) in (dict, Mapping) or tp is dict:
            path += f"[{part}]"
            args = get_args(tp)
            tp = args[1] if len(args) == 2 else None
        else:  # a tag of a union member: not a field
            continue
    return path, parent, in_key


def _quote_hint(value: Any) -> str:
    """What to write instead of the number YAML read where text belongs (an account ID, an annotation value)."""
    if isinstance(value, bool):
        return "YAML read a boolean (true, yes, on, ...); quote the value"
    if isinstance(value, int):
        octal = f"0{value:o}"
        if len(str(value)) != 12 and len(octal) == 12:  # 0-prefixed digits 0-7: YAML 1.1 reads them as octal
            return f"YAML read {octal} as the octal number {value}; quote it: \"{octal}\""
        return f"YAML read {value} as a number; quote it: \"{value}\""
    return f"YAML read {value!r} as a number; quote it"


def _reason(err: ErrorDetails, path: str, parent: Any, in_key: bool) -> str:
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        name = str(err["loc"][-1])
        fields = _wire_fields(parent) if isinstance(parent, type) and issubclass(parent, BaseModel) else []
        near = difflib.get_close_matches(name, fields, n=1, cutoff=0.6) or \
            [f for f in fields if f.lower() == name.lower()]
        where = path.rsplit(".", 1)[0] + "." if "." in path else ""
        return f"unknown field; did you mean {where}{near[0]}?" if near else \
            f"unknown field (known here: {', '.join(fields)})" if fields else "unknown field"
    if err["type"] == "string_type" and isinstance(err.get("input"), (int, float)):
        msg = f"{msg}: {_quote_hint(err['input'])}"
    return f"not a valid key: {msg}" if in_key else msg


def _field_error(where: str, err: ErrorDetails, model: type[BaseModel]) -> FieldError:
    path, parent, in_key = _locate(tuple(err["loc"]), model)
    return FieldError(where, path, _reason(err, path, parent, in_key))


# The metadata of a Cluster that resolve() reads. `resolved_part` keeps only these (with the spec and
# status.meshJoin); the service parses that part and re-resolves when it changes, so a field outside it
# (resourceVersion, finalizers, managedFields, the status the service writes) can never change a stack.
RESOLVED_METADATA = ("name", "namespace", "labels", "annotations", "generation", "creationTimestamp",
                     "deletionTimestamp")


REQUESTS = frozenset({RECONCILE_REQUEST_ANNOTATION, DRIFT_CHECK_REQUEST_ANNOTATION})  # what a person asks for now


def resolved_part(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a Cluster document that resolve() reads: what the service parses and watches for change."""
    meta = doc.get("metadata")
    part = {key: value for key, value in doc.items() if key not in ("metadata", "status")}
    part["metadata"] = {k: meta[k] for k in RESOLVED_METADATA if k in meta} if isinstance(meta, Mapping) else meta
    annotations = part["metadata"].get("annotations") if isinstance(part["metadata"], Mapping) else None
    if isinstance(annotations, Mapping) and REQUESTS & set(annotations):  # a request, not an input
        part["metadata"]["annotations"] = {k: v for k, v in annotations.items() if k not in REQUESTS}
    status = doc.get("status")
    kept = {key: status[key] for key in (JOIN_STATUS_KEY, INGRESS_STATUS_KEY)
            if isinstance(status, Mapping) and status.get(key)}
    network = status.get(NETWORK_STATUS_KEY) if isinstance(status, Mapping) else None
    if isinstance(network, Mapping):  # what discovery found, but not when: reading it again changes no stack
        kept[NETWORK_STATUS_KEY] = {k: v for k, v in network.items() if k != "observedAt"}
    failed = status.get(NETWORK_ERROR_STATUS_KEY) if isinstance(status, Mapping) else None
    if isinstance(failed, Mapping):  # why discovery cannot read it (the condition says so), but not when
        kept[NETWORK_ERROR_STATUS_KEY] = {k: v for k, v in failed.items() if k != "observedAt"}
    if kept:
        part["status"] = kept
    return part


def parse(doc: dict, *, source: str | None = None) -> HubConfig | Cluster | Namespace:
    """Validate one Kubernetes-style document. Raises InvalidSpec naming object, field and reason."""
    where = f"{_describe(doc)}{f' ({source})' if source else ''}"
    kind = doc.get("kind") if isinstance(doc, dict) else None
    api_version = doc.get("apiVersion") if isinstance(doc, dict) else None
    if isinstance(api_version, str) and api_version not in (API_VERSION, "v1"):  # by apiVersion, never by kind alone
        raise InvalidSpec.one(where, "apiVersion",
                              f"is {api_version}, not hubwright's {API_VERSION}: another project's object is never "
                              "read as ours (a Cluster API or Hive cluster is read as a source: docs/sources.md)")
    models: dict[str, type[HubConfig] | type[Cluster] | type[Namespace]] = {
        "HubConfig": HubConfig, "HubCluster": Cluster, "Namespace": Namespace}
    model = models.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise InvalidSpec.one(where, "kind", f"expected HubConfig, HubCluster or Namespace, got {kind!r}")
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        errors = [_field_error(where, err, model) for err in exc.errors()]
        raise InvalidSpec(errors) from None
