"""WorkerPool: the Engine the service uses. Every Pulumi operation runs in a worker process of its own.

    service thread ──► WorkerPool._call ──► Worker (python -m automation.adapters.engine.worker, one run at a time)
                                              └─► pulumi CLI ──► plugins (each in its own process group)

- **Pre-started.** `size` workers are started ahead (importing Pulumi takes ~0.45 s), so a run pays a JSON
  round trip, not a Python start. A worker serves `max_runs` runs, then a fresh one replaces it.
- **Time-limited.** A run that passes `limits.timeout` gets SIGINT (the worker passes it to the `pulumi` CLI:
  Pulumi's graceful cancel). If it has not ended `limits.grace` seconds later, the worker's whole process tree
  is killed (proctree: followed by parent pid, since plugins leave the CLI's process group), a fresh worker
  takes its place, and the stack's lock is recovered (the killed CLI's lock is a stale lock of this host).
  The run raises RunCancelled.
- **Cancellable.** `cancel(grace)` does the same to every run in flight (shutdown: the pod's grace period;
  a lost Lease: grace 0) and returns when none is left.
- **Nothing outlives the service.** Workers are subreapers that die with the service (a parent-death signal,
  and a lifeline pipe) and kill their tree as they go (automation.adapters.engine.worker).

Workers are started from one long-lived thread: Linux sends the parent-death signal when the *thread* that
started a process exits, so a worker started from a short-lived thread would die with that thread.
"""
from __future__ import annotations

import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Mapping

from automation.adapters.engine import proctree
from automation.adapters.engine.protocol import (EngineError, OnProgress, PolicyViolation, RunCancelled, RunLimits,
                                                 RunResult, StackLocked, Trace)
from automation.adapters.engine.settings import PulumiSettings
from stacks.inputs import StackProgramInputs, inputs_from_config

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[3]  # the import root of `automation` (the image's /app)
DEFAULT_PROGRAM = "components.program:program"
START_TIMEOUT_S = 60.0  # a worker that is not ready by then (import, setup) is killed
KILL_WAIT_S = 5.0  # after the grace, how long cancel() waits for the killed runs to be reaped
ERRORS = {cls.__name__: cls for cls in (EngineError, StackLocked, RunCancelled, PolicyViolation)}


class WorkerDied(Exception):
    pass


def _pipes(proc: subprocess.Popen[bytes]) -> tuple[IO[bytes], IO[bytes]]:
    """The worker's stdin and stdout: Popen makes both for PIPE (which its type cannot say)."""
    if proc.stdin is None or proc.stdout is None:
        raise WorkerDied(f"worker {proc.pid}: started without its pipes")
    return proc.stdin, proc.stdout


