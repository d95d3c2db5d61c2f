"""The registry's REST API (docs/registry.md): the FastAPI application and what every route shares.

    request ──► caller() ──► the route ──► Kubernetes, as the caller's own token
                 401 if no token          (RBAC alone decides; its 401/403 are passed through)

Routes live beside this module, one file per resource: tenants.py (tenants and clusters), facts.py (dynamic
facts and their history), bootstrap.py (bootstrap tokens and the install endpoint), agents.py (an agent's token),
gitrepos.py (Git repositories and the agent's key), history.py (a cluster's run history); serve.py hands them to
create_app. The API's own ServiceAccount (`Registry.own`, the rights listed in docs/registry.md) is used only
where the caller's token cannot be: a tenant's namespace, the cluster a token or a fact push is for (after
the caller's access was checked), status.bootstrapToken, status.facts and status.agentKey, a tenant's
spec.gitRepoURL, and the install endpoint, which
has no caller; everything else runs as the caller.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Iterable

import urllib3
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from kubernetes import client
from kubernetes.client.rest import ApiException

from automation.adapters.history import HistoryStore
from automation.adapters.kube.clients import ClientCache, TimedApiClient, timed
from automation.adapters.kube.objects import status_message
from automation.api.docs import add_docs
from automation.api.ratelimit import CallerLimits, RateLimiter
from stacks.names import API_VERSION, BOOTSTRAP_SUBRESOURCE, FACTS_SUBRESOURCE, GROUP
from stacks.options import API, default, default_factory
from stacks.release import NAME, version

LOG = logging.getLogger("hubwright.api")
VERSION = version()


def _default(flag: str) -> Any:
    return default(flag, API)


@dataclass(frozen=True)
class ApiSettings:
    """What the API is told at start (automation.api.serve turns flags into these, by name): each field is the `api`
    option of its name in the one table (stacks/options.py), with its default and help there."""

    token_cache: int = _default("token-cache")  # per-token Kubernetes clients kept (LRU)
    install_rate: float = _default("install-rate")  # install requests per second per client address, per replica
    install_burst: int = _default("install-burst")
    agent_image: str = field(default_factory=default_factory("agent-image", API))  # ours, at this release
    public_url: str = "http://127.0.0.1:8081"  # where agents reach this API (serve.settings_from: from --bind)
    # lifetime of the agent's ServiceAccount token (it rotates it through this API), capped by the hub's
    # maxTokenLifetime (stacks.registry.agent_token_seconds)
    agent_token_seconds: int = _default("agent-token-seconds")
    trust_forwarded_for: bool = _default("trust-forwarded-for")  # rate-limit by X-Forwarded-For, or by the peer
    hub_name: str = _default("hub-name")  # the HubConfig whose shared ingress install answers use
    # Every Kubernetes call the API makes waits at most this long to connect, and this long for each read of the
    # answer (TimedApiClient); one that does not answer in time is a 504, and frees its worker thread.
    kube_connect_timeout: float = _default("kube-connect-timeout")
    kube_read_timeout: float = _default("kube-read-timeout")
    # Per caller (the SHA-256 of its bearer token), every authenticated route: requests at once, and requests per
    # second with bursts (CallerLimits; 429 with Retry-After beyond either), so one caller cannot take every worker.
    caller_concurrency: int = _default("caller-concurrency")
    caller_rate: float = _default("caller-rate")
    caller_burst: int = _default("caller-burst")
    # Of those, fact-filtered lists (each scans up to listing.MAX_CHUNKS chunks of the fleet): one at a time, and
    # this many per second with bursts.
    caller_scan_rate: float = _default("caller-scan-rate")
    caller_scan_burst: int = _default("caller-scan-burst")


@dataclass
class Registry:
    """Everything a route needs: the settings, the API's own client, per-caller clients, the facts store and the
    run history's store."""

    settings: ApiSettings
    own: client.ApiClient  # the API's ServiceAccount: the rights listed in docs/registry.md, no more
    callers: ClientCache
    facts: Any  # automation.adapters.facts.FactsStore
    extra: dict[str, Any] = field(default_factory=dict)  # per-module state (rate limiters), by module
    history: HistoryStore | None = None  # the run history (--history-store; None: off): automation.api.history

    def __post_init__(self) -> None:
        """Every client a route can reach is timed (ApiSettings.kube_*_timeout)."""
        timeout = (self.settings.kube_connect_timeout, self.settings.kube_read_timeout)
        self.own = timed(self.own, timeout)
        self.callers.timeout = timeout


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
        problems.append({"loc": list(err.get("loc", ())), "field": ".".join(where) or "body",
                         "msg": str(err.get("msg", "")).removeprefix("Value error, "), "type": err.get("type")})
    return {"detail": problems, "message": "; ".join(f"{p['field']}: {p['msg']}" for p in problems)}


