"""Loopback ports for the tests' servers (kube-apiserver, etcd, Gitea, PostgreSQL, moto, HAProxy).

A port is handed out free and bound by the server a moment later. Two things could take it in that moment:
another pytest-xdist worker picking ports at the same time, or an outgoing connection's source port (the kernel
takes those from its ephemeral range, which is also where a bind to port 0 picks from). So ports come from a
block of their own per worker (``PYTEST_XDIST_WORKER`` gw0, gw1, ...), below the ephemeral range, handed out in
turn from a random start (another run on the machine starts elsewhere), each checked free by binding it.
"""
from __future__ import annotations

import itertools
import os
import random
import re
import socket
import threading

BASE, BLOCK, BLOCKS = 12000, 1000, 20  # 12000-31999: below Linux's default ephemeral range (32768-60999)

_lock = threading.Lock()
_next: "itertools.count[int] | None" = None


def worker_index() -> int:
    """This pytest-xdist worker's number (gw3 -> 3); 0 outside xdist."""
    found = re.fullmatch(r"gw(\d+)", os.environ.get("PYTEST_XDIST_WORKER", ""))
    return int(found.group(1)) % BLOCKS if found else 0


def free_port() -> int:
    """A loopback TCP port nobody listens on, from this worker's block."""
    global _next
    with _lock:
        if _next is None:
            _next = itertools.count(random.randrange(BLOCK))
        start = BASE + worker_index() * BLOCK
        for _ in range(BLOCK):
            port = start + next(_next) % BLOCK
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    raise RuntimeError(f"no free loopback port in {start}-{start + BLOCK - 1}")
