"""Test helpers for the registry's REST API on the shared envtest kube-apiserver.

`registry_api` (module fixture) runs the API in-process (FastAPI's TestClient) with the tenants and facts routes,
the API's own client acting as the envtest admin and a SQLite facts store in a temporary folder. `fleet`
(function fixture) makes tenants, their namespaces, clusters and users, each with a unique name, and deletes
them afterwards (the test server has no controller-manager: namespaces never finish deleting, which is fine).
"""
from __future__ import annotations

import re
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from kubernetes import client
from kubernetes.client.rest import ApiException

from automation.adapters.facts import FactsStore
from automation.api import facts, tenants
from automation.api.app import ApiSettings, ClientCache, Registry, create_app
from automation.api.models import ClusterView, TenantView
from stacks.admission import TENANT_ADMIN_CLUSTERROLE, tenant_admin_clusterrole
from stacks.names import GROUP, TENANT_ANNOTATION, TENANT_LABEL, VERSION
from tests.envtest import EnvTest
from tests.registry_rbac import delete_tenant, service_account_token, undo_all

RBAC = "rbac.authorization.k8s.io"
ROUTERS = (tenants.router, facts.router)
TENANT_ID = re.compile(r"t-[a-z]+-[a-z]+-[0-9]{6}")
CLUSTER_ID = re.compile(r"c-[a-z]+-[a-z]+-[0-9]{6}")


