"""Whether a source object is taken, and what it asks for: the opt-in is on the source object itself, as in the
clustermesh seed (docs/sources.md). Pure.

- `<group>/enabled: "true"` takes it; anything else (absent, "false", "True") never does;
- `<group>/mesh: G` (label) and `<group>/mesh-enabled: "true"` (annotation) put it in mesh group G, exactly as on
  a HubCluster: both are copied to the HubCluster and resolve() decides as for any other;
- `<group>/privatelink: "true"` asks for PrivateLink;
- HubConfig spec.sources.namespaces, when the hub administrator sets it, narrows the namespaces taken from.

A hand-written HubCluster of the same namespace and name wins over a source only when it says so
(`<group>/overrides-source: "true"`); otherwise the source's derived spec replaces it.
"""
from __future__ import annotations

from typing import Any, Mapping

from stacks.model.hub import HubConfig
from stacks.names import (ENABLED_ANNOTATION, MESH_ENABLED_ANNOTATION, MESH_LABEL, OVERRIDES_SOURCE_ANNOTATION,
                          PRIVATELINK_ANNOTATION)


def _meta(doc: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    meta = doc.get("metadata")
    value = meta.get(key) if isinstance(meta, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _true(values: Mapping[str, Any], key: str) -> bool:
    return values.get(key) == "true"


def source_namespace(doc: Mapping[str, Any]) -> str | None:
    meta = doc.get("metadata")
    namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
    return namespace if isinstance(namespace, str) and namespace else None


def opted_in(doc: Mapping[str, Any], hub: HubConfig) -> bool:
    """True when the source object asks to be taken and its namespace may be taken from."""
    if not _true(_meta(doc, "annotations"), ENABLED_ANNOTATION):
        return False
    allowed = hub.spec.sources.namespaces
    return allowed is None or source_namespace(doc) in allowed


def wants_privatelink(doc: Mapping[str, Any]) -> bool:
    return _true(_meta(doc, "annotations"), PRIVATELINK_ANNOTATION)


def grouping(doc: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, annotations) the HubCluster gets from its source: the mesh label and the mesh-enabled annotation,
    copied as written (string values only) so that resolve() decides group membership as for a HubCluster."""
    labels, annotations = _meta(doc, "labels"), _meta(doc, "annotations")
    return ({MESH_LABEL: labels[MESH_LABEL]} if isinstance(labels.get(MESH_LABEL), str) else {},
            {MESH_ENABLED_ANNOTATION: annotations[MESH_ENABLED_ANNOTATION]}
            if isinstance(annotations.get(MESH_ENABLED_ANNOTATION), str) else {})


def overrides_source(annotations: Mapping[str, str]) -> bool:
    """True when a hand-written HubCluster keeps its own spec over an opted-in source object of its name."""
    return annotations.get(OVERRIDES_SOURCE_ANNOTATION) == "true"
