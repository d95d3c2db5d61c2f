"""GitHub's REST API (2022-11-28), written to its documentation (docs.github.com/rest: repos, deploy keys,
contents, git database, meta) and tested against recorded responses (tests/test_forge_recorded.py), not GitHub.

The token goes in `Authorization: Bearer ...`. A classic token without the scope is refused with 403 (404 for
a private repository it may not see), `X-Accepted-OAuth-Scopes` naming what would do and `X-OAuth-Scopes` what
the token has; a fine-grained token is refused with 403 and `X-Accepted-GitHub-Permissions`. A taken name is
422 with errors [{"field": "name", "message": "name already exists on this account"}]. A 403 with
x-ratelimit-remaining: 0 is the rate limit (later, not denied). The SSH host keys come from GET /meta."""
from __future__ import annotations

import base64
from typing import Any, Mapping

import httpx

from automation.adapters.forge import hostkeys
from automation.adapters.forge.base import ForgeConflict, ForgeError, ForgeKey, Repository
from automation.adapters.forge.http import DEFAULT_TIMEOUT, Http, file_parts, plain_text, segment, split_path

_PER_PAGE = 100


def _scope_of(response: httpx.Response) -> str | None:
    """The scope the token lacks: the accepted scopes it does not have (classic tokens), or the permission a
    fine-grained token needs."""
    accepted = [s.strip() for s in response.headers.get("x-accepted-oauth-scopes", "").split(",") if s.strip()]
    has = {s.strip() for s in response.headers.get("x-oauth-scopes", "").split(",") if s.strip()}
    if accepted and not has & set(accepted):
        return ", ".join(accepted)
    permissions = response.headers.get("x-accepted-github-permissions", "").strip()
    return permissions or None


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return plain_text(response.text)
    if not isinstance(body, dict):
        return str(body)
    errors = "; ".join(e.get("message") or f"{e.get('field')} {e.get('code')}" for e in body.get("errors") or []
                       if isinstance(e, dict))
    return f"{body.get('message', '')}{': ' + errors if errors else ''}"


def _repository(body: dict[str, Any], empty: bool) -> Repository:
    return Repository(id=str(body["id"]), path=body["full_name"], http_url=body["clone_url"],
                      ssh_url=body["ssh_url"], description=body.get("description") or "", display_name=None,
                      empty=empty)


def _key(body: dict[str, Any]) -> ForgeKey:
    return ForgeKey(id=str(body["id"]), title=body.get("title") or "", key=" ".join(body["key"].split()[:2]),
                    read_only=bool(body.get("read_only")))


class GitHub:
    kind = "github"

    def __init__(self, api_url: str, token: str, *, timeout: float = DEFAULT_TIMEOUT,
                 transport: httpx.BaseTransport | None = None):
        """`api_url`: https://api.github.com, or https://<host>/api/v3 for GitHub Enterprise Server."""
        self.timeout = timeout
        self.http = Http(self.kind, api_url, token, {
            "Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28"}, timeout=timeout, transport=transport, scope_of=_scope_of,
            message_of=_message)
        self._user: str | None = None

    @staticmethod
    def _repo_path(path: str) -> str:
        owner, name = split_path(path)
        return f"/repos/{segment(owner)}/{segment(name)}"

    def close(self) -> None:
        """Close its connections (an adapter is cheap to make; one per forge and token may be kept)."""
        self.http.close()

    def check(self) -> str:
        self._user = self.http.json("GET", "/user")["login"]
        return self._user

    def _empty(self, body: dict[str, Any]) -> bool:
        """GitHub has no "empty" field: a size of 0 may be an empty repository or a stale size, so ask for its
        commits, which an empty repository answers with 409 "Git Repository is empty."."""
        if body.get("size"):
            return False
        try:
            response = self.http.call("GET", f"{self._repo_path(body['full_name'])}/commits", params={"per_page": 1},
                                      missing_ok=True, conflict=(409,))
        except ForgeConflict:
            return True
        return response is None or response.json() == []

    def get(self, path: str) -> Repository | None:
        body = self.http.json("GET", self._repo_path(path), missing_ok=True)
        return _repository(body, self._empty(body)) if body else None

    def create(self, path: str, *, description: str, display_name: str | None) -> Repository:
        owner, name = split_path(path)
        user = self._user or self.check()
        where = "/user/repos" if owner.lower() == user.lower() else f"/orgs/{segment(owner)}/repos"
        body = self.http.json("POST", where, json={"name": name, "description": description, "private": True,
                                                   "auto_init": False}, conflict=(422,))
        return _repository(body, empty=True)

    def update(self, repo: Repository, *, description: str, display_name: str | None) -> Repository:
        body = self.http.json("PATCH", self._repo_path(repo.path), json={"description": description})
        return _repository(body, empty=repo.empty)

    def delete(self, repo: Repository) -> None:
        self.http.call("DELETE", self._repo_path(repo.path), missing_ok=True)

    def seed(self, repo: Repository, files: Mapping[str, str], message: str) -> None:
        """One root commit with every file. The git database API refuses an empty repository (409), so the
        first file goes in with PUT /contents (which makes the default branch); with more files, one tree of
        them all, a parentless commit of it, and the branch moved to it (force: it replaces the one-file
        commit, so the history is that single commit)."""
        if not files:
            raise ForgeError(f"github seed {repo.path}: no files to commit")
        base = self._repo_path(repo.path)
        ordered = sorted(files.items())
        for path, _ in ordered:
            file_parts(path)
        first_path, first_content = ordered[0]
        self.http.call("PUT", f"{base}/contents/{'/'.join(segment(p) for p in file_parts(first_path))}",
                                 json={"message": message,
                                       "content": base64.b64encode(first_content.encode()).decode()})
        if len(ordered) == 1:
            return
        branch = self.http.json("GET", base)["default_branch"]
        tree = self.http.json("POST", f"{base}/git/trees", json={
            "tree": [{"path": p, "mode": "100644", "type": "blob", "content": c} for p, c in ordered]})
        commit = self.http.json("POST", f"{base}/git/commits",
                                json={"message": message, "tree": tree["sha"], "parents": []})
        self.http.call("PATCH", f"{base}/git/refs/heads/{segment(branch)}",
                       json={"sha": commit["sha"], "force": True})

    def keys(self, repo: Repository) -> list[ForgeKey]:
        return [_key(k) for k in self.http.pages(f"{self._repo_path(repo.path)}/keys", per_page=_PER_PAGE)]

    def add_key(self, repo: Repository, title: str, key: str, *, write: bool) -> ForgeKey:
        return _key(self.http.json("POST", f"{self._repo_path(repo.path)}/keys",
                                   json={"title": title, "key": key, "read_only": not write}))

    def delete_key(self, repo: Repository, key_id: str) -> None:
        self.http.call("DELETE", f"{self._repo_path(repo.path)}/keys/{segment(key_id)}", missing_ok=True)

    def host_keys(self, repo: Repository) -> list[str]:
        """GET /meta's ssh_keys, for the host of the repository's SSH URL."""
        host, port = hostkeys.endpoint(repo.ssh_url)
        meta = self.http.json("GET", "/meta")
        keys = meta.get("ssh_keys") or []
        if not keys:
            raise ForgeError(f"github GET {self.http.api_url}/meta: no ssh_keys")
        name = hostkeys.known_host(host, port)
        return sorted(f"{name} {' '.join(k.split()[:2])}" for k in keys)

