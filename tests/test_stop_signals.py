"""A stop signal is acted on whichever thread the kernel delivers it to (automation/adapters/signals.py).

The kernel may deliver a process-directed SIGTERM to any thread of a multi-threaded process. CPython runs the
handler only in the main thread, so a main thread blocked in an untimed wait never ran it: the process ignored
the SIGTERM until the pod's grace period ended in a SIGKILL, with no drain. Seen in CI as `serve` not exiting
within 60 s of a SIGTERM on a loaded machine. Here the signal is sent to a thread that is not the main one, on
purpose: in-process with pthread_kill, and to the real `serve` process with tgkill."""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from doubles.kube import MockKubeAPI
from tests.test_serve_cli import serve_process

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.live
def test_a_sigterm_delivered_to_another_thread_ends_the_wait():
    program = textwrap.dedent("""
        import signal, threading
        from automation.adapters.signals import StopSignals
        stop = StopSignals()
        def deliver_here():
            signal.pthread_kill(threading.get_ident(), signal.SIGTERM)  # to this thread, not the main one
        threading.Timer(0.2, deliver_here).start()
        print(signal.Signals(stop.wait()).name, flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", program], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=30)
    assert (done.returncode, done.stdout.strip()) == (0, "SIGTERM"), done.stderr


def tgkill(pid: int, tid: int, signum: int) -> None:
    """Send `signum` to one thread of another process (glibc's tgkill)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.tgkill(pid, tid, signum) != 0:
        raise OSError(ctypes.get_errno(), f"tgkill({pid}, {tid}, {signum})")


@pytest.mark.live
def test_serve_drains_and_exits_on_a_sigterm_delivered_to_one_of_its_threads(tmp_path):
    with MockKubeAPI() as api:
        proc = serve_process(api, tmp_path, "--workers", "1")
        lines: list[str] = []
        try:
            while not any("probes and metrics on" in line for line in lines):  # the main thread is in its wait
                line = proc.stderr.readline()
                assert line, f"serve exited before it served:\n{''.join(lines)}"
                lines.append(line)
            others = sorted(int(tid) for tid in os.listdir(f"/proc/{proc.pid}/task") if int(tid) != proc.pid)
            assert others, "serve runs threads besides its main one"
            tgkill(proc.pid, others[-1], signal.SIGTERM)
            _, rest = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        lines += rest.splitlines(keepends=True)
    assert proc.returncode == 0, "".join(lines)
    assert any("stopping: cancelling the runs in flight" in line for line in lines), "".join(lines)
