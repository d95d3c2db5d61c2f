"""Who the viewer is, and what they may see and do: sign-in with a TokenReview, sessions held server-side, and one
SubjectAccessReview per (viewer, namespace, resource, verb), reused for a few seconds.

    sign-in   token ──TokenReview (the console's own ServiceAccount)──► user, uid, groups, extra
              a session: a random id in an HttpOnly, SameSite=Strict cookie; the token stays here, never in a page
    a page    the namespaces holding clusters ──SubjectAccessReview each──► the ones the viewer may list
    a write   a SubjectAccessReview for the verb, then the call made with the viewer's own token

What a viewer sees follows their RBAC per namespace: a grant scoped to resource names (resourceNames) is not
supported, because a list needs the whole namespace. A viewer who may list HubClusters in every namespace (a
ClusterRoleBinding) is a hub administrator: the one SubjectAccessReview with no namespace says so.
"""
from __future__ import annotations

import hmac
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from kubernetes import client

from stacks.jwt import claims
from stacks.names import CLUSTERS, GROUP

SESSION_COOKIE = "hubwright_session"
MAX_TOKEN = 16384  # bytes of a bearer token the sign-in form takes


@dataclass(frozen=True)
class Viewer:
    user: str
    uid: str
    groups: tuple[str, ...]
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def key(self) -> tuple:
        return (self.user, self.uid, self.groups, self.extra)


@dataclass
class Session:
    id: str
    viewer: Viewer
    token: str  # the viewer's own bearer token: the console's writes are made with it
    expires: float  # the token's exp, or --session-hours after sign-in, whichever is first
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))

    def valid_csrf(self, given: str | None) -> bool:
        return bool(given) and hmac.compare_digest(self.csrf, str(given))


class SignInRefused(Exception):
    """The token was not accepted: said the same way whatever the reason, naming no user."""


def token_expiry(token: str) -> float | None:
    """A JWT's exp claim (a ServiceAccount or OIDC token; the TokenReview has checked its signature), else None."""
    exp = (claims(token) or {}).get("exp")
    return float(exp) if isinstance(exp, (int, float)) else None


class Sessions:
    """Signed-in viewers, by session id (random, 256 bits); an expired one is gone when next looked up."""

    def __init__(self, own: client.ApiClient, *, hours: float, clock: Callable[[], float] = time.time):
        self.own, self.hours, self.clock = own, hours, clock
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def sign_in(self, token: str) -> Session:
        token = token.strip()
        if not token or len(token) > MAX_TOKEN or any(c.isspace() for c in token):
            raise SignInRefused()
        review = client.AuthenticationV1Api(self.own).create_token_review(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}})
        status = review.status
        if status is None or not status.authenticated or status.user is None:
            raise SignInRefused()
        user = status.user
        viewer = Viewer(user=user.username or "", uid=user.uid or "", groups=tuple(user.groups or ()),
                        extra=tuple(sorted((k, tuple(v or ())) for k, v in (user.extra or {}).items())))
        now = self.clock()
        expires = now + self.hours * 3600
        exp = token_expiry(token)
        if exp is not None:
            if exp <= now:
                raise SignInRefused()
            expires = min(expires, exp)
        session = Session(id=secrets.token_urlsafe(32), viewer=viewer, token=token, expires=expires)
        with self._lock:
            self._sessions = {k: s for k, s in self._sessions.items() if s.expires > now}  # expired ones go
            self._sessions[session.id] = session
        return session

    def get(self, session_id: str | None) -> Session | None:
        if not session_id:
            return None
        with self._lock:
            session = self._sessions.get(session_id)
            if session is not None and session.expires <= self.clock():
                del self._sessions[session_id]
                return None
            return session

    def sign_out(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)


class Access:
    """SubjectAccessReviews made with the console's own ServiceAccount, each answer reused for `ttl` seconds."""

    def __init__(self, own: client.ApiClient, *, ttl: float, clock: Callable[[], float] = time.monotonic,
                 workers: int = 8):
        self.own, self.ttl, self.clock = own, ttl, clock
        self._answers: dict[tuple, tuple[float, bool]] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="console-sar")
        self.reviews = 0  # SubjectAccessReviews made (the cache's misses)

    def allowed(self, viewer: Viewer, namespace: str, resource: str, verb: str, group: str = GROUP) -> bool:
        key = (viewer.key, namespace, group, resource, verb)
        now = self.clock()
        with self._lock:
            found = self._answers.get(key)
            if found is not None and found[0] > now:
                return found[1]
        answer = self._review(viewer, namespace, resource, verb, group)
        with self._lock:
            if len(self._answers) > 100_000:
                self._answers = {k: v for k, v in self._answers.items() if v[0] > now}
            self._answers[key] = (now + self.ttl, answer)
        return answer

    def _review(self, viewer: Viewer, namespace: str, resource: str, verb: str, group: str) -> bool:
        attributes: dict[str, Any] = {"group": group, "resource": resource, "verb": verb}
        if namespace:
            attributes["namespace"] = namespace
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": {"user": viewer.user, "uid": viewer.uid or None, "groups": list(viewer.groups),
                         "extra": {k: list(v) for k, v in viewer.extra} or None,
                         "resourceAttributes": attributes}}
        self.reviews += 1
        review = client.AuthorizationV1Api(self.own).create_subject_access_review(body)
        return bool(review.status is not None and review.status.allowed)

    def administrator(self, viewer: Viewer) -> bool:
        """May list HubClusters in every namespace: sees everything, and run text unredacted."""
        return self.allowed(viewer, "", CLUSTERS, "list")

    def namespaces(self, viewer: Viewer, among: Iterable[str], resource: str = CLUSTERS,
                   verb: str = "list") -> list[str] | None:
        """Which of `among` the viewer may `verb` `resource` in (None: every namespace, an administrator)."""
        if self.administrator(viewer):
            return None
        candidates = list(among)
        answers = self._pool.map(lambda ns: self.allowed(viewer, ns, resource, verb), candidates)
        return [ns for ns, ok in zip(candidates, answers) if ok]

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
