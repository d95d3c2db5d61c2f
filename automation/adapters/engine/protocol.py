"""The Engine protocol: what the reconcilers ask of Pulumi, one stack per cluster or per transit network account.

The real implementation is automation.adapters.engine.pulumi_engine.PulumiEngine (Automation API);
tests and benchmarks use a recording double behind this same protocol (doubles.engine.RecordingEngine).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping, Protocol

from stacks.errors import Failure, NeedsAttention
from stacks.inputs import StackProgramInputs

Operation = Literal["up", "destroy", "preview", "recover"]
OnProgress = Callable[[int, int], None]  # (resources done, planned so far), from the engine's events during a run


@dataclass
class Trace:
    """What the engine did in one run, for its history entry (stacks/runs/record.py): its changes, as the plan
    diff's model has them (stacks.plandiff.compare.StackDiff.to_json(); None when the engine sent no step), and the
    end of its output (at most PulumiSettings.log_bytes: --history-log-kib, the one place that size is set)."""

    diff: dict[str, Any] | None = None
    log: str = ""
    dropped: int = 0  # the bytes of output before `log` (not kept)


@dataclass
class RunResult:
    operation: Operation
    ok: bool
    message: str = ""
    outputs: dict[str, Any] = field(default_factory=dict)
    changes: dict[str, int] = field(default_factory=dict)  # e.g. {"create": 3, "same": 2}
    started: str = ""  # RFC 3339
    ended: str = ""
    permalink: str | None = None  # the console page of this update, when the backend has one
    drifted: list[str] = field(default_factory=list)  # preview: the resources (name and type) it would change
    trace: Trace | None = None  # the run's diff and log (the engine that ran it); the runners' engine: none
    run_id: str | None = None  # the runners' engine: the HubStackRun that ran it
    detail: dict[str, Any] | None = None  # the runners' engine: where the runner stored the run's detail (DetailRef)


# What a lock of this service must outlive before another replica may remove it, beyond the longest run.
LOCK_MARGIN_S = 60.0


@dataclass(frozen=True)
class RunLimits:
    """How long one run may take, and how long a cancelled run gets to stop by itself before it is killed."""

    timeout: float = 1800.0
    grace: float = 60.0

    @property
    def stale_lock_after(self) -> float:
        """The age at which a lock of this service on another host may be removed (`recover`): older than any
        run can be, so a new leader never removes a live run's lock."""
        return self.timeout + self.grace + LOCK_MARGIN_S

    def check(self, stale_lock_after: float) -> None:
        if self.timeout <= 0 or self.grace < 0:
            raise ValueError(f"run limits: the run timeout must be > 0 and the cancel grace >= 0 (got {self})")
        if stale_lock_after < self.stale_lock_after:
            raise ValueError(
                f"stale lock age {stale_lock_after:.0f}s (HUBWRIGHT_STALE_LOCK_SECONDS) must be at least the run "
                f"timeout {self.timeout:.0f}s + cancel grace {self.grace:.0f}s + {LOCK_MARGIN_S:.0f}s: a shorter one "
                "lets a new leader remove the lock of a run that is still going")


class EngineError(Failure):
    """A run that failed; `reason` becomes the cluster's condition reason. `trace`, `run_id` and `detail`: as a
    RunResult's, for the failed run's history entry (set where known)."""

    reason = "UpdateFailed"
    trace: Trace | None = None
    run_id: str | None = None
    detail: dict[str, Any] | None = None


class StackLocked(EngineError):
    """Another update holds the stack (HTTP 409 / concurrent update). Requeue; not a failure."""

    reason = "StackLocked"


class RunCancelled(EngineError):
    """The run was stopped before it finished: its time limit passed, or the service is shutting down or lost
    the Lease. The stack may be locked by it; the next run recovers the lock (Reconciler.recover_if_killed)."""

    reason = "RunCancelled"


class PolicyViolation(EngineError, NeedsAttention):
    """A mandatory rule of the policy pack refused the run (policy/, docs/security.md). The message names the rules.
    Not retried with backoff: the cluster is Stalled until its inputs, the pack or HUBWRIGHT_POLICY change (looked
    at again every --stalled-recheck)."""

    reason = "PolicyViolation"


class Engine(Protocol):
    def up(self, inputs: StackProgramInputs, *, message: str, refresh: bool = False,
           on_progress: OnProgress | None = None) -> RunResult:
        """Create or update the stack so that it matches `inputs`. `message` says why it ran. With `refresh`, the
        state is first read back from the cloud (`pulumi up --refresh`), so drift is put back too. `on_progress`
        (done, planned) is called during the run, at most a few times a second, and once at its end."""

    def destroy(self, stack: str, *, message: str) -> RunResult:
        """Delete every resource of the stack, then remove the stack. A stack that does not exist is a success."""

    def forget(self, stack: str) -> str:
        """Remove the stack from the state backend, leaving every resource it has in the cloud, unmanaged (a
        retained stack the hub administrator released with Forget). Says what was left; no stack: says so."""

    def preview(self, inputs: StackProgramInputs) -> RunResult:
        """Drift check: refresh from the cloud, then diff against `inputs`, writing nothing (no history entry).
        ok=True when nothing would change; else `drifted` names the resources that would."""

    def recover(self, stack: str, *, live_runners: Mapping[str, str] | None = None) -> RunResult:
        """Clear what a killed run left behind: a stale lock this service owns and pending operations.
        `live_runners` (runner -> claim expiry): the runners holding a live claim on the stack, which a runner
        knows from the HubStackRuns (stacks.runs.claims.live_holders); a lock of any other runner is stale."""

    def applied(self, stack: str) -> StackProgramInputs | None:
        """The inputs of the last successful `up` (a cluster's StackInputs, or a transit stack's TransitInputs), or
        None when the stack does not exist."""

    def cancel(self, grace: float) -> None:
        """Stop every run in flight: Pulumi's graceful cancel first, each run's whole process tree killed once
        `grace` seconds have passed (0: at once). Returns when none is left; each stopped run raises
        RunCancelled in its caller. Later runs start as usual."""
