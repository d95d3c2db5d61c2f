"""WorkerPool (the service's engine) against the real `pulumi` CLI: parallel runs in worker processes, the run
timeout's cancel-then-kill path, and no process outliving the service.

The stack program is doubles.pulumi_programs:sleepy (a dynamic resource whose create sleeps and writes the
provider's pid to a marker file), so a test can find the plugin process a run started and prove it is gone.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from automation.adapters.engine import proctree
from automation.adapters.engine import RunCancelled, RunLimits
from automation.adapters.engine.pool import WorkerPool
from doubles.pulumi_programs import ROOT, SLEEPY, engine_settings, make_inputs
from doubles.service_env import wait_until


def pool_at(tmp: Path, *, sleep: float = 0.0, marker: str = "", size: int = 1, limits: RunLimits = RunLimits(),
            **kw) -> WorkerPool:
    settings = engine_settings(tmp / "state", home=tmp / "home")
    return WorkerPool(settings, program=SLEEPY, program_options={"sleep": sleep, "marker": marker}, size=size,
                      limits=limits, **kw)


def pulumi_processes_under(pid: int) -> list[tuple[int, str]]:
    return [(p, proctree.program_name(p)) for p in proctree.descendants(pid)
            if "pulumi" in proctree.program_name(p)]


def started(pid: int) -> str | None:
    """When process `pid` started (/proc/PID/stat's starttime): with the pid, the identity of one process, since a
    pid is reused (pid_max is 32,768 here, and a busy CI run goes through thousands a minute)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def still_running(processes: dict[int, str | None]) -> list[tuple[int, str]]:
    """Those of {pid: start time} that run now as the same process (not a zombie), with their programs."""
    return [(pid, proctree.program_name(pid)) for pid, at in processes.items()
            if proctree.alive(pid) and started(pid) == at]


def test_four_stacks_go_up_at_once_each_in_its_own_worker(pulumi_cli, tmp_path):
    """Four `up`s overlap in time, each gets its own program's outputs (no state shared between inline
    programs), and every stack's applied inputs are its own."""
    pool = pool_at(tmp_path, sleep=4, size=4)
    try:
        names = ["a", "b", "c", "d"]
        spans: dict[str, tuple[float, float]] = {}
        results, errors = {}, []

        def up(name: str) -> None:
            start = time.monotonic()
            try:
                results[name] = pool.up(make_inputs(name), message=f"parallel {name}")
            except Exception as err:  # noqa: BLE001 - reported below
                errors.append((name, err))
            spans[name] = (start, time.monotonic())

        threads = [threading.Thread(target=up, args=(n,)) for n in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        assert not errors, errors
        assert max(s for s, _ in spans.values()) < min(e for _, e in spans.values()), f"runs did not overlap: {spans}"
        for name in names:
            assert results[name].outputs["cluster"] == f"acme/{name}"
            assert results[name].outputs["thing"] == f"{name}-thing-id"
            assert pool.applied(f"acme.{name}") == make_inputs(name)
    finally:
        pool.close()
    assert pulumi_processes_under(os.getpid()) == []


def test_a_hung_run_is_cancelled_then_killed_and_its_lock_recovered(pulumi_cli, tmp_path):
    """Past --run-timeout: SIGINT (Pulumi waits for the hung create), then the whole tree is killed after the
    grace period; the plugin is gone, no pulumi process is left, and the stack is usable at once.

    The run's clock is the test's: it passes the timeout once the create is hung (the provider wrote its pid),
    so a slow machine's start-up never races the timeout. The grace is real time."""
    marker = tmp_path / "provider.pid"
    clock = SteppedClock()
    pool = pool_at(tmp_path, sleep=600, marker=str(marker), limits=RunLimits(timeout=120, grace=2), clock=clock)
    try:
        caught: list[BaseException] = []
        thread = threading.Thread(target=lambda: _catch(caught, lambda: pool.up(make_inputs("hung"), message="hangs")))
        thread.start()
        provider = int(wait_until(lambda: marker.exists() and marker.read_text(), 120, what="the provider to start"))
        clock.step(120)  # --run-timeout has passed
        interrupted = time.monotonic()
        thread.join(120)
        took = time.monotonic() - interrupted
        assert not thread.is_alive() and isinstance(caught[0], RunCancelled), caught
        message = str(caught[0])
        assert "did not finish within 120s" in message and "killed its process tree" in message, message
        assert "recovered the stack" in message, message
        assert took >= 2, f"killed {took:.1f}s after the timeout, before its grace of 2s"
        assert not proctree.alive(provider), f"the provider {provider} outlived the killed run"
        assert pulumi_processes_under(os.getpid()) == []
    finally:
        pool.close()
    healthy = pool_at(tmp_path)  # same backend: the lock was recovered, so the next up needs nothing else
    try:
        result = healthy.up(make_inputs("hung"), message="after the kill")
        assert result.ok and result.outputs["cluster"] == "acme/hung"
    finally:
        healthy.close()


class SteppedClock:
    """A clock that stands still until the test moves it on by `step` seconds; from then on it runs."""

    def __init__(self) -> None:
        self.base, self.offset = time.monotonic(), None

    def step(self, seconds: float) -> None:
        self.offset = self.base + seconds - time.monotonic()

    def __call__(self) -> float:
        return self.base if self.offset is None else time.monotonic() + self.offset


def test_cancel_stops_the_runs_in_flight_and_later_runs_start_as_usual(pulumi_cli, tmp_path):
    marker = tmp_path / "provider.pid"
    pool = pool_at(tmp_path, sleep=600, marker=str(marker), size=2)
    try:
        failure: list[BaseException] = []
        thread = threading.Thread(target=lambda: _catch(failure, lambda: pool.up(make_inputs("c"), message="x")))
        thread.start()
        # A first up (a worker, a new stack, its tags and config, then the program) took over 60 s beside a loaded
        # 2-worker run: the bound is a safety net; a failed up ends the wait at once, with its error.
        found = wait_until(lambda: failure or (marker.exists() and marker.read_text()), 180, what="the provider to start")
        assert not failure, failure
        provider = int(found)
        started = time.monotonic()
        pool.cancel(0)
        assert time.monotonic() - started < 10
        thread.join(10)
        assert isinstance(failure[0], RunCancelled) and "cancelled" in str(failure[0])
        assert not proctree.alive(provider)
        assert pool.ping()["pid"] > 0  # a fresh worker serves the next run
    finally:
        pool.close()


def test_nothing_outlives_a_killed_service(pulumi_cli, tmp_path):
    """SIGKILL the process that owns the pool mid-`up`: its worker, the CLI and the plugin all die with it
    (before the pool, the plugin finished its create minutes later and left an untracked duplicate)."""
    marker = tmp_path / "provider.pid"
    service = subprocess.Popen(
        [sys.executable, "-m", "doubles.pulumi_programs", "up", "--pool", "--state", str(tmp_path / "state"),
         "--home", str(tmp_path / "home"), "--sleep", "600", "--marker", str(marker)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True)
    try:
        provider = int(wait_until(lambda: marker.exists() and marker.read_text(), 180, what="the provider to start"))
        tree = {pid: started(pid) for pid in proctree.descendants(service.pid)}
        assert provider in tree
        service.send_signal(signal.SIGKILL)
        service.wait(10)
        # 45 s, not 15: the chain (worker sees its parent gone, cancels the CLI, the CLI stops its plugin) took
        # over 15 s once in a full CI run on 2 busy cores; alone it takes a few seconds. A process is its pid and its
        # start time: a pid reused by another test's process while this waits is not this run's.
        wait_until(lambda: not still_running(tree), 45, what=f"every process of the run to die: {tree}",
                   diagnose=lambda: f"still running: {still_running(tree)}")
    finally:
        if service.poll() is None:
            service.kill()


def test_workers_are_recycled_and_a_dead_idle_worker_is_replaced(pulumi_cli, tmp_path):
    pool = pool_at(tmp_path, max_runs=2)
    try:
        first = {pool.ping()["pid"], pool.ping()["pid"]}
        assert len(first) == 1
        third = pool.ping()["pid"]
        assert third not in first  # served its 2 runs: replaced
        os.kill(third, signal.SIGKILL)
        wait_until(lambda: not proctree.alive(third), 5, what="the worker to die")
        assert pool.ping()["pid"] != third
    finally:
        pool.close()


def test_a_stale_lock_age_shorter_than_a_run_is_refused(tmp_path):
    settings = engine_settings(tmp_path, home=tmp_path / "home")
    limits = RunLimits(timeout=1800, grace=60)
    short = settings.__class__(**{**settings.__dict__, "stale_lock_after_s": 300.0})
    with pytest.raises(ValueError, match="stale lock age 300s .* at least the run timeout 1800s"):
        WorkerPool(short, program=SLEEPY, limits=limits)
    assert limits.stale_lock_after > limits.timeout + limits.grace


def _catch(into: list, fn) -> None:
    try:
        fn()
    except BaseException as err:  # noqa: BLE001
        into.append(err)
