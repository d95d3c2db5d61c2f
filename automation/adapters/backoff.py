"""The one retry formula: the work queue's retries (automation/kit/queue.py), the informers' reconnects
and the status writer's retries (automation/adapters/) all wait this way."""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Backoff:
    """Delay before retry n (0-based): min(cap, base * 2**n), with the upper half jittered."""

    base: float = 2.0
    cap: float = 300.0

    def __post_init__(self) -> None:
        if self.base <= 0 or self.cap < self.base:
            raise ValueError(f"backoff needs 0 < base <= cap (base={self.base}, cap={self.cap})")

    def delay(self, failures: int, rand: Callable[[], float] = random.random) -> float:
        ceiling = min(self.cap, self.base * 2 ** min(failures, 64))
        return ceiling / 2 + rand() * ceiling / 2
