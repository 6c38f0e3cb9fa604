"""The projection core: one partition's records in, changed run records out. No transport.

Drivers (Kafka with transactions, or any EventLog + CursorStore) feed it records per input
partition, persist what it returns, then commit offsets. It owns the rules that make
committed offsets replay cursors: a record a run's stored state already covers is skipped; a
run whose beginning the store lacks is folded from its start through the log first; a record
that does not decode or fold marks its run and is dead-lettered, never retried forever; a
record found outside its run's partition is no part of the run and is dead-lettered alone.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import structlog

from little import RecordDecodeError, World
from little.errors import RuntimeIntegrityError
from little.events import LoggedEvent, RunClaimed
from little.log import (
    DLQ_TOPIC,
    RUNS_TOPIC,
    SNAPSHOTS_TOPIC,
    Header,
    StoredRecord,
    partition_for,
)
from little.replay import (
    MaterializedRunState,
    Snapshot,
    encode_snapshot,
    materialize_run_state_from_events,
)
from little_services.projection._store import (
    IntegrityMark,
    PartitionCursor,
    ProjectionStore,
    ProjectionWrite,
    RunRecord,
    from_ms,
)

log = structlog.get_logger("little_services.projection")

DEFAULT_GROUP = "little-projector"

# Dead-letter headers, added to the record's own headers (DESIGN §3: "with error headers").
DLQ_REASON = "little.dlq.reason"
DLQ_MESSAGE = "little.dlq.message"
DLQ_TOPIC_HEADER = "little.dlq.source.topic"
DLQ_PARTITION = "little.dlq.source.partition"
DLQ_OFFSET = "little.dlq.source.offset"
DLQ_VALUE_OMITTED = "little.dlq.value_omitted"
"""Set (to the value's size) on a dead letter whose value was left out: too large to be sent
again beside the dead-letter headers. The source offset still finds the record."""
DLQ_MAX_VALUE = 900_000
"""The largest value a dead letter carries: librdkafka's default ``message.max.bytes`` (1,000,000)
less room for the key and headers. The broker's default (1,048,588) admits a record of 1 MB
into the runs topic, which sent again with its headers is refused (``MSG_SIZE_TOO_LARGE``):
before, that failed the projector's transaction on every retry, a poison record that stopped
the partition."""

REASON_STREAM = "stream-integrity"
REASON_FOLD = "fold-failed"
REASON_NO_KEY = "no-run-id"
REASON_MISROUTED = "misrouted"


@dataclass(frozen=True)
class ProjectionConfig:
    """What a projector consumes and writes. Topic names are configurable for tests."""

    topic: str = RUNS_TOPIC
    group: str = DEFAULT_GROUP
    snapshots_topic: str = SNAPSHOTS_TOPIC
    dlq_topic: str = DLQ_TOPIC
    snapshot_every: int = 100
    """Snapshot a run whenever its applied events cross a multiple of this, and at its end."""
    batch_size: int = 5000
    """Records consumed per batch (one store write and one offset commit per partition)."""
    cache_runs: int = 2000
    """Non-terminal run states kept in memory between batches (LRU)."""
    stall_seconds: float = 150.0
    """A Kafka transaction still unfinished after this long is stuck in librdkafka, not slow:
    the projector stops (``ProjectorStalledError``, exit 75) to be restarted."""

    def __post_init__(self) -> None:
        if self.snapshot_every < 1 or self.batch_size < 1 or self.cache_runs < 0:
            raise ValueError("snapshot_every and batch_size must be >= 1, cache_runs >= 0")
        if self.stall_seconds <= 0:
            raise ValueError("stall_seconds must be > 0")


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A record for the DLQ topic: the same key, the original value, headers saying why."""

    run_id: str
    """The record's key ("" when it had none)."""
    payload: bytes
    headers: tuple[Header, ...]
    partition: int
    offset: int
    reason: str


@dataclass
class PartitionBatch:
    """What folding one batch of one partition produced, before it is persisted/committed."""

    partition: int
    start: int
    """The partition's position before the batch (the committed offset it moves from)."""
    end: int
    """The offset to commit once the batch is durable: one past its last record."""
    records: dict[str, RunRecord] = field(default_factory=dict)
    snapshots: list[tuple[str, bytes]] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    consumed: int = 0
    folded: int = 0
    duplicates: int = 0
    skipped: int = 0
    refolded_runs: int = 0
    newest_timestamp_ms: int = 0


class _Open:
    __slots__ = ("gap_before", "position", "uncommitted_until")

    def __init__(self, position: int, gap_before: int, uncommitted_until: int = 0) -> None:
        self.position = position
        self.gap_before = gap_before
        self.uncommitted_until = uncommitted_until
        """Records below this were stored by a write whose commit never landed."""


class ProjectionCore:
    """Folds batches of records into ``RunRecord``s with the one fold of ``little.replay``.

    Not thread-safe: one driver thread calls it. ``fold`` changes nothing; ``persist`` writes
    the store and only then advances positions and the in-memory cache.
    """

    def __init__(self, world: World, store: ProjectionStore, config: ProjectionConfig) -> None:
        self.world = world
        self.store = store
        self.config = config
        self._open: dict[int, _Open] = {}
        self._cache: OrderedDict[str, RunRecord] = OrderedDict()
        self._headers: Callable[[StoredRecord], tuple[Header, ...]] | None = None

    # -- partitions --------------------------------------------------------------------------

    def open_partition(self, partition: int, committed: int | None, earliest: int = 0) -> int:
        """Reconcile the store with the group's committed offset; return where to consume.

        * committed == covered, or == previous (the process died between store write and
          commit): consume from it, skipping what the store already holds.
        * committed < covered: the group was reset (our rebuild or ``kafka-consumer-groups
          --reset-offsets``): runs starting at or after it are dropped, runs reaching past it
          are marked stale and refolded from the log when their next record comes.
        * committed > covered: the store is behind (lost, or the group moved forward): its
          runs of this partition are marked stale, and unknown runs are folded from their
          start before their first consumed record.
        """
        target = committed if committed is not None and committed >= 0 else earliest
        topic = self.config.topic
        uncommitted = 0
        cursor = self.store.cursors(topic).get(partition)
        if cursor is None:
            gap = target if target > earliest else 0
            self.store.reset_partition(topic, partition, PartitionCursor(target, target, gap))
            self._cache.clear()
            if gap:
                log.warning(
                    "projection_starts_after_earliest",
                    partition=partition,
                    offset=target,
                    hint="runs are folded from their start when they next appear; "
                    "`little projections rebuild --to-earliest` projects every run",
                )
        elif target in (cursor.covered, cursor.previous):
            gap = cursor.gap_before
            uncommitted = cursor.covered if target != cursor.covered else 0
            if target != cursor.covered:
                log.info(
                    "projection_resumed_after_uncommitted_write",
                    partition=partition,
                    committed=target,
                    stored=cursor.covered,
                )
        elif target < cursor.covered:
            gap = min(cursor.gap_before, target)
            deleted, staled = self.store.reset_partition(
                topic,
                partition,
                PartitionCursor(target, target, gap),
                delete_from=target,
                stale_from=target,
            )
            self._cache.clear()
            log.info(
                "projection_rewound",
                partition=partition,
                offset=target,
                stored=cursor.covered,
                runs_dropped=deleted,
                runs_stale=staled,
            )
        else:
            gap = target
            _deleted, staled = self.store.reset_partition(
                topic, partition, PartitionCursor(target, target, gap), stale_from=0
            )
            self._cache.clear()
            log.warning(
                "projection_behind_cursor",
                partition=partition,
                committed=target,
                stored=cursor.covered,
                runs_stale=staled,
            )
        self._open[partition] = _Open(target, gap, uncommitted)
        return target

    def close_partition(self, partition: int) -> None:
        if self._open.pop(partition, None) is not None:
            for run_id in [r for r, rec in self._cache.items() if rec.partition == partition]:
                del self._cache[run_id]

    def position(self, partition: int) -> int:
        return self._open[partition].position

    def positions(self) -> dict[int, int]:
        return {p: o.position for p, o in self._open.items()}

    def seek(self, partition: int, offset: int) -> None:
        """Consume from ``offset`` again (a commit failed); the store stays as it is."""
        opened = self._open[partition]
        opened.uncommitted_until = max(opened.uncommitted_until, opened.position)
        opened.position = offset

    # -- folding -----------------------------------------------------------------------------

    def fold(
        self,
        partition: int,
        records: Sequence[StoredRecord],
        headers: Callable[[StoredRecord], tuple[Header, ...]] | None = None,
    ) -> PartitionBatch:
        """Fold one partition's records (in offset order) without writing anything.

        ``headers`` gives a record's headers when a driver leaves them out of its records
        (they are read only to dead-letter a record).
        """
        self._headers = headers
        opened = self._open[partition]
        batch = PartitionBatch(
            partition=partition,
            start=opened.position,
            end=max(opened.position, records[-1].offset + 1) if records else opened.position,
            consumed=len(records),
        )
        by_run: dict[str, list[StoredRecord]] = {}
        for rec in records:
            run = by_run.get(rec.run_id)
            if run is None:
                by_run[rec.run_id] = [rec]
            else:
                run.append(rec)
        if records:
            batch.newest_timestamp_ms = records[-1].timestamp_ms
        for rec in by_run.pop("", []):
            batch.dead_letters.append(
                self._dead_letter(rec, REASON_NO_KEY, "record without a run id (key)")
            )
        self._refuse_misrouted(partition, by_run, batch)
        rows = self._rows(by_run)
        work: list[tuple[str, RunRecord | None, list[StoredRecord]]] = []
        wanted: dict[str, tuple[int, int]] = {}
        for run_id, recs in by_run.items():
            row = rows.get(run_id)
            if row is not None and row.partition != partition:
                row = self._moved_row(row, recs[0])
            if row is not None and not row.stale:
                if row.integrity is not None:
                    self._count_after_mark(row, recs, batch)
                    continue
                fresh = [r for r in recs if r.offset > row.last_offset]
                batch.duplicates += len(recs) - len(fresh)
                if len(fresh) < len(recs) and recs[0].offset < opened.uncommitted_until:
                    self._snapshot_again(row, recs, batch)
                if fresh:
                    work.append((run_id, row, fresh))
                continue
            if row is not None:  # stale: refold from the run's first record
                if row.first_offset < recs[0].offset:
                    wanted[run_id] = (row.first_offset, recs[0].offset)
            elif opened.gap_before > 0 and not self._starts_run(recs[0]):
                first = self.world.log.first_offset(run_id)
                if first is not None and first < min(opened.gap_before, recs[0].offset):
                    wanted[run_id] = (first, min(opened.gap_before, recs[0].offset))
            work.append((run_id, row, recs))
        prefixes = self._read_runs(partition, wanted) if wanted else {}
        for run_id, row, recs in work:
            prefix = prefixes.get(run_id, [])
            if prefix or (row is not None and row.stale):
                batch.refolded_runs += 1
            self._apply(run_id, row, prefix, recs, batch)
        return batch

    def persist(self, batches: Sequence[PartitionBatch]) -> None:
        """Write the batches' runs and cursors to the store in one durable write."""
        if not batches:
            return
        records = [r for b in batches for r in b.records.values()]
        cursors = {
            b.partition: PartitionCursor(b.end, b.start, self._open[b.partition].gap_before)
            for b in batches
        }
        self.store.put(ProjectionWrite(self.config.topic, records, cursors))
        for b in batches:
            self._open[b.partition].position = b.end
        for r in records:
            self._cache.pop(r.run_id, None)
            if self.config.cache_runs and not r.state.terminal and r.integrity is None:
                self._cache[r.run_id] = r
        while len(self._cache) > self.config.cache_runs:
            self._cache.popitem(last=False)

    def settle(self, batches: Sequence[PartitionBatch]) -> None:
        """Record that the batches' offsets are committed (``previous`` = ``covered``).

        Until then the store cannot tell a crash between its write and the commit from a
        reset to exactly the batch's start; after it, a committed offset below ``covered`` is
        always a reset.
        """
        if batches:
            self.store.put(
                ProjectionWrite(
                    self.config.topic,
                    (),
                    {
                        b.partition: PartitionCursor(
                            b.end, b.end, self._open[b.partition].gap_before
                        )
                        for b in batches
                        if b.partition in self._open
                    },
                )
            )

    # -- internals ---------------------------------------------------------------------------

    def _refuse_misrouted(
        self, partition: int, by_run: dict[str, list[StoredRecord]], batch: PartitionBatch
    ) -> None:
        """Dead-letter the records of runs whose partition is another: a run's stream is its
        own partition (``partition_for``, murmur2 of the run id); a record keyed with the run
        but produced elsewhere (librdkafka's default partitioner is CRC32) is read by no
        reader of the run, so it must not change the run's projection either."""
        partitions = self.world.log.partitions
        for run_id in [r for r in by_run if partition_for(r, partitions) != partition]:
            expected = partition_for(run_id, partitions)
            recs = by_run.pop(run_id)
            for rec in recs:
                message = (
                    f"run {run_id}: record at partition {rec.partition} offset {rec.offset} "
                    f"belongs in partition {expected} (murmur2 of the run id over {partitions} "
                    "partitions, Kafka's default partitioner): it was produced with another "
                    "partitioner (librdkafka's default, consistent_random, is CRC32; set "
                    "partitioner=murmur2_random) and is no part of the run's stream"
                )
                batch.dead_letters.append(self._dead_letter(rec, REASON_MISROUTED, message))
            log.warning(
                "record_misrouted",
                run_id=run_id,
                partition=partition,
                expected=expected,
                offsets=[r.offset for r in recs[:10]],
                records=len(recs),
            )

    def _moved_row(self, row: RunRecord, first: StoredRecord) -> RunRecord:
        """A stored row of another partition than the run's (written before misrouted records
        were refused, so it may hold one): refold the run from its start in its partition."""
        start = self.world.log.first_offset(row.run_id)
        log.warning(
            "projection_row_in_another_partition",
            run_id=row.run_id,
            stored_partition=row.partition,
            partition=first.partition,
            hint="refolded from the run's first record in its own partition",
        )
        return replace(row, stale=True, first_offset=first.offset if start is None else start)

    def _rows(self, run_ids: Iterable[str]) -> dict[str, RunRecord]:
        rows: dict[str, RunRecord] = {}
        missing: list[str] = []
        for run_id in run_ids:
            cached = self._cache.get(run_id)
            if cached is None:
                missing.append(run_id)
            else:
                self._cache.move_to_end(run_id)
                rows[run_id] = cached
        if missing:
            rows.update(self.store.get_many(missing))
        return rows

    def _starts_run(self, rec: StoredRecord) -> bool:
        """Is this a run's very first record (a first claim)? Decides without the run index."""
        try:
            event = self.world.decode(rec).event
        except RecordDecodeError:
            return False
        return isinstance(event, RunClaimed) and event.observed_seq == -1

    def _read_runs(
        self, partition: int, wanted: Mapping[str, tuple[int, int]]
    ) -> dict[str, list[StoredRecord]]:
        """Records of several runs, each in [lo, hi), in one bounded scan of the partition."""
        lo = min(w[0] for w in wanted.values())
        hi = max(w[1] for w in wanted.values())
        out: dict[str, list[StoredRecord]] = {run_id: [] for run_id in wanted}
        offset = lo
        while offset < hi:
            page = self.world.log.read_partition(partition, offset, limit=min(5000, hi - offset))
            if not page:
                break
            for rec in page:
                if rec.offset >= hi:
                    break
                w = wanted.get(rec.run_id)
                if w is not None and w[0] <= rec.offset < w[1]:
                    out[rec.run_id].append(rec)
            offset = page[-1].offset + 1
        log.info("projection_runs_refolded", partition=partition, runs=len(wanted), lo=lo, hi=hi)
        return out

    def _apply(
        self,
        run_id: str,
        row: RunRecord | None,
        prefix: list[StoredRecord],
        recs: list[StoredRecord],
        batch: PartitionBatch,
    ) -> None:
        incremental = row is not None and not row.stale
        start = row.state if row is not None and incremental else None
        items = prefix + recs if prefix else recs
        first_offset = row.first_offset if row is not None and incremental else items[0].offset
        failed_at: int | None = None
        reason = message = ""
        decode = self.world.decode
        events: list[LoggedEvent] = []
        for i, rec in enumerate(items):
            try:
                events.append(decode(rec))
            except RecordDecodeError as exc:
                failed_at, reason, message = i, exc.cause.reason, str(exc)
                break
        state, applied, error = _fold(run_id, start, events)
        if error is not None:
            failed_at = applied
            reason = REASON_STREAM if isinstance(error, RuntimeIntegrityError) else REASON_FOLD
            message = str(error) if reason == REASON_STREAM else f"{type(error).__name__}: {error}"
        batch.folded += applied
        last = items[-1]
        mark = None
        if failed_at is not None:
            bad = items[failed_at]
            after = items[failed_at + 1 :]
            mark = IntegrityMark(
                reason=reason,
                message=message,
                partition=bad.partition,
                offset=bad.offset,
                skipped=len(after),
                last_skipped_offset=after[-1].offset if after else -1,
            )
            batch.skipped += sum(1 for r in after if r.offset >= recs[0].offset)
            if bad.offset >= recs[0].offset:  # consumed now, not re-read for a refold
                batch.dead_letters.append(self._dead_letter(bad, reason, message))
            log.warning(
                "run_marked_integrity_error",
                run_id=run_id,
                reason=reason,
                partition=bad.partition,
                offset=bad.offset,
                message=message,
            )
        batch.records[run_id] = RunRecord(
            state=state,
            partition=batch.partition,
            first_offset=first_offset,
            last_offset=last.offset,
            updated_at=from_ms(last.timestamp_ms),
            integrity=mark,
        )
        if mark is None and state.last_position is not None:
            every = self.config.snapshot_every
            before = start.events_applied if start is not None else 0
            was_terminal = start.terminal if start is not None else False
            if state.events_applied // every > before // every or (
                state.terminal and not was_terminal
            ):
                batch.snapshots.append((run_id, encode_snapshot(Snapshot.of(state))))

    def _snapshot_again(
        self, row: RunRecord, recs: list[StoredRecord], batch: PartitionBatch
    ) -> None:
        """Re-send the snapshot of a state whose write outran its commit: the transaction that
        carried its snapshot was aborted, and folding skips what the store already holds."""
        if any(r.offset == row.last_offset for r in recs) and row.state.last_position is not None:
            batch.snapshots.append((row.run_id, encode_snapshot(Snapshot.of(row.state))))

    def _count_after_mark(
        self, row: RunRecord, recs: list[StoredRecord], batch: PartitionBatch
    ) -> None:
        mark = row.integrity
        assert mark is not None
        skipped, last = mark.skipped, mark.last_skipped_offset
        for rec in recs:
            if rec.offset == mark.offset:
                # Re-delivered: the commit that carried its dead letter never landed.
                batch.dead_letters.append(self._dead_letter(rec, mark.reason, mark.message))
            elif rec.offset > max(mark.offset, last):
                skipped, last = skipped + 1, rec.offset
                batch.skipped += 1
            else:
                batch.duplicates += 1
        newest = recs[-1]
        batch.records[row.run_id] = replace(
            row,
            integrity=replace(mark, skipped=skipped, last_skipped_offset=last),
            last_offset=max(row.last_offset, newest.offset),
            updated_at=max(row.updated_at, from_ms(newest.timestamp_ms)),
        )

    def _dead_letter(self, rec: StoredRecord, reason: str, message: str) -> DeadLetter:
        headers = (
            *(self._headers(rec) if self._headers is not None else rec.headers),
            (DLQ_REASON, reason.encode()),
            (DLQ_MESSAGE, message.encode()[:4000]),
            (DLQ_TOPIC_HEADER, self.config.topic.encode()),
            (DLQ_PARTITION, str(rec.partition).encode()),
            (DLQ_OFFSET, str(rec.offset).encode()),
        )
        payload = rec.payload
        if len(payload) > DLQ_MAX_VALUE:
            headers = (*headers, (DLQ_VALUE_OMITTED, str(len(payload)).encode()))
            payload = b""
        return DeadLetter(
            run_id=rec.run_id,
            payload=payload,
            headers=headers,
            partition=rec.partition,
            offset=rec.offset,
            reason=reason,
        )


def _fold(
    run_id: str, start: MaterializedRunState | None, events: list[LoggedEvent]
) -> tuple[MaterializedRunState, int, Exception | None]:
    """Fold events; on failure, the state before the failing event, its index, the error."""
    try:
        state = materialize_run_state_from_events(events, start=start, run_id=run_id)
        return state, len(events), None
    except Exception as first_error:
        # Find the failing event: fold one at a time (only on this rare path).
        state = start or MaterializedRunState(run_id=run_id)
        for i, event in enumerate(events):
            try:
                state = materialize_run_state_from_events([event], start=state)
            except Exception as exc:
                return state, i, exc
        return state, len(events), first_error
