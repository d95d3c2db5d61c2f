"""A real Gitea on 127.0.0.1, the forge the registry's Git repositories are tested against.

`.tools/bin/gitea` (v1.26.0) and its static files (`.tools/share/gitea`) are built by scripts/gitea.sh, which
scripts/tools.sh calls; without them these tests FAIL (never skip) saying so.

The forge itself is the sandbox's (automation/sandbox/gitea.py: one copy of the config, the process, the admin
and its tokens; `python -m automation sandbox up --forge` runs it for a person): each :class:`Gitea` here runs it
from .tools in a temp dir, on this worker's free ports, and adds the tests' httpx calls (`request`) and users.

Fixtures:

* ``gitea`` (session): one forge for the whole run; ``gitea.url``, ``gitea.api``, ``gitea.ssh_host``,
  ``gitea.ssh_port``, ``gitea.admin``, ``gitea.token`` (all scopes).
* ``fresh_gitea`` (function): a forge of its own, for a test that stops it (`stop()` / `start()`).

Plain module, no pytest needed to use it: ``with start_gitea() as forge: ...``.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import httpx
import pytest

import automation.sandbox.gitea as forge_core
from automation.sandbox.gitea import ADMIN, ALL_SCOPES, TOKEN  # noqa: F401
from doubles.ports import free_port as _free_port

ROOT = Path(__file__).resolve().parent.parent
BINARY = ROOT / ".tools" / "bin" / "gitea"
STATIC = ROOT / ".tools" / "share" / "gitea"
MISSING = (f"no Gitea at {BINARY} (or its static files at {STATIC}): run scripts/tools.sh, which builds "
           "Gitea v1.26.0 with scripts/gitea.sh")


class Gitea(forge_core.Gitea):
    """The sandbox's Gitea (automation/sandbox/gitea.py: config, process, admin, tokens) from .tools, on this
    worker's ports, with the tests' httpx calls."""

    def __init__(self, work: Path):
        if not (BINARY.exists() and os.access(BINARY, os.X_OK) and (STATIC / "options" / "locale").is_dir()):
            pytest.fail(MISSING, pytrace=False)
        super().__init__(work, str(BINARY), STATIC, port=_free_port, name="hubwright test forge")

    def request(self, method: str, path: str, *, token: str | None = None, **kwargs) -> httpx.Response:
        """An API call as the admin (or with `token`); raises on an error status."""
        headers = {"Authorization": f"token {token or self.token}"}
        response = httpx.request(method, f"{self.api}{path}", headers=headers, timeout=30, **kwargs)
        response.raise_for_status()
        return response

    def create_user(self, name: str | None = None) -> tuple[str, str]:
        """Another (non-admin) user and an all-scopes token of theirs: (name, token)."""
        name = name or f"user-{secrets.token_hex(3)}"
        self.request("POST", "/admin/users", json={
            "username": name, "email": f"{name}@example.invalid", "password": secrets.token_urlsafe(18),
            "must_change_password": False})
        return name, self.make_token(name)


@contextlib.contextmanager
def start_gitea() -> Iterator[Gitea]:
    """A fresh Gitea, started, with its admin and token; stopped and removed afterwards."""
    work = Path(tempfile.mkdtemp(prefix="hubwright-gitea-"))
    forge = Gitea(work)
    try:
        forge.start()
        forge.bootstrap()
        yield forge
    finally:
        forge.stop()
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="session")
def gitea() -> Iterator[Gitea]:
    with start_gitea() as forge:
        yield forge


@pytest.fixture
def fresh_gitea() -> Iterator[Gitea]:
    with start_gitea() as forge:
        yield forge
