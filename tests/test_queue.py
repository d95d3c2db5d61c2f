"""The work queue: coalescing, one run per key at a time, timers, capped backoff with jitter."""
from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from automation.adapters.backoff import Backoff
from automation.service.queue import Outcome, WorkQueue, Workers


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def drain(q: WorkQueue) -> list:
    keys = []
    while (key := q.get(timeout=0)) is not None:
        keys.append(key)
        q.done(key)
    return keys


def test_duplicates_coalesce_into_one_entry():
    q = WorkQueue()
    for _ in range(100):
        q.add("acme/prod-1")
    q.add("acme/prod-2")
    assert q.depth == 2
    assert drain(q) == ["acme/prod-1", "acme/prod-2"]


def test_a_key_in_flight_is_not_handed_out_again_until_done():
    q = WorkQueue()
    q.add("k")
    assert q.get(timeout=0) == "k"
    q.add("k")
    q.add("k")
    assert q.get(timeout=0) is None  # held back while in flight
    q.done("k")
    assert q.get(timeout=0) == "k"  # then exactly once more
    q.done("k")
    assert q.get(timeout=0) is None


def test_timers_fire_when_due_and_the_earliest_wins():
    clock = FakeClock()
    q = WorkQueue(clock=clock)
    q.add_after("k", 60)
    q.add_after("k", 10)
    q.add_after("k", 30)
    assert q.get(timeout=0) is None and q.scheduled == 1
    clock.now += 10
    assert q.get(timeout=0) == "k"
    q.done("k")
    clock.now += 100
    assert q.get(timeout=0) is None  # the later timers were superseded


def test_add_supersedes_a_pending_timer():
    clock = FakeClock()
    q = WorkQueue(clock=clock)
    q.add_after("k", 300)
    q.add("k")
    assert drain(q) == ["k"]
    clock.now += 400
    assert drain(q) == []


def test_backoff_grows_exponentially_is_capped_and_jittered():
    backoff = Backoff(base=1, cap=60)
    lows = [backoff.delay(n, rand=lambda: 0.0) for n in range(12)]
    highs = [backoff.delay(n, rand=lambda: 1.0) for n in range(12)]
    assert highs[:7] == [1, 2, 4, 8, 16, 32, 60]
    assert max(highs) == 60 and all(h == 2 * lo for lo, h in zip(lows, highs))
    assert Backoff().cap <= 15 * 60  # minutes, far below the 24 h that users complained about
    with pytest.raises(ValueError):
        Backoff(base=10, cap=1)


def test_rate_limited_retries_count_failures_until_forgotten():
    clock = FakeClock()
    q = WorkQueue(Backoff(base=2, cap=8), clock=clock, rand=lambda: 1.0)
    delays = [q.add_rate_limited("k") for _ in range(5)]
    assert delays == [2, 4, 8, 8, 8]
    assert q.failures("k") == 5
    q.forget("k")
    assert q.failures("k") == 0 and q.add_rate_limited("k") == 2


def test_get_blocks_until_a_timer_is_due():
    q = WorkQueue()
    q.add_after("k", 0.2)
    started = time.monotonic()
    assert q.get(timeout=5) == "k"
    assert 0.15 <= time.monotonic() - started < 2


def test_workers_run_one_operation_per_key_and_keys_in_parallel():
    q = WorkQueue()
    lock = threading.Lock()
    running: Counter = Counter()
    max_per_key: Counter = Counter()
    overall = {"now": 0, "max": 0}
    runs: Counter = Counter()

    def reconcile(key):
        with lock:
            running[key] += 1
            overall["now"] += 1
            max_per_key[key] = max(max_per_key[key], running[key])
            overall["max"] = max(overall["max"], overall["now"])
        time.sleep(0.02)
        with lock:
            running[key] -= 1
            overall["now"] -= 1
            runs[key] += 1
        return Outcome.done()

    workers = Workers(q, reconcile, 4)
    workers.start()
    try:
        for _ in range(30):
            for key in ("a", "b", "c", "d"):
                q.add(key)
            time.sleep(0.005)
        deadline = time.monotonic() + 10
        while not q.idle() and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        workers.stop(5)
    assert set(max_per_key.values()) == {1}
    assert overall["max"] > 1
    assert all(1 <= runs[k] < 30 for k in "abcd")  # coalesced, yet every key ran


