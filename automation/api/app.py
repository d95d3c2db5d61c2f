"""The registry's REST API (docs/registry.md): the FastAPI application and what every route shares.

    request ──► caller() ──► the route ──► Kubernetes, as the caller's own token
                 401 if no token          (RBAC alone decides; its 401/403 are passed through)

Routes live beside this module, one file per resource: tenants.py (tenants and clusters), facts.py (dynamic
facts and their history), bootstrap.py (bootstrap tokens and the install endpoint); serve.py hands them to
create_app. The API's own ServiceAccount (`Registry.own`, the rights listed in docs/registry.md) is used only
where the caller's token cannot be: a tenant's namespace, the cluster a token or a fact push is for (after
the caller's access was checked), status.bootstrapToken and status.facts, and the install endpoint, which
has no caller; everything else runs as the caller.
"""
from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from kubernetes import client
from kubernetes.client.rest import ApiException

from stacks.names import API_VERSION

LOG = logging.getLogger("clusternet.api")
VERSION = "0.1.0"


@dataclass(frozen=True)
class ApiSettings:
    """What the API is told at start (automation.api.serve turns flags into these)."""

    token_cache: int = 1024  # per-token Kubernetes clients kept (LRU)
    install_rate: float = 1.0  # install requests per second per client address, per replica
    install_burst: int = 10
    agent_image: str = "ghcr.io/clusternet/clusternet:latest"  # the facts agent's image
    public_url: str = "http://127.0.0.1:8080"  # where agents reach this API
    # lifetime of the agent's ServiceAccount token (it rotates it through this API), capped by the hub's
    # maxTokenLifetime (stacks.registry.agent_token_seconds)
    agent_token_seconds: int = 86400
    trust_forwarded_for: bool = False  # rate-limit by X-Forwarded-For (behind a proxy you run) or the peer
    hub_name: str = "default"  # the HubConfig whose shared ingress install answers use (the service's --hub-name)


class ClientCache:
    """A bounded LRU of Kubernetes clients, one per bearer token, keyed by the token's SHA-256."""

    def __init__(self, template: client.Configuration, size: int):
        self._template, self._size = template, size
        self._clients: OrderedDict[str, client.ApiClient] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, token: str) -> client.ApiClient:
        key = hashlib.sha256(token.encode()).hexdigest()
        with self._lock:
            found = self._clients.get(key)
            if found is not None:
                self._clients.move_to_end(key)
                return found
        configuration = client.Configuration()
        for name, value in vars(self._template).items():  # host, TLS and proxy settings; never a credential
            if name not in ("api_key", "api_key_prefix", "username", "password", "refresh_api_key_hook",
                            "cert_file", "key_file"):
                setattr(configuration, name, value)
        configuration.api_key = {"BearerToken": f"Bearer {token}", "authorization": f"Bearer {token}"}
        made = client.ApiClient(configuration)
        with self._lock:
            made = self._clients.setdefault(key, made)
            self._clients.move_to_end(key)
            while len(self._clients) > self._size:
                self._clients.popitem(last=False)  # in-flight requests keep their reference
        return made


@dataclass
class Registry:
    """Everything a route needs: the settings, the API's own client, per-caller clients and the facts store."""

    settings: ApiSettings
    own: client.ApiClient  # the API's ServiceAccount: the rights listed in docs/registry.md, no more
    callers: ClientCache
    facts: Any  # automation.adapters.facts.FactsStore
    extra: dict[str, Any] = field(default_factory=dict)  # per-module state (rate limiters), by module


def registry(request: Request) -> Registry:
    return request.app.state.registry


# Declared as a security scheme so the OpenAPI document and /docs ("Authorize") know every route needs it.
BEARER = HTTPBearer(auto_error=False, scheme_name="kubernetesToken",
                    description="a Kubernetes bearer token of the hub cluster: its RBAC decides what it may do")


def caller(request: Request, reg: Registry = Depends(registry),
           credentials: HTTPAuthorizationCredentials | None = Security(BEARER)) -> client.ApiClient:
    """A Kubernetes client that acts as the request's bearer token: 401 without one."""
    token = credentials.credentials.strip() if credentials is not None else ""
    if not token:
        raise HTTPException(401, "a bearer token is required: Authorization: Bearer <Kubernetes token>",
                            headers={"WWW-Authenticate": "Bearer"})
    return reg.callers.get(token)


def invalid(exc: RequestValidationError) -> dict[str, Any]:
    """A 422's body: FastAPI's list of problems, each also naming its field as a dotted path (spec.region),
    and one message naming them all."""
    problems = []
    for err in exc.errors():
        loc = [str(part) for part in err.get("loc", ())]
        where = loc[1:] if loc[:1] in (["body"], ["query"], ["path"], ["header"]) else loc
        problems.append({"loc": list(err.get("loc", ())), "field": ".".join(where) or "(body)",
                         "msg": str(err.get("msg", "")).removeprefix("Value error, "), "type": err.get("type")})
    return {"detail": problems, "message": "; ".join(f"{p['field']}: {p['msg']}" for p in problems)}


def kube_error(exc: ApiException) -> HTTPException:
    """Kubernetes' answer, passed through: its status code and its message."""
    try:
        body = json.loads(exc.body or "{}")
    except ValueError:
        body = {}
    message = body.get("message") or exc.reason or "Kubernetes refused the request"
    return HTTPException(exc.status or 502, message)


def create_app(reg: Registry, *, routers: Iterable[Callable[[], APIRouter]]) -> FastAPI:
    """The application with these routes (functions returning APIRouters; automation.api.serve.ROUTERS: every
    resource module's, which import this module, so they are handed in rather than imported here)."""
    app = FastAPI(
        separate_input_output_schemas=False,  # one schema per model (ClusterSpec, not -Input and -Output)
        title="clusternet registry",
        version=VERSION,
        description="Tenants, clusters, facts and one-time bootstrap over the clusternet CRDs. Every request "
                    "but discovery, health and install carries `Authorization: Bearer <Kubernetes token>`; "
                    "Kubernetes RBAC decides what it may do.",
    )
    app.state.registry = reg

    @app.exception_handler(ApiException)
    def _kubernetes(request: Request, exc: ApiException) -> JSONResponse:
        err = kube_error(exc)
        return JSONResponse({"detail": err.detail}, status_code=err.status_code)

    @app.exception_handler(RequestValidationError)
    def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(invalid(exc), status_code=422)

    @app.get("/", tags=["discovery"])
    def discovery() -> dict[str, Any]:
        return {
            "name": "clusternet registry",
            "version": VERSION,
            "apiVersion": API_VERSION,
            "auth": {"type": "bearer", "header": "Authorization: Bearer <token>",
                     "token": "a Kubernetes token of the hub cluster; its RBAC decides"},
            "openapi": "/openapi.json",
            "docs": "/docs",
        }

    @app.get("/healthz", tags=["discovery"])
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    for make in routers:
        app.include_router(make())
    return app
