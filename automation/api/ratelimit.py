"""Token buckets per client address, in memory: the install endpoint's rate limit.

Per replica: each API process counts on its own, so N replicas let a client make N times the rate. That is
enough for its purpose (guessing a 256-bit bootstrap token is hopeless anyway; the limit keeps one client
from hammering the Kubernetes API through the install endpoint). Buckets of addresses not seen for a while
are forgotten (least recently used first) once more than `max_keys` are held.
"""
from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from typing import Callable

from fastapi import Request


class RateLimiter:
    """`rate` requests per second per key, with bursts of up to `burst`."""

    def __init__(self, rate: float, burst: int, *, max_keys: int = 10000,
                 clock: Callable[[], float] = time.monotonic):
        self.rate, self.burst, self.max_keys, self._clock = rate, max(1, burst), max_keys, clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key -> (tokens, at)
        self._lock = threading.Lock()

    def take(self, key: str) -> float:
        """0 when the request may go ahead (one token taken), else the seconds until one is available."""
        now = self._clock()
        with self._lock:
            tokens, at = self._buckets.pop(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - at) * self.rate)
            wait = 0.0
            if tokens >= 1:
                tokens -= 1
            else:
                wait = (1 - tokens) / self.rate if self.rate > 0 else math.inf
            self._buckets[key] = (tokens, now)
            while len(self._buckets) > self.max_keys:
                self._buckets.popitem(last=False)
            return wait


def client_address(request: Request, trust_forwarded_for: bool) -> str:
    """The client's address: the peer's, or behind a proxy you run, the last X-Forwarded-For entry (the one
    that proxy appended; the earlier ones are whatever the client sent)."""
    if trust_forwarded_for:
        forwarded = request.headers.get("x-forwarded-for", "")
        last = forwarded.rsplit(",", 1)[-1].strip()
        if last:
            return last
    return request.client.host if request.client is not None else "unknown"
