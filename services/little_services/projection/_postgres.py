"""The ProjectionStore on PostgreSQL: one database that several projector instances write and
every instance's API reads, so any instance serves every run.

States are JSON text beside the indexed columns the listing filters and sorts on (the same
shape as the sqlite store). ``put`` is one transaction on a pooled connection with
``synchronous_commit=on``: when it returns, the states and the cursors of the partitions they
came from are durable together, which is what lets the projector commit its consumer offsets
next. Instances of one consumer group write disjoint partitions; the guard of ``put`` (a run's
row never moves back) keeps a zombie that lost a partition from undoing the new owner's work.
Rows are written in run-id order, so two writers that do touch the same rows (a zombie) wait
for each other instead of deadlocking; a deadlock, a serialization failure or a dropped
connection is retried (every write here is idempotent).

The blocking psycopg API is used (on a ``psycopg_pool.ConnectionPool``): the ProjectionStore
port is synchronous, called from the projector's thread and from the API's worker threads,
never on an event loop. Needs the ``postgresql`` extra (``little-services[postgresql]``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import structlog

from little.errors import ConfigurationError
from little_services.projection._store import (
    PartitionCursor,
    ProjectionStore,
    ProjectionWrite,
    RunPage,
    RunQuery,
    RunRecord,
    cursor_row,
    cursors_of_rows,
    page_of_rows,
    record_columns,
    records_of_rows,
    row_of_record,
    run_columns,
    run_query_sql,
    summary_columns,
)

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

log = structlog.get_logger("little_services.projection.postgres")

SCHEMA_VERSION = 1
"""The tables' version, kept in ``projection_meta``; another version is refused on open."""
_SCHEMA_LOCK = 0x6C6974746C65  # pg_advisory_xact_lock key: one instance creates the tables
_RETRIES = 5

_SCHEMA = """
CREATE TABLE IF NOT EXISTS projection_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS projection_runs (
    run_id TEXT COLLATE "C" PRIMARY KEY,
    status TEXT NOT NULL,
    workflow TEXT,
    workflow_version TEXT,
    updated_at_ms BIGINT NOT NULL,
    log_partition INTEGER NOT NULL,
    first_offset BIGINT NOT NULL,
    last_offset BIGINT NOT NULL,
    last_seq BIGINT NOT NULL,
    events_applied BIGINT NOT NULL,
    epoch BIGINT NOT NULL,
    stale BOOLEAN NOT NULL,
    integrity TEXT,
    detail TEXT,
    state TEXT NOT NULL,
    replay TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS projection_runs_by_updated
    ON projection_runs (updated_at_ms DESC, run_id);
CREATE INDEX IF NOT EXISTS projection_runs_by_status
    ON projection_runs (status, updated_at_ms DESC, run_id);
CREATE INDEX IF NOT EXISTS projection_runs_by_workflow
    ON projection_runs (workflow, updated_at_ms DESC, run_id);
CREATE INDEX IF NOT EXISTS projection_runs_by_partition
    ON projection_runs (log_partition, first_offset);
CREATE TABLE IF NOT EXISTS projection_cursors (
    topic TEXT NOT NULL,
    log_partition INTEGER NOT NULL,
    covered BIGINT NOT NULL,
    previous BIGINT NOT NULL,
    gap_before BIGINT NOT NULL,
    PRIMARY KEY (topic, log_partition)
);
"""

_RUN_COLUMNS = run_columns(partition="log_partition")
# A run's row never moves back in the log (see ProjectionStore.put) unless it is stale or
# held in another partition (whose offsets do not compare).
_UPSERT_RUN = (
    f"INSERT INTO projection_runs ({', '.join(_RUN_COLUMNS)}) "
    f"VALUES ({', '.join(['%s'] * len(_RUN_COLUMNS))}) "
    "ON CONFLICT (run_id) DO UPDATE SET "
    + ", ".join(f"{c} = EXCLUDED.{c}" for c in _RUN_COLUMNS[1:])
    + " WHERE projection_runs.stale OR EXCLUDED.log_partition <> projection_runs.log_partition"
    " OR EXCLUDED.last_offset >= projection_runs.last_offset"
)
_SET_CURSOR = (
    "INSERT INTO projection_cursors (topic, log_partition, covered, previous, gap_before) "
    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (topic, log_partition) DO UPDATE SET "
    "covered = EXCLUDED.covered, previous = EXCLUDED.previous, "
    "gap_before = EXCLUDED.gap_before"
)
# ``put`` only moves a cursor forward (a fenced zombie's late write must not move it back);
# ``reset_partition`` sets it wherever it is told.
_ADVANCE_CURSOR = _SET_CURSOR + " WHERE EXCLUDED.covered >= projection_cursors.covered"
_SUMMARY_COLUMNS = summary_columns(partition="log_partition")
_RECORD_COLUMNS = record_columns(partition="log_partition")

