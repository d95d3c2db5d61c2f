"""The sandbox's folder: where its supervisor keeps its lock, state, environment and every piece's files and logs.

Default: $XDG_STATE_HOME/hubwright/sandbox, else ~/.local/state/hubwright/sandbox; never the current directory
(run from a checkout, the sandbox leaves nothing in it). A folder is the sandbox's once it holds the marker file
`.hubwright-sandbox`: an existing folder without it, and not empty, is refused, and only a marked folder is ever
emptied or removed. The supervisor holds an exclusive flock on `lock` for as long as it lives: a held lock is a
sandbox running, whatever `state.json` says.

    .hubwright-sandbox  lock  supervisor.log  state.json (pids, while running)  env (`export` lines, once ready)
    kubeconfig  apiserver/ (PKI, etcd, logs)  aws/  forge/
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import shutil
from pathlib import Path
from typing import Any, Mapping, Optional

from automation.adapters.engine.proctree import alive
from automation.sandbox.tools import kill, wait_gone

MARKER = ".hubwright-sandbox"
LOCK, STATE, ENV, LOG = "lock", "state.json", "env", "supervisor.log"


def default_dir() -> Path:
    """$XDG_STATE_HOME/hubwright/sandbox, else ~/.local/state/hubwright/sandbox."""
    state_home = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state_home) / "hubwright" / "sandbox"


class NotOurs(RuntimeError):
    """The folder exists, is not empty and is not a sandbox's."""


def env_lines(env: Mapping[str, str]) -> str:
    """`export NAME=value` lines, each value quoted for a POSIX shell (for `eval "$(...)"`)."""
    return "".join(f"export {name}={shlex.quote(value)}\n" for name, value in env.items())


def _atomic_write(path: Path, text: str, mode: int = 0o600) -> None:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text)
    partial.chmod(mode)
    os.replace(partial, path)


class Folder:
    def __init__(self, path: Path):
        self.path = Path(os.path.abspath(path.expanduser()))

    def __str__(self) -> str:
        return str(self.path)

    # -- ownership --------------------------------------------------------------------------------------------
    def ours(self) -> bool:
        return (self.path / MARKER).is_file()

    def prepare(self) -> None:
        """Make the folder (0700) and mark it; NotOurs for a folder of something else."""
        if self.path.exists() and not self.ours():
            if not self.path.is_dir() or any(self.path.iterdir()):
                raise NotOurs(f"{self.path} exists and is not a sandbox's folder (no {MARKER} in it): "
                              "give another --dir")
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        (self.path / MARKER).touch()

    def clear(self) -> None:
        """Empty the folder of a previous run's files (its marker and lock stay)."""
        for child in self.path.iterdir():
            if child.name in (MARKER, LOCK, LOG):  # the log: `up` opened it for the supervisor
                continue
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()

    def remove(self) -> None:
        """Remove the folder, if it is the sandbox's."""
        if self.ours():
            shutil.rmtree(self.path)

    def sub(self, name: str) -> Path:
        """A sub-folder for one piece, made."""
        path = self.path / name
        path.mkdir(mode=0o700, exist_ok=True)
        return path

    # -- the supervisor's lock --------------------------------------------------------------------------------
    def lock(self) -> Optional[int]:
        """Take the lock: its file descriptor (held until closed, or the process ends), or None when a running
        supervisor holds it. The folder is prepared first."""
        fd = os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd

    def running(self) -> bool:
        """Whether a supervisor holds the lock now."""
        if not (self.path / LOCK).is_file():
            return False
        fd = os.open(self.path / LOCK, os.O_RDWR | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # closing releases a lock taken here
        return False

    # -- state and environment --------------------------------------------------------------------------------
    def write_state(self, state: Mapping[str, Any]) -> None:
        _atomic_write(self.path / STATE, json.dumps(state, indent=1) + "\n")

    def state(self) -> dict[str, Any]:
        """What the supervisor wrote ({} when nothing or unreadable)."""
        with contextlib.suppress(OSError, ValueError):
            found = json.loads((self.path / STATE).read_text())
            if isinstance(found, dict):
                return found
        return {}

    def pids(self) -> dict[str, int]:
        """{name: pid} of the supervisor and every process it started, from its state."""
        state = self.state()
        found = {"supervisor": state.get("supervisor")} | dict(state.get("processes") or {})
        return {name: int(pid) for name, pid in found.items() if isinstance(pid, int)}

    def owns(self, pid: int) -> bool:
        """Whether process `pid` runs in this folder (every piece of the sandbox does; a reused pid does not).
        Linux's /proc says; elsewhere no process is taken for the sandbox's."""
        try:
            return Path(os.readlink(f"/proc/{pid}/cwd")).is_relative_to(self.path)
        except OSError:
            return False

    def leftovers(self) -> dict[str, int]:
        """The processes of the state that still run in this folder: what a supervisor killed hard left behind
        (only meaningful while no supervisor holds the lock)."""
        return {name: pid for name, pid in self.pids().items() if alive(pid) and self.owns(pid)}

    def kill_leftovers(self, timeout: float = 10) -> dict[str, int]:
        """SIGKILL the leftovers and wait (at most `timeout` s) until they are gone; which they were."""
        leftovers = self.leftovers()
        for pid in leftovers.values():
            kill(pid)
        wait_gone(leftovers.values(), timeout)
        return leftovers

    def write_env(self, env: Mapping[str, str]) -> None:
        _atomic_write(self.path / ENV, env_lines(env))

    def env(self) -> Optional[str]:
        """The `export` lines of a ready sandbox, or None."""
        with contextlib.suppress(OSError):
            return (self.path / ENV).read_text()
        return None

    def forget(self) -> None:
        """The supervisor is stopping: its state and environment are no longer true."""
        for name in (ENV, STATE):
            with contextlib.suppress(FileNotFoundError):
                (self.path / name).unlink()
