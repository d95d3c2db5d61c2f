"""Test doubles behind the same interfaces as the real things.

- `RecordingEngine`: the automation.engine.Engine protocol, in memory. Records
  every run, takes a configurable time per run, and fails, locks, drifts or
  leaves a killed run behind on request. Used by the tests and by bench/.
- `MockKubeAPI`: kmock's Kubernetes emulator served over real HTTP on
  127.0.0.1 from a background thread, for the official `kubernetes` client.
  It stamps resourceVersion/uid/generation/creationTimestamp like a real API
  server would (the bare emulator leaves resourceVersion a placeholder) and
  accepts the client's `watch=True` spelling.

`python -m tests.doubles` serves a MockKubeAPI until stdin closes (it prints the
URL first): bench/ runs it in its own process so its memory is not counted.
"""
from __future__ import annotations

import asyncio
import itertools
import re
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

from automation.engine import EngineError, RunResult, StackLocked
from stacks.inputs import StackInputs


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------- engine

@dataclass
class Call:
    operation: str
    stack: str
    inputs: StackInputs | None = None
    message: str = ""
    started: float = 0.0  # time.monotonic()
    ended: float = 0.0
    ok: bool | None = None


@dataclass
class _Fault:
    operation: str
    stack: str | None
    times: int
    error: Callable[[], EngineError]


def fake_outputs(inputs: StackInputs) -> dict[str, Any]:
    """Outputs shaped like stacks.program's, derived from the inputs."""
    outputs: dict[str, Any] = {"cluster": inputs.key, "inputsDigest": inputs.digest()}
    link = inputs.private_link
    if link is not None:
        outputs["privateLink"] = {
            "serviceName": f"com.amazonaws.vpce.{inputs.cluster.region}.vpce-svc-{link.infra_id}",
            "serviceId": f"vpce-svc-{link.infra_id}",
            "endpointId": f"vpce-{link.infra_id}",
            "endpointDnsName": f"vpce-{link.infra_id}.vpce-svc.{link.endpoint_vpc.region}.vpce.amazonaws.com",
            "endpointVpcId": link.endpoint_vpc.vpc_id,
            "zoneId": f"Z{link.infra_id.upper()}",
            "infraID": link.infra_id,
        }
    return outputs