T = TypeVar("T")


def is_postgres_url(location: str) -> bool:
    return urlsplit(location).scheme in ("postgresql", "postgres")


def redact(url: str) -> str:
    """``url`` with its passwords replaced by ``***`` (for logs and messages).

    Works on the raw text, parsing no port: a libpq URL may name several hosts
    (``h1:5432,h2:5432``) or an IPv6 address, and a malformed one must still be printable.
    Masks the password of the user part (after the first ``:`` before the last ``@``) and
    every ``password=`` query parameter.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    cut = len(rest)
    for mark in "/?#":
        at = rest.find(mark)
        if at != -1:
            cut = min(cut, at)
    netloc, tail = rest[:cut], rest[cut:]
    if "@" in netloc:
        user, _, hosts = netloc.rpartition("@")
        if ":" in user:
            user = user.split(":", 1)[0] + ":***"
        netloc = f"{user}@{hosts}"
    path, qmark, query = tail.partition("?")
    if qmark:
        query, hash_, fragment = query.partition("#")
        query = "&".join(_mask_password(part) for part in query.split("&"))
        tail = f"{path}?{query}{hash_}{fragment}"
    return f"{scheme}://{netloc}{tail}"


def _mask_password(param: str) -> str:
    key = param.split("=", 1)[0]
    return f"{key}=***" if key.strip().lower() == "password" else param


class PostgresProjectionStore(ProjectionStore):
    """Run states in a PostgreSQL database (tables created if missing).

    ``url`` is a libpq URL (``postgresql://user:password@host:5432/db?sslmode=require``);
    libpq's own variables (``PGPASSWORD``, ``PGSSLMODE``...) fill what it leaves out.
    ``max_connections`` bounds the pool (the projector's writer and the API's readers).
    """

    def __init__(self, url: str, *, max_connections: int = 8, connect_timeout: float = 30.0):
        try:
            import psycopg
            from psycopg_pool import ConnectionPool
        except ImportError:  # pragma: no cover - depends on the install
            raise ConfigurationError(
                "a postgresql:// projection store needs psycopg: "
                "pip install 'little-services[postgresql]'"
            ) from None
        if not is_postgres_url(url):
            raise ConfigurationError(f"not a postgresql:// URL: {redact(url)}")
        self.url = url
        self.location = url
        self._psycopg = psycopg
        self._closed = False
        self._close_lock = threading.Lock()
        try:  # fail now, naming the server, rather than on the first write
            with psycopg.connect(url, autocommit=True, connect_timeout=int(connect_timeout)) as c:
                self._create_schema(c)
        except psycopg.OperationalError as exc:
            raise ConfigurationError(
                f"cannot reach the projection database {redact(url)}: {exc}".strip()
            ) from exc
        self._pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            url,
            min_size=1,
            max_size=max_connections,
            kwargs={"autocommit": True},
            configure=_configure,
            check=ConnectionPool.check_connection,
            timeout=connect_timeout,
            name="little-projection",
            open=True,
        )

    def _create_schema(self, conn: psycopg.Connection[Any]) -> None:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            conn.execute(_SCHEMA)
            row = conn.execute("SELECT value FROM projection_meta WHERE key = 'schema'").fetchone()
            if row is None:
                conn.execute(
                    "INSERT INTO projection_meta VALUES ('schema', %s)", (str(SCHEMA_VERSION),)
                )
            elif int(row[0]) != SCHEMA_VERSION:
                raise ConfigurationError(
                    f"projection database {redact(self.url)} has schema {row[0]}, not "
                    f"{SCHEMA_VERSION}: rebuild it (`little projections rebuild --to-earliest`)"
                )

    def __repr__(self) -> str:
        return f"PostgresProjectionStore({redact(self.url)!r})"

    # -- connections -------------------------------------------------------------------------

    @contextmanager
    def _conn(self) -> Iterator[psycopg.Connection[Any]]:
        with self._pool.connection() as conn:
            yield conn

    def _retrying(self, what: str, body: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Run ``body`` in one transaction; again on a deadlock, a serialization failure or a
        lost connection (each body here is idempotent), up to ``_RETRIES`` times."""
        errors = self._psycopg.errors
        transient = (
            errors.DeadlockDetected,
            errors.SerializationFailure,
            self._psycopg.OperationalError,
        )
        for attempt in range(1, _RETRIES + 1):
            try:
                with self._conn() as conn, conn.transaction():
                    return body(conn)
            except transient as exc:
                if attempt == _RETRIES:
                    raise
                delay = min(2.0, 0.05 * 2**attempt)
                log.warning("projection_write_retried", what=what, attempt=attempt, error=str(exc))
                time.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    # -- the projector's side ----------------------------------------------------------------

    def get_many(self, run_ids: Iterable[str]) -> dict[str, RunRecord]:
        ids = list(dict.fromkeys(run_ids))
        if not ids:
            return {}
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT {_RECORD_COLUMNS} FROM projection_runs WHERE run_id = ANY(%s)", (ids,)
            ).fetchall()
        return records_of_rows(rows)

    def put(self, write: ProjectionWrite) -> None:
        rows = sorted((row_of_record(r) for r in write.records), key=lambda row: str(row[0]))
        cursors = [cursor_row(write.topic, p, c) for p, c in sorted(write.cursors.items())]

        def body(conn: psycopg.Connection[Any]) -> None:
            with conn.cursor() as cur:
                if rows:
                    cur.executemany(_UPSERT_RUN, rows)
                if cursors:
                    cur.executemany(_ADVANCE_CURSOR, cursors)

        self._retrying("put", body)

    def cursors(self, topic: str) -> dict[int, PartitionCursor]:
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT log_partition, covered, previous, gap_before FROM projection_cursors "
                "WHERE topic = %s",
                (topic,),
            ).fetchall()
        return cursors_of_rows(rows)

    def reset_partition(
        self,
        topic: str,
        partition: int,
        cursor: PartitionCursor,
        *,
        delete_from: int | None = None,
        stale_from: int | None = None,
    ) -> tuple[int, int]:
        def body(conn: psycopg.Connection[Any]) -> tuple[int, int]:
            deleted = staled = 0
            if delete_from is not None:
                deleted = conn.execute(
                    "DELETE FROM projection_runs WHERE log_partition = %s AND first_offset >= %s",
                    (partition, delete_from),
                ).rowcount
            if stale_from is not None:
                staled = conn.execute(
                    "UPDATE projection_runs SET stale = TRUE "
                    "WHERE log_partition = %s AND last_offset >= %s AND NOT stale",
                    (partition, stale_from),
                ).rowcount
            conn.execute(_SET_CURSOR, cursor_row(topic, partition, cursor))
            return deleted, staled

        return self._retrying("reset_partition", body)

    def clear(self) -> None:
        def body(conn: psycopg.Connection[Any]) -> None:
            conn.execute("DELETE FROM projection_runs")
            conn.execute("DELETE FROM projection_cursors")

        self._retrying("clear", body)

    # -- the API's side ----------------------------------------------------------------------

    def list_runs(self, query: RunQuery) -> RunPage:
        sql, args = run_query_sql(query, f"SELECT {_SUMMARY_COLUMNS} FROM projection_runs", "%s")
        with self._conn() as conn:
            rows = conn.execute(sql, args).fetchall()
        return page_of_rows(rows, query)

    def count_by_status(self) -> dict[str, int]:
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT status, COUNT(*) FROM projection_runs GROUP BY status"
            ).fetchall()
        return {str(s): int(n) for s, n in rows}

    def close(self) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._pool.close()


def _configure(conn: psycopg.Connection[Any]) -> None:
    # The durability ``put`` promises, whatever the server's or the role's default says.
    conn.execute("SET synchronous_commit TO on")
