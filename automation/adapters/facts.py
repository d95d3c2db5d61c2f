"""The history of a cluster's dynamic facts: every push is a new version, kept in a SQL database.

Why a database and not the Cluster object: status.facts holds only the latest facts (for kubectl users);
the history (`GET .../facts/history?since=`) would grow the object without bound. One table,
`hubwright_facts`, holds (namespace, cluster, version, time, facts), unique on (namespace, cluster, version).

- SQLite (`sqlite:///path.db`, the default) serves one replica. WAL lets readers run beside a writer, a busy
  timeout makes writers wait for each other, and a push opens its transaction with BEGIN IMMEDIATE so it
  holds the write lock from the first read: pushes from many threads are serialised, never conflict.
- PostgreSQL (`postgresql://...`, run through psycopg 3) serves several replicas. Two pushes to one cluster
  may read the same latest version; the unique key lets only one insert it, the other gets an
  IntegrityError, rolls back and tries again (PUSH_ATTEMPTS times, with a short random pause). That alone
  is correct but unfair under load (a writer that keeps losing runs out of attempts), so a push first
  takes a transaction-scoped advisory lock on its cluster: pushes to one cluster queue up, as on SQLite,
  and the retry stays as the backstop the unique key makes safe.

Versions count 1, 2, 3... per (namespace, cluster), continue across restarts, and each version's time is
strictly later than the previous one's (max(now, previous + 1 microsecond)), so times never go backwards
with the version order, even between replicas whose clocks differ, and `since=<last time seen>` never
skips a version. Retention keeps at most `retention` versions per cluster: each push deletes the oldest
beyond it in its own transaction; the newest is always kept.

`history()` says, per version, what changed from the version before it (stacks.registry.facts_change);
version 1 is a change from {}. When retention has trimmed the version before the first one returned,
that entry is a change from {} too: it lists all of its facts as set.
"""
from __future__ import annotations

import hashlib
import random
import time
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

from pydantic import TypeAdapter, ValidationError
from sqlalchemy import (JSON, Column, DateTime, Index, Integer, MetaData, String, Table, and_, create_engine, delete,
                        event, func, insert, select)
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import IntegrityError, ProgrammingError

from stacks.model.fields import Facts
from stacks.registry import facts_change
from stacks.times import rfc3339_micro

PUSH_ATTEMPTS = 8  # concurrent pushes to one cluster from other replicas; each lost race is one attempt
SQLITE_BUSY_MS = 10_000
NAME_CHARS = 253  # namespaces and cluster names are Kubernetes names

_FACTS = TypeAdapter(Facts)
_METADATA = MetaData()
TABLE = Table(
    "hubwright_facts", _METADATA,
    Column("namespace", String(NAME_CHARS), primary_key=True),
    Column("cluster", String(NAME_CHARS), primary_key=True),
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("time", DateTime(timezone=True), nullable=False),
    Column("facts", JSON, nullable=False),
    # The primary key's index serves latest(), the retention delete and history() without since=;
    # this one takes history(since=...) straight to the first newer version.
    Index("hubwright_facts_history", "namespace", "cluster", "time"),
)


class FactsVersion(NamedTuple):
    version: int
    time: str  # RFC 3339, UTC: 2024-05-01T12:00:00.000123Z
    facts: dict[str, str]


def _utc(moment: datetime) -> datetime:
    """SQLite hands datetimes back naive (they were stored in UTC); PostgreSQL hands them back aware."""
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment.astimezone(timezone.utc)


