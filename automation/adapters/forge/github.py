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
from automation.adapters.forge.base import ForgeConflict, ForgeError, Repository
from automation.adapters.forge.http import file_parts, plain_text, segment
from automation.adapters.forge.rest import Fields, RestForge


class GitHub(RestForge):
    """`api_url`: https://api.github.com, or https://<host>/api/v3 for GitHub Enterprise Server."""

    kind = "github"
    fields = Fields(path="full_name", http_url="clone_url", ssh_url="ssh_url")  # no "empty": _empty asks
    per_page = 100
    taken = (422,)

    def _headers(self, token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": "2022-11-28"}

    def _scope_of(self, response: httpx.Response) -> str | None:
        """The scope the token lacks: the accepted scopes it does not have (classic tokens), or the permission a
        fine-grained token needs."""
        accepted = [s.strip() for s in response.headers.get("x-accepted-oauth-scopes", "").split(",") if s.strip()]
        has = {s.strip() for s in response.headers.get("x-oauth-scopes", "").split(",") if s.strip()}
        if accepted and not has & set(accepted):
            return ", ".join(accepted)
        permissions = response.headers.get("x-accepted-github-permissions", "").strip()
        return permissions or None

    def _message_of(self, response: httpx.Response) -> str:
        try:
            body = response.json()
        except ValueError:
            return plain_text(response.text)
        if not isinstance(body, dict):
            return str(body)
        errors = "; ".join(e.get("message") or f"{e.get('field')} {e.get('code')}" for e in body.get("errors") or []
                           if isinstance(e, dict))
        return f"{body.get('message', '')}{': ' + errors if errors else ''}"

    def _empty(self, body: dict[str, Any]) -> bool:
        """GitHub has no "empty" field: a size of 0 may be an empty repository or a stale size, so ask for its
        commits, which an empty repository answers with 409 "Git Repository is empty."."""
        if body.get("size"):
            return False
        try:
            response = self.http.call("GET", f"{self._locate(body['full_name'])}/commits", params={"per_page": 1},
                                      missing_ok=True, conflict=(409,))
        except ForgeConflict:
            return True
        return response is None or response.json() == []

    def seed(self, repo: Repository, files: Mapping[str, str], message: str) -> None:
        """One root commit with every file. The paths are checked in commit (sorted) order, so of two refused
        paths the first sorted is named."""
        for path in sorted(files):
            file_parts(path)
        super().seed(repo, files, message)

    def _commit(self, repo: Repository, files: list[tuple[str, str]], message: str) -> None:
        """The git database API refuses an empty repository (409), so the first file goes in with PUT /contents
        (which makes the default branch); with more files, one tree of them all, a parentless commit of it, and
        the branch moved to it (force: it replaces the one-file commit, so the history is that single commit)."""
        base = self._url(repo)
        first_path, first_content = files[0]
        self.http.call("PUT", f"{base}/contents/{'/'.join(segment(p) for p in file_parts(first_path))}",
                       json={"message": message, "content": base64.b64encode(first_content.encode()).decode()})
        if len(files) == 1:
            return
        branch = self.http.json("GET", base)["default_branch"]
        tree = self.http.json("POST", f"{base}/git/trees", json={
            "tree": [{"path": p, "mode": "100644", "type": "blob", "content": c} for p, c in files]})
        commit = self.http.json("POST", f"{base}/git/commits",
                                json={"message": message, "tree": tree["sha"], "parents": []})
        self.http.call("PATCH", f"{base}/git/refs/heads/{segment(branch)}",
                       json={"sha": commit["sha"], "force": True})

    def host_keys(self, repo: Repository) -> list[str]:
        """GET /meta's ssh_keys, for the host of the repository's SSH URL."""
        host, port = hostkeys.endpoint(repo.ssh_url)
        meta = self.http.json("GET", "/meta")
        keys = meta.get("ssh_keys") or []
        if not keys:
            raise ForgeError(f"github GET {self.http.api_url}/meta: no ssh_keys")
        name = hostkeys.known_host(host, port)
        return sorted(f"{name} {' '.join(k.split()[:2])}" for k in keys)
