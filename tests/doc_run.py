"""Running a doc's blocks the way a reader does: in one bash, in order, from the repository's root, with the
local sandbox as their hub; and checking that they leave the repository as they found it.

`run_blocks(chosen, env, checks=...)` runs every block but the last, prints a marker, and waits: the test's
`checks(stdout)` look at the hub and the forge while the sandbox still runs; then the last block (the doc's end:
`sandbox down`) runs. Whatever happens, the sandbox is stopped afterwards (`sandbox down` is idempotent), so a
failed run leaves no process behind.
"""
from __future__ import annotations

import os
import shlex
import socket
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from tests.docblocks import Block, script
from tests.envtest import require_binaries

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / ".tools" / "bin"
MARK = "--- the doc's blocks but its last have run ---"
# The docs' commands listen on their defaults (serve 8080, api 8081, console 8082): their tests share one xdist worker.
DEFAULT_PORTS = "default_ports"
SCRUBBED = ("HUBWRIGHT_", "AWS_", "KUBERNETES_", "KUBECONFIG", "PULUMI_", "VIRTUAL_ENV", "PYTHON", "FORGE_")


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str

    def __str__(self) -> str:
        return f"exit {self.returncode}\nstdout:\n{self.stdout[-6000:]}\nstderr:\n{self.stderr[-6000:]}"


def reader_env(home: Path) -> dict[str, str]:
    """A reader's environment: the venv first on PATH (`. .venv/bin/activate`), nothing of ours or AWS's set, HOME
    and the sandbox's folder ($XDG_STATE_HOME) under `home`."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(SCRUBBED)}
    # The reader's own cache, where ./dev setup put the venv: with HOME moved and no HUBWRIGHT_CACHE, `./dev plan`
    # would make another venv under `home` and point the repository's .venv at it.
    env["HUBWRIGHT_CACHE"] = os.environ.get("HUBWRIGHT_CACHE") or str(Path.home() / ".cache" / "hubwright")
    env.update(HOME=str(home), XDG_STATE_HOME=str(home / ".local" / "state"),
               PATH=os.pathsep.join([str(ROOT / ".venv" / "bin"), env.get("PATH", "/usr/bin:/bin")]))
    return env


def sandbox_dir(env: dict[str, str]) -> Path:
    return Path(env["XDG_STATE_HOME"]) / "hubwright" / "sandbox"


def sandbox_env(env: dict[str, str]) -> dict[str, str]:
    """The running sandbox's environment, read from its folder as `sandbox env` prints it."""
    found = {}
    for line in (sandbox_dir(env) / "env").read_text().splitlines():
        word, assignment = shlex.split(line)
        name, _, value = assignment.partition("=")
        found[name] = value
    return found


def git_status() -> str:
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout


def run_blocks(chosen: list[Block], env: dict[str, str], timeout: float,
               checks: Optional[Callable[[str], None]] = None) -> Ran:
    runnable = [block for block in chosen if block.not_run is None]
    text = script(runnable)
    go = Path(env["HOME"]) / "doc-run.go"  # a FIFO: the doc's own commands keep /dev/null as their stdin
    if checks is not None:
        os.mkfifo(go)
        text = (f"{script(runnable[:-1])}\necho {shlex.quote(MARK)}\nread -r _ < {shlex.quote(str(go))}\n"
                f"{script(runnable[-1:])}")
    stderr_path = Path(env["HOME"]) / "doc-run.stderr"
    with open(stderr_path, "w") as stderr:
        process = subprocess.Popen(["bash", "-euo", "pipefail", "-c", text], cwd=ROOT, env=env, text=True,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr,
                                   start_new_session=True)
    lines: list[str] = []
    marked = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            if line.rstrip("\n") == MARK:
                marked.set()
        marked.set()  # the end: the marker never came

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        if checks is not None:
            if not marked.wait(timeout) or MARK not in "".join(lines):
                process.wait(30)
                ran = Ran(process.returncode, "".join(lines), stderr_path.read_text())
                raise AssertionError(f"the doc stopped before its last block; the checks did not run\n{ran}")
            if process.poll() is None:
                try:
                    checks("".join(lines))
                finally:
                    with open(go, "w") as release:
                        release.write("\n")
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        lines.append(f"\n(the doc did not finish in {timeout} s)")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
        try:
            os.killpg(process.pid, signal.SIGTERM)  # what the doc left in the background (serve, api)
        except ProcessLookupError:
            pass
        subprocess.run([sys.executable, "-m", "automation", "sandbox", "down"], cwd=ROOT, env=env,
                       capture_output=True, timeout=120)
        reader.join(30)
    return Ran(process.returncode, "".join(lines), stderr_path.read_text())


def run_from_the_repository(chosen: list[Block], home: Path, *, binaries: tuple[str, ...], ports: tuple[int, ...],
                            timeout: float, checks: Callable[[dict[str, str], str], None]) -> Ran:
    """The doc's blocks, as a reader runs them from the repository's root; then what every such doc promises: it
    ended well, its sandbox is gone, and `git status` is what it was."""
    require_binaries(*binaries)
    taken = [port for port in ports if _taken(port)]
    assert not taken, f"ports {taken} must be free: the doc's commands listen on them"
    env = reader_env(home)
    before, venv = git_status(), _venv()
    ran = run_blocks(chosen, env, timeout, checks=lambda stdout: checks(env, stdout))
    assert ran.returncode == 0, str(ran)
    assert not sandbox_dir(env).exists(), "sandbox down leaves no folder"
    assert git_status() == before, "the doc's blocks wrote into the repository"
    assert _venv() == venv, "the doc's blocks moved the repository's .venv (git ignores it)"
    return ran


def _taken(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _venv() -> str:
    """Where the repository's .venv points (a link into the cache, ./dev setup's), or that it is a folder."""
    path = ROOT / ".venv"
    return os.readlink(path) if path.is_symlink() else f"folder: {path.is_dir()}"
