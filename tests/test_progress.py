"""status.lastUpdate.progress: resources done / planned during a run, from the engine's events.

The real engine (the `pulumi` CLI through the service's WorkerPool: the events cross the worker's pipe) reports a
run of N resources with done <= planned throughout, ending at planned; the service writes the count into the
HubCluster's status while the run goes, at a bounded rate, and the Succeeded lastUpdate keeps the final count.
"""
from __future__ import annotations

import threading

from automation.adapters.engine.pool import WorkerPool
from doubles.engine import RecordingEngine
from doubles.pulumi_programs import CLOUDY, engine_settings, make_inputs
from tests.pulumi_live_programs import pulumi_cli  # noqa: F401 - fixture
from doubles.service_env import ENGINE_RUN, on_kmock, wait_until


def test_a_real_up_of_n_resources_reports_progress_that_ends_at_planned(pulumi_cli, tmp_path):  # noqa: F811
    count = 6
    pool = WorkerPool(engine_settings(tmp_path / "state"), program=CLOUDY,
                      program_options={"cloud": str(tmp_path / "cloud"), "count": count}, size=1)
    heard: list[tuple[int, int]] = []
    try:
        result = pool.up(make_inputs("prog-1"), message="progress test", on_progress=lambda d, p: heard.append((d, p)))
        again: list[tuple[int, int]] = []
        same = pool.up(make_inputs("prog-1"), message="nothing changed", on_progress=lambda d, p: again.append((d, p)))
    finally:
        pool.close()
    assert result.ok and heard, "no progress was reported"
    assert all(0 <= done <= planned for done, planned in heard), heard
    assert [d for d, _ in heard] == sorted(d for d, _ in heard) and [p for _, p in heard] == sorted(p for _, p in heard)
    # The last count is the whole run, as the engine's own summary counts it (the things and the root stack).
    steps = sum(result.changes.values())
    assert heard[-1] == (steps, steps) and steps == count + 1, (heard, result.changes)
    assert again[-1] == (steps, steps) and same.changes == {"same": steps}  # an up with no change too


def test_the_service_writes_progress_to_status_during_a_run_at_a_bounded_rate():
    engine = RecordingEngine(run_seconds=3.0, progress=30)  # 30 resources done one by one over 3 s
    with on_kmock() as env, env.running(engine) as service:
        reconciler = service.pipeline.reconciler
        reconciler.progress_every = 0.5
        written: list[dict] = []
        write_later = reconciler.kube.write_later

        def spy(raw, status, *, previous):
            last = status.last_update
            if last is not None and last.result == "Running" and last.progress is not None:
                written.append(last.progress.model_dump())
            return write_later(raw, status, previous=previous)
        reconciler.kube.write_later = spy

        seen: list[dict] = []
        stop = threading.Event()

        def watch() -> None:  # what `kubectl get hwc -o yaml` shows meanwhile
            while not stop.wait(0.05):
                last = ((env.get("prod-1") or {}).get("status") or {}).get("lastUpdate") or {}
                if last.get("result") == "Running" and last.get("progress"):
                    seen.append(last["progress"])
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        env.create("prod-1")
        wait_until(lambda: env.ready("prod-1"), ENGINE_RUN, what="prod-1 Ready")
        stop.set()
        watcher.join()
        final = env.get("prod-1")["status"]["lastUpdate"]
    assert final["result"] == "Succeeded" and final["progress"] == {"done": 30, "planned": 30}
    # Written while it ran, never more often than every 0.5 s (3 s of progress: at most ~6 writes, not 31).
    assert 1 <= len(written) <= 8, written
    assert all(0 <= p["done"] <= p["planned"] == 30 for p in written)
    assert seen and all(p in written for p in seen), (seen, written)  # on the API server, as written
