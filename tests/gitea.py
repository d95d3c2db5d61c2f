"""A real Gitea on 127.0.0.1, the forge the registry's Git repositories are tested against.

`.tools/bin/gitea` (v1.26.0) and its static files (`.tools/share/gitea`) are built by scripts/gitea.sh, which
scripts/tools.sh calls; without them these tests FAIL (never skip) saying so.

Each :class:`Gitea` runs in its own temp dir: a free HTTP port and a free SSH port on loopback, SQLite,
INSTALL_LOCK, Gitea's built-in SSH server (its host key an ed25519 key made here with ssh-keygen: Gitea would
otherwise spend seconds on a 4096-bit RSA key), registration off, offline, no mailer, no cron, logs to files.
Gitea refuses to run as root unless told it may, so as root I_AM_BEING_UNSAFE_RUNNING_AS_ROOT is set.

The admin is made with `gitea admin user create --admin`, its tokens with `gitea admin user
generate-access-token --scopes ...` (the CLI, as a hub administrator would); other users and organisations
through the admin API.

Fixtures:

* ``gitea`` (session): one forge for the whole run; ``gitea.url``, ``gitea.api``, ``gitea.ssh_host``,
  ``gitea.ssh_port``, ``gitea.admin``, ``gitea.token`` (all scopes).
* ``fresh_gitea`` (function): a forge of its own, for a test that stops it (`stop()` / `start()`).

Plain module, no pytest needed to use it: ``with start_gitea() as forge: ...``.
"""
from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from doubles.ports import free_port as _free_port

TOKEN = re.compile(r"[0-9a-f]{40}")  # an access token as Gitea prints it (a SHA-1's hex)

ROOT = Path(__file__).resolve().parent.parent
BINARY = ROOT / ".tools" / "bin" / "gitea"
STATIC = ROOT / ".tools" / "share" / "gitea"
MISSING = (f"no Gitea at {BINARY} (or its static files at {STATIC}): run scripts/tools.sh, which builds "
           "Gitea v1.26.0 with scripts/gitea.sh")
ADMIN = "hubwright-admin"
ALL_SCOPES = "all"



def _app_ini(work: Path, http_port: int, ssh_port: int, host_key: Path) -> str:
    user = os.environ.get("USER") or subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip()
    root = "\nI_AM_BEING_UNSAFE_RUNNING_AS_ROOT = true" if os.geteuid() == 0 else ""
    return f"""\
APP_NAME = hubwright test forge
RUN_USER = {user}
RUN_MODE = prod
WORK_PATH = {work}{root}

[server]
PROTOCOL = http
HTTP_ADDR = 127.0.0.1
HTTP_PORT = {http_port}
DOMAIN = 127.0.0.1
ROOT_URL = http://127.0.0.1:{http_port}/
APP_DATA_PATH = {work}/data
STATIC_ROOT_PATH = {STATIC}
OFFLINE_MODE = true
DISABLE_SSH = false
START_SSH_SERVER = true
BUILTIN_SSH_SERVER_USER = git
SSH_DOMAIN = 127.0.0.1
SSH_LISTEN_HOST = 127.0.0.1
SSH_PORT = {ssh_port}
SSH_LISTEN_PORT = {ssh_port}
SSH_SERVER_HOST_KEYS = {host_key}
LFS_START_SERVER = false

[database]
DB_TYPE = sqlite3
PATH = {work}/data/gitea.db
SQLITE_JOURNAL_MODE = WAL

[security]
INSTALL_LOCK = true
SECRET_KEY = {secrets.token_hex(32)}
INTERNAL_TOKEN = {secrets.token_urlsafe(64)}
PASSWORD_HASH_ALGO = pbkdf2_hi

[oauth2]
ENABLED = false

[service]
DISABLE_REGISTRATION = true
DEFAULT_ALLOW_CREATE_ORGANIZATION = true

[repository]
ROOT = {work}/repos
DEFAULT_BRANCH = main

[indexer]
ISSUE_INDEXER_TYPE = db
REPO_INDEXER_ENABLED = false

[queue]
TYPE = channel

[session]
PROVIDER = memory

[cache]
ADAPTER = memory

[mailer]
ENABLED = false

[cron]
ENABLED = false

[cron.update_checker]
ENABLED = false

[actions]
ENABLED = false

[packages]
ENABLED = false

[log]
MODE = file
LEVEL = Info
ROOT_PATH = {work}/log
"""


