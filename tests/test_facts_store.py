"""The facts history store (automation/adapters/facts.py) over SQLite and a real PostgreSQL server.

The behaviour tests run on both databases; the PostgreSQL server is shared by the session, so every test
uses its own namespace. The concurrency tests push from many threads (SQLite: one replica) and from two
FactsStore instances at once (PostgreSQL: two replicas) and check that every version exists exactly once.
"""
from __future__ import annotations

import re
import threading
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import create_engine, update

from automation.adapters import facts as facts_module
from automation.adapters.facts import TABLE, FactsStore
from tests.postgres import postgres_url  # noqa: F401 - the fixture

RFC3339_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.live)])
def url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'facts.db'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def ns():
    return f"ns-{uuid.uuid4().hex[:10]}"  # the PostgreSQL database is shared by every test


@pytest.fixture
def store(url):
    facts = FactsStore(url)
    yield facts
    facts.close()


def parse(moment: str) -> datetime:
    return datetime.fromisoformat(moment)


def push_all(store: FactsStore, ns: str, cluster: str, versions: list[dict[str, str]]):
    return [store.push(ns, cluster, facts) for facts in versions]


@pytest.mark.live
def test_every_push_is_a_new_version_and_history_says_what_changed(store, ns):
    assert store.latest(ns, "c1") is None and store.history(ns, "c1") == []
    before = datetime.now(timezone.utc)
    pushed = push_all(store, ns, "c1", [{"a": "1"}, {"a": "1", "b": "2"}, {"b": "3"}])

    assert [p.version for p in pushed] == [1, 2, 3]
    assert all(RFC3339_UTC.match(p.time) for p in pushed)
    times = [parse(p.time) for p in pushed]
    assert before <= times[0] < times[1] < times[2] <= datetime.now(timezone.utc)
    assert store.latest(ns, "c1") == pushed[2] and pushed[2].facts == {"b": "3"}
    assert store.history(ns, "c1") == [
        {"version": 1, "time": pushed[0].time, "set": {"a": "1"}, "removed": []},
        {"version": 2, "time": pushed[1].time, "set": {"b": "2"}, "removed": []},
        {"version": 3, "time": pushed[2].time, "set": {"b": "3"}, "removed": ["a"]},
    ]
    # An unchanged push is still a version (the agent's heartbeat), with nothing set or removed.
    assert store.push(ns, "c1", {"b": "3"}).version == 4
    assert store.history(ns, "c1")[-1] | {"time": None} == {"version": 4, "time": None, "set": {}, "removed": []}


def test_history_since_and_limit(store, ns):
    pushed = push_all(store, ns, "c1", [{"k": str(n)} for n in range(1, 6)])

    assert [e["version"] for e in store.history(ns, "c1", since=pushed[1].time)] == [3, 4, 5]
    # Each entry is still diffed against the version before it, returned or not.
    assert store.history(ns, "c1", since=pushed[1].time)[0]["set"] == {"k": "3"}
    assert store.history(ns, "c1", since=pushed[4].time) == []
    assert [e["version"] for e in store.history(ns, "c1", since="2000-01-01T00:00:00Z")] == [1, 2, 3, 4, 5]
    # The same instant written with another offset.
    elsewhere = parse(pushed[2].time).astimezone(timezone(timedelta(hours=2))).isoformat()
    assert [e["version"] for e in store.history(ns, "c1", since=elsewhere)] == [4, 5]
    # limit: the oldest first, so a client pages on with since=<the last time it got>.
    page = store.history(ns, "c1", limit=2)
    assert [e["version"] for e in page] == [1, 2]
    assert [e["version"] for e in store.history(ns, "c1", since=page[-1]["time"], limit=2)] == [3, 4]

    with pytest.raises(ValueError, match="RFC 3339"):
        store.history(ns, "c1", since="yesterday")
    with pytest.raises(ValueError, match="limit"):
        store.history(ns, "c1", limit=0)


