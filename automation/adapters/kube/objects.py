"""One client for every kind: get, list, create, merge-patch, patch the status subresource, delete.

    Kind("hubwright.io", "v1alpha1", "hubtenants", "HubTenant", namespaced=False)
    objects.get(TENANTS_KIND, "acme")                           -> the object, None when it is not there (404)
    objects.patch(kind, name, {"metadata": {..., "resourceVersion": rv}}, namespace)  -> Conflict on 409

`KubeObjects` speaks the API's REST paths through the official client's ApiClient (its auth, TLS and pool), so
one port serves our kinds, another project's and the core ones alike, each call with a timeout. The controller kit
(automation/kit/objects.py) hands the port (`Objects`, declared here so the adapters that take one may name it) and
the view over what it returns to every controller; doubles/objects.py is the in-memory one their direct tests use.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Protocol

from kubernetes import client
from kubernetes.client.rest import ApiException

from automation.adapters.kube.status import EventRecorder
from stacks.names import CLUSTER, GITREPO, GROUP, HUBCONFIG, RETAINED, STACKRUN, TENANT, VERSION

Raw = dict[str, Any]
TIMEOUT = (5, 30)  # (connect, read) seconds of every call here


@dataclass(frozen=True)
class Kind:
    """A resource the API serves: its group ("" for the core group), version, plural and kind."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, name: str | None = None, namespace: str | None = None, subresource: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base


