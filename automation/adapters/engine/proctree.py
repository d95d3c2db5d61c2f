"""Process trees on Linux, read from /proc: find a process's descendants, interrupt its children, kill it all.

The worker pool (automation.adapters.engine.pool) cancels a run by interrupting the worker's children (the `pulumi`
CLI cancels gracefully on SIGINT) and, after a grace period, kills the worker's whole tree. Pulumi starts every
plugin in a process group of its own, so a process group is not a tree: the tree is followed by parent pid.
A worker is a subreaper (PR_SET_CHILD_SUBREAPER), so a plugin whose CLI died is re-parented to the worker and
stays in its tree.
"""
from __future__ import annotations

import ctypes
import os
import signal
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}, {value}) failed")


def become_subreaper() -> None:
    """Orphans of this process's descendants are re-parented to it (not to init), so they stay in its tree."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Receive `sig` when the thread that started this process exits (the pool starts workers from one
    long-lived thread for that reason)."""
    _prctl(PR_SET_PDEATHSIG, int(sig))


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of `pid`, or None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2:].split()  # after "pid (comm) ": state ppid ...
    return fields[0].decode(), int(fields[1])


def _processes() -> dict[int, tuple[str, int]]:
    """Every process's (state, parent pid), zombies included."""
    table = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None:
                table[int(entry.name)] = stat
    return table


def parents() -> dict[int, int]:
    """Every live process's parent pid (zombies left out: they are dead, only not yet reaped)."""
    return {pid: parent for pid, (state, parent) in _processes().items() if state != "Z"}


def descendants(pid: int) -> list[int]:
    """The live descendants of `pid`, parents before their children. The walk goes through zombies: a killed
    multi-threaded parent (the pulumi CLI) shows as a zombie while its other threads still exit, and its children
    are re-parented only after that; skipping it would miss them, and the tree would look empty while its plugins
    live on."""
    table = _processes()
    children: dict[int, list[int]] = {}
    for child, (_, parent) in table.items():
        children.setdefault(parent, []).append(child)
    found: list[int] = []
    seen = {pid}  # a pid reused while /proc is read cannot make the walk loop
    frontier = [pid]
    while frontier:
        nxt = [c for p in frontier for c in children.get(p, ()) if c not in seen]
        seen.update(nxt)
        found.extend(nxt)
        frontier = nxt
    return [p for p in found if table[p][0] != "Z"]


def children(pid: int) -> list[int]:
    return [child for child, parent in parents().items() if parent == pid]


def program_name(pid: int) -> str:
    """The base name of the program `pid` runs (argv[0]), or "" when it is gone."""
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]
    except OSError:
        return ""
    return os.path.basename(argv0.decode(errors="replace"))


def kill(pid: int, sig: int = signal.SIGKILL) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def signal_children(pid: int, sig: int) -> list[int]:
    """Send `sig` to the direct children of `pid`; returns whom."""
    return [child for child in children(pid) if kill(child, sig)]


def kill_descendants(pid: int, *, timeout: float = 5.0) -> list[int]:
    """SIGKILL every descendant of `pid` until none is left (a dying parent can start one more child; a
    subreaper `pid` inherits the orphans). Returns the pids killed."""
    killed: list[int] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        tree = descendants(pid)
        if not tree:
            break
        killed.extend(p for p in tree if kill(p))
        time.sleep(0.01)
    return killed


def alive(pid: int) -> bool:
    """`pid` runs and is not a zombie."""
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"
