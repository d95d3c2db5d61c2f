"""Loop: a daemon thread that runs `run()` until `stop()`. The informers, the leader elector and the mapper
are Loops, so each starts, stops and reports whether it is alive the same way (docs/architecture.md lists
every thread and its time bound)."""
from __future__ import annotations

import threading
from typing import Callable


class Loop:
    """Subclasses implement `run()`, checking `self._stop` between steps, and may wake a blocked step in
    `_interrupt()` (an informer closes its watch stream)."""

    stop_timeout: float = 5.0  # how long stop() waits for the thread

    def __init__(self, thread_name: str):
        self.thread_name = thread_name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        self._stop.clear()
        thread = threading.Thread(target=self.run, name=self.thread_name, daemon=True)
        thread.start()
        self._thread = thread  # only once started: a stop() from another thread never joins an unstarted one

    def stop(self, timeout: float | None = None) -> None:
        self._stop.set()
        self._interrupt()
        if self._thread is not None:
            self._thread.join(self.stop_timeout if timeout is None else timeout)

    def _interrupt(self) -> None:
        """Wake whatever `run()` is blocked on; nothing by default (runs wait on `self._stop`)."""

    def alive(self) -> bool:
        """Running, or not started yet (a Loop that was never started has not died)."""
        return self._thread is None or self._thread.is_alive()


class Every(Loop):
    """Calls `call()` every `interval` seconds until stopped: a controller's resync (every object looked at again,
    so what someone changed by hand is put back and a refusal is tried again)."""

    def __init__(self, thread_name: str, interval: float, call: Callable[[], None]):
        super().__init__(thread_name)
        self.interval = interval
        self.call = call
        self.calls = 0  # how many calls have returned (a test waits for "one more resync", not for a time)

    def run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.call()
            finally:
                self.calls += 1
