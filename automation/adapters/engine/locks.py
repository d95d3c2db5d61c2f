"""Backend locks: who holds one (as the CLI reports it), whether that process still runs, and the one rule
for when a lock may be removed (lock_is_stale: only a stale lock of this service, never a live one or another
tool's)."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable


_LOCK_LINE = re.compile(r"^\s*(?P<path>\S+): created by (?P<user>.*?)@(?P<host>\S+) \(pid (?P<pid>\d+)\) at (?P<at>\S+)\s*$", re.M)


@dataclass(frozen=True)
class LockOwner:
    """One DIY backend lock, as the CLI reports it in its 'stack is currently locked' error."""

    path: str
    user: str
    host: str
    pid: int
    created: datetime

    def describe(self) -> str:
        return f"{self.user}@{self.host} (pid {self.pid}) since {self.created.isoformat(timespec='seconds')}"


def parse_lock_owners(stderr: str) -> list[LockOwner]:
    owners = []
    for m in _LOCK_LINE.finditer(stderr):
        try:
            created = datetime.fromisoformat(m["at"].replace("Z", "+00:00"))
        except ValueError:
            created = datetime.now(timezone.utc)
        owners.append(LockOwner(m["path"].split("?", 1)[0], m["user"], m["host"], int(m["pid"]), created))
    return owners


def pulumi_process_alive(pid: int) -> bool:
    """True when `pid` runs here and is a pulumi process (not a zombie, not a reused pid)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path(f"/proc/{pid}")
    if not proc.exists():
        return True  # no /proc: the pid exists, assume it is the lock holder
    try:
        if re.search(r"^State:\s*Z", (proc / "status").read_text(), re.M):
            return False
        return b"pulumi" in (proc / "cmdline").read_bytes()
    except OSError:
        return False


def lock_is_stale(
    owner: LockOwner,
    *,
    hostname: str,
    own_hosts: str | None,
    stale_after_s: float,
    now: datetime | None = None,
    alive: Callable[[int], bool] = pulumi_process_alive,
) -> tuple[bool, str]:
    """Whether a lock may be removed: (stale, why). Only locks of this service ever are."""
    if owner.host == hostname:
        if alive(owner.pid):
            return False, f"held by {owner.describe()}, a live pulumi process on this host"
        return True, f"stale lock of {owner.describe()}: that process is gone"
    if own_hosts and re.fullmatch(own_hosts, owner.host):
        age = ((now or datetime.now(timezone.utc)) - owner.created).total_seconds()
        if age >= stale_after_s:
            return True, f"stale lock of {owner.describe()}: another replica of this service, {age:.0f}s old"
        return False, f"held by {owner.describe()}, another replica of this service, {age:.0f}s old (stale after {stale_after_s:.0f}s)"
    return False, f"held by {owner.describe()}, not this service: left alone"