def test_a_restart_continues_the_numbering_and_keeps_the_history(url, ns):
    first = FactsStore(url)
    pushed = push_all(first, ns, "c1", [{"a": "1"}, {"a": "2"}])
    history = first.history(ns, "c1")
    first.close()

    second = FactsStore(url)
    try:
        assert second.history(ns, "c1") == history
        assert second.latest(ns, "c1") == pushed[-1]
        third = second.push(ns, "c1", {"a": "3"})
        assert third.version == 3 and parse(third.time) > parse(pushed[-1].time)
        assert [e["version"] for e in second.history(ns, "c1")] == [1, 2, 3]
    finally:
        second.close()


def test_retention_keeps_the_newest_versions(url, ns):
    store = FactsStore(url, retention=3)
    try:
        pushed = push_all(store, ns, "c1", [{"n": str(n), "same": "x"} for n in range(1, 7)])
        history = store.history(ns, "c1")
        assert [e["version"] for e in history] == [4, 5, 6]
        # Version 3 is gone, so the oldest kept version lists all its facts, as a change from {}.
        assert history[0] == {"version": 4, "time": pushed[3].time, "set": {"n": "4", "same": "x"}, "removed": []}
        assert history[1]["set"] == {"n": "5"}
        assert store.latest(ns, "c1") == pushed[5]
        assert store.push(ns, "c1", {}).version == 7
        assert [e["version"] for e in store.history(ns, "c1")] == [5, 6, 7]
    finally:
        store.close()

    newest_only = FactsStore(url, retention=1)
    try:
        newest_only.push(ns, "c2", {"a": "1"})
        last = newest_only.push(ns, "c2", {"a": "2"})
        assert newest_only.history(ns, "c2") == [{"version": 2, "time": last.time, "set": {"a": "2"}, "removed": []}]
    finally:
        newest_only.close()
    with pytest.raises(ValueError, match="retention"):
        FactsStore(url, retention=0)


def test_forget_drops_one_clusters_history_only(store, ns):
    other_ns = f"{ns}-other"
    push_all(store, ns, "gone", [{"a": "1"}, {"a": "2"}, {"a": "3"}])
    push_all(store, ns, "stays", [{"b": "1"}])
    push_all(store, other_ns, "gone", [{"c": "1"}])  # the same name in another namespace is another cluster

    assert store.forget(ns, "gone") == 3
    assert store.latest(ns, "gone") is None and store.history(ns, "gone") == []
    assert store.latest(ns, "stays").facts == {"b": "1"}
    assert store.latest(other_ns, "gone").facts == {"c": "1"}
    assert store.forget(ns, "gone") == 0
    assert store.push(ns, "gone", {"a": "new"}).version == 1  # a new cluster of that name starts afresh


@pytest.mark.parametrize("facts, reason", [
    ({"a": 1}, "a: Input should be a valid string"),
    ({"a": "x" * 1025}, "at most 1024 characters"),
    ({f"k{n}": "v" for n in range(101)}, "at most 100 items"),
    ({"not a key!": "v"}, "should match pattern"),
    (["a", "b"], "valid dictionary"),
])
def test_bad_facts_are_refused_with_a_clear_message(store, ns, facts, reason):
    with pytest.raises(ValueError, match="facts refused") as refused:
        store.push(ns, "c1", facts)
    assert reason in str(refused.value)
    assert store.latest(ns, "c1") is None
    with pytest.raises(ValueError, match="cluster must be a name"):
        store.push(ns, "", {"a": "b"})


def test_time_never_goes_backwards_when_a_clock_was_ahead(tmp_path, ns):
    """A replica whose clock ran ahead stored a future time: the next version's time is still later."""
    url = f"sqlite:///{tmp_path / 'facts.db'}"
    store = FactsStore(url)
    try:
        store.push(ns, "c1", {"a": "1"})
        future = datetime.now(timezone.utc) + timedelta(hours=1)
        engine = create_engine(url)
        with engine.begin() as connection:
            connection.execute(update(TABLE).values(time=future).where(TABLE.c.namespace == ns))
        engine.dispose()
        assert parse(store.push(ns, "c1", {"a": "2"}).time) == future + timedelta(microseconds=1)
    finally:
        store.close()


