"""What the parts of the clusters' controller share: its options, the checks before an up, and `Context`, the
reconciler as delete.py and drift.py see it (so they depend on this, not on reconciler.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal, Protocol

from automation.adapters.engine import Engine
from automation.adapters.kube.informer import Raw
from automation.service.cache import Cache
from automation.service.clusters.client import ClusterClient
from automation.service.snapshot import DesiredView
from automation.service.outcomes import Operation
from automation.kit.queue import Outcome
from automation.service.runs import Runs
from stacks.errors import Failure, InvalidSpec
from stacks.inputs import StackInputs
from stacks.runs.cause import Cause
from stacks.status import ClusterStatus

# A check before every up: raises InvalidSpec (refused until the input changes), NeedsAttention (refused, looked at
# again every --stalled-recheck) or a transient Failure (retried with backoff).
Guard = Callable[[StackInputs | None, StackInputs], None]
Audit = Callable[[StackInputs, str], Any]


@dataclass(frozen=True)
class ReconcileOptions:
    drift_interval: float = 3600.0  # seconds between drift checks of a stack; 0 turns them off
    drift_jitter: float = 0.25  # each stack's interval is stretched by up to this fraction (stable per stack)
    lock_retry: float = 15.0  # StackLocked: look again after about this long
    stalled_recheck: float = 600.0  # NeedsAttention: look again after this long (an input change: at once)
    drift_policy: Literal["correct", "report"] = "correct"  # on drift: an up with refresh, or the condition only


class Context(Protocol):
    desired: DesiredView
    cache: Cache
    engine: Engine
    kube: ClusterClient
    options: ReconcileOptions
    audit: Audit | None
    clock: Callable[[], float]
    released: set[str]  # destroyed and let go by us: no orphan check when they vanish
    runs: Runs  # every engine run passes this gate (automation/service/runs.py)

    def write(self, raw: Raw, before: ClusterStatus, after: ClusterStatus) -> bool: ...

    def fail(self, raw: Raw, status: ClusterStatus, operation: Operation, exc: InvalidSpec | Failure,
             started: float, *, before: ClusterStatus | None = None, note: str = "") -> Outcome: ...

    def recover_if_killed(self, raw: Raw, status: ClusterStatus, stack: str) -> ClusterStatus | None: ...

    def known(self, key: str, stack: str) -> Callable[[], frozenset[str]]: ...

    def run_up(self, key: str, raw: Raw, status: ClusterStatus, desired: StackInputs, *,
               cause: Cause | None = None, refresh: bool = False) -> Outcome: ...
