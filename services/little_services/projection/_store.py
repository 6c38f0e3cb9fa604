"""The ProjectionStore port: where the projector keeps one folded state per run.

A store holds ``RunRecord``s (state, where the run sits in the log, integrity marks) and, per
input partition, a ``PartitionCursor`` saying which offsets its records cover. The projector
writes both in one durable ``put``; the HTTP API only reads. ``MemoryProjectionStore`` is the
reference implementation the conformance tests hold the sqlite store to. The SQL stores
(sqlite, PostgreSQL) share here what does not depend on their dialect: the columns of a run's
row and their order, rows to records, summaries and cursors and back, and the listing's query.
"""

from __future__ import annotations

import base64
import json
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from little.errors import ConfigurationError
from little.replay import MaterializedRunState, ReplayEnvelope, replay_envelope
from little.report import waiting_line

INTEGRITY_ERROR = "integrity_error"
"""The status of a run whose stream could not be decoded or folded (see ``IntegrityMark``)."""
PARKED = "parked"
"""The status of a run a coordinator parked (``RunParked``), until the next claim."""


@dataclass(frozen=True, slots=True)
class IntegrityMark:
    """Why a run's projection stopped: the record that did not decode or fold, and after it.

    ``reason`` is stable for matching: an ``EventDecodeError`` reason (``malformed-body``...),
    ``stream-integrity`` (the fold raised ``RuntimeIntegrityError``) or ``fold-failed`` (any
    other exception in the fold: a bug, kept from crash-looping the projector). Records of the
    run after ``offset`` are counted in ``skipped`` and not folded.
    """

    reason: str
    message: str
    partition: int
    offset: int
    skipped: int = 0
    last_skipped_offset: int = -1


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One run as the projection holds it.

    ``state`` is the fold of every record of the run from ``first_offset`` to ``last_offset``
    (or, with ``integrity`` set, of those before ``integrity.offset``). ``stale`` means a
    cursor reset uncovered records the state may miss: the next record of the run refolds it
    from the log. ``updated_at`` is the log timestamp of the last record processed.
    """

    state: MaterializedRunState
    partition: int
    first_offset: int
    last_offset: int
    updated_at: datetime
    integrity: IntegrityMark | None = None
    stale: bool = False

    @property
    def run_id(self) -> str:
        return self.state.run_id

    @property
    def status(self) -> str:
        """The fold's status, but ``integrity_error`` for a marked run and ``parked`` for a
        run a coordinator parked (RunParked, until the next claim)."""
        if self.integrity is not None:
            return INTEGRITY_ERROR
        if self.state.parked_reason is not None and not self.state.terminal:
            return PARKED
        return self.state.status

    @property
    def detail(self) -> str | None:
        """What an operator reads beside the status: the integrity mark's message, why it is
        parked, what it waits for (an approval's tool and arguments), or the run's error."""
        if self.integrity is not None:
            return self.integrity.message
        if self.status == PARKED:
            return self.state.parked_reason
        return self.state.error or waiting_line(self.state)

    def summary(self) -> RunSummary:
        s = self.state
        return RunSummary(
            run_id=s.run_id,
            status=self.status,
            workflow=s.workflow,
            workflow_version=s.workflow_version,
            updated_at=self.updated_at,
            partition=self.partition,
            first_offset=self.first_offset,
            last_offset=self.last_offset,
            last_seq=s.last_seq,
            events_applied=s.events_applied,
            epoch=s.epoch,
            stale=self.stale,
            integrity=self.integrity,
            detail=self.detail,
            replay=replay_envelope(s),
        )


@dataclass(frozen=True, slots=True)
class RunSummary:
    """A run in a listing: the indexed columns, no state."""

    run_id: str
    status: str
    workflow: str | None
    workflow_version: str | None
    updated_at: datetime
    partition: int
    first_offset: int
    last_offset: int
    last_seq: int
    events_applied: int
    epoch: int
    stale: bool = False
    integrity: IntegrityMark | None = None
    detail: str | None = None
    """The integrity mark's message, why the run is parked, or its error."""
    replay: ReplayEnvelope = field(default_factory=ReplayEnvelope)
    """The run's replay envelope (``little.replay.replay_envelope`` of its state)."""


@dataclass(frozen=True, slots=True)
class PartitionCursor:
    """What the store's records cover in one input partition.

    Every record below ``covered`` is applied. ``previous`` is ``covered`` before the last
    write: if the group's committed offset equals it, the process died between the store write
    and the offset commit, and the records in between are skipped by offset. ``gap_before``
    (0 for none) says runs the store does not know may have records below it that were never
    consumed (a group that started late, or moved forward): such runs are folded from their
    start through the run index before their first consumed record.
    """

    covered: int
    previous: int
    gap_before: int = 0


@dataclass(frozen=True, slots=True)
class RunQuery:
    """Filters and one page of a run listing, newest first (``updated_at`` desc, ``run_id``)."""

    status: str | None = None
    workflow: str | None = None
    updated_since: datetime | None = None
    updated_before: datetime | None = None
    limit: int = 100
    cursor: str | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.limit <= 1000:
            raise ConfigurationError(f"limit must be between 1 and 1000, not {self.limit}")
        for t in (self.updated_since, self.updated_before):
            if t is not None and t.tzinfo is None:
                raise ConfigurationError("updated_since/updated_before must be timezone-aware")


@dataclass(frozen=True, slots=True)
class RunPage:
    runs: tuple[RunSummary, ...]
    next_cursor: str | None = None


@dataclass(frozen=True, slots=True)
class ProjectionWrite:
    """One durable write: changed runs and the cursors of the partitions they came from."""

    topic: str
    records: Sequence[RunRecord] = ()
    cursors: Mapping[int, PartitionCursor] = field(default_factory=dict)


class ProjectionStore(ABC):
    """The projector's read model: one ``RunRecord`` per run, plus partition cursors.

    ``put`` is atomic and durable when it returns: the projector commits consumer offsets only
    after it, so a record is never marked consumed before its state is stored.
    """

    @abstractmethod
    def get_many(self, run_ids: Iterable[str]) -> dict[str, RunRecord]:
        """The stored records of these runs (absent runs are left out)."""

    @abstractmethod
    def put(self, write: ProjectionWrite) -> None:
        """Store records and cursors atomically and durably.

        A record whose ``last_offset`` is below the stored one of its run is ignored unless
        the stored one is stale: a late write of an instance that lost the partition (a
        zombie sharing the store) never moves a run back. Offsets compare within a partition
        only: a stored record of another partition is replaced (the core writes a run only
        from the run's own partition, so such a row was written before misrouted records
        were refused).

        A partition's cursor only moves forward here (a zombie's late write of an older
        cursor is ignored); ``reset_partition`` is what moves one back.
        """

    @abstractmethod
    def cursors(self, topic: str) -> dict[int, PartitionCursor]:
        """Per partition of ``topic``, what the stored records cover."""

    @abstractmethod
    def reset_partition(
        self,
        topic: str,
        partition: int,
        cursor: PartitionCursor,
        *,
        delete_from: int | None = None,
        stale_from: int | None = None,
    ) -> tuple[int, int]:
        """Set a partition's cursor; drop runs that start at or after ``delete_from`` and mark
        stale the rest of those whose last record is at or after ``stale_from``. Atomic.
        Returns (deleted, marked stale)."""

    @abstractmethod
    def clear(self) -> None:
        """Forget every run and cursor (a rebuild from the earliest offsets starts here)."""

    @abstractmethod
    def list_runs(self, query: RunQuery) -> RunPage:
        """One page of runs matching the query, newest first."""

    @abstractmethod
    def count_by_status(self) -> dict[str, int]:
        """How many runs are in each status (``integrity_error`` for marked runs)."""

    def get(self, run_id: str) -> RunRecord | None:
        return self.get_many([run_id]).get(run_id)

    def close(self) -> None:  # noqa: B027 - stores without resources need not override
        """Release resources. Idempotent."""

    def __enter__(self) -> ProjectionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- page cursors: opaque to clients, (updated_at ms, run_id) inside -------------------------


def encode_page_cursor(updated_at: datetime, run_id: str) -> str:
    raw = json.dumps([to_ms(updated_at), run_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_page_cursor(cursor: str) -> tuple[int, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        ms, run_id = json.loads(raw)
        return int(ms), str(run_id)
    except (ValueError, TypeError) as exc:
        raise ConfigurationError(f"not a page cursor of this API: {cursor!r}") from exc


def to_ms(t: datetime) -> int:
    return int(t.timestamp() * 1000)


def from_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


class MemoryProjectionStore(ProjectionStore):
    """A store in a dict: for tests and in-process folds that need no durability."""

    def __init__(self) -> None:
        self._runs: dict[str, RunRecord] = {}
        self._cursors: dict[tuple[str, int], PartitionCursor] = {}
        self._lock = threading.Lock()

    def get_many(self, run_ids: Iterable[str]) -> dict[str, RunRecord]:
        with self._lock:
            return {r: self._runs[r] for r in run_ids if r in self._runs}

    def put(self, write: ProjectionWrite) -> None:
        with self._lock:
            for record in write.records:
                held = self._runs.get(record.run_id)
                if (
                    held is None
                    or held.stale
                    or held.partition != record.partition
                    or record.last_offset >= held.last_offset
                ):
                    self._runs[record.run_id] = record
            for p, c in write.cursors.items():
                held_cursor = self._cursors.get((write.topic, p))
                if held_cursor is None or c.covered >= held_cursor.covered:
                    self._cursors[(write.topic, p)] = c

    def cursors(self, topic: str) -> dict[int, PartitionCursor]:
        with self._lock:
            return {p: c for (t, p), c in self._cursors.items() if t == topic}

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
        with self._lock:
            for run_id, r in list(self._runs.items()):
                if r.partition != partition:
                    continue
                if delete_from is not None and r.first_offset >= delete_from:
                    del self._runs[run_id]
                    deleted += 1
                elif stale_from is not None and r.last_offset >= stale_from and not r.stale:
                    self._runs[run_id] = replace(r, stale=True)
                    staled += 1
            self._cursors[(topic, partition)] = cursor
        return deleted, staled

    def clear(self) -> None:
        with self._lock:
            self._runs.clear()
            self._cursors.clear()

    def list_runs(self, query: RunQuery) -> RunPage:
        with self._lock:
            rows = [r.summary() for r in self._runs.values()]
        rows = [s for s in rows if _matches(s, query)]
        rows.sort(key=lambda s: (-to_ms(s.updated_at), s.run_id))
        if query.cursor is not None:
            ms, run_id = decode_page_cursor(query.cursor)
            rows = [s for s in rows if (-to_ms(s.updated_at), s.run_id) > (-ms, run_id)]
        page = rows[: query.limit]
        more = len(rows) > query.limit
        last = page[-1] if page else None
        return RunPage(
            tuple(page),
            encode_page_cursor(last.updated_at, last.run_id) if more and last else None,
        )

    def count_by_status(self) -> dict[str, int]:
        out: dict[str, int] = {}
        with self._lock:
            for r in self._runs.values():
                out[r.status] = out.get(r.status, 0) + 1
        return out


def _matches(s: RunSummary, q: RunQuery) -> bool:
    if q.status is not None and s.status != q.status:
        return False
    if q.workflow is not None and s.workflow != q.workflow:
        return False
    ms = to_ms(s.updated_at)
    if q.updated_since is not None and ms < to_ms(q.updated_since):
        return False
    return not (q.updated_before is not None and ms >= to_ms(q.updated_before))


def integrity_mark_of(text: str | None) -> IntegrityMark | None:
    return None if text is None else IntegrityMark(**json.loads(text))


# -- rows of the SQL stores (sqlite, PostgreSQL): what does not depend on the dialect ---------


def run_columns(partition: str) -> tuple[str, ...]:
    """The SQL stores' run columns, in the order of ``row_of_record``; ``partition`` is the
    store's name for the log partition's column (a keyword in PostgreSQL)."""
    return (
        "run_id",
        "status",
        "workflow",
        "workflow_version",
        "updated_at_ms",
        partition,
        "first_offset",
        "last_offset",
        "last_seq",
        "events_applied",
        "epoch",
        "stale",
        "integrity",
        "detail",
        "state",
        "replay",
    )


def row_of_record(r: RunRecord) -> tuple[Any, ...]:
    """A run's row of the SQL stores' run columns (``run_columns``), in their order."""
    return (
        r.run_id,
        r.status,
        r.state.workflow,
        r.state.workflow_version,
        to_ms(r.updated_at),
        r.partition,
        r.first_offset,
        r.last_offset,
        r.state.last_seq,
        r.state.events_applied,
        r.state.epoch,
        r.stale,
        None if r.integrity is None else json.dumps(asdict(r.integrity)),
        r.detail,
        r.state.model_dump_json(),
        replay_envelope(r.state).model_dump_json(),
    )


def record_columns(partition: str) -> str:
    """The columns ``records_of_rows`` reads, in their order (``partition`` as at
    ``run_columns``)."""
    return f"run_id, {partition}, first_offset, last_offset, updated_at_ms, stale, integrity, state"


def records_of_rows(rows: Iterable[tuple[Any, ...]]) -> dict[str, RunRecord]:
    """Per run, its record, from rows of ``record_columns``."""
    return {
        run_id: RunRecord(
            state=MaterializedRunState.model_validate_json(state),
            partition=part,
            first_offset=first,
            last_offset=last,
            updated_at=from_ms(ms),
            integrity=integrity_mark_of(integrity),
            stale=bool(stale),
        )
        for run_id, part, first, last, ms, stale, integrity, state in rows
    }


def summary_columns(partition: str) -> str:
    """The columns ``summary_of_row`` reads, in its order: every run column but the state
    (the replay envelope included)."""
    return ", ".join(c for c in run_columns(partition) if c != "state")


def cursor_row(topic: str, partition: int, cursor: PartitionCursor) -> tuple[Any, ...]:
    """A partition's cursor as a row of the SQL stores' cursor table, in its columns' order."""
    return (topic, partition, cursor.covered, cursor.previous, cursor.gap_before)


def cursors_of_rows(rows: Iterable[tuple[Any, ...]]) -> dict[int, PartitionCursor]:
    """Per partition, its cursor, from rows of (partition, covered, previous, gap_before)."""
    return {int(p): PartitionCursor(int(c), int(prev), int(g)) for p, c, prev, g in rows}


def page_of_rows(rows: Sequence[tuple[Any, ...]], query: RunQuery) -> RunPage:
    """The page of ``run_query_sql``'s rows (one past the limit says there is a next page)."""
    summaries = [summary_of_row(row) for row in rows[: query.limit]]
    next_cursor = None
    if len(rows) > query.limit and summaries:
        last = summaries[-1]
        next_cursor = encode_page_cursor(last.updated_at, last.run_id)
    return RunPage(tuple(summaries), next_cursor)


def summary_of_row(row: tuple[Any, ...]) -> RunSummary:
    """A run's summary from a row of ``summary_columns``."""
    (
        run_id,
        status,
        workflow,
        version,
        ms,
        part,
        first,
        last,
        seq,
        applied,
        epoch,
        stale,
        mark,
        detail,
        replay,
    ) = row
    return RunSummary(
        run_id=run_id,
        status=status,
        workflow=workflow,
        workflow_version=version,
        updated_at=from_ms(ms),
        partition=part,
        first_offset=first,
        last_offset=last,
        last_seq=seq,
        events_applied=applied,
        epoch=epoch,
        stale=bool(stale),
        integrity=integrity_mark_of(mark),
        detail=detail,
        replay=ReplayEnvelope.model_validate_json(replay),
    )


def run_query_sql(query: RunQuery, select: str, mark: str) -> tuple[str, list[Any]]:
    """``GET /runs`` as SQL for the SQL stores: ``select`` (``SELECT ... FROM <table>``) with
    the query's filters and keyset page, newest first, one row past the limit (is there a
    next page?); ``mark`` is the driver's placeholder (``?`` or ``%s``)."""
    where: list[str] = []
    args: list[Any] = []
    if query.status is not None:
        where.append(f"status = {mark}")
        args.append(query.status)
    if query.workflow is not None:
        where.append(f"workflow = {mark}")
        args.append(query.workflow)
    if query.updated_since is not None:
        where.append(f"updated_at_ms >= {mark}")
        args.append(to_ms(query.updated_since))
    if query.updated_before is not None:
        where.append(f"updated_at_ms < {mark}")
        args.append(to_ms(query.updated_before))
    if query.cursor is not None:
        ms, run_id = decode_page_cursor(query.cursor)
        where.append(f"(updated_at_ms < {mark} OR (updated_at_ms = {mark} AND run_id > {mark}))")
        args += [ms, ms, run_id]
    sql = select + (" WHERE " + " AND ".join(where) if where else "")
    sql += f" ORDER BY updated_at_ms DESC, run_id LIMIT {mark}"
    args.append(query.limit + 1)
    return sql, args
