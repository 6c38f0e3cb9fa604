"""The default ProjectionStore: one sqlite file (WAL), states as JSON beside indexed columns.

One connection writes (the projector), another reads (the HTTP API), so readers never wait
for a write transaction. Several processes may write one file (a rebuild's workers): each
write waits for the others (``busy_timeout``), and a run's row never moves back. ``put`` is one ``BEGIN IMMEDIATE`` transaction with
``synchronous=FULL``: when it returns, the states survive a power cut, which is what lets the
projector commit its consumer offsets next.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from little.errors import ConfigurationError
from little.replay import MaterializedRunState, replay_envelope
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

SCHEMA_VERSION = 3
"""2: ``detail`` (an error, why a run is parked). 3: ``replay`` (the run's replay envelope, as
JSON, for the listing). An older file is migrated on open, one version at a time."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    workflow TEXT,
    workflow_version TEXT,
    updated_at_ms INTEGER NOT NULL,
    partition INTEGER NOT NULL,
    first_offset INTEGER NOT NULL,
    last_offset INTEGER NOT NULL,
    last_seq INTEGER NOT NULL,
    events_applied INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    stale INTEGER NOT NULL,
    integrity TEXT,
    detail TEXT,
    state TEXT NOT NULL,
    replay TEXT
);
CREATE INDEX IF NOT EXISTS runs_by_updated ON runs (updated_at_ms DESC, run_id);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs (status, updated_at_ms DESC, run_id);
CREATE INDEX IF NOT EXISTS runs_by_workflow ON runs (workflow, updated_at_ms DESC, run_id);
CREATE INDEX IF NOT EXISTS runs_by_partition ON runs (partition, first_offset);
CREATE TABLE IF NOT EXISTS cursors (
    topic TEXT NOT NULL,
    partition INTEGER NOT NULL,
    covered INTEGER NOT NULL,
    previous INTEGER NOT NULL,
    gap_before INTEGER NOT NULL,
    PRIMARY KEY (topic, partition)
);
"""

_RUN_COLUMNS = run_columns(partition="partition")
# A run's row never moves back in the log (see ProjectionStore.put) unless it is stale or
# held in another partition (whose offsets do not compare).
_UPSERT_RUN = (
    f"INSERT INTO runs ({', '.join(_RUN_COLUMNS)}) VALUES ({', '.join('?' * len(_RUN_COLUMNS))}) "
    "ON CONFLICT (run_id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _RUN_COLUMNS[1:])
    + " WHERE runs.stale = 1 OR excluded.partition != runs.partition"
    " OR excluded.last_offset >= runs.last_offset"
)

_SET_CURSOR = "INSERT OR REPLACE INTO cursors VALUES (?, ?, ?, ?, ?)"
# ``put`` only moves a cursor forward (a fenced zombie's late write must not move it back);
# ``reset_partition`` sets it wherever it is told.
_ADVANCE_CURSOR = (
    "INSERT INTO cursors VALUES (?, ?, ?, ?, ?) ON CONFLICT (topic, partition) DO UPDATE SET "
    "covered = excluded.covered, previous = excluded.previous, "
    "gap_before = excluded.gap_before WHERE excluded.covered >= cursors.covered"
)

_SUMMARY_COLUMNS = summary_columns(partition="partition")
_RECORD_COLUMNS = record_columns(partition="partition")


class SqliteProjectionStore(ProjectionStore):
    """Run states in an sqlite file (created if missing)."""

    def __init__(self, path: str | Path, *, synchronous: str = "FULL") -> None:
        if synchronous not in ("FULL", "NORMAL"):
            raise ConfigurationError(f"synchronous must be FULL or NORMAL, not {synchronous!r}")
        self.path = Path(path)
        self.location = str(self.path)
        self.synchronous = synchronous
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._write = self._connect(synchronous)
        self._read = self._connect(synchronous)
        self._write_lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._closed = False
        with self._write_lock:
            self._write.executescript(_SCHEMA)
            row = self._write.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
            if row is None:
                self._write.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            elif int(row[0]) in (1, 2):
                if int(row[0]) == 1:
                    self._migrate_from_1()
                self._migrate_from_2()
            elif int(row[0]) != SCHEMA_VERSION:
                raise ConfigurationError(
                    f"projection store {self.path} has schema {row[0]}, not {SCHEMA_VERSION}: "
                    "rebuild it (`little projections rebuild --to-earliest`)"
                )

    def _migrate_from_1(self) -> None:
        """Schema 1 -> 2 in one transaction (another process may be migrating the same file):
        add ``detail`` and fill it from what the rows already hold (no run is parked in a
        version-1 file: RunParked came with version 2)."""
        conn = self._write
        conn.execute("BEGIN IMMEDIATE")
        try:
            (version,) = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
            if int(version) == 1:
                columns = {r[1] for r in conn.execute("PRAGMA table_info(runs)")}
                if "detail" not in columns:
                    conn.execute("ALTER TABLE runs ADD COLUMN detail TEXT")
                conn.execute(
                    "UPDATE runs SET detail = CASE WHEN integrity IS NOT NULL "
                    "THEN json_extract(integrity, '$.message') "
                    "ELSE json_extract(state, '$.error') END"
                )
                conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema'")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _migrate_from_2(self) -> None:
        """Schema 2 -> 3 in one transaction: add ``replay`` and fill it with the envelope of
        each row's state (computed here: it is a fold of the state's agent calls, not SQL)."""
        conn = self._write
        conn.execute("BEGIN IMMEDIATE")
        try:
            (version,) = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
            if int(version) == 2:
                columns = {r[1] for r in conn.execute("PRAGMA table_info(runs)")}
                if "replay" not in columns:
                    conn.execute("ALTER TABLE runs ADD COLUMN replay TEXT")
                rows = conn.execute("SELECT run_id, state FROM runs").fetchall()
                conn.executemany(
                    "UPDATE runs SET replay = ? WHERE run_id = ?",
                    [
                        (_replay_json(MaterializedRunState.model_validate_json(state)), run_id)
                        for run_id, state in rows
                    ],
                )
                conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema'")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _connect(self, synchronous: str) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, timeout=60.0, isolation_level=None, check_same_thread=False
        )
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={synchronous}")
        conn.execute("PRAGMA busy_timeout=60000")
        return conn

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._write_lock:
            conn = self._write
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    # -- the projector's side ----------------------------------------------------------------

    def get_many(self, run_ids: Iterable[str]) -> dict[str, RunRecord]:
        ids = list(dict.fromkeys(run_ids))
        out: dict[str, RunRecord] = {}
        with self._read_lock:
            for i in range(0, len(ids), 500):
                chunk = ids[i : i + 500]
                rows = self._read.execute(
                    f"SELECT {_RECORD_COLUMNS} FROM runs "
                    f"WHERE run_id IN ({','.join('?' * len(chunk))})",
                    chunk,
                ).fetchall()
                out.update(records_of_rows(rows))
        return out

    def put(self, write: ProjectionWrite) -> None:
        rows = [row_of_record(r) for r in write.records]  # ``stale`` binds as 0 or 1
        with self._transaction() as conn:
            conn.executemany(_UPSERT_RUN, rows)
            conn.executemany(
                _ADVANCE_CURSOR, [cursor_row(write.topic, p, c) for p, c in write.cursors.items()]
            )

    def cursors(self, topic: str) -> dict[int, PartitionCursor]:
        with self._read_lock:
            rows = self._read.execute(
                "SELECT partition, covered, previous, gap_before FROM cursors WHERE topic = ?",
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
        deleted = staled = 0
        with self._transaction() as conn:
            if delete_from is not None:
                deleted = conn.execute(
                    "DELETE FROM runs WHERE partition = ? AND first_offset >= ?",
                    (partition, delete_from),
                ).rowcount
            if stale_from is not None:
                staled = conn.execute(
                    "UPDATE runs SET stale = 1 "
                    "WHERE partition = ? AND last_offset >= ? AND stale = 0",
                    (partition, stale_from),
                ).rowcount
            conn.execute(_SET_CURSOR, cursor_row(topic, partition, cursor))
        return deleted, staled

    def clear(self) -> None:
        with self._transaction() as conn:
            conn.execute("DELETE FROM runs")
            conn.execute("DELETE FROM cursors")

    # -- the API's side ----------------------------------------------------------------------

    def list_runs(self, query: RunQuery) -> RunPage:
        sql, args = run_query_sql(query, f"SELECT {_SUMMARY_COLUMNS} FROM runs", "?")
        with self._read_lock:
            rows = self._read.execute(sql, args).fetchall()
        return page_of_rows(rows, query)

    def count_by_status(self) -> dict[str, int]:
        with self._read_lock:
            rows = self._read.execute("SELECT status, COUNT(*) FROM runs GROUP BY status")
            return {str(s): int(n) for s, n in rows.fetchall()}

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._write_lock:
            self._write.close()
        with self._read_lock:
            self._read.close()


def _replay_json(state: MaterializedRunState) -> str:
    return replay_envelope(state).model_dump_json()