class Worker:
    """One worker process and its pipes: requests on stdin, replies on stdout, a lifeline it watches."""

    def __init__(self, python: str, setup: Mapping[str, Any], env: Mapping[str, str]):
        lifeline_r, self._lifeline = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [python, "-m", "automation.adapters.engine.worker", str(os.getpid()), str(lifeline_r)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT, env=dict(env), pass_fds=(lifeline_r,),
                start_new_session=True)  # a Ctrl-C at the service's terminal reaches the service, not the runs
        finally:
            os.close(lifeline_r)
        self.pid = self.proc.pid
        self._stdin, self._stdout = _pipes(self.proc)
        self.runs = 0
        self._buffer = b""
        self.send(setup)
        ready = self.read(START_TIMEOUT_S)
        if ready is None or ready.get("ready") != self.pid:
            self.kill()
            raise WorkerDied(f"worker {self.pid} did not start within {START_TIMEOUT_S:.0f}s: {ready}")

    def send(self, message: Mapping[str, Any]) -> None:
        try:
            self._stdin.write(json.dumps(message).encode() + b"\n")
            self._stdin.flush()
        except (BrokenPipeError, ValueError) as err:
            raise WorkerDied(f"worker {self.pid}: {err}") from None

    def read(self, timeout: float) -> dict | None:
        """The next reply, or None when none came within `timeout` seconds; WorkerDied when its stdout closed."""
        fd = self._stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise WorkerDied(f"worker {self.pid} exited ({self.proc.poll()})")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)

    def alive(self) -> bool:
        """Not exited, and not exiting (a dying process's main thread is a zombie before waitpid sees it)."""
        return self.proc.poll() is None and proctree.alive(self.pid)

    def interrupt(self) -> None:
        """SIGINT: the worker passes it on to the `pulumi` CLI, which cancels gracefully."""
        proctree.kill(self.pid, signal.SIGINT)

    def kill(self) -> list[int]:
        """Kill the worker's whole tree (it is a subreaper: orphaned plugins are in it), then the worker."""
        proctree.kill(self.pid, signal.SIGSTOP)  # it starts nothing more while its tree is killed
        killed = proctree.kill_descendants(self.pid)
        proctree.kill(self.pid)
        self.proc.wait()
        self._close()
        return killed

    def retire(self) -> None:
        """EOF on stdin: the worker exits after its current run (it has none when retired)."""
        try:
            self._stdin.close()
            self.proc.wait(5)
            self._close()
        except (OSError, subprocess.TimeoutExpired):
            self.kill()

    def _close(self) -> None:
        for stream in (self._stdin, self._stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            os.close(self._lifeline)
        except OSError:
            pass


@dataclass
class _Run:
    op: str
    stack: str
    deadline: float
    grace: float
    why: str | None = None  # set when it must stop: "timed out" or "cancelled"
    kill_at: float | None = None
    on_progress: OnProgress | None = None  # the worker's {"progress": [done, planned]} lines go here


class WorkerPool:
    """Engine (automation.adapters.engine) over worker processes; safe to call from several threads."""

    def __init__(self, settings: PulumiSettings, *, program: str = DEFAULT_PROGRAM,
                 program_options: Mapping[str, Any] | None = None, size: int = 4, limits: RunLimits = RunLimits(),
                 max_runs: int = 50, python: str = sys.executable, env: Mapping[str, str] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        settings.check()
        limits.check(settings.stale_lock_after_s)
        if size < 1 or max_runs < 1:
            raise ValueError(f"worker pool: size and max_runs must be at least 1 (got {size}, {max_runs})")
        self.settings, self.limits, self.size, self.max_runs = settings, limits, size, max_runs
        self._clock = clock  # the run timeout's clock (a test moves it on instead of waiting out --run-timeout)
        self._setup = {"settings": settings.to_json(), "program": program, "program_options": dict(program_options or {})}
        self._python = python
        self._env = {**(os.environ if env is None else env), "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
        self._spawner = ThreadPoolExecutor(1, thread_name_prefix="engine-spawner")  # see the module docstring
        self._cond = threading.Condition()
        self._idle: list[Worker] = []
        self._busy: dict[Worker, _Run] = {}
        self._starting = 0
        self._closed = False
        for _ in range(size):
            self._replace()

    # ----------------------------------------------------------------- the Engine protocol

    def up(self, inputs: StackProgramInputs, *, message: str, refresh: bool = False,
           on_progress: OnProgress | None = None) -> RunResult:
        return _result(self._call("up", inputs.stack, {"inputs": inputs.to_config(), "message": message,
                                                       "refresh": refresh, "progress": on_progress is not None},
                                  on_progress=on_progress))

    def destroy(self, stack: str, *, message: str) -> RunResult:
        return _result(self._call("destroy", stack, {"stack": stack, "message": message}))

    def preview(self, inputs: StackProgramInputs) -> RunResult:
        return _result(self._call("preview", inputs.stack, {"inputs": inputs.to_config()}))

    def recover(self, stack: str, *, live_runners: Mapping[str, str] | None = None) -> RunResult:
        args: dict[str, Any] = {"stack": stack}
        if live_runners is not None:
            args["live_runners"] = dict(live_runners)
        return _result(self._call("recover", stack, args))

    def applied(self, stack: str) -> StackProgramInputs | None:
        reply = self._call("applied", stack, {"stack": stack})
        return inputs_from_config(reply["inputs"]) if reply else None

    def forget(self, stack: str) -> str:
        return str(self._call("forget", stack, {"stack": stack}))

    def cancel(self, grace: float) -> None:
        with self._cond:
            for run in self._busy.values():
                run.why = run.why or "cancelled"
                run.grace = min(run.grace, grace)
                if run.kill_at is not None:  # already interrupted (timed out): a shorter grace still applies
                    run.kill_at = min(run.kill_at, self._clock() + grace)
            self._cond.notify_all()
            self._cond.wait_for(lambda: not self._busy, timeout=grace + KILL_WAIT_S)

    def close(self) -> None:
        """Cancel what runs (no grace) and stop every worker."""
        self.cancel(0)
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.retire()
        self._spawner.shutdown(wait=True)

    # ----------------------------------------------------------------- runs

    def ping(self) -> dict:
        """A round trip to a worker that runs nothing (the pool's own overhead: bench/pool.py)."""
        return self._call("ping", "-", {})

    def _call(self, op: str, stack: str, args: Mapping[str, Any], *, on_progress: OnProgress | None = None) -> Any:
        worker = self._checkout()
        run = _Run(op, stack, deadline=self._clock() + self.limits.timeout, grace=self.limits.grace,
                   on_progress=on_progress)
        with self._cond:
            self._busy[worker] = run
        reply, killed = None, None
        try:
            worker.send({"op": op, "args": dict(args)})
            reply = self._await(worker, run)
        except WorkerDied as err:
            log.warning("%s %s: %s", op, stack, err)
        finally:
            if reply is None:
                killed = worker.kill()
            self._checkin(worker, reusable=reply is not None)
        if reply is None:
            return self._after_kill(run, killed or [])
        if "error" in reply:
            failure = reply["error"]
            if run.why:
                error: EngineError = RunCancelled(f"{op} {stack}: {run.why}, then stopped: {failure['message']}")
            else:
                error = ERRORS.get(failure["type"], EngineError)(failure["message"], reason=failure.get("reason"))
            error.trace = _trace(failure.get("trace"))  # the failed run's diff and log, for its history entry
            raise error
        return reply["result"]

    def _await(self, worker: Worker, run: _Run) -> dict | None:
        """The worker's reply; None once the run had to be killed (timed out or cancelled, and past its grace)."""
        while True:
            now = self._clock()
            with self._cond:
                if run.why is None and now >= run.deadline:
                    run.why = f"did not finish within {self.limits.timeout:.0f}s (--run-timeout)"
                if run.why and run.kill_at is None:
                    run.kill_at = now + run.grace
                    log.warning("%s %s: %s: cancelling (SIGINT), killed in %.0fs", run.op, run.stack, run.why,
                                run.grace)
                    worker.interrupt()
                kill_at = run.kill_at
            if kill_at is not None and now >= kill_at:
                return None
            reply = worker.read(0.1)
            if reply is not None and "progress" in reply:
                if run.on_progress is not None:
                    try:
                        run.on_progress(*reply["progress"])
                    except Exception:  # noqa: BLE001 - progress is a report: it never fails the run
                        log.exception("%s %s: reporting progress failed", run.op, run.stack)
                continue
            if reply is not None:
                return reply

    def _after_kill(self, run: _Run, killed: list[int]) -> Any:
        what = f"{run.op} {run.stack}: {run.why or 'its worker died'}; killed its process tree ({len(killed)} processes)"
        if run.why and run.why != "cancelled" and run.op != "recover" and run.stack != "-":
            try:  # the killed CLI's lock is a stale lock of this host now: clear it while we know the cause
                what += f"; recovered the stack: {self.recover(run.stack).message}"
            except EngineError as err:
                what += f"; recovering the stack failed: {err}"
        raise RunCancelled(what)

    # ----------------------------------------------------------------- workers

    def _checkout(self) -> Worker:
        with self._cond:
            if self._closed:
                raise EngineError("the engine is closed (the service is stopping)", reason="RunCancelled")
            while not self._idle and self._starting:  # one is on its way
                self._cond.wait(1.0)
            while self._idle:
                worker = self._idle.pop()
                if worker.alive():
                    return worker
                log.warning("worker %d exited while idle (%s); replacing it", worker.pid, worker.proc.poll())
                worker.kill()
            self._starting += 1
        try:  # more runs at once than workers: start one for this run
            return self._spawner.submit(self._start).result()
        finally:
            with self._cond:
                self._starting -= 1

    def _checkin(self, worker: Worker, *, reusable: bool) -> None:
        worker.runs += 1
        with self._cond:
            self._busy.pop(worker, None)
            keep = (reusable and not self._closed and worker.runs < self.max_runs
                    and len(self._idle) + len(self._busy) + self._starting < self.size)
            if keep:
                self._idle.append(worker)
            self._cond.notify_all()
        if not keep:
            if reusable:
                worker.retire()
            self._replace()

    def _replace(self) -> None:
        """Start a worker in the background, to be idle when the next run comes."""
        with self._cond:
            if self._closed or len(self._idle) + len(self._busy) + self._starting >= self.size:
                return
            self._starting += 1
        self._spawner.submit(self._start_idle)

    def _start_idle(self) -> None:
        try:
            worker = self._start()
        except Exception as err:  # noqa: BLE001 - the next run starts one itself, and says why if it fails
            log.error("starting a worker failed: %s", err)
            worker = None
        with self._cond:
            self._starting -= 1
            if worker is not None:
                self._idle.append(worker)
            self._cond.notify_all()

    def _start(self) -> Worker:
        return Worker(self._python, self._setup, self._env)


def _trace(raw: Mapping[str, Any] | None) -> Trace | None:
    """A Trace back from its JSON (dataclasses.asdict)."""
    return None if raw is None else Trace(diff=raw.get("diff"), log=raw.get("log") or "",
                                          dropped=int(raw.get("dropped") or 0))


def _result(raw: Mapping[str, Any]) -> RunResult:
    """A RunResult back from its JSON (worker._plain: dataclasses.asdict), every field included (`drifted`,
    `trace`)."""
    return RunResult(**{**raw, "drifted": list(raw.get("drifted") or []), "trace": _trace(raw.get("trace"))})
