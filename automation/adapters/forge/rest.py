"""The skeleton every forge adapter shares (gitea.py, gitlab.py, github.py): the one Http client (http.py: a
timeout on every call, the errors, the pages) made from the forge's headers and its way of naming a missing
scope; the token's user; a Repository read from the forge's answer by the names of its fields; the seed's checks
before any request; deploy keys listed, added and removed; the host keys read from the forge's SSH server
(hostkeys.py). An adapter says only what differs: its headers, fields and URLs, and the calls that are its own.

The defaults follow the layout Gitea copies from GitHub: /repos/{owner}/{name}, a create under /user/repos or
/orgs/{owner}/repos, a change with PATCH, deploy keys at .../keys with `read_only`. GitLab's adapter replaces
them with its own."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Collection, Mapping

import httpx

from automation.adapters.forge import hostkeys
from automation.adapters.forge.base import ForgeError, ForgeKey, Repository
from automation.adapters.forge.http import DEFAULT_TIMEOUT, Http, file_parts, reason, segment, split_path


@dataclass(frozen=True)
class Fields:
    """Where a forge's answer about a repository keeps what a Repository holds."""

    path: str  # owner/name as the forge spells it
    http_url: str
    ssh_url: str
    display_name: str | None = None  # None: the forge has no display name
    empty: str | None = None  # None: the answer does not say (the adapter finds out: RestForge._empty)


class RestForge(ABC):
    """One forge's REST API at `api_url` (its API root), every call within `timeout` seconds. `transport` is for
    tests (recorded responses)."""

    kind: str  # gitea, gitlab, github
    fields: ClassVar[Fields]
    user_field: ClassVar[str] = "login"  # the user name in GET /user
    per_page: ClassVar[int]  # deploy keys asked for per page
    size_param: ClassVar[str] = "per_page"  # the query parameter saying how many
    deploy_keys: ClassVar[str] = "keys"  # below the repository's URL
    taken: ClassVar[Collection[int]] = ()  # the statuses of a create that mean the name is taken

    def __init__(self, api_url: str, token: str, *, timeout: float = DEFAULT_TIMEOUT,
                 transport: httpx.BaseTransport | None = None):
        self.timeout = timeout
        self.http = Http(self.kind, api_url, token, self._headers(token), timeout=timeout, transport=transport,
                         scope_of=self._scope_of, message_of=self._message_of)
        self._user: str | None = None

    # ------------------------------------------------------------------- what each forge says
    @abstractmethod
    def _headers(self, token: str) -> dict[str, str]:
        """Every call's headers: the token, and what the forge wants to be asked for."""

    def _scope_of(self, response: httpx.Response) -> str | None:
        """The scope a 401/403 says the token lacks, None when it names none."""
        return None

    def _message_of(self, response: httpx.Response) -> str:
        """The forge's own words in a refusal."""
        return reason(response)

    def _locate(self, path: str) -> str:
        """The URL of the repository at owner/name (a path that is not one is refused before any request)."""
        owner, name = split_path(path)
        return f"/repos/{segment(owner)}/{segment(name)}"

    def _url(self, repo: Repository) -> str:
        """The URL of a repository the forge answered with."""
        return self._locate(repo.path)

    def _empty(self, body: dict[str, Any]) -> bool | None:
        """Whether the repository of this answer has no commit yet; None: the answer says (Fields.empty)."""
        return None

    def _access(self, write: bool) -> dict[str, bool]:
        """A new deploy key's rights, as the forge is told them."""
        return {"read_only": not write}

    def _read_only(self, body: dict[str, Any]) -> bool:
        """A deploy key's rights, as the forge tells them."""
        return bool(body.get("read_only"))

    @abstractmethod
    def _commit(self, repo: Repository, files: list[tuple[str, str]], message: str) -> None:
        """The first commit of an empty repository: these files (checked, sorted), on its default branch."""

    # ------------------------------------------------------------------- the Forge interface (base.Forge)
    def close(self) -> None:
        """Close its connections (an adapter is cheap to make; one per forge and token may be kept)."""
        self.http.close()

    def check(self) -> str:
        self._user = self.http.json("GET", "/user")[self.user_field]
        return self._user

    def get(self, path: str) -> Repository | None:
        body = self.http.json("GET", self._locate(path), missing_ok=True)
        return self._repository(body, empty=self._empty(body)) if body else None

    def create(self, path: str, *, description: str, display_name: str | None) -> Repository:
        """Private and without a first commit, under the token's user or else the organisation `owner`."""
        owner, name = split_path(path)
        user = self._user or self.check()
        where = "/user/repos" if owner.lower() == user.lower() else f"/orgs/{segment(owner)}/repos"
        body = self.http.json("POST", where, json={"name": name, "description": description, "private": True,
                                                   "auto_init": False}, conflict=self.taken)
        # Where the answer does not say: made without a first commit, so empty.
        return self._repository(body, empty=None if self.fields.empty else True)

    def update(self, repo: Repository, *, description: str, display_name: str | None) -> Repository:
        body = self.http.json("PATCH", self._url(repo), json={"description": description})
        # Where the answer does not say: a change of description leaves it as empty as it was.
        return self._repository(body, empty=None if self.fields.empty else repo.empty)

    def delete(self, repo: Repository) -> None:
        self.http.call("DELETE", self._url(repo), missing_ok=True)

    def seed(self, repo: Repository, files: Mapping[str, str], message: str) -> None:
        """Every file's path is checked before the first request (file_parts: none may leave the repository)."""
        if not files:
            raise ForgeError(f"{self.kind} seed {repo.path}: no files to commit")
        for path in files:
            file_parts(path)
        self._commit(repo, sorted(files.items()), message)

    def keys(self, repo: Repository) -> list[ForgeKey]:
        return [self._key(k) for k in self.http.pages(f"{self._url(repo)}/{self.deploy_keys}",
                                                       per_page=self.per_page, size_param=self.size_param)]

    def add_key(self, repo: Repository, title: str, key: str, *, write: bool) -> ForgeKey:
        return self._key(self.http.json("POST", f"{self._url(repo)}/{self.deploy_keys}",
                                        json={"title": title, "key": key, **self._access(write)}))

    def delete_key(self, repo: Repository, key_id: str) -> None:
        self.http.call("DELETE", f"{self._url(repo)}/{self.deploy_keys}/{segment(key_id)}", missing_ok=True)

    def host_keys(self, repo: Repository) -> list[str]:
        """Read from the SSH server of repo.ssh_url (ssh-keyscan), within the timeout."""
        host, port = hostkeys.endpoint(repo.ssh_url)
        return hostkeys.scan(host, port, timeout=self.timeout)

    # ------------------------------------------------------------------- answers
    def _repository(self, body: dict[str, Any], *, empty: bool | None = None) -> Repository:
        """The forge's answer as a Repository; `empty` when the answer does not say it."""
        fields = self.fields
        return Repository(id=str(body["id"]), path=body[fields.path], http_url=body[fields.http_url],
                          ssh_url=body[fields.ssh_url], description=body.get("description") or "",
                          display_name=body.get(fields.display_name) if fields.display_name else None,
                          empty=bool(body.get(fields.empty)) if empty is None and fields.empty else bool(empty))

    def _key(self, body: dict[str, Any]) -> ForgeKey:
        return ForgeKey(id=str(body["id"]), title=body.get("title") or "", key=" ".join(body["key"].split()[:2]),
                        read_only=self._read_only(body))
