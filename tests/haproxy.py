"""Which HAProxy the tests run: the one scripts/tools.sh put in .tools/bin (>= 2.9), else one on PATH."""
from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

from automation.adapters.files.haproxy import MasterCLI, RuntimeApiError

ROOT = Path(__file__).resolve().parent.parent
_SYSTEM_PATH = os.environ.get("PATH", "") + ":/usr/sbin:/usr/local/sbin"


def version(binary: str) -> tuple[int, int]:
    out = subprocess.run([binary, "-v"], capture_output=True, text=True, check=True).stdout
    found = re.search(r"version (\d+)\.(\d+)", out)
    assert found, out
    return int(found[1]), int(found[2])


def _find() -> str | None:
    built = ROOT / ".tools" / "bin" / "haproxy"
    if built.exists() and os.access(built, os.X_OK):
        return str(built)
    return shutil.which("haproxy", path=_SYSTEM_PATH)


HAPROXY = _find()
# Debian's own HAProxy, when it is older than 2.9: the wire-mode version floor is shown on it.
_system = shutil.which("haproxy", path=":".join(p for p in _SYSTEM_PATH.split(":") if ".tools" not in p))
OLD_HAPROXY = _system if _system and version(_system) < (2, 9) else None
MISSING = "no haproxy: run scripts/tools.sh (builds >= 2.9 into .tools/bin) or apt-get install haproxy"


def check(path: Path | str, binary: str | None = None) -> subprocess.CompletedProcess:
    """`haproxy -c -f path`: HAProxy's own verdict on a config."""
    return subprocess.run([binary or HAPROXY, "-c", "-f", str(path)], capture_output=True, text=True)


def check_text(config: str, binary: str | None = None) -> subprocess.CompletedProcess:
    with tempfile.NamedTemporaryFile("w", suffix=".cfg") as fh:
        fh.write(config)
        fh.flush()
        return check(fh.name, binary)


def check_central(rendered) -> subprocess.CompletedProcess:
    """`haproxy -c` of a rendered central config, with its map written where the config reads it."""
    Path(rendered.map_path).write_text(rendered.map)
    return check_text(rendered.config)


def wait_for_port(port: int, proc: subprocess.Popen, log: Path | None = None, timeout: float = 10.0) -> None:
    """Until something accepts on 127.0.0.1:port; fails at once if `proc` exits, showing `log`."""
    _wait_for(lambda: socket.create_connection(("127.0.0.1", port), timeout=0.2).close(), f"on {port}", proc, log,
              timeout)


def wait_for_master(path: str, proc: subprocess.Popen, log: Path | None = None, timeout: float = 10.0) -> None:
    """Until HAProxy's master CLI on the unix socket `path` answers `show proc` with a worker. A port that
    answers says nothing of the master: it opens its socket on its own schedule, and once its workers run it
    re-executes itself (wait mode), resetting a connection it took before that (seen under load)."""
    def answers() -> None:
        if not MasterCLI(path, timeout=2.0).processes().workers:
            raise OSError("the master lists no worker yet")

    _wait_for(answers, f"on the master socket {path}", proc, log, timeout)


def _wait_for(connect: Callable[[], None], where: str, proc: subprocess.Popen, log: Path | None,
              timeout: float) -> None:
    shown = lambda: f":\n{log.read_text()}" if log is not None else ""  # noqa: E731
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"haproxy exited with {proc.returncode}{shown()}")
        try:
            connect()
            return
        except (OSError, RuntimeApiError):  # refused, reset, or not yet the whole answer
            time.sleep(0.05)
    raise AssertionError(f"nothing listens {where} after {timeout}s{shown()}")