class RecordingEngine:
    """An in-memory Engine that records what it was asked to do."""

    def __init__(self, run_seconds: float = 0.0, *, on_start: Callable[[Call], None] | None = None):
        self.run_seconds = run_seconds
        self.on_start = on_start
        self.calls: list[Call] = []
        self.stacks: dict[str, StackInputs] = {}  # what `up` last applied, per stack
        self.drifted: set[str] = set()
        self.stale: set[str] = set()  # stacks a killed run left locked with pending operations
        self.gates: dict[str, threading.Event] = {}  # runs of these stacks wait for the event
        self._faults: list[_Fault] = []
        self._lock = threading.Lock()
        self._running: Counter = Counter()
        self.max_concurrent_per_stack = 0
        self.max_concurrent = 0

    # -- configuring faults
    def fail(self, operation: str, stack: str | None = None, *, times: int = 1,
             message: str = "simulated failure", reason: str | None = None) -> None:
        self._faults.append(_Fault(operation, stack, times, lambda: EngineError(message, reason=reason)))

    def lock(self, stack: str | None = None, *, times: int = 1, message: str = "the stack is locked") -> None:
        """The next `times` runs raise StackLocked (another update holds the stack)."""
        self._faults.append(_Fault("*", stack, times, lambda: StackLocked(message)))

    def kill_mid_run(self, stack: str) -> None:
        """Leave the stack as a killed run would: locked, with pending operations, until recover()."""
        self.stale.add(stack)

    def gate(self, stack: str) -> threading.Event:
        """Runs of `stack` block until the returned event is set."""
        self.gates[stack] = threading.Event()
        return self.gates[stack]

    # -- reading the record
    def runs(self, operation: str | None = None, stack: str | None = None) -> list[Call]:
        with self._lock:
            return [c for c in self.calls
                    if (operation is None or c.operation == operation) and (stack is None or c.stack == stack)]

    def count(self, operation: str | None = None, stack: str | None = None) -> int:
        return len(self.runs(operation, stack))

    # -- the protocol
    def up(self, inputs: StackInputs, *, message: str) -> RunResult:
        call = self._begin("up", inputs.stack, inputs, message)
        try:
            self._check(call)
            with self._lock:
                self.stacks[inputs.stack] = inputs
                self.drifted.discard(inputs.stack)
            return self._end(call, RunResult("up", True, "applied", outputs=fake_outputs(inputs),
                                             changes={"same": 1}))
        except EngineError:
            self._end(call, None)
            raise

    def destroy(self, stack: str, *, message: str) -> RunResult:
        call = self._begin("destroy", stack, None, message)
        try:
            self._check(call)
            with self._lock:
                self.stacks.pop(stack, None)
            return self._end(call, RunResult("destroy", True, "destroyed"))
        except EngineError:
            self._end(call, None)
            raise

    def preview(self, inputs: StackInputs) -> RunResult:
        call = self._begin("preview", inputs.stack, inputs, "drift check")
        try:
            self._check(call)
            with self._lock:
                same = self.stacks.get(inputs.stack) == inputs and inputs.stack not in self.drifted
            return self._end(call, RunResult("preview", same, "no changes" if same else "drift",
                                             changes={} if same else {"update": 1}))
        except EngineError:
            self._end(call, None)
            raise

    def refresh(self, inputs: StackInputs) -> RunResult:
        call = self._begin("refresh", inputs.stack, inputs, "refresh")
        self._check(call)
        return self._end(call, RunResult("refresh", True))

    def recover(self, stack: str) -> RunResult:
        call = self._begin("recover", stack, None, "recover")
        with self._lock:
            was_stale = stack in self.stale
            self.stale.discard(stack)
        return self._end(call, RunResult("recover", True, "cancelled a stale lock" if was_stale else "nothing to do"))

    def applied(self, stack: str) -> StackInputs | None:
        with self._lock:
            return self.stacks.get(stack)

    # -- internals
    def _begin(self, operation: str, stack: str, inputs: StackInputs | None, message: str) -> Call:
        call = Call(operation, stack, inputs, message, started=time.monotonic())
        with self._lock:
            self.calls.append(call)
            self._running[stack] += 1
            self.max_concurrent_per_stack = max(self.max_concurrent_per_stack, self._running[stack])
            self.max_concurrent = max(self.max_concurrent, sum(self._running.values()))
        if self.on_start is not None:
            self.on_start(call)
        return call

    def _check(self, call: Call) -> None:
        gate = self.gates.get(call.stack)
        if gate is not None:
            gate.wait(30)
        if self.run_seconds:
            time.sleep(self.run_seconds)
        with self._lock:
            if call.stack in self.stale and call.operation != "recover":
                raise StackLocked(f"stack {call.stack} is locked by a run that did not finish")
            for fault in self._faults:
                if fault.times > 0 and fault.operation in (call.operation, "*") and fault.stack in (None, call.stack):
                    fault.times -= 1
                    raise fault.error()

    def _end(self, call: Call, result: RunResult | None) -> RunResult | None:
        call.ended = time.monotonic()
        call.ok = result.ok if result is not None else False
        with self._lock:
            self._running[call.stack] -= 1
        if result is not None:
            result.started = result.started or _now()
            result.ended = _now()
        return result


# --------------------------------------------------------------------------- Kubernetes API

_NAMESPACES = "namespaces-of-the-cluster"


def _emulator_class():
    import kmock

    class StampingEmulator(kmock.KubernetesEmulator):
        """kmock's emulator, plus the metadata a real API server maintains."""

        _rv = itertools.count(1)
        _last_rv = 0

        def _next_rv(self) -> str:
            type(self)._last_rv = next(self._rv)
            return str(self._last_rv)

        async def __call__(self, raw_request):
            import yarl

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
            from kmock import action

            data = request.data if isinstance(request.data, dict) else None
            if request.resource is not None and data is not None:
                meta = data.setdefault("metadata", {})
                if request.action == action.CREATE:
                    meta.setdefault("uid", str(uuid.uuid4()))
                    meta.setdefault("creationTimestamp", _now())
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

        async def _serve_create(self, request):
            return kmock.Response(status=201, payload=await super()._serve_create(request))  # as the API does

        def _current(self, request):
            for (resource, namespace, name), obj in self.objects.items():
                if resource == request.resource and namespace == request.namespace and name == request.name:
                    return None if obj.deleted else obj.raw
            return None

    return StampingEmulator


RESOURCES = {
    "clusternet.io/v1alpha1/clusters": dict(kind="Cluster", namespaced=True, subresources={"status"}),
    "clusternet.io/v1alpha1/hubconfigs": dict(kind="HubConfig", namespaced=False),
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
        import kmock

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
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = url or self.url
        return cfg


def _hang_up(sock) -> None:
    import socket

    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class CuttableProxy:
    """A TCP proxy on 127.0.0.1 in front of `port`: `cut()` drops every open connection mid-stream,
    `refuse()` turns new connections away until `accept()`. Network faults without touching the client."""

    def __init__(self, port: int):
        import socket

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
        import socket

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
        import socket

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


def main() -> None:
    with MockKubeAPI(history=int(sys.argv[1]) if len(sys.argv) > 1 else 4) as api:
        print(api.url, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
