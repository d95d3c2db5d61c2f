"""The console's web application: what every page shares (the signed-in viewer, the security headers, the CSRF
check, the HTML), and the sign-in pages. The pages are in pages.py, the event stream in live.py, the two actions in
actions.py; serve.py runs it.

    request ──► viewer()  no session, or an expired one: the sign-in page (303), or 401 for a script
            ──► the page  only what the viewer's SubjectAccessReviews allow (access.py)

Every answer carries a strict Content-Security-Policy: scripts and styles only from this origin (assets.py, no
inline script or style), no frames, forms only to this origin. Every POST carries the session's CSRF token and,
when the browser sends one, an Origin of this console; cookies are HttpOnly and SameSite=Strict, and Secure
behind TLS.
"""
from __future__ import annotations

import hmac
import logging
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import parse_qs, urlsplit

import urllib3
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape
from kubernetes.client.rest import ApiException
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint

from automation.adapters.history import HistoryStore
from automation.adapters.kube.calls import error_text
from automation.adapters.kube.clients import ClientCache
from automation.console.access import SESSION_COOKIE, Access, Session, Sessions, SignInRefused
from automation.console.cache import ConsoleCache
from automation.console.model import FleetModel
from stacks.release import version

LOG = logging.getLogger("hubwright.console")
AUDIT = logging.getLogger("hubwright.console.audit")
LOGIN_COOKIE = "hubwright_login"  # the sign-in form's CSRF token (double submit), before there is a session
FRAGMENT = "x-console-fragment"  # a live page asks for its <main> only
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "font-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin",
           "X-Frame-Options": "DENY", "Cross-Origin-Opener-Policy": "same-origin",
           "Cross-Origin-Resource-Policy": "same-origin"}
MAX_FORM = 65536
TEMPLATES = Path(__file__).resolve().parent / "templates"


@dataclass(frozen=True)
class ConsoleSettings:
    page_size: int = 100
    secure_cookies: bool = False  # Secure cookies: --tls-cert, or --secure-cookies behind a TLS proxy


@dataclass
class Console:
    settings: ConsoleSettings
    cache: ConsoleCache
    sessions: Sessions
    access: Access
    callers: ClientCache  # a client per viewer's token: the actions are made as the viewer
    history: HistoryStore | None
    model: FleetModel  # the fleet resolved from the cache: the mesh, and what each stack builds


class SecurityHeaders(BaseHTTPMiddleware):
    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        response = await call_next(request)
        for name, value in HEADERS.items():
            response.headers.setdefault(name, value)
        if not request.url.path.startswith("/assets/"):
            response.headers.setdefault("Cache-Control", "no-store")
        return response


class NotSignedIn(Exception):
    pass


ENV = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(default=True),
                  trim_blocks=True, lstrip_blocks=True)


def console(request: Request) -> Console:
    return request.app.state.console


def session(request: Request) -> Session:
    """The signed-in viewer's session, or NotSignedIn (the sign-in page, or 401)."""
    found = console(request).sessions.get(request.cookies.get(SESSION_COOKIE))
    if found is None:
        raise NotSignedIn()
    return found


def page(request: Request, template: str, title: str, context: Mapping[str, Any], *, live: str = "",
         status: int = 200) -> HTMLResponse:
    """A page; only its <main> when the page's script asks for it again (a live update)."""
    signed = console(request).sessions.get(request.cookies.get(SESSION_COOKIE))
    values = {**context, "title": title, "live": live, "session": signed, "version": version(),
              "path": request.url.path}
    if request.headers.get(FRAGMENT) == "1":
        return HTMLResponse(ENV.get_template(template).render(values), status_code=status)
    return HTMLResponse(ENV.get_template("base.html").render({**values, "content": template}), status_code=status)


async def form(request: Request) -> dict[str, str]:
    """An application/x-www-form-urlencoded body, one value per name (the last); larger than MAX_FORM: 413."""
    body = await request.body()
    if len(body) > MAX_FORM:
        raise HTTPException(413, "the form is too large")
    return {k: v[-1] for k, v in parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).items()}


