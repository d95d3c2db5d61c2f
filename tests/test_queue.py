"""The work queue: coalescing, one run per key at a time, timers, capped backoff with jitter."""
from __future__ import annotations

import itertools
import logging
import random
import threading
import time
from collections import Counter

import pytest

from automation.adapters.backoff import Backoff
from automation.kit.queue import Outcome, WorkQueue, Workers, fairness_group


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def wait_for(predicate, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"not true within {timeout}s"
        time.sleep(0.005)


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


def test_a_key_that_keeps_raising_logs_its_traceback_once_per_streak(caplog):
    q = WorkQueue(Backoff(base=0.01, cap=0.02))
    attempts: Counter = Counter()
    finished = threading.Event()

    def reconcile(key):
        attempts[key] += 1
        if attempts[key] <= 4:
            raise RuntimeError(f"the API answered 500 (attempt {attempts[key]})")
        finished.set()
        return Outcome.done()

    workers = Workers(q, reconcile, 1)
    with caplog.at_level(logging.WARNING, logger="hubwright.queue"):
        workers.start()
        try:
            q.add("acme/prod-1")
            assert finished.wait(5)
        finally:
            workers.stop(5)
    raised = [r for r in caplog.records if "raised" in r.getMessage()]
    assert [bool(r.exc_info) for r in raised] == [True, False, False, False]
    assert "raised again (failure 2): RuntimeError: the API answered 500 (attempt 2)" in raised[1].getMessage()


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


# -- fairness between namespaces: get() serves the namespace with the fewest keys in flight

def take(q: WorkQueue, n: int) -> list:
    """Take n keys and keep them in flight (as n busy workers would)."""
    keys = [q.get(timeout=0) for _ in range(n)]
    assert None not in keys
    return keys


def test_the_group_of_a_key_is_its_namespace_and_a_key_without_one_is_its_own():
    assert fairness_group("acme/prod-1") == "acme" and fairness_group("acme/a/b") == "acme"
    assert fairness_group("prod-1") == "prod-1" and fairness_group(("acme", "prod-1")) == ("acme", "prod-1")


def test_namespaces_take_turns_and_keys_keep_their_order_within_one():
    q = WorkQueue()
    for key in ("acme/1", "acme/2", "acme/3", "globex/1", "globex/2", "initech/1"):
        q.add(key)
    assert drain(q) == ["acme/1", "globex/1", "initech/1", "acme/2", "globex/2", "acme/3"]


def test_a_namespace_that_got_work_later_waits_behind_those_that_waited_longer():
    q = WorkQueue()
    q.add("acme/1")
    q.add("acme/2")
    q.add("globex/1")
    assert q.get(timeout=0) == "acme/1"
    q.done("acme/1")  # acme was just served: it goes to the back of the line, behind globex
    q.add("initech/1")  # and initech, come later, behind acme
    assert drain(q) == ["globex/1", "acme/2", "initech/1"]


def test_a_namespace_with_50_keys_holding_4_workers_is_overtaken_by_a_newcomer_when_one_frees_up():
    q = WorkQueue()
    for i in range(50):
        q.add(f"acme/c-{i:02d}")
    busy = take(q, 4)
    assert busy == ["acme/c-00", "acme/c-01", "acme/c-02", "acme/c-03"]
    q.add("globex/new")
    q.done(busy.pop(0))  # the first worker frees up
    assert q.get(timeout=0) == "globex/new"  # ahead of acme's 46 ready keys
    assert q.get(timeout=0) == "acme/c-04"  # globex has nothing more ready: acme's turn again
    assert (q.depth, q.in_flight) == (45, 5)


def test_two_busy_namespaces_converge_on_an_equal_share_of_the_workers():
    q = WorkQueue()
    for i in range(50):
        q.add(f"acme/c-{i:02d}")
    busy = take(q, 4)  # acme alone: all four workers
    for i in range(10):
        q.add(f"globex/c-{i:02d}")
    taken = []
    for _ in range(5):  # the oldest run ends each time; the freed worker goes by the counts in flight
        q.done(busy.pop(0))
        taken.append(q.get(timeout=0))
        busy.append(taken[-1])
    # acme 3 vs globex 0, 2 vs 1: globex; 1 vs 2, 1 vs 2: acme; then a globex run ends, 2 vs 1: globex
    assert taken == ["globex/c-00", "globex/c-01", "acme/c-04", "acme/c-05", "globex/c-02"]
    assert sorted(fairness_group(k) for k in busy) == ["acme", "acme", "globex", "globex"]


def test_a_single_namespace_may_use_every_worker():
    q = WorkQueue()
    for i in range(10):
        q.add(f"acme/c-{i}")
    assert take(q, 4) == [f"acme/c-{i}" for i in range(4)]
    assert (q.depth, q.in_flight) == (6, 4)
    # and through the worker threads: all four run acme keys at once (a barrier of 4 only opens if they do)
    barrier = threading.Barrier(4, timeout=5)

    def reconcile(key):
        barrier.wait()
        return Outcome.done()

    workers = Workers(WorkQueue(), reconcile, 4)
    for i in range(8):
        workers.queue.add(f"acme/c-{i}")
    workers.start()
    try:
        wait_for(lambda: workers.queue.idle(), 5)
    finally:
        workers.stop(5)
    assert not barrier.broken


def test_worker_threads_hand_a_newcomer_the_first_worker_that_frees_up():
    """Four workers busy with acme's keys (each held until released); globex's key is the next one started."""
    q = WorkQueue(Backoff(base=0.001, cap=0.002))
    started: list = []
    release = {f"acme/c-{i:02d}": threading.Event() for i in range(50)}
    release["globex/new"] = threading.Event()
    lock = threading.Lock()

    def reconcile(key):
        with lock:
            started.append(key)
        release[key].wait(10)
        return Outcome.retry()  # acme's keys keep failing: they come back after the backoff

    workers = Workers(q, reconcile, 4)
    for key in release:
        if key.startswith("acme/"):
            q.add(key)
    workers.start()
    try:
        wait_for(lambda: len(started) == 4, 5)
        q.add("globex/new")
        release[started[0]].set()
        wait_for(lambda: len(started) == 5, 5)
        assert started[4] == "globex/new"
    finally:
        for event in release.values():
            event.set()
        workers.stop(5)


def test_coalescing_and_a_key_dirty_in_flight_work_the_same_across_namespaces():
    q = WorkQueue()
    for _ in range(100):
        q.add("acme/1")
        q.add("globex/1")
    assert q.depth == 2
    assert take(q, 2) == ["acme/1", "globex/1"]
    q.add("acme/1")  # changed while it runs: dirty, not handed out again
    q.add("acme/1")
    assert q.get(timeout=0) is None and (q.depth, q.in_flight) == (0, 2) and not q.idle()
    q.done("acme/1")
    assert q.depth == 1
    assert q.get(timeout=0) == "acme/1"  # once more, exactly once
    q.done("acme/1")
    q.done("globex/1")
    assert q.get(timeout=0) is None and q.idle()


def test_keys_back_from_settling_or_a_timer_join_their_namespace_line():
    clock = FakeClock()
    q = WorkQueue(settle=0.5, clock=clock)
    q.add("acme/1")
    q.add("acme/2")
    assert q.get(timeout=0) == "acme/1"
    q.add("acme/1")  # changed while it ran: comes back once its changes stop (at +0.5)
    q.done("acme/1")
    assert q.get(timeout=0) == "acme/2"  # acme now has one in flight
    q.add_after("globex/1", 0.55)
    assert q.get(timeout=0) is None and q.scheduled == 2 and (q.depth, q.in_flight) == (0, 1)
    clock.now += 0.6  # both due, acme/1 first; globex, with nothing in flight, still goes first
    assert q.get(timeout=0) == "globex/1"
    assert q.get(timeout=0) == "acme/1"
    for key in ("acme/1", "acme/2", "globex/1"):
        q.done(key)
    assert q.get(timeout=0) is None and q.scheduled == 0 and q.idle()


def test_a_custom_grouping_decides_the_shares():
    q = WorkQueue(group=lambda key: key.split("-")[0])  # e.g. by team prefix
    for key in ("red-1", "red-2", "blue-1"):
        q.add(key)
    assert drain(q) == ["red-1", "blue-1", "red-2"]


def test_get_always_picks_what_a_scan_of_every_namespace_would_pick():
    """The heap with its stale entries and rebuilds agrees, step by step, with the plain O(groups) rule:
    the namespace with the fewest in flight, then the one that waited longest."""
    rng = random.Random(14)
    q = WorkQueue()
    ready: dict[str, list[str]] = {}  # the model: namespace -> its ready keys in order
    turn: dict[str, int] = {}
    running: Counter = Counter()
    in_flight: list[str] = []
    stamps = itertools.count()
    fresh = itertools.count()
    for _ in range(20000):
        roll = rng.random()
        if roll < 0.45:
            ns = f"ns-{rng.randrange(30)}"
            key = f"{ns}/{next(fresh)}"
            q.add(key)
            if ns not in ready:
                ready[ns], turn[ns] = [], next(stamps)
            ready[ns].append(key)
        elif roll < 0.75 and in_flight:
            key = in_flight.pop(rng.randrange(len(in_flight)))
            q.done(key)
            running[fairness_group(key)] -= 1
        else:
            got = q.get(timeout=0)
            if not ready:
                assert got is None
                continue
            ns = min(ready, key=lambda n: (running[n], turn[n]))
            assert got == ready[ns].pop(0)
            running[ns] += 1
            in_flight.append(got)
            if ready[ns]:
                turn[ns] = next(stamps)
            else:
                del ready[ns], turn[ns]
        assert (q.depth, q.in_flight) == (sum(map(len, ready.values())), len(in_flight))
