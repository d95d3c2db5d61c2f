"""Kubernetes API doubles, for the official `kubernetes` client over real HTTP on 127.0.0.1.

- `MockKubeAPI`: kmock's Kubernetes emulator served from a background thread. It stamps
  resourceVersion/uid/generation/creationTimestamp like a real API server would (the bare emulator
  leaves resourceVersion a placeholder) and accepts the client's `watch=True` spelling.
- `CuttableProxy`: a TCP proxy whose connections a test can cut, for dropped-watch faults.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import re
import socket
import threading
import uuid
from pathlib import Path
from typing import Any, Callable

import kmock
import yarl
from kmock import action
from kubernetes import client

from doubles.engine import utc_now
from stacks.names import API_VERSION, CLUSTER, GITREPO, HUBCONFIG, RETAINED, TENANT

_NAMESPACES = "namespaces-of-the-cluster"


def _emulator_class():
    class StampingEmulator(kmock.KubernetesEmulator):
        """kmock's emulator, plus the metadata a real API server maintains."""

        _rv = itertools.count(1)
        _last_rv = 0

        def _next_rv(self) -> str:
            type(self)._last_rv = next(self._rv)
            return str(self._last_rv)

        async def __call__(self, raw_request):
            url = raw_request.rel_url
            if url.query.get("watch") in ("True", "1"):  # the python client's spelling
                url = url.update_query(watch="true")
            # kmock 0.8 reads /api/v1/namespaces[/name] as a namespace prefix: route Namespaces
            # to a plural of their own, the same for every verb, so list/watch/get agree.
            found = re.fullmatch(r"/api/v1/namespaces(/[^/]+)?", url.path)
            if found:
                url = yarl.URL.build(path=f"/api/v1/{_NAMESPACES}{found[1] or ''}", query=url.query)
            if url != raw_request.rel_url:
                raw_request = raw_request.clone(rel_url=url)
            try:
                return await super().__call__(raw_request)
            finally:
                # kmock matches each request against its whole request log: cap it for long runs.
                limit = getattr(self, "history_limit", None)
                if limit and len(self._requests) > 2 * limit:
                    del self._requests[:-limit]

        async def _handle(self, request):
            data = request.data if isinstance(request.data, dict) else None
            if request.resource is not None and data is not None:
                meta = data.setdefault("metadata", {})
                if request.action == action.CREATE:
                    meta.setdefault("uid", str(uuid.uuid4()))
                    meta.setdefault("creationTimestamp", utc_now())
                    meta["generation"] = 1
                    meta["resourceVersion"] = self._next_rv()
                elif request.action == action.UPDATE:
                    meta.pop("resourceVersion", None)  # no optimistic locking in the emulator
                    if "spec" in data and request.subresource is None:
                        current = self._current(request)
                        if current is not None and current.get("spec") != {**current.get("spec", {}),
                                                                           **data["spec"]}:
                            meta["generation"] = int(current.get("metadata", {}).get("generation", 1)) + 1
                    meta["resourceVersion"] = self._next_rv()
                elif request.action == action.DELETE:
                    pass
            elif request.resource is not None and request.action == action.DELETE:
                pass
            return await super()._handle(request)

        async def _serve_list(self, request):
            listed = await super()._serve_list(request)
            listed["metadata"]["resourceVersion"] = str(self._last_rv)  # not the emulator's "..."
            return listed

        def _current(self, request):
            obj = self._object(request.resource, request.namespace, request.name)
            return None if obj is None or obj.deleted else obj.raw

        # kmock finds one object by comparing the request with every object (O(objects) a request). An API server
        # finds it by its key, so do the same: a 10,000-cluster bench measures the service, not the double.
        def _object(self, resource, namespace, name):
            key = (resource, namespace, name)
            return self._objects[key] if key in self._objects else None

        async def _serve_fetch(self, request):
            async with self._lock:
                obj = self._object(request.resource, request.namespace, request.name)
            if obj is None or obj.deleted:
                raise kmock.KubernetesObjectNotFoundError()
            return obj.raw

        async def _serve_update(self, request):
            async with self._lock:
                obj = self._object(request.resource, request.namespace, request.name)
            assert obj is not None  # updated (or refused) in _handle
            return obj.last.raw

        _serve_delete = _serve_update

        async def _serve_create(self, request):
            meta = request.data.get("metadata", {})
            async with self._lock:
                obj = self._object(request.resource, request.namespace or meta.get("namespace"),
                                   request.name or meta.get("name"))
            assert obj is not None  # created in _handle
            return kmock.Response(status=201, payload=obj.raw)  # as the API does

    return StampingEmulator


