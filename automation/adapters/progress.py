"""Progress of long work on stderr, when stderr is a terminal; nothing otherwise (a pipe, a file, CI).

    planned 4,210/10,000 stacks  37.8/s  2m33s left

One line, rewritten in place at most every `every` seconds, ended when the work is done. The count and rate are
the work's own; time left is the rest at the rate so far.
"""
from __future__ import annotations

import sys
import time
from typing import Callable, TextIO


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class Progress:
    def __init__(self, what: str, unit: str, *, stream: TextIO | None = None, every: float = 0.5,
                 clock: Callable[[], float] = time.monotonic):
        self.what, self.unit = what, unit
        self.stream = stream if stream is not None else sys.stderr
        self.every = every
        self.clock = clock
        self.total = 0
        self.done = 0
        self.shown = False
        self._started = clock()
        self._last = float("-inf")
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(isatty and isatty())

    def expect(self, more: int) -> None:
        """`more` items of work are coming (the total may grow as the work learns of it)."""
        self.total += more

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = self.clock()
        if self.enabled and now - self._last >= self.every:
            self._last = now
            self._show(now)

    def line(self, now: float) -> str:
        elapsed = max(now - self._started, 1e-9)
        rate = self.done / elapsed
        text = f"{self.what} {self.done:,}/{self.total:,} {self.unit}  {rate:.1f}/s"
        if 0 < self.done < self.total:
            text += f"  {_duration((self.total - self.done) / rate)} left"
        return text

    def _show(self, now: float) -> None:
        self.stream.write("\r\033[K" + self.line(now))
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        """The final count, and the line ended (only if anything was shown)."""
        if self.enabled and self.shown:
            now = self.clock()
            self.stream.write("\r\033[K" + self.line(now) + f"  done in {_duration(now - self._started)}\n")
            self.stream.flush()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
