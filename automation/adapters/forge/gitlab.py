"""GitLab's REST API v4, written to its documentation (docs.gitlab.com/api: projects, namespaces, deploy_keys,
commits) and tested against recorded responses (tests/test_forge_recorded.py), not a running GitLab.

A project is addressed by its URL-encoded path (group%2Fname). The token goes in `PRIVATE-TOKEN`. A token
without the scope is refused with 403 {"error": "insufficient_scope", ..., "scope": "api"} (and the same in
WWW-Authenticate); a taken name is 400 {"message": {"name": ["has already been taken"], ...}}. GitLab has no API
for its SSH host keys: they are read from its SSH server (hostkeys.py), like Gitea's."""
from __future__ import annotations

import re
from typing import Any

import httpx

from automation.adapters.forge.base import ForgeConflict, ForgeError, Repository
from automation.adapters.forge.http import segment, split_path
from automation.adapters.forge.rest import Fields, RestForge

_HEADER_SCOPE = re.compile(r'scope="([^"]+)"')
DEFAULT_BRANCH = "main"


def _taken(error: ForgeError) -> bool:
    return "has already been taken" in str(error)


class GitLab(RestForge):
    """`api_url`: the API root, e.g. https://gitlab.example.com/api/v4."""

    kind = "gitlab"
    fields = Fields(path="path_with_namespace", http_url="http_url_to_repo", ssh_url="ssh_url_to_repo",
                    display_name="name", empty="empty_repo")
    user_field = "username"
    per_page = 100
    deploy_keys = "deploy_keys"

    def _headers(self, token: str) -> dict[str, str]:
        return {"PRIVATE-TOKEN": token, "Accept": "application/json"}

    def _scope_of(self, response: httpx.Response) -> str | None:
        try:
            body = response.json()
        except ValueError:
            body = None
        if isinstance(body, dict) and body.get("error") == "insufficient_scope" and body.get("scope"):
            return str(body["scope"])
        found = _HEADER_SCOPE.search(response.headers.get("www-authenticate", ""))
        return found[1] if found and "insufficient_scope" in response.headers.get("www-authenticate", "") else None

    def _locate(self, path: str) -> str:
        split_path(path)
        return f"/projects/{segment(path)}"

    def _url(self, repo: Repository) -> str:
        return f"/projects/{repo.id}"

    def _access(self, write: bool) -> dict[str, bool]:
        return {"can_push": write}

    def _read_only(self, body: dict[str, Any]) -> bool:
        return not body.get("can_push", False)

    def create(self, path: str, *, description: str, display_name: str | None) -> Repository:
        """In the namespace `owner` (a user's or a group's, looked up by its full path), private, no README."""
        owner, name = split_path(path)
        namespace = self.http.json("GET", f"/namespaces/{segment(owner)}", missing_ok=True)
        if namespace is None:
            raise ForgeError(f"gitlab: no namespace {owner!r} (user or group) the token can see")
        try:
            body = self.http.json("POST", "/projects", json={
                "name": display_name or name, "path": name, "namespace_id": namespace["id"],
                "description": description, "visibility": "private", "initialize_with_readme": False})
        except ForgeError as exc:
            if type(exc) is ForgeError and _taken(exc):  # 400 {"message": {"path": ["has already been taken"]}}
                raise ForgeConflict(str(exc)) from None
            raise
        return self._repository(body)

    def update(self, repo: Repository, *, description: str, display_name: str | None) -> Repository:
        change: dict[str, Any] = {"description": description}
        if display_name:
            change["name"] = display_name
        return self._repository(self.http.json("PUT", self._url(repo), json=change))

    def _commit(self, repo: Repository, files: list[tuple[str, str]], message: str) -> None:
        """One commit with every file (POST /projects/:id/repository/commits, actions "create"); on an empty
        project the branch is created by it."""
        self.http.call("POST", f"{self._url(repo)}/repository/commits", json={
            "branch": DEFAULT_BRANCH, "commit_message": message,
            "actions": [{"action": "create", "file_path": path, "content": content} for path, content in files]})
