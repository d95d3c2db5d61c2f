"""Gitea's REST API (v1, as of Gitea 1.26), tested against a real Gitea (tests/test_forge_gitea.py).

The token goes in `Authorization: token ...`. A token missing a scope is refused with 403 and the message
"token does not have at least one of required scope(s), required=[write:repository], token scope=..."
(routers/api/v1/api.go, tokenRequiresScopes): the scope named is the first of `required`. Gitea's layout is
GitHub's (rest.py's defaults); a taken name is 409, and the SSH host keys are read from its SSH server."""
from __future__ import annotations

import base64
import re

import httpx

from automation.adapters.forge.base import Repository
from automation.adapters.forge.rest import Fields, RestForge

_SCOPE = re.compile(r"required scope\(s\), required=\[([^\]\s,]+)")


class Gitea(RestForge):
    """`api_url`: the API root, e.g. https://gitea.example.com/api/v1."""

    kind = "gitea"
    fields = Fields(path="full_name", http_url="clone_url", ssh_url="ssh_url", empty="empty")
    per_page = 50  # Gitea's default MAX_RESPONSE_ITEMS
    size_param = "limit"
    taken = (409,)

    def _headers(self, token: str) -> dict[str, str]:
        return {"Authorization": f"token {token}", "Accept": "application/json"}

    def _scope_of(self, response: httpx.Response) -> str | None:
        found = _SCOPE.search(response.text)
        return found[1] if found else None

    def _commit(self, repo: Repository, files: list[tuple[str, str]], message: str) -> None:
        """One commit with every file (ChangeFiles, POST /repos/{o}/{r}/contents), which Gitea allows on an
        empty repository: it creates the default branch."""
        self.http.call("POST", f"{self._url(repo)}/contents", json={
            "message": message,
            "files": [{"operation": "create", "path": path,
                       "content": base64.b64encode(content.encode()).decode()}
                      for path, content in files]})