RESOURCES = {
    f"{API_VERSION}/{CLUSTER.plural}": dict(kind=CLUSTER.kind, namespaced=True, subresources={"status"}),
    f"{API_VERSION}/{HUBCONFIG.plural}": dict(kind=HUBCONFIG.kind, namespaced=False, subresources={"status"}),
    f"{API_VERSION}/{TENANT.plural}": dict(kind=TENANT.kind, namespaced=False, subresources={"status"}),
    f"{API_VERSION}/{GITREPO.plural}": dict(kind=GITREPO.kind, namespaced=True, subresources={"status"}),
    f"{API_VERSION}/{RETAINED.plural}": dict(kind=RETAINED.kind, namespaced=False),
    f"v1/{_NAMESPACES}": dict(kind="Namespace", namespaced=False),
    "v1/configmaps": dict(kind="ConfigMap", namespaced=True),
    "v1/events": dict(kind="Event", namespaced=True),
    "coordination.k8s.io/v1/leases": dict(kind="Lease", namespaced=True),
}


class MockKubeAPI:
    """A kmock Kubernetes emulator on 127.0.0.1, run from a background thread.

        with MockKubeAPI() as api:
            client = kubernetes.client.ApiClient(api.configuration())
            api.run(lambda k: k["watch"] << ...)   # DSL calls happen on the server's loop
    """

    def __init__(self, *, history: int | None = None) -> None:
        """`history`: keep only about this many requests in kmock's log (None: all; slices like [:1] need all)."""
        self.history = history
        self.loop = asyncio.new_event_loop()
        self.url = ""
        self.emulator = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None

    def __enter__(self) -> "MockKubeAPI":
        ready = threading.Event()
        failure: list[BaseException] = []

        async def main() -> None:
            self._stop = asyncio.Event()
            try:
                async with _emulator_class()() as emulator, kmock.Server(emulator) as server:
                    for path, info in RESOURCES.items():
                        emulator.resources[path] = kmock.ResourceInfo(**info)
                    emulator.history_limit = self.history
                    self.emulator = emulator
                    self.url = str(server.url).rstrip("/")
                    ready.set()
                    await self._stop.wait()
                    for task in asyncio.all_tasks():  # open watch streams never end by themselves
                        if task is not asyncio.current_task():
                            task.cancel()
            except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
                failure.append(exc)
                ready.set()

        self._thread = threading.Thread(target=self.loop.run_until_complete, args=(main(),),
                                        name="kmock", daemon=True)
        self._thread.start()
        ready.wait(30)
        if failure:
            raise failure[0]
        return self

    def __exit__(self, *exc: object) -> None:
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig at `path` for this server, with a user that has no credentials (what `serve` is given)."""
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "mock",
            "clusters": [{"name": "mock", "cluster": {"server": self.url}}],
            "users": [{"name": "nobody", "user": {}}],
            "contexts": [{"name": "mock", "context": {"cluster": "mock", "user": "nobody"}}]}))
        return path

    def run(self, fn: Callable[[Any], Any]) -> Any:
        """Call fn(emulator) on the server's event loop (the kmock DSL is not thread-safe)."""
        async def call():
            result = fn(self.emulator)
            await asyncio.sleep(0)
            return result
        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(10)

    def requests(self, predicate: Callable[[Any], bool] = lambda r: True) -> list:
        return self.run(lambda k: [r for r in list(k) if predicate(r)])

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def configuration(self, url: str | None = None):
        """A client configuration for this server (or for `url`, e.g. a proxy in front of it)."""
        cfg = client.Configuration()
        cfg.host = url or self.url
        return cfg


def _hang_up(sock) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class CuttableProxy:
    """A TCP proxy on 127.0.0.1 in front of `port`: `cut()` drops every open connection mid-stream,
    `refuse()` turns new connections away until `accept()`. Network faults without touching the client."""

    def __init__(self, port: int):
        self._target = port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set = set()
        self._refusing = False
        self.connections = 0
        self._stopped = False
        threading.Thread(target=self._serve, name="proxy", daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cut(self) -> int:
        """Close every open connection (both sides); returns how many were cut."""
        with self._lock:
            victims, self._open = list(self._open), set()
            for sock in victims:  # the pump threads wake up and close them
                _hang_up(sock)
        return len(victims) // 2

    def refuse(self) -> None:
        self._refusing = True
        self.cut()

    def accept(self) -> None:
        self._refusing = False

    def close(self) -> None:
        self._stopped = True
        self._listener.close()
        self.cut()

    def _serve(self) -> None:
        while not self._stopped:
            try:
                downstream, _ = self._listener.accept()
            except OSError:
                return
            if self._refusing:
                downstream.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self._target))
            except OSError:
                downstream.close()
                continue
            with self._lock:
                self._open.update((downstream, upstream))
                self.connections += 1
            for a, b in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source, sink) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            with self._lock:
                # shutdown() first: a close() alone would not wake the other pump's recv() on Linux,
                # and the peer would never hear that the connection is gone.
                for sock in (source, sink):
                    _hang_up(sock)
                    self._open.discard(sock)
            for sock in (source, sink):
                sock.close()
