"""The forges' HTTP plumbing: one httpx client per forge with a timeout on every call, and the one place an
answer becomes a ForgeError (base.py): no answer, a timeout, 429 or a 5xx -> ForgeUnavailable; 401/403 ->
ForgeDenied (each forge says which scope it missed); a 409/422 on a create -> ForgeConflict (the caller says
which statuses mean "taken"); a redirect is never followed (the token would go with it) and is an error;
anything else -> ForgeError. The token is redacted from every message."""
from __future__ import annotations

import re
from typing import Any, Callable, Collection
from urllib.parse import quote

import httpx

from automation.adapters.forge.base import ForgeConflict, ForgeDenied, ForgeError, ForgeUnavailable
from stacks.gitrepos.model import PATH_PATTERN

DEFAULT_TIMEOUT = 15.0  # seconds, per call (connect, read, write)
_MESSAGE_MAX = 300


def segment(text: str) -> str:
    """One URL path segment (owner, name, file path as a single segment): every '/' encoded too."""
    return quote(text, safe="")


def split_path(path: str) -> tuple[str, str]:
    """owner/name (a GitLab group may nest: group/sub/name) -> (owner, name). A path the model would refuse
    (stacks/gitrepos/model.py: no empty, "." or ".." part) never reaches a URL, whoever called."""
    if not re.fullmatch(PATH_PATTERN, path):
        raise ForgeError(f"repository path {path!r}: expected owner/name (parts of letters, digits, '_', '.', '-')")
    owner, _, name = path.rpartition("/")
    return owner, name


def file_parts(path: str) -> list[str]:
    """A seed file's path, split; refused when a part is empty, "." or ".." (it would leave the repository)."""
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise ForgeError(f"file path {path!r}: relative, with no empty, '.' or '..' part")
    return parts


class Http:
    """Calls to one forge's API at `api_url`, with `headers` (which carry the token, never logged)."""

    def __init__(self, kind: str, api_url: str, token: str, headers: dict[str, str], *,
                 timeout: float = DEFAULT_TIMEOUT, transport: httpx.BaseTransport | None = None,
                 scope_of: Callable[[httpx.Response], str | None] = lambda response: None,
                 message_of: Callable[[httpx.Response], str] | None = None):
        self.kind = kind
        self.api_url = api_url.rstrip("/")
        self.timeout = timeout
        self._token = token
        self._scope_of = scope_of
        self._message_of = message_of or reason
        self._client = httpx.Client(base_url=self.api_url, headers=headers, timeout=httpx.Timeout(timeout),
                                    transport=transport, follow_redirects=False)

    def close(self) -> None:
        self._client.close()

    def _redact(self, text: str) -> str:
        return text.replace(self._token, "<token>") if self._token else text

    def call(self, method: str, path: str, *, json: Any = None, params: dict[str, Any] | None = None,
             missing_ok: bool = False, conflict: Collection[int] = ()) -> httpx.Response | None:
        """The answer to one call; None for a 404 when `missing_ok`; a status in `conflict` -> ForgeConflict."""
        what = f"{self.kind} {method} {self.api_url}{path}"
        try:
            response = self._client.request(method, path, json=json, params=params)
        except httpx.TimeoutException as exc:
            raise ForgeUnavailable(self._redact(f"{what}: no answer within {self.timeout:g}s "
                                                f"({type(exc).__name__})")) from None
        except httpx.TransportError as exc:
            raise ForgeUnavailable(self._redact(f"{what}: unreachable ({type(exc).__name__}: {exc})")) from None
        status = response.status_code
        if 300 <= status < 400:  # never followed: the token header would go along to wherever it points
            where = self._redact(response.headers.get("location", "nowhere"))[:_MESSAGE_MAX]
            raise ForgeError(f"{what}: {status} redirected to {where}, not followed (is apiURL the API root?)")
        if status < 400:
            return response
        if missing_ok and status == 404:
            return None
        detail = self._redact(self._message_of(response))[:_MESSAGE_MAX]
        message = f"{what}: {status} {detail}".rstrip()
        if status >= 500 or status == 429 or _rate_limited(response):
            raise ForgeUnavailable(message)
        if status in conflict:
            raise ForgeConflict(message)
        if status in (401, 403):
            scope = self._scope_of(response)
            raise ForgeDenied(message + (f" (the token lacks the scope {scope!r})" if scope else ""), scope)
        raise ForgeError(message)

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.call(method, path, **kwargs)
        if response is None:
            return None
        try:
            return response.json() if response.content else None
        except ValueError:
            raise ForgeError(f"{self.kind} {method} {self.api_url}{path}: {response.status_code} "
                             "answered with something that is not JSON") from None

    def pages(self, path: str, *, per_page: int, page_param: str = "page",
              size_param: str = "per_page", limit: int = 50) -> list[Any]:
        """Every item of a paged list (at most `limit` pages)."""
        items: list[Any] = []
        for page in range(1, limit + 1):
            batch = self.json("GET", path, params={page_param: page, size_param: per_page}) or []
            items.extend(batch)
            if len(batch) < per_page:
                break
        return items


def _rate_limited(response: httpx.Response) -> bool:
    """GitHub says "rate limit" with a 403 and x-ratelimit-remaining: 0: that is "later", not "denied"."""
    return response.status_code == 403 and response.headers.get("x-ratelimit-remaining") == "0"


def plain_text(text: str) -> str:
    """A body that is not JSON (a proxy's HTML error page): its words, without the markup."""
    return " ".join(re.sub(r"<!--.*?-->|<[^>]*>", " ", text, flags=re.S).split())


def reason(response: httpx.Response) -> str:
    """The forge's own words: the `message` (or `error_description`, `error`) of a JSON body, else the text."""
    try:
        body = response.json()
    except ValueError:
        return plain_text(response.text)
    if isinstance(body, dict):
        for field in ("message", "error_description", "error"):
            if body.get(field):
                value = body[field]
                return value if isinstance(value, str) else str(value)
    return str(body)
