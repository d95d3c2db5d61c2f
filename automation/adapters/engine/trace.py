"""EngineTrace: what one run of the Pulumi CLI did, for its history entry (protocol.Trace): its changes, from the
engine's step events, as the plan diff's model has them (stacks.plandiff.steps), and the end of its output.

The Automation API calls `on_event` from its event thread and `on_output` from one thread per stream (stdout and
stderr both go to it, as `on_output` and `on_error`), so everything here is thread-safe. The output is held as a
ring of lines by bytes: at most about `log_bytes`, however long the run talks. A failed CLI call adds what its
CommandError says and the tail does not hold (`add_error`): the whole output of a call that streamed nothing here
(set_config, export, remove), and the error lines that what the CLI printed after them pushed out of the tail.
Steps that change nothing are counted, not kept: a run over a large stack does not hold its whole state.
"""
from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Any, Callable, Protocol

from automation.adapters.engine.protocol import Trace
from automation.adapters.engine.run_output import ANSI_ESCAPES
from stacks.plandiff.steps import KIND_OF_OP, Step, counted, stack_diff
from stacks.runs.record import tail

log = logging.getLogger("automation.adapters.engine.pulumi_engine")

OnEvent = Callable[[Any], None]


class EventConsumer(Protocol):
    """Another reader of the engine's events (run_output.ProgressEvents, run_output.ChangedResources)."""

    def on_event(self, event: Any) -> None: ...


ERRORS_HEADING = "(the CLI's errors, from earlier in its output:)"


def _is_error(line: str) -> bool:
    """A line that says why a CLI call failed (as run_output.readable_error picks them)."""
    text = line.strip()
    return text.startswith("error:") or "Exception:" in text or "Error:" in text


def _op(meta: Any) -> str:
    return str(getattr(meta.op, "value", meta.op))


def _state(state: Any, attr: str) -> dict[str, Any] | None:
    if state is None:
        return None
    return dict(getattr(state, attr, None) or {})


def step_of(meta: Any) -> Step:
    """A resourcePreEvent's StepEventMetadata as plain data (the old outputs only where an update or a replace
    may need them: drift)."""
    op = _op(meta)
    outputs = _state(meta.old, "outputs") if KIND_OF_OP.get(op) in ("update", "replace") else None
    return Step(op, meta.urn, meta.type, _state(meta.old, "inputs"), _state(meta.new, "inputs"),
                list(meta.diffs) if meta.diffs else None,
                list(meta.detailed_diff) if meta.detailed_diff else None, outputs)


class EngineTrace:
    """Collects one run's steps and the last `log_bytes` of its output; `trace` makes its Trace."""

    def __init__(self, log_bytes: int):
        self.log_bytes = max(0, log_bytes)
        self._steps: list[Step] = []  # only those that change something (steps.counted): not the whole state
        self._stepped = False  # the engine sent a step (one that changes nothing too)
        self._lines: deque[str] = deque()
        self._bytes = 0  # the encoded size of self._lines, a newline after each
        self._dropped = 0  # the bytes of output before the tail (lines pushed out, a long line's start)
        self._lock = threading.Lock()

    def on_event(self, event: Any) -> None:
        meta = getattr(getattr(event, "resource_pre_event", None), "metadata", None)
        if meta is None:
            return
        try:
            bare = Step(_op(meta), meta.urn, meta.type, None, None)
            step = step_of(meta) if counted(bare) else None
        except (AttributeError, TypeError, ValueError) as err:  # a report: never the run's failure
            log.warning("engine event not traced (%s): %s", type(err).__name__, err)
            return
        with self._lock:
            self._stepped = True
            if step is not None:
                self._steps.append(step)

    def events(self, *others: OnEvent | None) -> OnEvent:
        """One on_event for the Automation API that feeds this trace and `others` (ChangedResources,
        ProgressEvents), each on its own: one that raises does not keep the event from the rest."""
        consumers = [self.on_event, *(other for other in others if other is not None)]

        def fan_out(event: Any) -> None:
            for consumer in consumers:
                try:
                    consumer(event)
                except Exception:  # noqa: BLE001 - a consumer's bug must not stop the others (the SDK drops it)
                    log.exception("an engine event consumer failed")

        return fan_out

    def streams(self, *others: EventConsumer | None) -> dict[str, Any]:
        """A CLI call's callbacks (keyword arguments of the Automation API's up, preview, destroy, refresh): its
        engine events to this trace and to `others` (None: left out), its stdout and stderr to the log."""
        return {"on_event": self.events(*(other.on_event for other in others if other is not None)),
                "on_output": self.on_output, "on_error": self.on_output}

    def on_output(self, line: str) -> None:
        """One line of the CLI's stdout or stderr (the Automation API strips its newline)."""
        line = ANSI_ESCAPES.sub("", line)
        size = len(line.encode()) + 1
        cut = 0
        if size > self.log_bytes:  # one line longer than the whole tail: its end
            line, cut = tail(line, max(self.log_bytes - 1, 0))
            size = len(line.encode()) + 1
        with self._lock:
            self._dropped += cut
            self._lines.append(line)
            self._bytes += size
            while self._lines and self._bytes - (len(self._lines[0].encode()) + 1) >= self.log_bytes:
                gone = len(self._lines.popleft().encode()) + 1
                self._bytes -= gone
                self._dropped += gone

    def add_error(self, text: str) -> None:
        """A failed CLI call's CommandError text ("code: N / stdout: ... / stderr: ..."): its lines that the tail
        does not hold (a call that streamed its output here has them all), the last log_bytes of them; then its
        error lines (`error: ...`, an exception) that the tail lost to what the CLI printed after them (the stack's
        outputs), so that a failed run's log always ends with why it failed."""
        text = ANSI_ESCAPES.sub("", text)
        _, marker, rest = text.partition(" stdout: ")
        stdout, _, stderr = (rest if marker else text).partition("\n stderr: ")
        output = [line for part in (stdout, stderr) for line in part.splitlines() if line.strip()]
        wanted, _ = tail("\n".join(output), self.log_bytes)
        with self._lock:
            held = set(self._lines)
        missing = [line for line in wanted.splitlines() if line not in held]
        held.update(missing)
        lost = [line for line in dict.fromkeys(output) if _is_error(line) and line not in held]
        for line in missing + ([ERRORS_HEADING] if lost else []) + lost:
            self.on_output(line)

    def log(self) -> str:
        return self._tail()[0]

    def _tail(self) -> tuple[str, int]:
        """The tail of the output, and how many bytes of it came before (dropped)."""
        with self._lock:
            text, dropped = "".join(line + "\n" for line in self._lines), self._dropped
        if not self.log_bytes:
            return "", dropped + len(text.encode())
        kept, cut = tail(text, self.log_bytes)
        return kept, dropped + cut

    def trace(self, operation: str, stack: str) -> Trace:
        """The run's Trace: its diff (None when the engine sent no step) and the tail of its output."""
        with self._lock:
            steps, stepped = list(self._steps), self._stepped
        diff = stack_diff(stack, steps, operation=operation).to_json() if stepped else None
        log, dropped = self._tail()
        return Trace(diff=diff, log=log, dropped=dropped)
