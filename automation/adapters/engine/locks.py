"""Backend locks: who holds one (as the CLI reports it), whether that process still runs, and the one rule
for when a lock may be removed (lock_is_stale: only a stale lock of this service, never a live one or another
tool's); judge_locks applies it to the CLI's "stack is locked" error, or, on Pulumi Cloud, which names no owner, to
the stack's in-progress update (judge_cloud_update)."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping


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
    runner_hosts: str | None = None,
    live_runners: Mapping[str, str] | None = None,
) -> tuple[bool, str]:
    """Whether a lock may be removed: (stale, why). Only locks of this service ever are:
    - one written on this host: when its pulumi process is gone;
    - a runner's (`runner_hosts`, --runner-hosts): once that runner holds no live claim on the stack, a claim
      counting as live until its expiry plus the cancel grace (`live_runners`: runner -> expiry, from
      stacks.runs.claims.live_holders; None: not known here, so left alone). By then a runner that lost its
      claim has killed its run, and a runner that died took its run with it;
    - another replica's of the service (`own_hosts`, --lock-hosts): once older than any run may be."""
    if owner.host == hostname:
        if alive(owner.pid):
            return False, f"held by {owner.describe()}, a live pulumi process on this host"
        return True, f"stale lock of {owner.describe()}: that process is gone"
    if runner_hosts and re.fullmatch(runner_hosts, owner.host):
        if live_runners is None:
            return False, f"held by {owner.describe()}, a runner whose claims are not known here: left alone"
        if owner.host in live_runners:
            return False, f"held by {owner.describe()}, a runner whose claim on the stack is live (expires " \
                          f"{live_runners[owner.host]}, then the cancel grace)"
        return True, f"stale lock of {owner.describe()}: that runner holds no live claim on the stack " \
                     "(its claim lapsed more than the cancel grace ago, or it has none)"
    if own_hosts and re.fullmatch(own_hosts, owner.host):
        age = ((now or datetime.now(timezone.utc)) - owner.created).total_seconds()
        if age >= stale_after_s:
            return True, f"stale lock of {owner.describe()}: another replica of this service, {age:.0f}s old"
        return False, f"held by {owner.describe()}, another replica of this service, {age:.0f}s old (stale after {stale_after_s:.0f}s)"
    return False, f"held by {owner.describe()}, not this service: left alone"


def describe_locks(error: str) -> str:
    """Who holds the stack, from the CLI's "stack is locked" error (ANSI escapes removed)."""
    owners = parse_lock_owners(error)
    return "; ".join(o.describe() for o in owners) if owners else "another update is in progress"


def judge_locks(stack: Any, error: str, *, hostname: str, own_hosts: str | None, runner_hosts: str | None,
                live_runners: Mapping[str, str] | None, stale_after_s: float, ours: str) -> tuple[bool, str]:
    """(stale, why) for the locks the CLI's error (ANSI escapes removed) names: DIY backends name each lock's
    owner, and the stack is stale only when every lock is a stale one of ours (lock_is_stale). None named (Pulumi
    Cloud): judge_cloud_update. `ours`: the message prefix of this service's updates."""
    owners = parse_lock_owners(error)
    if not owners:
        return judge_cloud_update(stack, stale_after_s=stale_after_s, ours=ours)
    verdicts = [lock_is_stale(o, hostname=hostname, own_hosts=own_hosts, runner_hosts=runner_hosts,
                              live_runners=live_runners, stale_after_s=stale_after_s) for o in owners]
    return all(stale for stale, _ in verdicts), "; ".join(why for _, why in verdicts)


def judge_cloud_update(stack: Any, *, stale_after_s: float, ours: str) -> tuple[bool, str]:
    """Pulumi Cloud names no lock owner: an in-progress update of ours (its message starts with `ours`), older
    than `stale_after_s`, is stale. `stack`: the Automation API's Stack (its latest history entry is read)."""
    entries = stack.history(page_size=1, show_secrets=False)
    if not entries or entries[0].result != "in-progress":
        return False, "an update is in progress (owner unknown)"
    latest = entries[0]
    start = latest.start_time.replace(tzinfo=latest.start_time.tzinfo or timezone.utc)
    age = (datetime.now(timezone.utc) - start).total_seconds()
    mine = (latest.message or "").startswith(ours)
    what = f"in-progress update {latest.message!r} started {start.isoformat(timespec='seconds')}"
    if mine and age >= stale_after_s:
        return True, f"stale {what} ({age:.0f}s old, by this service)"
    return False, f"{what}: {'by this service, ' if mine else 'not by this service: '}{age:.0f}s old"
