"""An in-memory forge (automation.adapters.forge.base.Forge) for the Git repository controller's tests, with the
faults the controller must survive: `down` (every call raises ForgeUnavailable), `deny(scope)` (every call raises
ForgeDenied naming the scope), and `foreign(path)` (a repository someone else made, with a key of theirs).

One `MemoryForges` is the whole forge world of a test: `forge_for(kind, api_url, token, timeout=)` is the factory
the controller takes, and records the tokens it was given (so a test sees which Secret was read). Every call is
logged in `calls` as (method, path, ...)."""
from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field, replace
from typing import Mapping

from automation.adapters.forge.base import ForgeConflict, ForgeDenied, ForgeKey, ForgeUnavailable, Repository

HOST_KEY = "[forge.test]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGTrRYOZ5f7GgYyx0Kaf1Y29NgfwRdp3Tq9/KcjF08am"


def public_key(comment: str | None = None) -> str:
    """A fresh ed25519 public key in OpenSSH form (what an agent or an administrator gives as a deploy key)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    key = ed25519.Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    return f"{key} {comment}" if comment else key


@dataclass
class Stored:
    repo: Repository
    keys: dict[str, ForgeKey] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    commits: list[str] = field(default_factory=list)


class MemoryForges:
    """Every forge of a test (one store: the API URL only names it), its faults and its call log."""

    def __init__(self, *, token: str | None = None):
        self.repos: dict[str, Stored] = {}
        self.calls: list[tuple] = []
        self.tokens: list[str] = []
        self.token = token  # when set, any other token is refused (401)
        self.down = False
        self.denied: str | None = None  # a scope: every call is refused naming it
        self.failing: set[str] = set()  # methods whose next call fails (ForgeUnavailable), once each
        self._ids = itertools.count(100)
        self._lock = threading.Lock()

    # -- what a test sets up
    def fail_once(self, method: str) -> None:
        """The next call of `method` (create, seed, add_key, ...) raises ForgeUnavailable *after* it took effect
        for create (the answer lost: a timeout), before it for the others."""
        self.failing.add(method)

    def deny(self, scope: str | None) -> None:
        self.denied = scope

    def foreign(self, path: str, *, key_title: str = "theirs", key: str | None = None) -> Repository:
        """A repository at `path` made by someone else, with one deploy key of theirs."""
        repo = self._new(path, "someone else's")
        if key is not None:
            self.repos[path].keys[self._id()] = ForgeKey(self._last, key_title, _bare(key), True)
        return repo

    # -- the factory the controller takes
    def forge_for(self, kind: str, api_url: str, token: str, *, timeout: float = 30.0) -> "MemoryForge":
        self.tokens.append(token)
        return MemoryForge(self, kind, api_url, token)

    # -- reading back
    def keys_of(self, path: str) -> list[ForgeKey]:
        return list(self.repos[path].keys.values())

    def _id(self) -> str:
        self._last = str(next(self._ids))
        return self._last

    def _new(self, path: str, description: str, display_name: str | None = None) -> Repository:
        host, name = "forge.test", path
        repo = Repository(id=self._id(), path=path, http_url=f"https://{host}/{name}.git",
                          ssh_url=f"ssh://git@{host}:2222/{name}.git", description=description,
                          display_name=display_name, empty=True)
        self.repos[path] = Stored(repo)
        return repo


def _bare(key: str) -> str:
    return " ".join(key.split()[:2])


class MemoryForge:
    """One client of the MemoryForges (base.Forge)."""

    def __init__(self, world: MemoryForges, kind: str, api_url: str, token: str):
        self.world, self.kind, self.api_url, self.token = world, kind, api_url, token

    def _call(self, *what) -> None:
        self.world.calls.append(what)
        if what[0] != "create" and what[0] in self.world.failing:
            self.world.failing.discard(what[0])
            raise ForgeUnavailable(f"{self.api_url}: {what[0]} timed out")
        if self.world.down:
            raise ForgeUnavailable(f"{self.api_url}: connection refused")
        if self.world.token is not None and self.token != self.world.token:
            raise ForgeDenied(f"{self.api_url}: 401 Unauthorized")
        if self.world.denied is not None:
            raise ForgeDenied(f"{self.api_url}: 403 token does not have at least one of required scope(s): "
                              f"[{self.world.denied}]", scope=self.world.denied)

    def _stored(self, repo: Repository) -> Stored:
        stored = self.world.repos.get(repo.path)
        if stored is None or stored.repo.id != repo.id:
            raise ForgeUnavailable(f"{repo.path}: gone")  # not a case the tests make
        return stored

    def check(self) -> str:
        self._call("check")
        return "hubwright"

    def get(self, path: str) -> Repository | None:
        self._call("get", path)
        with self.world._lock:
            stored = self.world.repos.get(path)
            return stored.repo if stored else None

    def create(self, path: str, *, description: str, display_name: str | None) -> Repository:
        self._call("create", path)
        with self.world._lock:
            if path in self.world.repos:
                raise ForgeConflict(f"{path}: the repository already exists")
            repo = self.world._new(path, description, display_name)
        if "create" in self.world.failing:
            self.world.failing.discard("create")
            raise ForgeUnavailable(f"{self.api_url}: create timed out")  # made, the answer lost
        return repo

    def update(self, repo: Repository, *, description: str, display_name: str | None) -> Repository:
        self._call("update", repo.path)
        with self.world._lock:
            stored = self._stored(repo)
            stored.repo = replace(stored.repo, description=description, display_name=display_name)
            return stored.repo

    def delete(self, repo: Repository) -> None:
        self._call("delete", repo.path)
        with self.world._lock:
            self.world.repos.pop(repo.path, None)

    def seed(self, repo: Repository, files: Mapping[str, str], message: str) -> None:
        self._call("seed", repo.path, tuple(sorted(files)))
        with self.world._lock:
            stored = self._stored(repo)
            stored.files.update(files)
            stored.commits.append(message)
            stored.repo = replace(stored.repo, empty=False)

    def keys(self, repo: Repository) -> list[ForgeKey]:
        self._call("keys", repo.path)
        with self.world._lock:
            return list(self._stored(repo).keys.values())

    def add_key(self, repo: Repository, title: str, key: str, *, write: bool) -> ForgeKey:
        self._call("add_key", repo.path, title, write)
        with self.world._lock:
            stored = self._stored(repo)
            if any(held.title == title or held.key == _bare(key) for held in stored.keys.values()):
                raise ForgeConflict(f"{repo.path}: key {title} has already been added")
            held = ForgeKey(self.world._id(), title, _bare(key), not write)
            stored.keys[held.id] = held
            return held

    def delete_key(self, repo: Repository, key_id: str) -> None:
        self._call("delete_key", repo.path, key_id)
        with self.world._lock:
            self._stored(repo).keys.pop(key_id, None)

    def host_keys(self, repo: Repository) -> list[str]:
        self._call("host_keys", repo.path)
        return [HOST_KEY]
