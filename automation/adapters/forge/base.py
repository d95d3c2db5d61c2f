"""What the Git repository controller asks of a forge (automation/service/gitrepos.py), and how a forge fails.

One interface, one implementation per forge API. Every call has a timeout; every failure is one of:

- ForgeUnavailable: no answer, a timeout, or a 5xx: retried with backoff (the HubGitRepo says Retrying);
- ForgeDenied: 401/403, with `scope` naming the token scope the forge says is missing when it says one (Stalled,
  naming the scope);
- ForgeConflict: the forge refuses a create because the name is taken (Stalled: refused, never adopted);
- ForgeError: anything else the forge refused (Stalled, with its message).

Tokens never appear in a message.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Protocol


class ForgeError(Exception):
    """The forge refused a request; the message says which and why (never the token)."""


class ForgeUnavailable(ForgeError):
    """No answer in time, a refused connection, or a 5xx: try again later."""


class ForgeDenied(ForgeError):
    """401 or 403. `scope`: the token scope the forge says is missing, when it says one."""

    def __init__(self, message: str, scope: str | None = None):
        super().__init__(message)
        self.scope = scope


class ForgeConflict(ForgeError):
    """The name is taken on the forge."""


@dataclass(frozen=True)
class Repository:
    id: str  # the forge's ID, as text
    path: str  # owner/name as the forge spells it
    http_url: str  # HTTPS clone URL
    ssh_url: str  # SSH clone URL (ssh://git@host:port/owner/name.git or git@host:owner/name.git)
    description: str
    display_name: str | None = None  # GitLab's project name; None where the forge has none
    empty: bool = False  # no commit yet


@dataclass(frozen=True)
class ForgeKey:
    id: str
    title: str
    key: str  # "<type> <base64>" as the forge returns it (comment dropped)
    read_only: bool


class Forge(Protocol):
    kind: str  # gitea, gitlab, github

    def check(self) -> str:
        """The token's user name; ForgeDenied when the token is refused."""
        ...

    def get(self, path: str) -> Repository | None:
        """The repository at owner/name, None when there is none."""
        ...

    def create(self, path: str, *, description: str, display_name: str | None) -> Repository:
        """Create an empty repository under its owner (the token's user, or an organisation/group); ForgeConflict
        when the name is taken."""
        ...

    def update(self, repo: Repository, *, description: str, display_name: str | None) -> Repository:
        ...

    def delete(self, repo: Repository) -> None:
        """Delete it; gone already is fine."""
        ...

    def seed(self, repo: Repository, files: Mapping[str, str], message: str) -> None:
        """The first commit of an empty repository: these files, on its default branch."""
        ...

    def keys(self, repo: Repository) -> list[ForgeKey]:
        ...

    def add_key(self, repo: Repository, title: str, key: str, *, write: bool) -> ForgeKey:
        ...

    def delete_key(self, repo: Repository, key_id: str) -> None:
        """Remove a deploy key; gone already is fine."""
        ...

    def host_keys(self, repo: Repository) -> list[str]:
        """The forge's SSH host keys as known_hosts lines for the host of repo.ssh_url."""
        ...
