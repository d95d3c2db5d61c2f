"""Reading a stack's applied inputs back (PulumiEngine.applied): a stored hubwright:inputs parsed with today's model,
and the legacy reading from the stack's update history, for stacks without the tag and output the engine now writes
(pulumi_engine.APPLIED_TAG)."""
from __future__ import annotations

import logging
from typing import Any, Callable, Mapping, Sequence

from stacks.inputs import StackProgramInputs, inputs_from_config

log = logging.getLogger("automation.adapters.engine.pulumi_engine")  # the engine's log lines, wherever written

HISTORY_PAGE, HISTORY_WINDOW = 10, 50  # the legacy applied(): how far back it reads the history


def from_history(stack: str, config_key: str, page: Callable[[int], Sequence[Any]], *,
                 window: int = HISTORY_WINDOW) -> StackProgramInputs | None:
    """LEGACY (stacks without the tag and output of `applied`): the config (`config_key`) of the newest successful
    update in the last `window` history entries (a newer successful destroy: None); `page(n)` is the stack's
    n-th history page of HISTORY_PAGE entries, newest first. Failed updates fill the window too: after that many
    failed retries this returns None although the stack holds resources."""
    seen = 0
    for number in range(1, -(-window // HISTORY_PAGE) + 1):
        entries = page(number)
        for entry in entries[:window - seen]:
            if entry.result != "succeeded":
                continue
            if entry.kind == "destroy":
                return None
            raw = (entry.config or {}).get(config_key)
            if entry.kind == "update" and raw is not None:
                return parse_inputs(stack, raw)
        seen += len(entries)
        if len(entries) < HISTORY_PAGE or seen >= window:
            break
    return None


def parse_inputs(stack: str, raw: Any) -> StackProgramInputs | None:
    """A history entry's hubwright:inputs; None (and a warning) when today's model rejects it."""
    value = raw.get("value") if isinstance(raw, Mapping) else getattr(raw, "value", raw)
    if not isinstance(value, str):  # json.loads would raise TypeError, not ValueError, on it
        log.warning("stack %s: the last applied inputs are no JSON text (%s); treating them as unknown", stack,
                    type(value).__name__)
        return None
    try:
        return inputs_from_config(value)
    except ValueError as err:  # pydantic's ValidationError: inputs written by an older model
        log.warning("stack %s: the last applied inputs no longer parse (%s); treating them as unknown",
                    stack, str(err).splitlines()[0])
        return None