def kube_error(exc: ApiException) -> HTTPException:
    """Kubernetes' answer, passed through: its status code and its message (the Status body's, as every caller reads
    it: automation.adapters.kube.objects.status_message)."""
    message = status_message(exc.body) or exc.reason or "Kubernetes refused the request"
    return HTTPException(exc.status or 502, message)


FORBIDDEN = ("forbidden: your token may not do this in this tenant, or there is no such tenant (pushing facts needs "
             f"the right to create {FACTS_SUBRESOURCE} in {GROUP} for the cluster, issuing a bootstrap token the "
             f"right to create {BOOTSTRAP_SUBRESOURCE})")


def names_tenant(request: Request) -> bool:
    """Whether the request is about one tenant (a path's {tenant} or ?tenant=): its 403 is FORBIDDEN."""
    return "tenant" in request.path_params or "tenant" in request.query_params


def kube_unreachable(exc: urllib3.exceptions.HTTPError) -> HTTPException:
    """A Kubernetes call that got no answer: 504 when it timed out (TimedApiClient), else 502."""
    reason = getattr(exc, "reason", None)
    if isinstance(exc, urllib3.exceptions.TimeoutError) or isinstance(reason, urllib3.exceptions.TimeoutError):
        return HTTPException(504, "the Kubernetes API did not answer in time; try again later")
    return HTTPException(502, "the Kubernetes API cannot be reached; try again later")


def create_app(reg: Registry, *, routers: Iterable[APIRouter]) -> FastAPI:
    """The application with these routes (automation.api.serve.ROUTERS: every resource module's APIRouter; those
    modules import this one, so they are handed in rather than imported here)."""
    app = FastAPI(
        docs_url=None, redoc_url=None, swagger_ui_oauth2_redirect_url=None,  # /docs: automation.api.docs
        separate_input_output_schemas=False,  # one schema per model (ClusterSpec, not -Input and -Output)
        title="hubwright registry",
        version=VERSION,
        description="Tenants, clusters, facts and one-time bootstrap over the hubwright CRDs. Every request "
                    "but discovery, health and install carries `Authorization: Bearer <Kubernetes token>`; "
                    "Kubernetes RBAC decides what it may do.",
    )
    app.state.registry = reg

    @app.exception_handler(ApiException)
    def _kubernetes(request: Request, exc: ApiException) -> JSONResponse:
        err = kube_error(exc)
        if err.status_code == 403 and names_tenant(request):  # Kubernetes' message names the namespace
            return JSONResponse({"detail": FORBIDDEN}, status_code=403)
        return JSONResponse({"detail": err.detail}, status_code=err.status_code)

    @app.exception_handler(urllib3.exceptions.HTTPError)
    def _unreachable(request: Request, exc: urllib3.exceptions.HTTPError) -> JSONResponse:
        err = kube_unreachable(exc)
        LOG.warning("%s %s: %s (%s)", request.method, request.url.path, err.detail, type(exc).__name__)
        return JSONResponse({"detail": err.detail}, status_code=err.status_code)

    @app.exception_handler(RequestValidationError)
    def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(invalid(exc), status_code=422)

    # Both answer on the event loop (async, no Kubernetes call), never in the worker threads the routes share.
    @app.get("/", tags=["discovery"])
    async def discovery() -> dict[str, Any]:
        return {
            "name": "hubwright registry",
            "version": VERSION,
            "apiVersion": API_VERSION,
            "auth": {"type": "bearer", "header": "Authorization: Bearer <token>",
                     "token": "a Kubernetes token of the hub cluster; its RBAC decides"},
            "openapi": "/openapi.json",
            "docs": "/docs",
        }

    @app.get("/version", tags=["discovery"])
    async def release() -> dict[str, str]:
        return {"name": NAME, "version": VERSION}  # the release this API runs (pyproject.toml's version)

    @app.get("/healthz", tags=["discovery"])
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    add_docs(app)
    for routes in routers:
        app.include_router(routes)
    settings = reg.settings
    app.add_middleware(CallerLimits, limiter=RateLimiter(settings.caller_rate, settings.caller_burst),
                       concurrency=settings.caller_concurrency,
                       scan_limiter=RateLimiter(settings.caller_scan_rate, settings.caller_scan_burst))
    return app
