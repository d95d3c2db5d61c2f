"""What derive() says about one source object: Derived (the HubCluster to keep), Refused (never, until the source
changes: the errors name the source object, its field and the reason) or Pending (not yet: what it waits for).
None, derive()'s fourth answer, is "not opted in". Pure.

The service keeps one HubCluster per Derived: it creates `Derived.doc`, and patches the one it keeps when its
managed part differs (`Derived.same_as`, `Derived.merge_patch`). Only the managed part counts: what the API server
or the service writes (status, resourceVersion, finalizers, other annotations) never asks for a patch.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from stacks.conditions import changes_patch
from stacks.errors import FieldError, InvalidSpec
from stacks.model.cluster import Cluster, ClusterSpec
from stacks.names import DELETION_PROTECTION_ANNOTATION, MESH_ENABLED_ANNOTATION, MESH_LABEL, REGION_ANNOTATION
from stacks.sources.kinds import SourceRef

# The metadata a source decides on its HubCluster; every other label and annotation is left to others.
MANAGED_LABELS = (MESH_LABEL,)
MANAGED_ANNOTATIONS = (MESH_ENABLED_ANNOTATION, REGION_ANNOTATION, DELETION_PROTECTION_ANNOTATION)

# Condition reasons (a Refused source's HubCluster is never written; the service reports these on the source's
# events and in its log, the plan among its refusals).
SOURCE_REFUSED = "SourceRefused"
SOURCE_PENDING = "SourcePending"


def _spec(spec: Any) -> dict[str, Any]:
    """A HubCluster spec as the model reads it: the defaults our CRD makes the API server write (privateLink.enabled,
    tokenLifetime, ...) filled in on both sides, so that what the server added never asks for a patch."""
    try:
        return ClusterSpec.model_validate(spec).model_dump(mode="json", by_alias=True, exclude_none=True)
    except ValueError:  # not one of ours as it stands: compared as written, so it is patched to the derived one
        return dict(spec) if isinstance(spec, Mapping) else {}


def managed_part(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a HubCluster document that its source decides: spec (as the model reads it), the mesh label,
    the mesh and region annotations, and the ownerReferences. Absent labels and annotations are absent here too."""
    meta = doc.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    return {"metadata": {"labels": {k: labels[k] for k in MANAGED_LABELS if k in labels},
                         "annotations": {k: annotations[k] for k in MANAGED_ANNOTATIONS if k in annotations},
                         "ownerReferences": list(meta.get("ownerReferences") or [])},
            "spec": _spec(doc.get("spec") or {})}


def digest_of(doc: Mapping[str, Any]) -> str:
    """The SHA-256 of a HubCluster document's managed part: equal digests, nothing to patch."""
    canonical = json.dumps(managed_part(doc), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class Derived:
    """The HubCluster a source object keeps: `doc` is ready to create (apiVersion, kind, metadata, spec)."""

    source: SourceRef
    doc: dict[str, Any] = field(compare=False)
    cluster: Cluster = field(compare=False)  # `doc` validated as ours (stacks.model.loading.parse)

    @property
    def digest(self) -> str:
        return digest_of(self.doc)

    @property
    def key(self) -> str:
        """namespace/name of the HubCluster (the source's own)."""
        meta = self.doc["metadata"]
        return f"{meta['namespace']}/{meta['name']}"

    def same_as(self, existing: Mapping[str, Any]) -> bool:
        """True when the HubCluster `existing` (as the API server returns it) needs no patch."""
        return digest_of(existing) == self.digest

    def merge_patch(self, existing: Mapping[str, Any]) -> dict[str, Any] | None:
        """The JSON merge patch (application/merge-patch+json) that makes `existing`'s managed part this one's:
        a label, an annotation or a spec field the source no longer gives is removed; None when nothing differs.
        Labels and annotations the source does not manage are left alone."""
        old, new = managed_part(existing), managed_part(self.doc)
        if old == new:
            return None
        patch = changes_patch(old, new)
        return {key: value for key, value in patch.items() if value != {}}


@dataclass(frozen=True)
class Refused:
    """The source object cannot be taken as it is (a cross-namespace reference, a classic ELB for PrivateLink, Hive's
    own PrivateLink too, ...): no HubCluster is written for it; nothing is destroyed for it either."""

    source: SourceRef
    errors: tuple[FieldError, ...]
    reason: str = SOURCE_REFUSED

    @classmethod
    def one(cls, source: SourceRef, obj: SourceRef | str, field_: str, why: str, *,
            reason: str = SOURCE_REFUSED) -> "Refused":
        return cls(source, (FieldError(str(obj), field_, why),), reason)

    @property
    def error(self) -> InvalidSpec:
        return InvalidSpec(list(self.errors), self.reason)

    def __str__(self) -> str:
        return "\n".join(str(e) for e in self.errors)


@dataclass(frozen=True)
class Pending:
    """The source object is not ready yet (its infrastructure object is not there, its control-plane endpoint or
    its load balancer not reported, Hive has not installed it): the service waits and derives again when it
    changes; the offline plan reports it among its refusals."""

    source: SourceRef
    wait: FieldError
    reason: str = SOURCE_PENDING

    @property
    def error(self) -> InvalidSpec:
        return InvalidSpec([self.wait], self.reason)

    def __str__(self) -> str:
        return str(self.wait)
