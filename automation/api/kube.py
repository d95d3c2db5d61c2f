"""What the routes share about Kubernetes: the custom-objects client, a tenant's namespace, generated names, merge
patches, and 422s that name the field.

Every call here takes the client it must act as. The one call made with the API's own client is reading a Tenant
to find its namespace: tenant users usually cannot read cluster-scoped Tenants, and a namespace is not a secret.
"""
from __future__ import annotations

import json
from typing import Any, Callable, Literal, Mapping

from fastapi import HTTPException
from fastapi.exceptions import RequestValidationError
from kubernetes import client
from kubernetes.client.rest import ApiException
from pydantic import BaseModel, ValidationError

from automation.adapters.kube.calls import error_text
from automation.api.app import FORBIDDEN, LOG, Registry
from automation.api.models import RESERVED_LABELS, tenant_namespace
from stacks.names import CLUSTERS, TENANTS, GROUP, VERSION
from stacks.registry import ID_ATTEMPTS, new_id

CONFLICT_ATTEMPTS = 5  # read-modify-write retries when another writer got in between (no resourceVersion given)


def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def reason(exc: ApiException) -> str | None:
    try:
        return json.loads(exc.body or "{}").get("reason")
    except (ValueError, AttributeError):
        return None


def may(api: client.ApiClient, verb: str, resource: str, *, namespace: str | None = None, name: str | None = None,
        subresource: str | None = None) -> tuple[bool, str]:
    """Whether the caller may (a SelfSubjectAccessReview made as the caller; Kubernetes' 401 for a bad token),
    and Kubernetes' reason."""
    attributes = {"group": GROUP, "resource": resource, "verb": verb, "namespace": namespace, "name": name,
                  "subresource": subresource}
    review = client.AuthorizationV1Api(api).create_self_subject_access_review({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {key: value for key, value in attributes.items() if value is not None}}})
    return bool(review.status.allowed), review.status.reason or ""


def authorize(api: client.ApiClient, subresource: str, namespace: str, cluster: str, doing: str) -> None:
    """403 unless the caller may `create` the virtual subresource `clusters/<subresource>` of this Cluster
    (stacks.names FACTS_SUBRESOURCE, BOOTSTRAP_SUBRESOURCE): the one check behind pushing facts and issuing
    bootstrap tokens, asked of Kubernetes as the caller."""
    allowed, why = may(api, "create", CLUSTERS, namespace=namespace, name=cluster, subresource=subresource)
    if not allowed:  # FORBIDDEN, as for a tenant that does not exist: the namespace is not named
        LOG.info("refused to %s Cluster %s/%s: no right to create clusters/%s%s", doing, namespace, cluster,
                 subresource, f" ({why})" if why else "")
        raise HTTPException(403, FORBIDDEN)


def own_cluster(reg: Registry, namespace: str, tenant: str, cluster: str) -> dict[str, Any]:
    """The Cluster, read with the API's own client (after `authorize`): 404 when there is none."""
    try:
        return custom(reg.own).get_namespaced_custom_object(GROUP, VERSION, namespace, CLUSTERS, cluster)
    except ApiException as exc:
        if exc.status == 404:
            raise HTTPException(404, f"cluster {cluster} not found in tenant {tenant}") from None
        raise


def namespace_of_tenant(reg: Registry, tenant: str, api: client.ApiClient | None = None) -> str:
    """The namespace that holds a tenant's clusters, from its Tenant read with the API's own client.

    Given the caller (`api`), no such Tenant is a 404 only for a caller who could list clusters in the namespace
    it would have: others get the 403 (or, with a bad token, the 401) that an existing tenant would give them,
    with the same body (app.FORBIDDEN, which the routes' Kubernetes 403s become too), so the answer tells no one
    which tenants exist or where."""
    try:
        return tenant_namespace(custom(reg.own).get_cluster_custom_object(GROUP, VERSION, TENANTS, tenant))
    except ApiException as exc:
        if exc.status != 404:
            raise
    allowed = True if api is None else may(api, "list", CLUSTERS, namespace=tenant)[0]
    if not allowed:
        raise HTTPException(403, FORBIDDEN)
    raise HTTPException(404, f"tenant {tenant} not found")


def tenant_index(reg: Registry) -> dict[str, str]:
    """namespace -> Tenant name, for showing which tenant each cluster of a fleet-wide list belongs to.

    A Tenant counts for the namespace the tenant controller granted it (status.namespace), never for the one its
    spec asks for: whoever may create a Tenant can name any namespace in spec.namespace, and an impostor would
    then be shown as the owner of another tenant's clusters. Read with the API's own client; when it may not
    list Tenants, clusters are shown without a tenant rather than the list failing."""
    try:
        tenants = custom(reg.own).list_cluster_custom_object(GROUP, VERSION, TENANTS)
    except ApiException as exc:
        if not reg.extra.get("tenant_index_refused"):  # say it once, not on every list
            reg.extra["tenant_index_refused"] = True
            LOG.warning("cannot list Tenants with the API's own ServiceAccount (%s): clusters are shown "
                        "without their tenant", error_text(exc))
        return {}
    index: dict[str, str] = {}
    for doc in tenants.get("items") or []:
        status = doc.get("status") if isinstance(doc.get("status"), Mapping) else {}
        granted = status.get("namespace")
        if isinstance(granted, str) and granted:
            index.setdefault(granted, doc["metadata"]["name"])
    return index


def create_named(create: Callable[[str], dict[str, Any]], given: str | None,
                 kind: Literal["Tenant", "Cluster"]) -> dict[str, Any]:
    """Create under the given name, or under generated ones until the server takes one (it is the collision
    check: 409 AlreadyExists means taken, so try another)."""
    if given is not None:
        return create(given)
    for _ in range(ID_ATTEMPTS):
        try:
            return create(new_id(kind))
        except ApiException as exc:
            if exc.status != 409 or reason(exc) != "AlreadyExists":
                raise
    raise HTTPException(503, f"no free {kind} name after {ID_ATTEMPTS} tries; try again")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: apply a JSON merge patch."""
    if not isinstance(patch, Mapping):
        return patch
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def wire(spec: BaseModel) -> dict[str, Any]:
    """A validated spec as it is stored: camelCase, only what was given (defaults stay the model's)."""
    return spec.model_dump(mode="json", by_alias=True, exclude_unset=True, exclude_none=True)


def validated(model: type[BaseModel], raw: Any, *loc: str) -> BaseModel:
    """`raw` as `model`, or a 422 in FastAPI's shape whose locations start at `loc` (e.g. body.spec)."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise RequestValidationError([{**err, "loc": (*loc, *err["loc"])} for err in exc.errors()]) from None


def check_labels(labels: Mapping[str, Any] | None) -> None:
    """The registry's own labels cannot be set or removed through a request body."""
    for key in labels or ():
        if key in RESERVED_LABELS:
            raise RequestValidationError([{"loc": ("body", "labels", key), "type": "value_error",
                                           "msg": f"label {key} is the registry's own: it cannot be set or removed"}])


def relabel(current: Mapping[str, str] | None, wanted: Mapping[str, str] | None) -> dict[str, str] | None:
    """Labels after a replace: `wanted` (None: unchanged) plus the registry's own labels already there."""
    if wanted is None:
        return dict(current or {})
    kept = {key: value for key, value in (current or {}).items() if key in RESERVED_LABELS}
    return {**wanted, **kept}


def conflict(resource: str, name: str, wanted: str, current: str | None) -> HTTPException:
    return HTTPException(409, f"{resource} {name} changed since resourceVersion {wanted} (now {current}): "
                              "read it again and retry")
