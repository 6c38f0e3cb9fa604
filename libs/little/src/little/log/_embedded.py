"""The embedded event log: Kafka's partition/offset/cursor semantics on one sqlite file.

WAL mode; appends are group-committed (every append waiting at that moment, of every run, in
one ``BEGIN IMMEDIATE`` transaction), so several processes on one machine can append and read
the same file safely and concurrent runs share fsyncs. Offsets are dense per partition from 0,
runs are partitioned with Kafka's own partitioner, and group cursors mean what Kafka's do.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from little.errors import ConfigurationError, LogError
from little.log._pending import InFlight, Outcome, PendingAppend
from little.log._port import CursorStore, EventLog
from little.log._records import Header, OutgoingRecord, Position, ResetTo, StoredRecord
from little.log._topics import RUNS_TOPIC
from little.snapshots import SnapshotStore

_SCHEMA = """
CREATE TABLE IF NOT EXISTS topics (
    name TEXT PRIMARY KEY,
    partitions INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS records (
    topic TEXT NOT NULL,
    partition INTEGER NOT NULL,
    "offset" INTEGER NOT NULL,
    run_id TEXT NOT NULL,
    timestamp_ms INTEGER NOT NULL,
    headers TEXT NOT NULL,
    payload BLOB NOT NULL,
    PRIMARY KEY (topic, partition, "offset")
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS records_by_run ON records (topic, run_id, partition, "offset");
CREATE TABLE IF NOT EXISTS snapshots (
    run_id TEXT PRIMARY KEY,
    payload BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS cursors (
    group_id TEXT NOT NULL,
    topic TEXT NOT NULL,
    partition INTEGER NOT NULL,
    "offset" INTEGER NOT NULL,
    PRIMARY KEY (group_id, topic, partition)
);
"""

_PAGE = 1000


def _encode_headers(headers: Sequence[Header]) -> str:
    """``json.dumps([[key, value.hex()], ...])`` (the stored text), built without the encoder
    for keys it writes as they are (every key little writes: ``little.*``, ``traceparent``)."""
    parts = []
    for key, value in headers:
        if key not in _VERBATIM_KEYS:
            if json.dumps(key) != f'"{key}"':  # escaped (quotes, controls, non-ASCII)
                return json.dumps([[k, v.hex()] for k, v in headers])
            if len(_VERBATIM_KEYS) < 1000:
                _VERBATIM_KEYS.add(key)
        parts.append(f'["{key}", "{value.hex()}"]')
    return f"[{', '.join(parts)}]"


_VERBATIM_KEYS: set[str] = set()
"""Header keys ``json.dumps`` writes between quotes unchanged (checked once per key)."""


def _decode_headers(text: str) -> tuple[Header, ...]:
    return tuple((k, bytes.fromhex(v)) for k, v in json.loads(text))


class _Sqlite:
    """One connection per store object, guarded by a lock (sqlite objects are not thread-safe)."""

    def __init__(self, path: Path, *, synchronous: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.lock = threading.RLock()
        self.conn = sqlite3.connect(
            path, timeout=60.0, isolation_level=None, check_same_thread=False
        )
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute(f"PRAGMA synchronous={synchronous}")
        self.conn.execute("PRAGMA busy_timeout=60000")
        with self.lock:
            self.conn.executescript(_SCHEMA)

    def close(self) -> None:
        with self.lock:
            self.conn.close()


class EmbeddedEventLog(EventLog):
    """An ``EventLog`` on sqlite; the default backend, no broker needed.

    ``synchronous="FULL"`` (default) fsyncs every committed append, as acks=all is durable on a
    broker; ``"NORMAL"`` survives process crashes but not power loss, and is faster.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        topic: str = RUNS_TOPIC,
        partitions: int = 12,
        synchronous: str = "FULL",
    ) -> None:
        if synchronous not in ("FULL", "NORMAL"):
            raise ConfigurationError(f"synchronous must be FULL or NORMAL, not {synchronous!r}")
        self.topic = topic
        self._db = _Sqlite(Path(path), synchronous=synchronous)
        self.partitions = self._ensure_topic(topic, partitions)
        self._committer = _Committer(
            _Sqlite(Path(path), synchronous=synchronous), topic, str(self._db.path)
        )
        self._closed = False

    @property
    def path(self) -> Path:
        return self._db.path

    def _ensure_topic(self, topic: str, partitions: int) -> int:
        with self._db.lock:
            conn = self._db.conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute(
                    "SELECT partitions FROM topics WHERE name = ?", (topic,)
                ).fetchone()
                if row is None:
                    conn.execute("INSERT INTO topics VALUES (?, ?)", (topic, partitions))
                    conn.execute("COMMIT")
                    return partitions
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        existing = int(row[0])
        if existing != partitions:
            raise ConfigurationError(
                f"topic {topic} in {self._db.path} has {existing} partitions, not {partitions}: "
                "partition counts never change (runs would move)"
            )
        return existing

    def _start(
        self,
        run_id: str,
        records: Sequence[OutgoingRecord],
        pending: PendingAppend,
        after: PendingAppend | None,
    ) -> None:
        if self._closed:
            raise LogError(f"append of run {run_id} to {self._db.path}: the log is closed")
        self._committer.submit(
            _Batch(
                run_id,
                self.partition_for(run_id),
                records,  # headers are encoded by the committer, off the event loop
                pending,
            ),
            after,
        )

    def in_flight(self) -> tuple[int, float]:
        return self._committer.flight.stats()

    @property
    def commits(self) -> int:
        """Transactions the group committer has committed so far (each one fsync)."""
        return self._committer.commits

    def read_run(self, run_id: str, *, after: Position | None = None) -> Iterator[StoredRecord]:
        partition = self.partition_for(run_id)
        offset = -1 if after is None else after.offset
        while True:
            with self._db.lock:
                rows = self._db.conn.execute(
                    'SELECT "offset", timestamp_ms, headers, payload FROM records '
                    'WHERE topic = ? AND run_id = ? AND partition = ? AND "offset" > ? '
                    'ORDER BY "offset" LIMIT ?',
                    (self.topic, run_id, partition, offset, _PAGE),
                ).fetchall()
            for off, ts, headers, payload in rows:
                yield StoredRecord(run_id, partition, off, ts, payload, _decode_headers(headers))
            if len(rows) < _PAGE:
                return
            offset = rows[-1][0]

    def first_offset(self, run_id: str) -> int | None:
        with self._db.lock:
            (first,) = self._db.conn.execute(
                'SELECT MIN("offset") FROM records WHERE topic = ? AND run_id = ? AND partition = ?',
                (self.topic, run_id, self.partition_for(run_id)),
            ).fetchone()
        return None if first is None else int(first)

    def read_partition(
        self, partition: int, offset: int, *, limit: int = 1000, timeout: float = 0.0
    ) -> list[StoredRecord]:
        self._check_partition(partition)
        deadline = time.monotonic() + timeout
        while True:
            with self._db.lock:
                rows = self._db.conn.execute(
                    'SELECT "offset", run_id, timestamp_ms, headers, payload FROM records '
                    'WHERE topic = ? AND partition = ? AND "offset" >= ? ORDER BY "offset" LIMIT ?',
                    (self.topic, partition, offset, limit),
                ).fetchall()
            if rows or time.monotonic() >= deadline:
                return [
                    StoredRecord(run, partition, off, ts, payload, _decode_headers(h))
                    for off, run, ts, h, payload in rows
                ]
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))

    def end_offsets(self) -> dict[int, int]:
        with self._db.lock:
            rows = self._db.conn.execute(
                'SELECT partition, MAX("offset") + 1 FROM records WHERE topic = ? '
                "GROUP BY partition",
                (self.topic,),
            ).fetchall()
        ends = dict.fromkeys(range(self.partitions), 0)
        ends.update({int(p): int(o) for p, o in rows})
        return ends

    def offsets_for_time(self, timestamp_ms: int) -> dict[int, int]:
        """Per partition, the first offset whose timestamp is >= ``timestamp_ms`` (else the end)."""
        ends = self.end_offsets()
        with self._db.lock:
            rows = self._db.conn.execute(
                'SELECT partition, MIN("offset") FROM records '
                "WHERE topic = ? AND timestamp_ms >= ? GROUP BY partition",
                (self.topic, timestamp_ms),
            ).fetchall()
        found = {int(p): int(o) for p, o in rows}
        return {p: found.get(p, end) for p, end in ends.items()}

    def _check_partition(self, partition: int) -> None:
        if not 0 <= partition < self.partitions:
            raise ConfigurationError(
                f"partition {partition} does not exist in {self.topic} "
                f"({self.partitions} partitions)"
            )

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._committer.close()
            self._db.close()