def same_origin(request: Request) -> bool:
    """No Origin header (an older browser, a script), or this console's own. (Referrer-Policy same-origin, not
    no-referrer: under no-referrer a browser sends `Origin: null` even from the console's own form.)"""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    found = urlsplit(origin)
    return found.netloc == request.headers.get("host", "") and found.scheme in ("http", "https")


def checked_post(request: Request, fields: Mapping[str, str]) -> Session:
    """A state-changing request's session, once its CSRF token and origin are this console's: else 403."""
    signed = session(request)
    if not same_origin(request) or not signed.valid_csrf(fields.get("csrf")):
        raise HTTPException(403, "this request did not come from the console's own page (CSRF check failed); "
                                 "reload the page and try again")
    return signed


def local(target: str | None) -> str:
    """Where to go after sign-in: a path of this console only (never another site)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def cookie(response: Response, name: str, value: str, settings: ConsoleSettings, max_age: int | None = None) -> None:
    response.set_cookie(name, value, max_age=max_age, httponly=True, samesite="strict", path="/",
                        secure=settings.secure_cookies)


def login_page(request: Request, problem: str = "", status: int = 200) -> HTMLResponse:
    settings = console(request).settings
    token = secrets.token_urlsafe(32)
    response = page(request, "login.html", "Sign in", {"csrf": token, "problem": problem,
                                                      "next": local(request.query_params.get("next"))},
                    status=status)
    cookie(response, LOGIN_COOKIE, token, settings, max_age=3600)
    return response


def create_app(state: Console, *, routers: tuple = ()) -> FastAPI:
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None, title="hubwright console", version=version())
    app.state.console = state
    app.add_middleware(SecurityHeaders)

    @app.exception_handler(NotSignedIn)
    async def _sign_in(request: Request, exc: NotSignedIn) -> Response:
        if request.method != "GET" or request.headers.get(FRAGMENT) == "1" or \
                request.headers.get("accept") == "text/event-stream":
            return JSONResponse({"detail": "not signed in"}, status_code=401)
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/login?next={local(target)}" if target != "/" else "/login", status_code=303)

    @app.exception_handler(StarletteHTTPException)  # the routes' and the router's own (no such page: 404)
    async def _problem(request: Request, exc: StarletteHTTPException) -> Response:
        return page(request, "problem.html", "Not available", {"problem": exc.detail}, status=exc.status_code)

    @app.exception_handler(ApiException)
    @app.exception_handler(urllib3.exceptions.HTTPError)
    async def _unreachable(request: Request, exc: Exception) -> Response:
        """An access review or a read the API server did not answer: said without its words (they may name
        another namespace), which go to the log."""
        LOG.error("%s %s: the Kubernetes API failed: %s", request.method, request.url.path, exc)
        return page(request, "problem.html", "Not available", {
            "problem": "The hub's API server did not answer; try again in a moment."}, status=503)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/login")
    async def login(request: Request) -> HTMLResponse:
        return login_page(request)

    @app.post("/login")
    async def sign_in(request: Request) -> Response:
        fields = await form(request)
        expected = request.cookies.get(LOGIN_COOKIE) or ""
        if not expected or not same_origin(request) or not hmac.compare_digest(expected, fields.get("csrf", "")):
            return login_page(request, "The sign-in form expired; try again.", status=403)
        try:
            signed = state.sessions.sign_in(fields.get("token", ""))
        except SignInRefused:
            return login_page(request, "The hub's API server did not accept this token (it may have expired).",
                              status=401)
        except ApiException as exc:
            LOG.error("TokenReview failed: %s", error_text(exc))
            return login_page(request, "Sign-in is not possible now; the console's log says why.", status=503)
        AUDIT.info("sign-in: %s (groups %s)", signed.viewer.user, ",".join(signed.viewer.groups))
        response = RedirectResponse(local(fields.get("next")), status_code=303)
        cookie(response, SESSION_COOKIE, signed.id, state.settings)
        response.delete_cookie(LOGIN_COOKIE, path="/")
        return response

    @app.post("/logout")
    async def sign_out(request: Request) -> Response:
        signed = checked_post(request, await form(request))
        state.sessions.sign_out(signed.id)
        AUDIT.info("sign-out: %s", signed.viewer.user)
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/")
        return response

    for router in routers:
        app.include_router(router)
    return app