def _engine(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):  # plain URLs mean psycopg 3, the driver we ship
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() != "sqlite":
        return create_engine(parsed, pool_pre_ping=True)
    engine = create_engine(parsed)

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # pysqlite's own BEGIN handling off: we emit BEGIN ourselves
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_MS}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: Connection) -> None:
        immediate = connection.get_execution_options().get("hubwright_write", False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


def _checked(facts: dict[str, str]) -> dict[str, str]:
    try:
        return _FACTS.validate_python(facts)
    except ValidationError as error:
        reasons = "; ".join(f"{'.'.join(str(part) for part in problem['loc']) or 'facts'}: {problem['msg']}"
                            for problem in error.errors())
        raise ValueError(f"facts refused (a map of at most 100 keys to strings of at most 1024 characters): "
                         f"{reasons}") from None


def _queue_behind_other_pushes(connection: Connection, namespace: str, cluster: str) -> None:
    """PostgreSQL: hold the cluster's advisory lock until the transaction ends (SQLite: BEGIN IMMEDIATE did).

    The key is 64 bits of a hash of the cluster's name; a collision only makes two clusters queue together.
    """
    if connection.dialect.name == "postgresql":
        digest = hashlib.sha256(f"hubwright-facts/{namespace}/{cluster}".encode()).digest()
        connection.execute(select(func.pg_advisory_xact_lock(int.from_bytes(digest[:8], "big", signed=True))))


def _key(namespace: str, cluster: str) -> Any:
    for what, name in (("namespace", namespace), ("cluster", cluster)):
        if not isinstance(name, str) or not 0 < len(name) <= NAME_CHARS:
            raise ValueError(f"{what} must be a name of 1 to {NAME_CHARS} characters, not {name!r}")
    return and_(TABLE.c.namespace == namespace, TABLE.c.cluster == cluster)


class FactsStore:
    """Versioned facts per (namespace, cluster) in the database at `url`; safe to share between threads."""

    def __init__(self, url: str, *, retention: int = 1000):
        if retention < 1:
            raise ValueError(f"retention must keep at least 1 version, not {retention}")
        self.retention = retention
        self._engine = _engine(url)
        self._writer = self._engine.execution_options(hubwright_write=True)
        try:
            _METADATA.create_all(self._engine)
        except (IntegrityError, ProgrammingError):  # another replica created the table at the same moment
            _METADATA.create_all(self._engine)

    def push(self, namespace: str, cluster: str, facts: dict[str, str]) -> FactsVersion:
        """Store `facts` as the cluster's next version, trim the history to `retention`, return the version."""
        where, facts = _key(namespace, cluster), _checked(facts)
        for attempt in range(1, PUSH_ATTEMPTS + 1):
            try:
                with self._writer.begin() as connection:
                    return self._push(connection, where, namespace, cluster, facts)
            except IntegrityError:  # another replica stored that version first: read the newest again
                if attempt == PUSH_ATTEMPTS:
                    raise
                time.sleep(random.uniform(0, 0.002 * 2 ** attempt))
        raise AssertionError("unreachable")

    def _push(self, connection: Connection, where: Any, namespace: str, cluster: str,
              facts: dict[str, str]) -> FactsVersion:
        _queue_behind_other_pushes(connection, namespace, cluster)
        previous = connection.execute(
            select(TABLE.c.version, TABLE.c.time).where(where).order_by(TABLE.c.version.desc()).limit(1)).first()
        now = datetime.now(timezone.utc)
        version, moment = (1, now) if previous is None else (
            previous.version + 1, max(now, _utc(previous.time) + timedelta(microseconds=1)))
        connection.execute(insert(TABLE).values(namespace=namespace, cluster=cluster, version=version,
                                                time=moment, facts=facts))
        connection.execute(delete(TABLE).where(where, TABLE.c.version <= version - self.retention))
        return FactsVersion(version, rfc3339_micro(moment), facts)

    def latest(self, namespace: str, cluster: str) -> FactsVersion | None:
        query = select(TABLE).where(_key(namespace, cluster)).order_by(TABLE.c.version.desc()).limit(1)
        with self._engine.connect() as connection:
            row = connection.execute(query).first()
        return None if row is None else FactsVersion(row.version, rfc3339_micro(row.time), row.facts)

    def history(self, namespace: str, cluster: str, since: str | None = None,
                limit: int = 100) -> list[dict]:
        """Up to `limit` versions with a time after `since` (RFC 3339), oldest first, each with what changed.

        Each entry is {"version", "time", "set", "removed"}, diffed against the version before it; the
        first entry's predecessor is read too, and if retention has dropped it the diff is against {}.
        """
        if limit < 1:
            raise ValueError(f"limit must be at least 1, not {limit}")
        where = _key(namespace, cluster)
        query = select(TABLE).where(where).order_by(TABLE.c.version).limit(limit)
        if since is not None:
            query = query.where(TABLE.c.time > _utc(_parse_time(since)))
        with self._engine.connect() as connection:
            rows = connection.execute(query).all()
            before = connection.execute(select(TABLE.c.facts).where(
                where, TABLE.c.version == rows[0].version - 1)).scalar() if rows else None
        entries, before = [], before or {}
        for row in rows:
            entries.append({"version": row.version, "time": rfc3339_micro(row.time), **facts_change(before, row.facts)})
            before = row.facts
        return entries

    def forget(self, namespace: str, cluster: str) -> int:
        """Drop a deleted cluster's whole history; returns how many versions went."""
        with self._engine.begin() as connection:
            return connection.execute(delete(TABLE).where(_key(namespace, cluster))).rowcount

    def close(self) -> None:
        self._engine.dispose()


def _parse_time(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text)  # a time without an offset is taken as UTC (_utc)
    except (TypeError, ValueError):
        raise ValueError(f"since must be an RFC 3339 time such as 2024-05-01T12:00:00Z, not {text!r}") from None