class Gitea:
    """One Gitea process over one temp dir; `stop()` / `start()` keep its data, ports and host key."""

    def __init__(self, work: Path):
        if not (BINARY.exists() and os.access(BINARY, os.X_OK) and (STATIC / "options" / "locale").is_dir()):
            pytest.fail(MISSING, pytrace=False)
        self.work = work
        self.http_port = _free_port()
        self.ssh_port = _free_port()
        self.ssh_host = "127.0.0.1"
        self.url = f"http://127.0.0.1:{self.http_port}"
        self.api = f"{self.url}/api/v1"
        self.admin = ADMIN
        self.password = secrets.token_urlsafe(18)
        self.token = ""
        self.config = work / "app.ini"
        self.host_key = work / "ssh" / "host_ed25519"
        self.host_key.parent.mkdir(parents=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(self.host_key)],
                       check=True, capture_output=True)
        self.config.write_text(_app_ini(work, self.http_port, self.ssh_port, self.host_key))
        self.process: subprocess.Popen | None = None
        self.start_seconds = 0.0  # how long the last start() took until /api/healthz answered

    # -- the process ------------------------------------------------------------------------------------------
    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GITEA_")}
        env.update(GITEA_WORK_DIR=str(self.work), HOME=str(self.work), GIT_CONFIG_NOSYSTEM="1")
        return env

    def _cli(self, *args: str) -> str:
        done = subprocess.run([str(BINARY), *args, "--config", str(self.config), "--work-path", str(self.work)],
                              capture_output=True, text=True, env=self._env(), cwd=self.work, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"gitea {' '.join(args[:3])} failed ({done.returncode}): {done.stderr or done.stdout}")
        return done.stdout

    def start(self, timeout: float = 60.0) -> None:
        assert self.process is None, "already running"
        t0 = time.monotonic()
        log = open(self.work / "stdout.log", "ab")
        self.process = subprocess.Popen(
            [str(BINARY), "web", "--config", str(self.config), "--work-path", str(self.work)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self._env(), cwd=self.work)
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                code, self.process = self.process.returncode, None
                raise RuntimeError(f"gitea exited with {code} before it was ready:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/api/healthz", timeout=1).status_code == 200 and self._ssh_listens():
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"gitea did not answer /api/healthz on {self.url} within {timeout}s:\n"
                                   f"{self.log_tail()}")
            time.sleep(0.05)
        self.start_seconds = time.monotonic() - t0

    def _ssh_listens(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection((self.ssh_host, self.ssh_port), timeout=1):
            return True
        return False

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def log_tail(self, lines: int = 30) -> str:
        out = []
        for path in [self.work / "stdout.log", *sorted((self.work / "log").glob("*.log"))]:
            if path.exists():
                out.append(f"--- {path.name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(out)

    # -- users, organisations, tokens ---------------------------------------------------------------------------
    def bootstrap(self) -> None:
        """The admin (CLI) and its all-scopes token (CLI)."""
        self._cli("admin", "user", "create", "--admin", "--username", self.admin, "--password", self.password,
                  "--email", f"{self.admin}@example.invalid", "--must-change-password=false")
        self.token = self.make_token(self.admin, ALL_SCOPES)

    def make_token(self, user: str, scopes: str = ALL_SCOPES, name: str | None = None) -> str:
        """A token of `user` with these scopes ("all", or e.g. "read:user,read:repository"), by the CLI."""
        name = name or f"t-{secrets.token_hex(4)}"
        out = self._cli("admin", "user", "generate-access-token", "--username", user, "--token-name", name,
                        "--scopes", scopes, "--raw")
        # As root, Gitea logs a warning to stdout too (its logger writes from a goroutine of its own, so not always
        # first): the token is the line of 40 hex digits.
        found = [line.strip() for line in out.splitlines() if TOKEN.fullmatch(line.strip())]
        if len(found) != 1:
            raise RuntimeError(f"gitea generate-access-token printed {len(found)} tokens:\n{out}")
        self._accepted(found[0])
        return found[0]

    def _accepted(self, token: str, timeout: float = 60.0) -> None:
        """Wait until the server takes `token` (written to the database by another process, the CLI): any answer
        but 401 to GET /user (403 is a token without read:user)."""
        deadline = time.monotonic() + timeout
        while True:
            status = httpx.get(f"{self.api}/user", headers={"Authorization": f"token {token}"}, timeout=30).status_code
            if status != 401:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"gitea refused a token the CLI made for {timeout:.0f} s:\n{self.log_tail()}")
            time.sleep(0.1)

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

    def create_org(self, name: str | None = None, *, token: str | None = None) -> str:
        """An organisation owned by the admin (or by the user of `token`)."""
        name = name or f"org-{secrets.token_hex(3)}"
        self.request("POST", "/orgs", token=token, json={"username": name, "visibility": "public"})
        return name

    def known_hosts(self) -> str:
        """The known_hosts line of this forge's SSH host key, from the file it was made in (the truth the
        adapter's ssh-keyscan is checked against)."""
        key = " ".join(self.host_key.with_suffix(".pub").read_text().split()[:2])
        return f"[{self.ssh_host}]:{self.ssh_port} {key}"


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
