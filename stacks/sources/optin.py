"""Whether a source object is taken, and what it asks for: the opt-in is on the source object itself, as in the
clustermesh seed (docs/sources.md). Pure.

- `<group>/enabled: "true"` takes it; anything else (absent, "false", "True") never does;
- `<group>/mesh: G` (label) and `<group>/mesh-enabled: "true"` (annotation) put it in mesh group G, exactly as on
  a HubCluster: both are copied to the HubCluster and resolve() decides as for any other;
- `<group>/privatelink: "true"` asks for PrivateLink;
- `<group>/shared-ingress: "true"` asks for a route through the shared ingress (a HostedCluster only: its control
  plane runs on the hub, stacks.sources.hypershift);
- `<group>/deletion-protection` is copied to the HubCluster as written: "true" there, as on the source, makes the
  API server refuse its DELETE (stacks/admission.py); the source decides it, so lifting it on the source lifts it
  on the HubCluster (stacks.sources.outcome.MANAGED_ANNOTATIONS; `protection_patch` as the source lets it go);
- HubConfig spec.sources.namespaces, when the hub administrator sets it, narrows the namespaces taken from.

A hand-written HubCluster of the same namespace and name wins over a source only when it says so
(`<group>/overrides-source: "true"`); otherwise the source's derived spec replaces it.
"""
from __future__ import annotations

from typing import Any, Mapping

from stacks.model.hub import HubConfig
from stacks.names import (DELETION_PROTECTION_ANNOTATION, ENABLED_ANNOTATION, MESH_ENABLED_ANNOTATION, MESH_LABEL,
                          OVERRIDES_SOURCE_ANNOTATION, PRIVATELINK_ANNOTATION, SHARED_INGRESS_ANNOTATION)

# The source's annotations its HubCluster carries as written (string values only).
COPIED_ANNOTATIONS = (MESH_ENABLED_ANNOTATION, DELETION_PROTECTION_ANNOTATION)


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


def wants_shared_ingress(doc: Mapping[str, Any]) -> bool:
    return _true(_meta(doc, "annotations"), SHARED_INGRESS_ANNOTATION)


def grouping(doc: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, annotations) the HubCluster gets from its source: the mesh label, the mesh-enabled annotation and
    the deletion protection, copied as written (string values only) so that resolve() decides group membership, and
    the API server deletion, as for a HubCluster."""
    labels, annotations = _meta(doc, "labels"), _meta(doc, "annotations")
    return ({MESH_LABEL: labels[MESH_LABEL]} if isinstance(labels.get(MESH_LABEL), str) else {},
            {key: annotations[key] for key in COPIED_ANNOTATIONS if isinstance(annotations.get(key), str)})


def deletion_protected(doc: Mapping[str, Any]) -> bool:
    """True when the object (a source or a HubCluster) carries `hubwright.io/deletion-protection: "true"`: the API
    server refuses its DELETE."""
    return _true(_meta(doc, "annotations"), DELETION_PROTECTION_ANNOTATION)


def protection_patch(source: Mapping[str, Any], hubcluster: Mapping[str, Any]) -> dict[str, Any] | None:
    """The JSON merge patch making the deletion protection of the HubCluster `source` lets go the source's as the
    source writes it now (lifted there: removed with an explicit null, which a merge patch needs), or None when
    they agree. While the source keeps its HubCluster, the derived document's merge patch does this
    (stacks.sources.outcome.MANAGED_ANNOTATIONS); a source that is let go derives nothing, so this is its."""
    value = _meta(source, "annotations").get(DELETION_PROTECTION_ANNOTATION)
    want = value if isinstance(value, str) else None
    if _meta(hubcluster, "annotations").get(DELETION_PROTECTION_ANNOTATION) == want:
        return None
    return {"metadata": {"annotations": {DELETION_PROTECTION_ANNOTATION: want}}}


def overrides_source(annotations: Mapping[str, str]) -> bool:
    """True when a hand-written HubCluster keeps its own spec over an opted-in source object of its name."""
    return annotations.get(OVERRIDES_SOURCE_ANNOTATION) == "true"
