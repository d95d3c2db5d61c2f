"""The claim: a runner's lease on a run (docs/service.md, "Runners").

A runner takes a Pending run by writing status.claim with an update that carries the run's resourceVersion: of
two runners, one wins, the other gets 409 Conflict. It renews renewTime every ttl/3. A runner that cannot renew
kills its own run before the claim expires (its watchdog); a runner that died stops renewing, and once
renewTime + ttl has passed, another runner takes the run over (`claimable`).

A run is never executed twice at once: runs of one stack are claimed one at a time (`claimable` looks at the
stack's other runs), and the service creates a stack's next run only after the last one finished. On S3 the
backend's lock is check-then-write, not atomic: only the claim excludes a second run there.

The stale-lock rule (automation.adapters.engine.locks.lock_is_stale, its one owner) reads `live_holders`: a lock
written by a runner is stale once that runner holds no live claim on the stack, counting a claim as live until
its expiry plus the cancel grace (the killed run's process tree is gone by then).
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable, Mapping

from stacks.runs.model import FINISHED, Claim, StackRunStatus, status_of
from stacks.times import rfc3339_seconds, parse_rfc3339

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class RunView:
    """What the claim rules read of one run: its key (namespace/name), stack, creation time and status."""

    key: str
    stack: str
    created: datetime
    status: StackRunStatus

    @property
    def namespace(self) -> str:
        return self.key.partition("/")[0]

    @property
    def finished(self) -> bool:
        return self.status.phase in FINISHED


def expiry(claim: Claim) -> datetime | None:
    """When the claim lapses (renewTime + ttl); None when unreadable (then it counts as lapsed)."""
    renewed = parse_rfc3339(claim.renew_time)
    return None if renewed is None else renewed + timedelta(seconds=claim.ttl_seconds)


def expired(claim: Claim | None, now: datetime) -> bool:
    if claim is None:
        return True
    until = expiry(claim)
    return until is None or now >= until


def claimable(run: RunView, others: Iterable[RunView], now: datetime) -> tuple[bool, str]:
    """Whether a runner may take `run` now, and why (not): Pending and unclaimed, or Running under a claim that
    expired (a takeover); and no other run of its stack is running under a live claim."""
    if run.finished:
        return False, f"finished ({run.status.phase})"
    claim = run.status.claim
    if run.status.phase == "Running" and not expired(claim, now):
        return False, f"held by {claim.holder if claim else '?'} until {rfc3339_seconds(expiry(claim) or now) if claim else '?'}"
    for other in others:
        if other.key != run.key and other.stack == run.stack and not other.finished \
                and other.status.phase == "Running" and not expired(other.status.claim, now):
            return False, f"stack {run.stack} is being run by {other.key}"
    return True, "takeover of an expired claim" if claim is not None else "pending"


def claimed(run: RunView, holder: str, now: datetime, ttl: int) -> Claim:
    """The claim `holder` writes to take `run` (a takeover counts one more)."""
    previous = run.status.claim
    takeovers = (previous.takeovers + (previous.holder != holder)) if previous is not None else 0
    stamp = rfc3339_seconds(now)
    return Claim(holder=holder, acquire_time=stamp, renew_time=stamp, ttl_seconds=ttl, takeovers=takeovers)


def renewed(claim: Claim, now: datetime) -> Claim:
    return claim.model_copy(update={"renew_time": rfc3339_seconds(now)})


def live_holders(runs: Iterable[RunView], stack: str, now: datetime, grace: float) -> dict[str, str]:
    """The runners whose claim on a run of `stack` is still live, or lapsed less than `grace` seconds ago:
    runner -> that claim's expiry (RFC 3339). A lock written by any other runner is stale (locks.lock_is_stale)."""
    live: dict[str, str] = {}
    for run in runs:
        claim = run.status.claim
        if run.stack != stack or claim is None or run.finished:
            continue
        until = expiry(claim)
        if until is not None and now < until + timedelta(seconds=grace):
            live[claim.holder] = rfc3339_seconds(until)
    return live


def view(raw: Mapping[str, Any]) -> RunView:
    """What the rules read of a HubStackRun document (the runners' and the service's informers hold those)."""
    meta, spec = raw.get("metadata") or {}, raw.get("spec") or {}
    stack = spec.get("stack")
    return RunView(key=f"{meta.get('namespace')}/{meta.get('name')}", stack=stack if isinstance(stack, str) else "",
                   created=parse_rfc3339(meta.get("creationTimestamp")) or EPOCH, status=status_of(raw))


def by_stack(runs: Iterable[RunView]) -> Mapping[str, list[RunView]]:
    grouped: dict[str, list[RunView]] = {}
    for run in runs:
        grouped.setdefault(run.stack, []).append(run)
    return grouped
