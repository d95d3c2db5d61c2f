"""Where the sandbox (and the tests' envtest, doubles/envtest.py) find the programs they run, and how they run them.

A binary is looked for, in order, in $KUBEBUILDER_ASSETS (controller-runtime envtest's convention: the folder
`setup-envtest use -p path` prints), in the checkout's .tools/bin (built by scripts/tools.sh) when this code runs
from a checkout, then on PATH. A missing one is :class:`MissingBinaries`, a one-line message naming it and where
to get it.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional, Sequence

from automation.adapters.engine.proctree import alive  # a pid that runs and is not a zombie

CHECKOUT = Path(__file__).resolve().parents[2]  # the repository's root, when this runs from a checkout
TOOLS_SCRIPT = "scripts/tools.sh"
ASSETS = "KUBEBUILDER_ASSETS"

# How to get each binary when it is missing outside a checkout.
SETUP_ENVTEST = ("controller-runtime's setup-envtest (`setup-envtest use -p path` prints the folder to export as "
                 "KUBEBUILDER_ASSETS)")
WHERE_TO_GET = {
    "etcd": SETUP_ENVTEST,
    "kube-apiserver": SETUP_ENVTEST,
    "kubectl": SETUP_ENVTEST,
    "kube-controller-manager": "Kubernetes' server binaries (https://dl.k8s.io/release/<version>/bin/<os>/<arch>/"
                               "kube-controller-manager), put in $KUBEBUILDER_ASSETS",
    "gitea": "a Gitea release (https://about.gitea.com), on PATH",
    "openssl": "your package manager (Debian: apt-get install openssl)",
    "ssh-keygen": "your package manager (Debian: apt-get install openssh-client)",
}
SYSTEM = ("openssl", "ssh-keygen")  # found on PATH only: the system's, never a tools folder's


class MissingBinaries(RuntimeError):
    """Binaries not found: the message is one line, naming them and how to get them."""

    def __init__(self, names: Sequence[str]):
        self.names = list(names)
        super().__init__(missing_message(self.names))


def checkout_tools() -> Optional[Path]:
    """The checkout's .tools/bin when this code runs from a checkout (its pyproject.toml and scripts/tools.sh
    beside the package), else None."""
    if (CHECKOUT / "pyproject.toml").is_file() and (CHECKOUT / TOOLS_SCRIPT).is_file():
        return CHECKOUT / ".tools" / "bin"
    return None


def search_folders() -> list[Path]:
    """The folders searched before PATH, in order."""
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    tools = checkout_tools()
    return ([Path(assets)] if assets else []) + ([tools] if tools is not None else [])


def find_binary(name: str) -> Optional[str]:
    """The path of `name` ($KUBEBUILDER_ASSETS, the checkout's .tools/bin, PATH), or None."""
    if name not in SYSTEM:
        for folder in search_folders():
            candidate = folder / name
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    return shutil.which(name)


def missing_message(names: Sequence[str]) -> str:
    """One line: what is missing, where it was looked for, how to get it."""
    tools = checkout_tools()
    hints: dict[str, list[str]] = {}
    for name in names:
        hint = (f"run {TOOLS_SCRIPT} in the checkout, which builds them into {tools}"
                if tools is not None and name not in SYSTEM else WHERE_TO_GET.get(name, "your package manager"))
        hints.setdefault(hint, []).append(name)
    places = (f"${ASSETS}, {tools} or PATH" if tools is not None else f"${ASSETS} or PATH") \
        if any(name not in SYSTEM for name in names) else "PATH"
    how = "; ".join(hint if len(hints) == 1 else f"{', '.join(found)} from {hint}" for hint, found in hints.items())
    return f"{', '.join(names)} not found in {places}: {how}"


def require(*names: str) -> dict[str, str]:
    """{name: path} of every binary, or MissingBinaries naming all that are missing."""
    found = {name: find_binary(name) for name in names}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        raise MissingBinaries(missing)
    return {name: path for name, path in found.items() if path is not None}


# --------------------------------------------------------------------------- processes

def free_port() -> int:
    """A loopback TCP port nobody listens on now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def spawn(argv: Sequence[str], log: Path, *, cwd: Path, env: Optional[Mapping[str, str]] = None) -> subprocess.Popen:
    """Start `argv` in a session of its own (a Ctrl-C meant for its starter does not reach it), its output
    appended to `log`, no stdin."""
    with open(log, "ab") as out:
        return subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=cwd, env=None if env is None else dict(env), start_new_session=True)


def stop(process: Optional[subprocess.Popen], timeout: float = 15) -> None:
    """SIGTERM, then SIGKILL after `timeout` s; returns once the process is reaped."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


def tail(path: Path, lines: int = 40) -> str:
    """The last lines of a log ("" when it cannot be read)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def kill(pid: int, signum: int = signal.SIGKILL) -> None:
    """Send `signum` to `pid`, which may have gone meanwhile."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def wait_gone(pids: Iterable[int], timeout: float, busy: Callable[[], bool] = lambda: False) -> list[int]:
    """Wait until none of `pids` is alive (and `busy()` is false): those still alive after `timeout` s."""
    pids = list(pids)
    deadline = time.monotonic() + timeout
    while True:
        left = [pid for pid in pids if alive(pid)]
        if (not left and not busy()) or time.monotonic() > deadline:
            return left
        time.sleep(0.05)
