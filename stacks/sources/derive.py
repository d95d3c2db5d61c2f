"""derive(): the one answer, for the service and the offline plan alike, to "what HubCluster does this source
object keep?". Pure.

    derive(source, related, owner_account=..., hub=...) -> Derived | Refused | Pending | None

- None: not taken (not opted in, or its namespace is outside HubConfig spec.sources.namespaces);
- Refused: never as it is; the errors name the source object (`Kind.group namespace/name`), its field and why;
- Pending: not yet (an infrastructure object, an endpoint or a load balancer not reported): derive again when the
  source or what it references changes;
- Derived: the HubCluster document to keep, validated as ours (stacks.model.loading.parse): our apiVersion and
  kind, the source's namespace and name, its mesh label and annotation, the region annotation (the source's region
  wins over the namespace's default), its deletion protection and deletion policy (its hubwright.io/deletion-policy
  annotation becomes spec.deletionPolicy), an ownerReference to the source (controller, blockOwnerDeletion; the service
  always has its uid, a plan folder may not), and the spec. The account is the namespace's owner account, never
  anything the source says: the tenancy gate applies unchanged.
"""
from __future__ import annotations

from typing import Any, Mapping

from stacks.errors import FieldError, InvalidSpec
from stacks.model.cluster import Cluster
from stacks.model.hub import HubConfig
from stacks.model.loading import parse
from stacks.names import (API_VERSION, CLUSTER, DELETION_POLICY_ANNOTATION, OWNER_ACCOUNT_ANNOTATION,
                          REGION_ANNOTATION, SHARED_INGRESS_ANNOTATION)
from stacks.sources.families import SOURCES, Family, family_of, kind_of
from stacks.sources.kinds import SourceRef
from stacks.sources.optin import grouping, opted_in, wants_privatelink, wants_shared_ingress
from stacks.sources.outcome import Derived, Pending, Refused
from stacks.sources.part import Asks, Part, Provenance, Related, get

NAMESPACE_NOT_OWNED = "NamespaceNotOwned"  # the condition reason resolve() gives a HubCluster in such a namespace


def _owner_reference(ref: SourceRef) -> list[dict[str, Any]]:
    if ref.uid is None:  # a plan folder's object: never written to an API server
        return []
    return [{"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name, "uid": ref.uid,
             "controller": True, "blockOwnerDeletion": True}]


def _document(source: Mapping[str, Any], ref: SourceRef, part: Part, account: str) -> dict[str, Any]:
    labels, annotations = grouping(source)
    annotations[REGION_ANNOTATION] = part.spec["region"]
    meta: dict[str, Any] = {"name": ref.name, "namespace": ref.namespace}
    created = get(source, "metadata.creationTimestamp")
    if isinstance(created, str):  # the plan's "younger" is the source's age; an API server sets its own
        meta["creationTimestamp"] = created
    meta |= {k: v for k, v in (("labels", labels), ("annotations", annotations),
                               ("ownerReferences", _owner_reference(ref))) if v}
    return {"apiVersion": API_VERSION, "kind": CLUSTER.kind, "metadata": meta,
            "spec": {"accountID": account, **part.spec}}


def with_deletion_policy(source: Mapping[str, Any], ref: SourceRef, part: Part) -> Part:
    """The part with the source's deletion policy (its hubwright.io/deletion-policy annotation, as written) as the
    HubCluster's spec.deletionPolicy; a value the model refuses is blamed on the annotation."""
    annotations = get(source, "metadata.annotations")
    value = annotations.get(DELETION_POLICY_ANNOTATION) if isinstance(annotations, Mapping) else None
    if value is None:
        return part
    return Part({**part.spec, "deletionPolicy": value},
                {**part.provenance, "spec.deletionPolicy": (ref, f"metadata.annotations[{DELETION_POLICY_ANNOTATION}]")})


def _no_route(family: Family, ref: SourceRef) -> Refused:
    return Refused.one(ref, ref, f"metadata.annotations[{SHARED_INGRESS_ANNOTATION}]",
                       f"asks for a shared-ingress route, but a {family.project} {family.source.kind}'s API server does "
                       "not run on this hub, so no backend can be derived from it: only a HyperShift HostedCluster's "
                       "can; write the route on a HubCluster instead")


def _blame(error: FieldError, ref: SourceRef, provenance: Provenance, key: str) -> FieldError:
    """A model error of the derived HubCluster, named where the value was written (the source object's field)."""
    path = error.field
    found = [p for p in provenance if path == p or path.startswith((f"{p}.", f"{p}["))]
    if not found:
        return FieldError(f"{ref} (its HubCluster {key})", path, error.reason)
    obj, field = provenance[max(found, key=len)]
    return FieldError(str(obj), field, f"{error.reason} (read into the HubCluster's {path})")


def derive(source: Mapping[str, Any], related: Related, *, owner_account: str | None,
           hub: HubConfig) -> Derived | Refused | Pending | None:
    """The HubCluster `source` keeps, or why none (module docstring). `related(kind, namespace, name)` fetches an
    object a Cluster references; `owner_account` is the source's namespace's owner account, or None."""
    family = family_of(kind_of(source))
    if family is None:
        raise ValueError(f"{SourceRef.of(source)} is not a cluster source ({', '.join(k.qualified for k in SOURCES)})")
    if not opted_in(source, hub):
        return None
    ref = SourceRef.of(source)
    if owner_account is None:
        return Refused.one(ref, ref, "metadata.namespace",
                           f"namespace {ref.namespace} owns no account (annotation {OWNER_ACCOUNT_ANNOTATION}): "
                           "its source objects are not taken", reason=NAMESPACE_NOT_OWNED)
    asks = Asks(privatelink=wants_privatelink(source), shared_ingress=wants_shared_ingress(source))
    part = _no_route(family, ref) if asks.shared_ingress and not family.control_plane_here else \
        family.part(source, related, hub=hub, asks=asks, ref=ref)
    if isinstance(part, (Refused, Pending)):
        return part
    part = with_deletion_policy(source, ref, part)
    doc = _document(source, ref, part, owner_account)
    try:
        cluster = parse(doc)
    except InvalidSpec as exc:
        key = f"{ref.namespace}/{ref.name}"
        return Refused(ref, tuple(_blame(e, ref, part.provenance, key) for e in exc.errors))
    assert isinstance(cluster, Cluster)
    return Derived(ref, doc, cluster)
