"""The EventLog port: the one boundary between little and a durable, partitioned log.

Records are transport-neutral: a run id (the key), Avro bytes and string headers. A backend
(Kafka, embedded sqlite) supplies partitions, offsets and consumer-group cursors with the same
meaning, and passes the same conformance suite (``little.testing.EventLogConformance``, which
little's ``tests/conformance`` runs on each backend). Nothing here decodes events: the port
moves bytes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence

from little.log._partitioner import partition_for
from little.log._pending import PendingAppend
from little.log._records import OutgoingRecord, Position, ResetTo, StoredRecord


class EventLog(ABC):
    """One topic of run events, partitioned by run id.

    Guarantees every backend keeps:

    * ``submit`` starts a durable append and returns at once; awaiting what it returns gives
      the positions once every record is durable (acks=all on Kafka, a committed transaction
      on sqlite), in order, all in the run's one partition. The order of submits is the order
      in the log for a run, so a writer that takes ``seq`` and submits with no ``await`` in
      between needs no lock, and several submits of one run may be in flight. Appends of many
      runs share round trips (librdkafka batches per partition; the embedded log commits
      every waiting append in one transaction). If the outcome is unknown, awaiting raises
      ``AppendOutcomeUnknownError``: that writer must stop; other runs' appends carry on.
    * ``append`` is the same append, waited for by blocking the calling thread: for bulk and
      tooling paths, never on an event loop.
    * ``read_run`` yields one run's records in append order, never a full scan of a shared
      partition from offset 0.
    * ``read_partition`` returns a partition's records of every run from an offset, in order.
    """

    topic: str
    partitions: int

    def submit(
        self,
        run_id: str,
        records: Sequence[OutgoingRecord],
        *,
        after: PendingAppend | None = None,
    ) -> PendingAppend:
        """Start a durable append of records of one run (on an event loop); await the result
        for their positions. ``after``: the writer's previous append of the run; if it failed
        (as the backend knows, before its awaiter may), this one is refused unsent."""
        if not records:
            return PendingAppend.done([])
        pending = PendingAppend.on_running_loop()
        self._start(run_id, records, pending, after)
        return pending

    def append(self, run_id: str, records: Sequence[OutgoingRecord]) -> list[Position]:
        """Durably append records of one run, blocking until they are; return their positions."""
        if not records:
            return []
        pending = PendingAppend(None)
        self._start(run_id, records, pending, None)
        return pending.wait(self.append_timeout)

    append_timeout: float | None = None
    """How long a blocking ``append`` waits beyond the backend's own timeouts (None: forever)."""

    @abstractmethod
    def _start(
        self,
        run_id: str,
        records: Sequence[OutgoingRecord],
        pending: PendingAppend,
        after: PendingAppend | None,
    ) -> None:
        """Hand the records over for appending, in call order, without waiting; settle
        ``pending`` (through the backend's ``InFlight``) once they are durable or failed. If
        ``after`` is ``doomed`` (decided under the backend's lock), fail it unsent; a run
        never gets a record after one of its records that did not land."""

    @abstractmethod
    def read_run(self, run_id: str, *, after: Position | None = None) -> Iterator[StoredRecord]:
        """The run's records in order, starting after ``after`` (a cursor) if given."""

    @abstractmethod
    def read_partition(
        self, partition: int, offset: int, *, limit: int = 1000, timeout: float = 0.0
    ) -> list[StoredRecord]:
        """Up to ``limit`` records of ``partition`` from ``offset`` on (may be empty)."""

    @abstractmethod
    def end_offsets(self) -> dict[int, int]:
        """Per partition, the offset the next appended record will get (high watermark)."""

    @abstractmethod
    def first_offset(self, run_id: str) -> int | None:
        """A lower bound of the run's first offset (None if the run has no records).

        Reading a run starts here, so a run's read never scans its partition from offset 0.
        """

    def in_flight(self) -> tuple[int, float]:
        """(appends submitted and not yet settled, seconds the oldest of them has waited)."""
        return 0, 0.0

    def close(self) -> None:  # noqa: B027 - backends without resources need not override
        """Flush and release connections. Idempotent."""

    def partition_for(self, run_id: str) -> int:
        return partition_for(run_id, self.partitions)

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CursorStore(ABC):
    """Committed consumer-group cursors: the replay cursors of projections.

    A committed offset is the next offset to read, as in Kafka.
    """

    @abstractmethod
    def commit(self, group: str, offsets: Mapping[int, int]) -> None:
        """Durably record the next offset to read, per partition."""

    @abstractmethod
    def committed(self, group: str) -> dict[int, int]:
        """The group's committed offsets (partitions never committed are absent)."""

    @abstractmethod
    def reset(self, group: str, to: ResetTo) -> dict[int, int]:
        """Move the group's cursors (the group must have no live members); return them."""