def _push_concurrently(stores: list[FactsStore], ns: str, threads_per_store: int, pushes: int) -> list:
    """Every thread pushes `pushes` versions ({"writer": id, "n": i}); returns what each push returned."""
    results, errors, start = [], [], threading.Barrier(len(stores) * threads_per_store)
    lock = threading.Lock()

    def writer(store: FactsStore, name: str) -> None:
        try:
            start.wait()
            mine = [store.push(ns, "c1", {"writer": name, "n": str(n)}) for n in range(pushes)]
            assert [v.version for v in mine] == sorted(v.version for v in mine)  # each writer sees its own order
            with lock:
                results.extend(mine)
        except BaseException as error:  # noqa: BLE001 - reported by the test thread
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(store, f"s{s}-t{t}"))
               for s, store in enumerate(stores) for t in range(threads_per_store)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    return results


def _assert_versions_once_each_in_time_order(store: FactsStore, ns: str, results: list, total: int) -> None:
    assert sorted(v.version for v in results) == list(range(1, total + 1))
    history = store.history(ns, "c1", limit=total)
    assert [e["version"] for e in history] == list(range(1, total + 1))
    times = [parse(e["time"]) for e in history]
    assert times == sorted(times) and len(set(times)) == total
    pushed = {v.version: v for v in results}
    assert [(e["version"], e["time"]) for e in history] == [(n, pushed[n].time) for n in range(1, total + 1)]


def test_concurrent_pushes_in_one_replica_get_distinct_consecutive_versions(tmp_path, ns):
    store = FactsStore(f"sqlite:///{tmp_path / 'facts.db'}")
    try:
        results = _push_concurrently([store], ns, threads_per_store=8, pushes=15)
        _assert_versions_once_each_in_time_order(store, ns, results, 120)
        assert store.latest(ns, "c1") == max(results)
    finally:
        store.close()


def test_two_replicas_on_postgresql_never_duplicate_or_reorder_versions(postgres_url, ns):  # noqa: F811
    replicas = [FactsStore(postgres_url), FactsStore(postgres_url)]
    try:
        results = _push_concurrently(replicas, ns, threads_per_store=4, pushes=15)
        for replica in replicas:
            _assert_versions_once_each_in_time_order(replica, ns, results, 120)
        history = replicas[0].history(ns, "c1", limit=1000)
    finally:
        for replica in replicas:
            replica.close()

    restarted = FactsStore(postgres_url)
    try:
        assert restarted.history(ns, "c1", limit=1000) == history
        assert restarted.push(ns, "c1", {"after": "restart"}).version == 121
    finally:
        restarted.close()


def test_without_the_lock_the_unique_key_and_retries_still_keep_versions_unique(postgres_url, ns,  # noqa: F811
                                                                               monkeypatch):
    """The advisory lock only makes pushes queue fairly; the unique key is what forbids a duplicate.

    Without the lock two replicas read the same newest version; the loser's insert fails on the key, it
    rolls back, sleeps (counted here) and tries again.
    """
    monkeypatch.setattr(facts_module, "_queue_behind_other_pushes", lambda *_: None)
    conflicts = []
    real_sleep = facts_module.time.sleep
    monkeypatch.setattr(facts_module.time, "sleep", lambda seconds: (conflicts.append(seconds), real_sleep(seconds)))
    replicas = [FactsStore(postgres_url), FactsStore(postgres_url)]
    try:
        results = _push_concurrently(replicas, ns, threads_per_store=1, pushes=20)
        _assert_versions_once_each_in_time_order(replicas[0], ns, results, 40)
    finally:
        for replica in replicas:
            replica.close()
    # Two writers pushing 20 versions each from one start lose races (4 to 22 in 25 runs here): the retry ran.
    assert conflicts, "no push lost a race, so the retry path went untested"
