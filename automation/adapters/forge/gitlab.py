"""GitLab's REST API v4, written to its documentation (docs.gitlab.com/api: projects, namespaces, deploy_keys,
commits) and tested against recorded responses (tests/test_forge_recorded.py), not a running GitLab.

A project is addressed by its URL-encoded path (group%2Fname). The token goes in `PRIVATE-TOKEN`. A token
without the scope is refused with 403 {"error": "insufficient_scope", ..., "scope": "api"} (and the same in
WWW-Authenticate); a taken name is 400 {"message": {"name": ["has already been taken"], ...}}. GitLab has no API
for its SSH host keys: they are read from its SSH server (hostkeys.py), like Gitea's."""
from __future__ import annotations

import re
from typing import Any, Mapping

import httpx

from automation.adapters.forge import hostkeys
from automation.adapters.forge.base import ForgeConflict, ForgeError, ForgeKey, Repository
from automation.adapters.forge.http import DEFAULT_TIMEOUT, Http, file_parts, segment, split_path

_PER_PAGE = 100
_HEADER_SCOPE = re.compile(r'scope="([^"]+)"')
DEFAULT_BRANCH = "main"


def _scope_of(response: httpx.Response) -> str | None:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("error") == "insufficient_scope" and body.get("scope"):
        return str(body["scope"])
    found = _HEADER_SCOPE.search(response.headers.get("www-authenticate", ""))
    return found[1] if found and "insufficient_scope" in response.headers.get("www-authenticate", "") else None


def _repository(body: dict[str, Any]) -> Repository:
    return Repository(id=str(body["id"]), path=body["path_with_namespace"], http_url=body["http_url_to_repo"],
                      ssh_url=body["ssh_url_to_repo"], description=body.get("description") or "",
                      display_name=body.get("name"), empty=bool(body.get("empty_repo")))


def _key(body: dict[str, Any]) -> ForgeKey:
    return ForgeKey(id=str(body["id"]), title=body.get("title") or "", key=" ".join(body["key"].split()[:2]),
                    read_only=not body.get("can_push", False))


def _taken(error: ForgeError) -> bool:
    return "has already been taken" in str(error)


class GitLab:
    kind = "gitlab"

    def __init__(self, api_url: str, token: str, *, timeout: float = DEFAULT_TIMEOUT,
                 transport: httpx.BaseTransport | None = None):
        """`api_url`: the API root, e.g. https://gitlab.example.com/api/v4."""
        self.timeout = timeout
        self.http = Http(self.kind, api_url, token, {"PRIVATE-TOKEN": token, "Accept": "application/json"},
                         timeout=timeout, transport=transport, scope_of=_scope_of)

    def close(self) -> None:
        """Close its connections (an adapter is cheap to make; one per forge and token may be kept)."""
        self.http.close()

    def check(self) -> str:
        return self.http.json("GET", "/user")["username"]

    def get(self, path: str) -> Repository | None:
        split_path(path)
        body = self.http.json("GET", f"/projects/{segment(path)}", missing_ok=True)
        return _repository(body) if body else None

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
        return _repository(body)

    def update(self, repo: Repository, *, description: str, display_name: str | None) -> Repository:
        change: dict[str, Any] = {"description": description}
        if display_name:
            change["name"] = display_name
        return _repository(self.http.json("PUT", f"/projects/{repo.id}", json=change))

    def delete(self, repo: Repository) -> None:
        self.http.call("DELETE", f"/projects/{repo.id}", missing_ok=True)

    def seed(self, repo: Repository, files: Mapping[str, str], message: str) -> None:
        """One commit with every file (POST /projects/:id/repository/commits, actions "create"); on an empty
        project the branch is created by it."""
        if not files:
            raise ForgeError(f"gitlab seed {repo.path}: no files to commit")
        for path in files:
            file_parts(path)
        self.http.call("POST", f"/projects/{repo.id}/repository/commits", json={
            "branch": DEFAULT_BRANCH, "commit_message": message,
            "actions": [{"action": "create", "file_path": path, "content": content}
                        for path, content in sorted(files.items())]})

    def keys(self, repo: Repository) -> list[ForgeKey]:
        return [_key(k) for k in self.http.pages(f"/projects/{repo.id}/deploy_keys", per_page=_PER_PAGE)]

    def add_key(self, repo: Repository, title: str, key: str, *, write: bool) -> ForgeKey:
        return _key(self.http.json("POST", f"/projects/{repo.id}/deploy_keys",
                                   json={"title": title, "key": key, "can_push": write}))

    def delete_key(self, repo: Repository, key_id: str) -> None:
        self.http.call("DELETE", f"/projects/{repo.id}/deploy_keys/{segment(key_id)}", missing_ok=True)

    def host_keys(self, repo: Repository) -> list[str]:
        host, port = hostkeys.endpoint(repo.ssh_url)
        return hostkeys.scan(host, port, timeout=self.timeout)
