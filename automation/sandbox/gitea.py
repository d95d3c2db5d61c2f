"""A real Gitea on 127.0.0.1: the sandbox's forge (`sandbox up --forge`) and the tests' (tests/gitea.py).

Each :class:`Gitea` runs in a folder of its own: a free HTTP port and a free SSH port on loopback, SQLite,
INSTALL_LOCK, Gitea's built-in SSH server (its host key an ed25519 key made here with ssh-keygen: Gitea would
otherwise spend seconds on a 4096-bit RSA key), registration off, offline, no mailer, no cron, logs to files.
Gitea refuses to run as root unless told it may, so as root I_AM_BEING_UNSAFE_RUNNING_AS_ROOT is set.

The admin is made with `gitea admin user create --admin`, its tokens with `gitea admin user
generate-access-token --scopes ...` (the CLI, as a hub administrator would); organisations through the API.
The binary: the checkout's .tools/bin/gitea with its static files in .tools/share/gitea (scripts/gitea.sh builds
both), else `gitea` on PATH (a release binary, its files built in).
"""
from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import secrets
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Optional

from automation.sandbox.tools import MissingBinaries, checkout_tools, free_port, require, spawn, stop

TOKEN = re.compile(r"[0-9a-f]{40}")  # an access token as Gitea prints it (a SHA-1's hex)
ADMIN = "hubwright-admin"
ALL_SCOPES = "all"


def find_gitea() -> tuple[str, Optional[Path]]:
    """(the gitea binary, its static files' folder or None for a binary with its files built in)."""
    tools = checkout_tools()
    if tools is not None:
        binary, static = tools / "gitea", tools.parent / "share" / "gitea"
        if binary.is_file() and os.access(binary, os.X_OK) and (static / "options" / "locale").is_dir():
            return str(binary), static
    try:
        return require("gitea")["gitea"], None
    except MissingBinaries:
        if tools is not None:
            raise MissingBinaries(["gitea"]) from None
        raise


def app_ini(work: Path, http_port: int, ssh_port: int, host_key: Path, static: Optional[Path],
            name: str = "hubwright forge") -> str:
    user = pwd.getpwuid(os.geteuid()).pw_name  # Gitea runs only as RUN_USER
    root = "\nI_AM_BEING_UNSAFE_RUNNING_AS_ROOT = true" if os.geteuid() == 0 else ""
    static_root = f"\nSTATIC_ROOT_PATH = {static}" if static is not None else ""
    return f"""\
APP_NAME = {name}
RUN_USER = {user}
RUN_MODE = prod
WORK_PATH = {work}{root}

[server]
PROTOCOL = http
HTTP_ADDR = 127.0.0.1
HTTP_PORT = {http_port}
DOMAIN = 127.0.0.1
ROOT_URL = http://127.0.0.1:{http_port}/
APP_DATA_PATH = {work}/data{static_root}
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
    """One Gitea process over one folder; `stop()` / `start()` keep its data, ports and host key."""

    def __init__(self, work: Path, binary: Optional[str] = None, static: Optional[Path] = None, *,
                 port: Callable[[], int] = free_port, name: str = "hubwright forge"):
        if binary is None:
            binary, static = find_gitea()
        keygen = require("ssh-keygen")["ssh-keygen"]
        self.binary = binary
        self.work = work
        self.http_port = port()
        self.ssh_port = port()
        self.ssh_host = "127.0.0.1"
        self.url = f"http://127.0.0.1:{self.http_port}"
        self.api = f"{self.url}/api/v1"
        self.admin = ADMIN
        self.password = secrets.token_urlsafe(18)
        self.token = ""
        self.config = work / "app.ini"
        self.host_key = work / "ssh" / "host_ed25519"
        self.host_key.parent.mkdir(parents=True)
        subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(self.host_key)],
                       check=True, capture_output=True)
        self.config.write_text(app_ini(work, self.http_port, self.ssh_port, self.host_key, static, name))
        self.process: Optional[subprocess.Popen] = None
        self.start_seconds = 0.0  # how long the last start() took until /api/healthz answered

    # -- the process ------------------------------------------------------------------------------------------
    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GITEA_")}
        env.update(GITEA_WORK_DIR=str(self.work), HOME=str(self.work), GIT_CONFIG_NOSYSTEM="1")
        return env

    def _cli(self, *args: str) -> str:
        done = subprocess.run([self.binary, *args, "--config", str(self.config), "--work-path", str(self.work)],
                              capture_output=True, text=True, env=self._env(), cwd=self.work, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"gitea {' '.join(args[:3])} failed ({done.returncode}): {done.stderr or done.stdout}")
        return done.stdout

    def start(self, timeout: float = 60.0) -> None:
        """Run `gitea web`; returns once /api/healthz answers 200 and the SSH port listens."""
        assert self.process is None, "already running"
        t0 = time.monotonic()
        self.process = spawn([self.binary, "web", "--config", str(self.config), "--work-path", str(self.work)],
                             self.work / "stdout.log", cwd=self.work, env=self._env())
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                code, self.process = self.process.returncode, None
                raise RuntimeError(f"gitea exited with {code} before it was ready:\n{self.log_tail()}")
            if self._healthy() and self._ssh_listens():
                break
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"gitea did not answer /api/healthz on {self.url} within {timeout}s:\n"
                                   f"{self.log_tail()}")
            time.sleep(0.05)
        self.start_seconds = time.monotonic() - t0

    def _healthy(self) -> bool:
        with contextlib.suppress(OSError), urllib.request.urlopen(f"{self.url}/api/healthz", timeout=1) as answer:
            return bool(answer.status == 200)
        return False

    def _ssh_listens(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection((self.ssh_host, self.ssh_port), timeout=1):
            return True
        return False

    def stop(self) -> None:
        stop(self.process)
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

    def make_token(self, user: str, scopes: str = ALL_SCOPES, name: Optional[str] = None) -> str:
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
        while self.call("GET", "/user", token=token)[0] == 401:
            if time.monotonic() > deadline:
                raise RuntimeError(f"gitea refused a token the CLI made for {timeout:.0f} s:\n{self.log_tail()}")
            time.sleep(0.1)

    def call(self, method: str, path: str, *, token: Optional[str] = None, body: Any = None) -> tuple[int, Any]:
        """(status, decoded JSON or None) of one API call as the admin (or with `token`); no error is raised."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.api}{path}", data=data, method=method, headers={
            "Authorization": f"token {token or self.token}", "Content-Type": "application/json",
            "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                status, raw = answer.status, answer.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, None

    def create_org(self, name: Optional[str] = None, *, token: Optional[str] = None) -> str:
        """An organisation owned by the admin (or by the user of `token`)."""
        name = name or f"org-{secrets.token_hex(3)}"
        status, answer = self.call("POST", "/orgs", token=token, body={"username": name, "visibility": "public"})
        if status != 201:
            raise RuntimeError(f"gitea refused the organisation {name} ({status}): {answer}")
        return name

    def known_hosts(self) -> str:
        """The known_hosts line of this forge's SSH host key, from the file it was made in (the truth the
        adapter's ssh-keyscan is checked against)."""
        key = " ".join(self.host_key.with_suffix(".pub").read_text().split()[:2])
        return f"[{self.ssh_host}]:{self.ssh_port} {key}"
