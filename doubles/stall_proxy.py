"""StallProxy: a TCP proxy on 127.0.0.1 that can stop forwarding without closing anything.

    with StallProxy(("127.0.0.1", 6443)) as proxy:   # proxy.port: point a client at 127.0.0.1:proxy.port
        proxy.stall()    # no byte moves either way; connections stay open; new ones are accepted, not forwarded
        proxy.resume()   # everything held flows again

What a stalled network path looks like to a client (a partition, a dead NAT entry, a hung middlebox): its
requests are sent (into the kernel's buffers) and no answer, no reset and no close ever comes. TLS passes
through untouched, so a client keeps verifying the upstream's certificate (for 127.0.0.1).

Two threads per connection, one per direction. A direction waits while stalled, both before it reads and
before it writes what it read, so nothing is forwarded once stall() has returned (a send already under way
finishes). `close()` shuts every socket down, which wakes every thread, and joins them.
"""
from __future__ import annotations

import select
import socket
import threading

POLL = 0.05  # how often a waiting thread looks at the close flag


class StallProxy:
    def __init__(self, upstream: tuple[str, int]):
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(POLL)
        self.port: int = self._listener.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self.connections = 0  # accepted so far
        self.sent = {"up": 0, "down": 0}  # bytes forwarded to the upstream, and back (bench/runners.py counts them)
        self._spawn(self._accept, "stall-proxy-accept")

    # -- control
    def stall(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    @property
    def stalled(self) -> bool:
        return not self._flowing.is_set()

    def close(self) -> None:
        self._closed.set()
        self._flowing.set()  # wake the waiters; they see the close flag before they move a byte
        with self._lock:
            sockets, self._sockets = list(self._sockets), set()
            threads = list(self._threads)
        for sock in sockets:
            _shut(sock)
        self._listener.close()
        for thread in threads:
            thread.join(5)
        alive = [t.name for t in threads if t.is_alive()]
        if alive:
            raise RuntimeError(f"stall proxy threads did not stop: {alive}")

    def __enter__(self) -> "StallProxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- threads
    def _spawn(self, target, name: str, *args) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                downstream, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return  # the listener was closed
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                _shut(downstream)
                continue
            downstream.settimeout(None)
            upstream.settimeout(None)
            with self._lock:
                if self._closed.is_set():
                    _shut(downstream)
                    _shut(upstream)
                    return
                self._sockets.update((downstream, upstream))
                self.connections += 1
                n = self.connections
            self._spawn(self._pump, f"stall-proxy-{n}-up", downstream, upstream, "up")
            self._spawn(self._pump, f"stall-proxy-{n}-down", upstream, downstream, "down")

    def _wait_flowing(self) -> bool:
        """True once bytes may move; False when the proxy is closing."""
        while not self._flowing.wait(POLL):
            if self._closed.is_set():
                return False
        return not self._closed.is_set()

    def _pump(self, src: socket.socket, dst: socket.socket, direction: str) -> None:
        try:
            while self._wait_flowing():
                readable, _, _ = select.select([src], [], [], POLL)
                if not readable:
                    continue
                data = src.recv(65536)
                if not data:
                    break  # one side closed: close the pair (HTTP needs no half-open connections)
                if not self._wait_flowing():
                    break
                dst.sendall(data)
                with self._lock:
                    self.sent[direction] += len(data)
        except (OSError, ValueError):
            pass  # a socket was shut down or closed under us
        finally:
            with self._lock:
                self._sockets.difference_update((src, dst))
            _shut(src)
            _shut(dst)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
