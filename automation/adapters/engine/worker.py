"""One engine worker: a child process of the service that runs Pulumi operations for it, one at a time.

    python -m automation.adapters.engine.worker <parent pid>      (started by automation.adapters.engine.pool, never by hand)

Why a process: Pulumi's Python runtime keeps global state, so inline programs of two stacks must not share a
process; and a run that hangs or is cancelled must be killable with everything it started.

Importing Pulumi (~0.45 s) is paid once per worker, not per run; the worker never forks without exec
(pulumi#21934: forking after `import pulumi` is unsafe). At start the worker
  - becomes a subreaper, so a plugin whose `pulumi` CLI died is re-parented here and stays in its tree;
  - asks for SIGTERM when its parent dies (PR_SET_PDEATHSIG), and also watches a lifeline pipe whose other end
    only the parent holds: either way it kills its whole tree and exits, so nothing outlives the service;
  - on SIGINT, passes SIGINT to its children: the `pulumi` CLI cancels gracefully (the pool's cancel path).

Protocol (JSON lines): the first line on stdin is the setup {"settings", "program", "program_options"};
it answers {"ready": pid}. Then each request {"op", "args"} gets one reply {"result"} or
{"error": {"type", "message", "reason", "trace"}} (trace: the failed run's protocol.Trace as a dict, or None),
after any number of {"progress": [done, planned]} lines (an `up` whose args ask for progress). Replies go to
the original stdout; fd 1 is pointed at stderr so that nothing else (the program, the CLI) can write into the
protocol. EOF on stdin: exit.
"""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import threading
from typing import Any, Callable

from automation.adapters import logs

from automation.adapters.engine import proctree
from automation.adapters.engine.pulumi_engine import PulumiEngine
from automation.adapters.engine.settings import PulumiSettings, load_program
from stacks.inputs import inputs_from_config


def _die(*_: Any) -> None:
    """Kill every descendant (CLI, plugins, orphans re-parented here), then exit."""
    proctree.kill_descendants(os.getpid())
    os._exit(143)


def _watch_lifeline(fd: int) -> None:
    while True:
        try:
            if not os.read(fd, 1):
                break
        except InterruptedError:
            continue
        except OSError:
            break
    _die()


def _reap_orphans() -> None:
    """Plugins re-parented to this subreaper become zombies when they exit; reap them between runs (never during
    one: waitpid(-1) would steal the CLI's exit status from the Automation API's subprocess)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _guard_process(parent: int, lifeline: int) -> None:
    proctree.become_subreaper()
    proctree.die_with_parent(signal.SIGTERM)
    signal.signal(signal.SIGTERM, _die)
    signal.signal(signal.SIGINT, lambda *_: proctree.signal_children(os.getpid(), signal.SIGINT))
    if os.getppid() != parent:  # the parent died before the death signal was armed
        _die()
    threading.Thread(target=_watch_lifeline, args=(lifeline,), name="lifeline", daemon=True).start()


def main(argv: list[str]) -> int:
    parent, lifeline = int(argv[0]), int(argv[1])
    _guard_process(parent, lifeline)
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    logs.configure_from(os.environ)  # the service's format on the shared stderr (json: nothing else)

    setup = json.loads(sys.stdin.readline())
    engine = PulumiEngine(PulumiSettings.from_json(setup["settings"]),
                          program_factory=load_program(setup["program"], setup.get("program_options") or {}))
    write = threading.Lock()

    def progress(done: int, planned: int) -> None:  # from the engine's event thread, before the run's reply
        with write:
            replies.write(json.dumps({"progress": [done, planned]}) + "\n")

    ops: dict[str, Callable[[dict], Any]] = {
        "up": lambda a: engine.up(inputs_from_config(a["inputs"]), message=a["message"],
                                  refresh=bool(a.get("refresh")), on_progress=progress if a.get("progress") else None),
        "destroy": lambda a: engine.destroy(a["stack"], message=a["message"]),
        "preview": lambda a: engine.preview(inputs_from_config(a["inputs"])),
        "recover": lambda a: engine.recover(a["stack"], live_runners=a.get("live_runners")),
        "applied": lambda a: engine.applied(a["stack"]),
        "forget": lambda a: engine.forget(a["stack"]),
        "ping": lambda a: {"pid": os.getpid()},
    }
    engine.warm()
    replies.write(json.dumps({"ready": os.getpid()}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        try:
            value = ops[request["op"]](request.get("args") or {})
            reply: dict[str, Any] = {"result": _plain(value)}
        except Exception as err:  # noqa: BLE001 - every failure goes back to the caller, typed
            trace = getattr(err, "trace", None)
            reply = {"error": {"type": type(err).__name__, "message": str(err),
                               "reason": getattr(err, "reason", "UpdateFailed"),
                               "trace": dataclasses.asdict(trace) if trace is not None else None}}
        with write:
            replies.write(json.dumps(reply) + "\n")
        _reap_orphans()
    return 0


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, dict):
        return value
    if hasattr(value, "to_config"):  # StackInputs (applied)
        return {"inputs": value.to_config()}
    return dataclasses.asdict(value)  # RunResult: every field, `drifted` (preview) and `trace` included


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