def test_workers_retry_failures_with_backoff_and_survive_exceptions():
    q = WorkQueue(Backoff(base=0.01, cap=0.05))
    attempts: Counter = Counter()
    finished = threading.Event()

    def reconcile(key):
        attempts[key] += 1
        if key == "boom" and attempts[key] == 1:
            raise RuntimeError("a bug")
        if key == "flaky" and attempts[key] < 4:
            return Outcome.retry()
        if attempts["boom"] >= 2 and attempts["flaky"] >= 4:
            finished.set()
        return Outcome.done()

    workers = Workers(q, reconcile, 2)
    workers.start()
    try:
        q.add("boom")
        q.add("flaky")
        assert finished.wait(5)
    finally:
        workers.stop(5)
    assert attempts["flaky"] == 4 and attempts["boom"] == 2
    assert q.failures("flaky") == 0  # forgotten after the success


def test_shutdown_releases_waiting_workers():
    q = WorkQueue()
    got = []
    thread = threading.Thread(target=lambda: got.append(q.get()))
    thread.start()
    time.sleep(0.05)
    q.shutdown()
    thread.join(2)
    assert not thread.is_alive() and got == [None]


def test_a_burst_of_changes_during_a_run_costs_one_more_run_with_the_final_state():
    clock = FakeClock()
    q = WorkQueue(settle=0.5, clock=clock)
    q.add("k")
    assert q.get(timeout=0) == "k"  # the first change runs at once
    for _ in range(100):  # 100 changes, 10 ms apart, while it runs and after
        clock.now += 0.01
        q.add("k")
        if clock.now >= 1000.1 and q.in_flight:
            q.done("k")
    assert q.get(timeout=0) is None  # still changing: waits
    clock.now += 0.49
    assert q.get(timeout=0) is None
    clock.now += 0.02  # quiet for half a second
    assert q.get(timeout=0) == "k"
    q.done("k")
    assert q.get(timeout=0) is None


def test_settling_never_waits_longer_than_its_cap():
    clock = FakeClock()
    q = WorkQueue(settle=0.5, settle_max=2.0, clock=clock)
    q.add("k")
    assert q.get(timeout=0) == "k"
    q.add("k")
    q.done("k")
    ran = None
    for step in range(1, 400):  # changes never stop
        clock.now += 0.01
        q.add("k")
        if q.get(timeout=0) == "k":
            ran = step * 0.01
            break
    assert ran is not None and 1.9 <= ran <= 2.1


def test_an_idle_key_runs_at_once_even_with_settling_on():
    clock = FakeClock()
    q = WorkQueue(settle=5.0, clock=clock)
    q.add("k")
    assert q.get(timeout=0) == "k"
    q.done("k")
    clock.now += 0.1
    q.add("k")  # changed again after its run ended: no reason to wait
    assert q.get(timeout=0) == "k"


def test_stopping_the_workers_waits_for_a_stuck_run_only_as_long_as_it_is_told():
    """The pod has a grace period: a run that ignores the engine's cancel must not hold the shutdown."""
    q = WorkQueue()
    release = threading.Event()
    entered = threading.Event()

    def stuck(key):
        entered.set()
        release.wait(30)
        return Outcome.done()

    workers = Workers(q, stuck, 1)
    workers.start()
    q.add("acme/prod-1")
    assert entered.wait(5)
    started = time.monotonic()
    workers.stop(timeout=0.3)
    assert time.monotonic() - started < 1.0
    assert len(workers._threads) == 1  # the stuck thread is left to the process's exit
    release.set()