def api_routes(routes: Any) -> Iterator[APIRoute]:
    """Every APIRoute of an app or router, including those of included routers (no prefixes are used here)."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        elif getattr(route, "original_router", None) is not None:  # FastAPI keeps included routers nested
            yield from api_routes(route.original_router.routes)


def apply_tenant_admin_role(kube: client.ApiClient) -> None:
    """The tenant-admin ClusterRole as the install makes it (stacks.admission), created or brought up to date."""
    rbac = client.RbacAuthorizationV1Api(kube)
    role = tenant_admin_clusterrole()
    try:
        rbac.create_cluster_role(role)
    except ApiException as exc:
        if exc.status != 409:
            raise
        current = rbac.read_cluster_role(TENANT_ADMIN_CLUSTERROLE)
        role["metadata"]["resourceVersion"] = current.metadata.resource_version
        rbac.replace_cluster_role(TENANT_ADMIN_CLUSTERROLE, role)


def bearer(token: str | None) -> dict[str, str]:
    return {} if token is None else {"Authorization": f"Bearer {token}"}


@dataclass
class RegistryApi:
    env: EnvTest
    http: TestClient
    store: FactsStore
    reg: Registry
    app: FastAPI

    @property
    def admin(self) -> str:
        return self.env.token

    def call(self, method: str, path: str, token: str | None = "admin", **kwargs: Any) -> httpx.Response:
        """One request, as `token` ("admin": the envtest admin; None: no Authorization header)."""
        token = self.admin if token == "admin" else token
        headers = {**bearer(token), **kwargs.pop("headers", {})}
        return self.http.request(method, path, headers=headers, **kwargs)

    def ok(self, method: str, path: str, token: str | None = "admin", status: int = 200, **kwargs: Any) -> Any:
        response = self.call(method, path, token, **kwargs)
        assert response.status_code == status, f"{method} {path}: {response.status_code} {response.text}"
        return response.json()


def make_registry(env: EnvTest, store: FactsStore | None) -> Registry:
    own = env.api_client()
    # The admin pages through fact-filtered lists in quick succession here; their rate limit has its own tests
    # (test_registry_api_limits.py).
    settings = ApiSettings(caller_scan_rate=1000.0, caller_scan_burst=1000)
    return Registry(settings=settings, own=own, callers=ClientCache(env.configuration(), 64), facts=store)


@pytest.fixture(scope="module")
def registry_api(kube_apiserver) -> Iterator[RegistryApi]:
    folder = Path(tempfile.mkdtemp(prefix="registry-api-"))
    store = FactsStore(f"sqlite:///{folder / 'facts.db'}")
    reg = make_registry(kube_apiserver, store)
    app = create_app(reg, routers=ROUTERS)
    with TestClient(app) as http:
        yield RegistryApi(kube_apiserver, http, store, reg, app)
    store.close()
    reg.own.close()


def cluster_view(body: dict) -> ClusterView:
    """A response checked against the documented model (what the OpenAPI document promises)."""
    return ClusterView.model_validate(body)


def tenant_view(body: dict) -> TenantView:
    return TenantView.model_validate(body)


@dataclass
class Fleet:
    """What one test made; `cleanup()` deletes it."""

    api: RegistryApi
    suffix: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    tenants: list[str] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    clusters: list[tuple[str, str]] = field(default_factory=list)
    roles: list[tuple[str, str]] = field(default_factory=list)

    @property
    def kube(self) -> client.ApiClient:
        return self.api.reg.own

    def tenant(self, tenant_id: str | None = None, *, granted: bool = True, **spec: Any) -> tuple[str, str]:
        """A Tenant made through the API as the admin, and its namespace (no service runs here to make it); when
        `granted`, status.namespace is written as the tenant controller would once it made the namespace."""
        body: dict[str, Any] = {"spec": spec}
        if tenant_id is not None:
            body["id"] = tenant_id
        made = self.api.ok("POST", "/tenants", json=body, status=201)
        self.tenants.append(made["id"])
        self.namespace(made["namespace"], made["id"])
        if granted:
            client.CustomObjectsApi(self.kube).patch_cluster_custom_object_status(
                GROUP, VERSION, "hubtenants", made["id"], {"status": {"namespace": made["namespace"]}})
        return made["id"], made["namespace"]

    def namespace(self, name: str, tenant: str | None = None) -> str:
        meta: dict[str, Any] = {"name": name}
        if tenant is not None:
            meta.update(labels={TENANT_LABEL: tenant}, annotations={TENANT_ANNOTATION: tenant})
        try:
            client.CoreV1Api(self.kube).create_namespace({"metadata": meta})
        except ApiException as exc:
            if exc.status != 409:
                raise
        self.namespaces.append(name)
        return name

    def cluster(self, tenant: str, namespace: str, token: str | None = "admin", **body: Any) -> dict:
        made = self.api.ok("POST", f"/tenants/{tenant}/clusters", token, json=body, status=201)
        self.clusters.append((namespace, made["id"]))
        return made

    def user(self, namespace: str, name: str, rules: list[dict] | None = None,
             cluster_role: str | None = None) -> str:
        """A ServiceAccount of `namespace` bound there to `rules` (a Role) or `cluster_role`; its token."""
        rbac = client.RbacAuthorizationV1Api(self.kube)
        role_ref = {"apiGroup": RBAC, "kind": "ClusterRole", "name": cluster_role}
        if rules is not None:
            rbac.create_namespaced_role(namespace, {"metadata": {"name": name}, "rules": rules})
            role_ref = {"apiGroup": RBAC, "kind": "Role", "name": name}
        rbac.create_namespaced_role_binding(namespace, {
            "metadata": {"name": name}, "roleRef": role_ref,
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]})
        self.roles.append((namespace, name))
        return service_account_token(self.kube, namespace, name)

    def status(self, namespace: str, name: str, status: dict) -> None:
        """Write a Cluster's status as the service would (the admin, through the status subresource)."""
        client.CustomObjectsApi(self.kube).patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, "hubclusters", name, {"status": status})

    def cleanup(self) -> None:
        objects = client.CustomObjectsApi(self.kube)
        rbac = client.RbacAuthorizationV1Api(self.kube)
        core = client.CoreV1Api(self.kube)
        calls = [lambda ns=ns, n=n: objects.delete_namespaced_custom_object(GROUP, VERSION, ns, "hubclusters", n)
                 for ns, n in self.clusters]
        calls += [lambda ns=ns, n=n: rbac.delete_namespaced_role_binding(n, ns) for ns, n in self.roles]
        calls += [lambda ns=ns, n=n: rbac.delete_namespaced_role(n, ns) for ns, n in self.roles]
        calls += [lambda ns=ns, n=n: core.delete_namespaced_service_account(n, ns) for ns, n in self.roles]
        calls += [lambda n=n: delete_tenant(self.kube, n) for n in self.tenants]
        calls += [lambda n=n: core.delete_namespace(n) for n in self.namespaces]
        undo_all(calls)


@pytest.fixture
def fleet(registry_api) -> Iterator[Fleet]:
    made = Fleet(registry_api)
    yield made
    made.cleanup()