HUBCLUSTERS = Kind(GROUP, VERSION, CLUSTER.plural, CLUSTER.kind)
HUBTENANTS = Kind(GROUP, VERSION, TENANT.plural, TENANT.kind, namespaced=False)
HUBCONFIGS = Kind(GROUP, VERSION, HUBCONFIG.plural, HUBCONFIG.kind, namespaced=False)
HUBSTACKRUNS = Kind(GROUP, VERSION, STACKRUN.plural, STACKRUN.kind)
HUBGITREPOS = Kind(GROUP, VERSION, GITREPO.plural, GITREPO.kind)
HUBRETAINEDSTACKS = Kind(GROUP, VERSION, RETAINED.plural, RETAINED.kind, namespaced=False)
NAMESPACES = Kind("", "v1", "namespaces", "Namespace", namespaced=False)
SECRETS = Kind("", "v1", "secrets", "Secret")
CONFIGMAPS = Kind("", "v1", "configmaps", "ConfigMap")
SERVICEACCOUNTS = Kind("", "v1", "serviceaccounts", "ServiceAccount")
RESOURCEQUOTAS = Kind("", "v1", "resourcequotas", "ResourceQuota")
ROLES = Kind("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLEBINDINGS = Kind("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
CLUSTERROLES = Kind("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False)
CLUSTERROLEBINDINGS = Kind("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding",
                           namespaced=False)


def status_message(body: Any) -> str:
    """The `message` of a Kubernetes Status body: what refused the call, in the API server's words (an admission
    policy's "ValidatingAdmissionPolicy '<name>' with binding '<name>' denied request: <its message>", RBAC's
    "User ... cannot create resource ...", a validation's); "" when the body is not a Status."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    if not isinstance(body, str) or not body.lstrip().startswith("{"):
        return ""
    try:
        found = json.loads(body)
    except ValueError:
        return ""
    message = found.get("message") if isinstance(found, dict) else None
    return message.strip() if isinstance(message, str) else ""


class ApiError(Exception):
    """A call the API server refused or did not answer (anything but 404, which reads as None or False). Its text
    is "<status> <reason>: <the Status body's message>" (error_text): the refusal's own words, not a bare
    "Forbidden"."""

    def __init__(self, status: int | None, reason: str, body: str = ""):
        self.status, self.reason, self.body = status, reason, body
        self.message = status_message(body)  # the API server's words; "" when the body is not a Status
        said = self.message or body[:512]
        super().__init__(f"{status} {reason}" + (f": {said}" if said else ""))


class Conflict(ApiError):
    """409: the object changed since the resourceVersion the write carried (read it again), or it exists already."""


def _error(exc: ApiException) -> ApiError:
    cls = Conflict if exc.status == 409 else ApiError
    return cls(exc.status, str(exc.reason), str(exc.body or ""))


def error_text(exc: BaseException) -> str:
    """The one text of a failed Kubernetes call, for a log line, a condition or an answer, whichever client made
    it (the object port's ApiError, the official client's ApiException, a connection's error): "403 Forbidden:
    <what the API server said>" (an admission policy's message, RBAC's, a validation's), never the bare reason,
    never the response's headers; a body that is not a Status is left out (it may be a proxy's page)."""
    if isinstance(exc, ApiError):
        return str(exc)
    if isinstance(exc, ApiException):
        message = status_message(exc.body)
        return f"{exc.status} {exc.reason}" + (f": {message}" if message else "")
    return str(exc) or type(exc).__name__


class Objects(Protocol):
    """The port (module docstring). 404 reads as None (get, patch, patch_status) or False (delete); 409 raises
    Conflict; any other refusal ApiError."""

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> Raw | None: ...

    def list(self, kind: Kind, namespace: str | None = None, *, label_selector: str | None = None,
             field_selector: str | None = None, limit: int | None = None) -> Raw: ...

    def create(self, kind: Kind, body: Raw, namespace: str | None = None) -> Raw: ...

    def patch(self, kind: Kind, name: str, patch: Raw, namespace: str | None = None) -> Raw | None: ...

    def patch_status(self, kind: Kind, name: str, status: Raw, namespace: str | None = None, *,
                     resource_version: str | None = None) -> Raw | None: ...

    def replace_status(self, kind: Kind, raw: Raw) -> Raw | None: ...

    def delete(self, kind: Kind, name: str, namespace: str | None = None, *, uid: str | None = None) -> bool: ...

    def event(self, kind: Kind, raw: Raw, type_: Literal["Normal", "Warning"], reason: str, message: str) -> None: ...


class KubeObjects:
    """The object port over the official client: every kind by its REST path, every call with a timeout."""

    def __init__(self, api_client: client.ApiClient, *, events: EventRecorder | None = None,
                 timeout: tuple[float, float] = TIMEOUT):
        self._api = api_client
        self._timeout = timeout
        self.events = events if events is not None else EventRecorder(api_client)

    def _call(self, method: str, path: str, *, body: Any = None, query: Mapping[str, Any] | None = None,
              merge: bool = False) -> Raw | None:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/merge-patch+json" if merge else "application/json"
        try:
            return self._api.call_api(
                path, method, {}, [(k, v) for k, v in (query or {}).items() if v is not None], headers, body=body,
                response_types_map={200: "object", 201: "object", 202: "object"}, auth_settings=["BearerToken"],
                _return_http_data_only=True, _preload_content=True, _request_timeout=self._timeout)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise _error(exc) from None

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> Raw | None:
        return self._call("GET", kind.path(name, namespace))

    def list(self, kind: Kind, namespace: str | None = None, *, label_selector: str | None = None,
             field_selector: str | None = None, limit: int | None = None) -> Raw:
        """The List document (items, metadata.continue, metadata.remainingItemCount), read from the server."""
        return self._call("GET", kind.path(None, namespace), query={
            "labelSelector": label_selector, "fieldSelector": field_selector, "limit": limit}) or {"items": []}

    def create(self, kind: Kind, body: Raw, namespace: str | None = None) -> Raw:
        namespace = namespace or (body.get("metadata") or {}).get("namespace")
        created = self._call("POST", kind.path(None, namespace), body={"apiVersion": kind.api_version,
                                                                        "kind": kind.kind, **body})
        if created is None:  # the namespace it goes in is not there
            raise ApiError(404, f"cannot create {kind.kind}: namespace {namespace} not found")
        return created

    def patch(self, kind: Kind, name: str, patch: Raw, namespace: str | None = None) -> Raw | None:
        """A JSON merge patch; one carrying metadata.resourceVersion fails with Conflict if the object moved on."""
        return self._call("PATCH", kind.path(name, namespace), body=patch, merge=True)

    def patch_status(self, kind: Kind, name: str, status: Raw, namespace: str | None = None, *,
                     resource_version: str | None = None) -> Raw | None:
        """A merge patch of the status subresource (at `resource_version`: Conflict if the object moved on)."""
        body: Raw = {"status": status}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        return self._call("PATCH", kind.path(name, namespace, "status"), body=body, merge=True)

    def replace_status(self, kind: Kind, raw: Raw) -> Raw | None:
        """PUT `raw` to the status subresource at its metadata.resourceVersion (for a role with `update`, not
        `patch`, on the status): Conflict if the object moved on, None when it is gone."""
        meta = raw.get("metadata") or {}
        return self._call("PUT", kind.path(meta.get("name"), meta.get("namespace"), "status"), body=raw)

    def delete(self, kind: Kind, name: str, namespace: str | None = None, *, uid: str | None = None) -> bool:
        """False when it was gone already; with `uid`, only that object (another one of the name: Conflict)."""
        body = {"preconditions": {"uid": uid}} if uid is not None else None
        return self._call("DELETE", kind.path(name, namespace), body=body) is not None

    def event(self, kind: Kind, raw: Raw, type_: Literal["Normal", "Warning"], reason: str, message: str) -> None:
        """A core/v1 Event on `raw`, sent off the caller's thread; never raises."""
        self.events.event(raw, type_, reason, message, kind=kind.kind, api_version=kind.api_version)

    def close(self) -> None:
        self.events.close()
