"""One HubCluster event's walk through the running service, traced: which rooms (modules) it passes, on which
thread, in order, from the spec edit to the engine's `up`. The equivalent, at run time, of `farm-studio walk`,
which cannot follow a key from one thread to the next.

    python -m bench.walk [--clusters 20] [--json]

The service runs on kmock (doubles.MockKubeAPI) with the recording engine, settles, then one cluster's spec is
edited. Every call into our packages (automation.*, stacks.*, doubles.engine) from then until the engine's `up`
returns is recorded (threading.setprofile, set before the service starts its threads); consecutive calls in one
module on one thread are one stay. It prints, per thread in the order the event reached them, the rooms entered
(first entries); --json adds every stay, which threads entered `FleetPublisher` (the mapper alone: decisions on one thread)
and whether a worker entered the mapper's room.
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from types import FrameType
from typing import Any

from doubles.engine import RecordingEngine
from doubles.service_env import on_kmock, quiet, wait_until

OURS = ("automation.", "stacks.", "doubles.engine")
NOISE = ("automation.adapters.logs", "automation.service.server")  # log formatting, the metrics' collectors


class Tracer:
    """Records (thread, module, function) of every call into OURS while armed; a stay per run of one module."""

    def __init__(self, limit: int = 20000):
        self.armed = False
        self.limit = limit
        self.stays: list[dict[str, str]] = []
        self.desired_threads: set[str] = set()
        self._last: dict[str, str] = {}  # thread -> the module it is in
        self._lock = threading.Lock()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.armed or event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith(OURS) or module.startswith(NOISE):
            return
        thread = threading.current_thread().name
        function = frame.f_code.co_qualname
        with self._lock:
            if function.startswith("FleetPublisher."):
                self.desired_threads.add(thread)
            if self._last.get(thread) == module or len(self.stays) >= self.limit:
                return
            self._last[thread] = module
            self.stays.append({"thread": thread, "module": module, "function": function})


def _thread_kind(name: str) -> str:
    return "worker" if name.startswith("worker-") else name


def room(module: str) -> str:
    """The room a module is in, as docs/architecture.md draws the service: a module of automation/service, a
    sub-package of automation/adapters or automation/service, stacks/ as one room (the pure decisions), the engine."""
    parts = module.split(".")
    if parts[0] == "stacks":
        return "stacks/"
    if parts[0] == "doubles":
        return "engine (doubles/engine.py)"
    if parts[1] == "adapters" and len(parts) > 3:
        return f"adapters/{parts[2]}/"
    if len(parts) > 3:  # a package of the service (service/clusters/)
        return f"{parts[1]}/{parts[2]}/"
    return "/".join(parts[1:]) + ".py"


def walk(clusters: int) -> dict[str, Any]:
    tracer = Tracer()
    threading.setprofile(tracer)  # every thread the service starts from now on
    try:
        with on_kmock() as env:
            for i in range(clusters):
                env.create(f"prod-{i}")
            engine = RecordingEngine()
            with env.running(engine) as service:
                wait_until(lambda: all(env.ready(f"prod-{i}") for i in range(clusters)), 60, what="the fleet")
                quiet(service)
                before = engine.count("up")
                tracer.armed = True
                started = time.perf_counter()
                env.patch("prod-0", {"spec": {"apiURL": "https://api.prod-0-b.example.com:6443"}})
                wait_until(lambda: engine.count("up") > before, 20, what="the edit's run")
                seconds = time.perf_counter() - started
                tracer.armed = False
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]  # typeshed: setprofile takes None to clear
    stays = [s for s in tracer.stays if s["thread"] not in ("MainThread", "kmock")]
    rooms_of: dict[str, list[str]] = {}  # thread kind -> the rooms it entered, in order (first entries)
    for stay in stays:
        rooms = rooms_of.setdefault(_thread_kind(stay["thread"]), [])
        if room(stay["module"]) not in rooms:
            rooms.append(room(stay["module"]))
    order = {"informer": 0, "mapper": 1, "worker": 2}  # the way an event goes; then the background writers
    walk = [{"thread": kind, "rooms": rooms} for kind, rooms in
            sorted(rooms_of.items(), key=lambda item: order.get(item[0].split("-")[0], 3))]
    workers = {room(s["module"]) for s in stays if s["thread"].startswith("worker-")}
    return {"clusters": clusters, "event_to_run_s": round(seconds, 4),
            "desired_entered_from": sorted(tracer.desired_threads),
            "workers_entered_the_mapper": "service/mapper.py" in workers,
            "walk": walk, "stays": stays}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.walk", description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", type=int, default=20)
    parser.add_argument("--json", action="store_true", help="the whole result as JSON (default: one stay a line)")
    args = parser.parse_args(argv)
    result = walk(args.clusters)
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        print()
        return 0
    for step in result["walk"]:
        print(f"{step['thread']:<20} {' -> '.join(step['rooms'])}")
    print(json.dumps({k: v for k, v in result.items() if k not in ("stays", "walk")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
