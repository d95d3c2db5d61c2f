"""Gitea's REST API (v1, as of Gitea 1.26), tested against a real Gitea (tests/test_forge_gitea.py).

The token goes in `Authorization: token ...`. A token missing a scope is refused with 403 and the message
"token does not have at least one of required scope(s), required=[write:repository], token scope=..."
(routers/api/v1/api.go, tokenRequiresScopes): the scope named is the first of `required`."""
from __future__ import annotations

import base64
import re
from typing import Any, Mapping

import httpx

from automation.adapters.forge import hostkeys
from automation.adapters.forge.base import ForgeError, ForgeKey, Repository
from automation.adapters.forge.http import DEFAULT_TIMEOUT, Http, file_parts, segment, split_path

_SCOPE = re.compile(r"required scope\(s\), required=\[([^\]\s,]+)")
_PER_PAGE = 50  # Gitea's default MAX_RESPONSE_ITEMS


def _scope_of(response: httpx.Response) -> str | None:
    found = _SCOPE.search(response.text)
    return found[1] if found else None


def _repository(body: dict[str, Any]) -> Repository:
    return Repository(id=str(body["id"]), path=body["full_name"], http_url=body["clone_url"],
                      ssh_url=body["ssh_url"], description=body.get("description") or "",
                      display_name=None, empty=bool(body.get("empty")))


def _key(body: dict[str, Any]) -> ForgeKey:
    return ForgeKey(id=str(body["id"]), title=body.get("title") or "", key=" ".join(body["key"].split()[:2]),
                    read_only=bool(body.get("read_only")))


class Gitea:
    kind = "gitea"

    def __init__(self, api_url: str, token: str, *, timeout: float = DEFAULT_TIMEOUT,
                 transport: httpx.BaseTransport | None = None):
        """`api_url`: the API root, e.g. https://gitea.example.com/api/v1."""
        self.timeout = timeout
        self.http = Http(self.kind, api_url, token, {"Authorization": f"token {token}", "Accept": "application/json"},
                         timeout=timeout, transport=transport, scope_of=_scope_of)
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

    def get(self, path: str) -> Repository | None:
        body = self.http.json("GET", self._repo_path(path), missing_ok=True)
        return _repository(body) if body else None

    def create(self, path: str, *, description: str, display_name: str | None) -> Repository:
        owner, name = split_path(path)
        user = self._user or self.check()
        where = "/user/repos" if owner.lower() == user.lower() else f"/orgs/{segment(owner)}/repos"
        body = self.http.json("POST", where, json={"name": name, "description": description, "private": True,
                                                   "auto_init": False}, conflict=(409,))
        return _repository(body)

    def update(self, repo: Repository, *, description: str, display_name: str | None) -> Repository:
        return _repository(self.http.json("PATCH", self._repo_path(repo.path), json={"description": description}))

    def delete(self, repo: Repository) -> None:
        self.http.call("DELETE", self._repo_path(repo.path), missing_ok=True)

    def seed(self, repo: Repository, files: Mapping[str, str], message: str) -> None:
        """One commit with every file (ChangeFiles, POST /repos/{o}/{r}/contents), which Gitea allows on an
        empty repository: it creates the default branch."""
        if not files:
            raise ForgeError(f"gitea seed {repo.path}: no files to commit")
        for path in files:
            file_parts(path)
        self.http.call("POST", f"{self._repo_path(repo.path)}/contents", json={
            "message": message,
            "files": [{"operation": "create", "path": path,
                       "content": base64.b64encode(content.encode()).decode()}
                      for path, content in sorted(files.items())]})

    def keys(self, repo: Repository) -> list[ForgeKey]:
        return [_key(k) for k in self.http.pages(f"{self._repo_path(repo.path)}/keys", per_page=_PER_PAGE,
                                                  size_param="limit")]

    def add_key(self, repo: Repository, title: str, key: str, *, write: bool) -> ForgeKey:
        return _key(self.http.json("POST", f"{self._repo_path(repo.path)}/keys",
                                   json={"title": title, "key": key, "read_only": not write}))

    def delete_key(self, repo: Repository, key_id: str) -> None:
        self.http.call("DELETE", f"{self._repo_path(repo.path)}/keys/{segment(key_id)}", missing_ok=True)

    def host_keys(self, repo: Repository) -> list[str]:
        host, port = hostkeys.endpoint(repo.ssh_url)
        return hostkeys.scan(host, port, timeout=self.timeout)
