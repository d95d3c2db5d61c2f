"""The one rule that turns an error's class (stacks.errors) into a condition, an Event and what comes next.

    class                condition state  Event    counted and logged  next (queue.Outcome)
    InvalidSpec          stalled          Warning  refused             stall: only when an input changes
    NeedsAttention       stalled          Warning  refused             stall: looked at again every --stalled-recheck
    StackLocked          progressing      Normal   -                   done after --lock-retry (jittered)
    Failure (any other)  retrying         Warning  -                   retry with backoff

`judge` decides; a reconciler applies the verdict to its own status target (a Cluster's status:
automation/service/clusters/reconciler.py `_fail`; the mesh's transit stacks keep theirs in the HubConfig).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

from automation.adapters.engine import StackLocked
from stacks.conditions import State
from automation.kit.queue import Outcome
from stacks import status as reasons
from stacks.errors import Failure, InvalidSpec, NeedsAttention
from stacks.names import RECONCILE_REQUEST_ANNOTATION


Operation = Literal["up", "destroy"]  # what was being done when the error came


@dataclass(frozen=True)
class Verdict:
    state: State  # the kstatus story the condition tells (stacks/conditions.py)
    reason: str  # the condition's and the Event's reason
    condition: str  # the condition's message: what happened and what comes next
    event_type: Literal["Normal", "Warning"]
    event: str  # the Event's message
    refused: bool  # a refusal: counted by reason (hubwright_refused_total) with its run log line
    outcome: Outcome

    @property
    def stalled(self) -> bool:
        return self.state == "stalled"


def judge(exc: InvalidSpec | Failure, *, operation: Operation, stalled_recheck: float, lock_retry: float,
          note: str = "") -> Verdict:
    """What `exc`, raised while doing `operation` ("up", "destroy"), means for the object. `note` prefixes the
    message (where it happened: "preflight, nothing ran: ")."""
    if isinstance(exc, InvalidSpec):
        return Verdict("stalled", exc.reason, str(exc), "Warning", str(exc), True, Outcome.stall(exc.reason))
    if isinstance(exc, StackLocked):
        return Verdict("progressing", reasons.STACK_LOCKED,
                       f"another update holds the stack; trying again shortly ({exc})", "Normal", str(exc), False,
                       Outcome.done(lock_retry * random.uniform(0.5, 1.5)))
    message = f"{note}{exc}"
    # A run's failure says which run: an engine error without a reason of its own is UpdateFailed/DestroyFailed.
    reason = reasons.DESTROY_FAILED if operation == "destroy" and exc.reason == reasons.UPDATE_FAILED else exc.reason
    if isinstance(exc, NeedsAttention):
        then = (f"needs attention; looked at again in {stalled_recheck:g}s, or at once when an input changes or "
                f"{RECONCILE_REQUEST_ANNOTATION} is set")
        return Verdict("stalled", reason, f"{message[:2048]} ({then})", "Warning", message, True,
                       Outcome.stall(reason, stalled_recheck))
    return Verdict("retrying", reason, f"{message[:2048]} (retrying with backoff)", "Warning", message, False,
                   Outcome.retry())
