"""Token buckets per client address, in memory: the install endpoint's rate limit; and per caller (the SHA-256
of its bearer token), with a cap on its requests at once, on every authenticated route (CallerLimits).

Per replica: each API process counts on its own, so N replicas let a client make N times the rate. That is
enough for its purpose (guessing a 256-bit bootstrap token is hopeless anyway; the limit keeps one client
from hammering the Kubernetes API through the install endpoint). Buckets of addresses not seen for a while
are forgotten (least recently used first) once more than `max_keys` are held.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import math
import threading
import time
from collections import OrderedDict
from typing import Any, Awaitable, Callable
from urllib.parse import parse_qsl

from fastapi import Request

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


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


def retry_after(wait: float) -> str:
    """A Retry-After header's value for a wait in seconds (at least 1; an hour when the rate is 0)."""
    return str(max(1, math.ceil(wait))) if math.isfinite(wait) else "3600"


def bearer_key(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The SHA-256 of the request's bearer token (the key ClientCache uses too), or None without one."""
    for name, value in headers:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            token = token.strip()
            if scheme.lower() == "bearer" and token:
                return hashlib.sha256(token.encode()).hexdigest()
    return None


TARPIT = 1.0  # seconds a 429 of CallerLimits is held before it is sent (a sleeping coroutine: no worker)
SCAN_PARAMETER = "fact"  # a list filtered by facts scans chunks of the fleet (automation.api.listing)
SCANS_AT_ONCE = 1  # such lists one caller may have in flight


def scans(scope: Scope) -> bool:
    """Whether the request is a fact-filtered list: the costly kind, of which a caller runs SCANS_AT_ONCE."""
    query = scope.get("query_string") or b""
    return SCAN_PARAMETER.encode() in query and \
        any(name == SCAN_PARAMETER for name, _ in parse_qsl(query.decode("latin-1"), keep_blank_values=True))


class CallerLimits:
    """ASGI middleware: per caller (bearer token hash), at most `concurrency` requests at once and `limiter`'s
    rate, and of fact-filtered lists at most SCANS_AT_ONCE at once and `scan_limiter`'s rate; beyond any, 429
    with Retry-After, answered on the event loop before the request takes a worker thread. Requests without a bearer token (discovery, health,
    docs, install, and the 401s) pass untouched: the install endpoint has its own limit per address. Per
    replica, like RateLimiter."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], *, limiter: RateLimiter,
                 concurrency: int, scan_limiter: RateLimiter):
        self.app, self.limiter, self.concurrency = app, limiter, max(1, concurrency)
        self.scan_limiter = scan_limiter
        self._running: dict[str, int] = {}  # touched only on the event loop: no lock
        self._scanning: dict[str, int] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        key = bearer_key(scope.get("headers") or []) if scope["type"] == "http" else None
        if key is None:
            await self.app(scope, receive, send)
            return
        scan = scans(scope)
        if self._running.get(key, 0) >= self.concurrency:
            await _too_many(send, f"too many requests at once with this token (at most {self.concurrency}); "
                                  "retry later", "1")
            return
        if scan and self._scanning.get(key, 0) >= SCANS_AT_ONCE:
            await _too_many(send, f"too many fact-filtered lists at once with this token (at most "
                                  f"{SCANS_AT_ONCE}); retry later", "1")
            return
        wait = self.limiter.take(key)
        if wait > 0:
            await _too_many(send, "too many requests with this token; retry later", retry_after(wait))
            return
        wait = self.scan_limiter.take(key) if scan else 0.0
        if wait > 0:
            await _too_many(send, f"too many fact-filtered lists with this token (at most "
                                  f"{self.scan_limiter.rate:g} per second); retry later", retry_after(wait))
            return
        counters = (self._running, self._scanning) if scan else (self._running,)
        for counter in counters:
            counter[key] = counter.get(key, 0) + 1
        try:
            await self.app(scope, receive, send)
        finally:
            for counter in counters:
                left = counter[key] - 1
                if left:
                    counter[key] = left
                else:
                    del counter[key]


async def _too_many(send: Send, detail: str, retry: str) -> None:
    """A 429, sent after TARPIT: a client that retries at once, ignoring Retry-After, still makes one request per
    connection per TARPIT, instead of a storm of 429s that would keep the event loop from everyone else."""
    await asyncio.sleep(TARPIT)
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": 429,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"retry-after", retry.encode())]})
    await send({"type": "http.response.body", "body": body})