@dataclass(slots=True)
class _Batch:
    """One append waiting for the committer: its rows (headers JSON, payload) and waiter."""

    run_id: str
    partition: int
    rows: Sequence[OutgoingRecord]
    pending: PendingAppend


class _Committer:
    """Group commit: a thread that takes every append waiting at that moment, of every run,
    and commits them in one ``BEGIN IMMEDIATE`` transaction (one fsync with
    ``synchronous=FULL``); each waiter is released when its transaction has committed.

    Offsets are taken inside the transaction, so several processes on one file stay safe
    (sqlite serialises their write transactions; ``busy_timeout`` waits for the lock). Appends
    are committed in submit order, so a run's appends keep their order.
    """

    MAX_ROWS = 20_000
    """Rows per transaction at most: a bigger backlog commits in several."""

    def __init__(self, db: _Sqlite, topic: str, where: str) -> None:
        self._db = db
        self._topic = topic
        self._where = where
        self.flight = InFlight()
        self._queue: deque[_Batch] = deque()
        self._wake = threading.Condition(threading.Lock())
        self._closing = False
        self._idle = False
        """The thread waits for work (under ``_wake``): only then does a submit notify it."""
        self._thread: threading.Thread | None = None
        self.commits = 0

    def submit(self, batch: _Batch, after: PendingAppend | None = None) -> None:
        self.flight.add(batch.pending)
        with self._wake:
            if after is not None and after.doomed:  # decided under this lock: never after it
                self.flight.settle([(batch.pending, self._after_failure(batch))])
                return
            if self._thread is None:  # started on first use: a read-only log needs none
                self._thread = threading.Thread(
                    target=self._run, name="little-sqlite-committer", daemon=True
                )
                self._thread.start()
            self._queue.append(batch)
            if self._idle:
                self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._queue and not self._closing:
                    self._idle = True
                    self._wake.wait()
                    self._idle = False
                if not self._queue:
                    return
                taken: list[_Batch] = []
                rows = 0
                while self._queue and rows < self.MAX_ROWS:
                    batch = self._queue.popleft()
                    taken.append(batch)
                    rows += len(batch.rows)
            try:
                outcomes = self._commit(taken)
                if len(taken) > 1 and all(isinstance(o, LogError) for _, o in outcomes):
                    # one bad append must not fail the others it shared a transaction with
                    outcomes = self._one_by_one(taken)
            except Exception as exc:  # never leave a waiter hanging
                outcomes = [
                    (b.pending, LogError(f"append of run {b.run_id} to {self._where}: {exc}"))
                    for b in taken
                ]
            failed = [
                b for b, (_, o) in zip(taken, outcomes, strict=True) if isinstance(o, LogError)
            ]
            if failed:
                outcomes += self._drop_queued(failed)
            self.flight.settle(outcomes)

    def _one_by_one(self, taken: list[_Batch]) -> list[tuple[PendingAppend, Outcome]]:
        """Each append in its own transaction; once one of a run fails, the run's later
        ones are not committed (a later record after a missing one is a seq gap)."""
        outcomes: list[tuple[PendingAppend, Outcome]] = []
        failed: set[str] = set()
        for batch in taken:
            if batch.run_id in failed:
                outcomes.append((batch.pending, self._after_failure(batch)))
                continue
            (outcome,) = self._commit([batch])
            if isinstance(outcome[1], LogError):
                failed.add(batch.run_id)
            outcomes.append(outcome)
        return outcomes

    def _drop_queued(self, failed: list[_Batch]) -> list[tuple[PendingAppend, Outcome]]:
        """Appends of runs whose earlier append failed, submitted before their writer knew:
        taken off the queue and failed, never committed. The failed ones are marked under the
        same lock, so a later submit ``after`` one of them is refused at once."""
        runs = {b.run_id for b in failed}
        with self._wake:
            for b in failed:
                b.pending.doomed = True
            dropped = [b for b in self._queue if b.run_id in runs]
            if dropped:
                self._queue = deque(b for b in self._queue if b.run_id not in runs)
                for b in dropped:
                    b.pending.doomed = True
        return [(b.pending, self._after_failure(b)) for b in dropped]

    def _after_failure(self, batch: _Batch) -> LogError:
        return LogError(
            f"append of run {batch.run_id} to {self._where}: not committed, an earlier append "
            "of the run failed"
        )

    def _commit(self, taken: list[_Batch]) -> list[tuple[PendingAppend, Outcome]]:
        conn = self._db.conn
        now_ms = int(time.time() * 1000)
        outcomes: list[tuple[PendingAppend, Outcome]] = []
        with self._db.lock:
            try:
                conn.execute("BEGIN IMMEDIATE")
                next_offsets: dict[int, int] = {}
                rows = []
                for batch in taken:
                    offset = next_offsets.get(batch.partition)
                    if offset is None:
                        (offset,) = conn.execute(
                            'SELECT COALESCE(MAX("offset") + 1, 0) FROM records '
                            "WHERE topic = ? AND partition = ?",
                            (self._topic, batch.partition),
                        ).fetchone()
                    positions = []
                    for record in batch.rows:
                        rows.append(
                            (
                                self._topic,
                                batch.partition,
                                offset,
                                batch.run_id,
                                now_ms,
                                _encode_headers(record.headers),
                                record.payload,
                            )
                        )
                        positions.append(Position(batch.partition, offset))
                        offset += 1
                    next_offsets[batch.partition] = offset
                    outcomes.append((batch.pending, positions))
                conn.executemany("INSERT INTO records VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
                conn.execute("COMMIT")
                self.commits += 1
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                # rolled back: none of these landed, and the writers learn it
                return [
                    (
                        b.pending,
                        LogError(f"append of run {b.run_id} to {self._where} failed: {exc}"),
                    )
                    for b in taken
                ]
        return outcomes

    def close(self) -> None:
        """Commit what is waiting, then stop the thread."""
        with self._wake:
            self._closing = True
            self._wake.notify()
            thread = self._thread
        if thread is not None:
            thread.join()
        self._db.close()


class EmbeddedCursorStore(CursorStore):
    """Consumer-group cursors of one embedded topic, in the same sqlite file as the log."""

    def __init__(self, log: EmbeddedEventLog) -> None:
        self._log = log
        self._db = _Sqlite(log.path, synchronous="FULL")

    def commit(self, group: str, offsets: Mapping[int, int]) -> None:
        for p, o in offsets.items():
            self._log._check_partition(p)
            if o < 0:
                raise ConfigurationError(f"cannot commit negative offset {o} for partition {p}")
        with self._db.lock:
            conn = self._db.conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(
                    "INSERT INTO cursors VALUES (?, ?, ?, ?) "
                    'ON CONFLICT (group_id, topic, partition) DO UPDATE SET "offset" = excluded."offset"',
                    [(group, self._log.topic, p, o) for p, o in offsets.items()],
                )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def committed(self, group: str) -> dict[int, int]:
        with self._db.lock:
            rows = self._db.conn.execute(
                'SELECT partition, "offset" FROM cursors WHERE group_id = ? AND topic = ?',
                (group, self._log.topic),
            ).fetchall()
        return {int(p): int(o) for p, o in rows}

    def reset(self, group: str, to: ResetTo) -> dict[int, int]:
        if to.earliest:
            target = dict.fromkeys(range(self._log.partitions), 0)
        elif to.latest:
            target = self._log.end_offsets()
        elif to.offsets is not None:
            target = dict(to.offsets)
        else:
            assert to.timestamp is not None
            target = self._log.offsets_for_time(int(to.timestamp.timestamp() * 1000))
        self.commit(group, target)
        return target

    def close(self) -> None:
        self._db.close()


class EmbeddedSnapshotStore(SnapshotStore):
    """The newest snapshot per run, in the embedded world's sqlite file."""

    def __init__(self, path: str | Path) -> None:
        self._db = _Sqlite(Path(path), synchronous="NORMAL")

    def put(self, run_id: str, payload: bytes) -> None:
        with self._db.lock:
            self._db.conn.execute(
                "INSERT INTO snapshots VALUES (?, ?) "
                "ON CONFLICT (run_id) DO UPDATE SET payload = excluded.payload",
                (run_id, payload),
            )

    def get(self, run_id: str) -> bytes | None:
        with self._db.lock:
            row = self._db.conn.execute(
                "SELECT payload FROM snapshots WHERE run_id = ?", (run_id,)
            ).fetchone()
        return None if row is None else bytes(row[0])

    def close(self) -> None:
        self._db.close()
