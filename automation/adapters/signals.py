"""Stop signals in a long-running command's main thread (`serve`, `runner`).

CPython runs a Python signal handler only in the main thread, when that thread next executes bytecode. A
process-directed SIGTERM may be delivered by the kernel to any thread that does not block it; when it lands on
another thread, a main thread blocked in an untimed `Event.wait()` (a semaphore wait) is never woken, so the
handler never runs and the pod is killed at the end of its grace period instead of draining. Waiting in short
slices returns the main thread to the interpreter, so a stop signal is acted on within one slice, whichever thread
the kernel chose.
"""
from __future__ import annotations

import signal
import threading

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
SLICE_SECONDS = 0.5  # the longest a stop signal waits to be acted on


class StopSignals:
    """Install once, early (before the threads that must not miss a stop start), then `wait()` in the main thread:
    it returns the number of the first SIGTERM or SIGINT received."""

    def __init__(self) -> None:
        self._received = threading.Event()
        self.signum: int | None = None
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self.signum is None:
            self.signum = signum
        self._received.set()

    def wait(self) -> int:
        while not self._received.wait(SLICE_SECONDS):
            pass
        assert self.signum is not None
        return self.signum
