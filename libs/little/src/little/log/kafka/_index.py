"""The run index: lower bounds of each run's first offset, from ``little.runs.index.v1``.

Blocking reads, on worker threads; the writer side (entries written before a run's first
record) is in ``_log``.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict, deque

from confluent_kafka import TopicPartition
from rbloom import Bloom

from little.log._partitioner import partition_for
from little.log.kafka.client import Readers, consume_until, watermarks

INDEX_RUNS_KEPT = 100_000
"""Runs whose first-offset bound a reader keeps in memory (the most recently used)."""
INDEX_RUNS_EXPECTED = 10_000_000
"""Runs the reader's Bloom filter is sized for at a 1% false-positive rate (12 MB); beyond,
its false positives rise and cost rescans, never wrong answers."""


class RunIndex:
    """Lower bounds of each run's first offset, read from the index topic, in bounded memory.

    Every process writes one entry for a run before its first record of that run (the bound:
    an offset it saw taken in the run's partition); entries are never compacted away and a
    reader takes the minimum over all entries of a run, so concurrent first writers cannot
    hide each other's records. A lookup catches its index partition up from where this
    process last read it (the first lookup of a partition reads it whole, once); lookups of
    different partitions read side by side, and lookups of one partition that queued behind a
    catch-up which began after them read nothing.

    Memory stays bounded however many runs the process sees: the bounds of the most recently
    used ``capacity`` runs are kept, and a Bloom filter remembers every run ever seen. A run
    the filter has never seen has no entry (an exact "no": the common lookup of a new run
    stays cheap); a run that was forgotten (or a false positive of the filter) is looked up by
    rescanning its index partition for that run alone.
    """

    def __init__(
        self,
        readers: Readers,
        topic: str,
        partitions: int,
        *,
        capacity: int = INDEX_RUNS_KEPT,
        expected_runs: int = INDEX_RUNS_EXPECTED,
    ) -> None:
        self.topic = topic
        self.partitions = partitions
        self.capacity = capacity
        self._readers = readers
        self._read_to: dict[int, int] = {}
        self._caught_at: dict[int, float] = {}
        """Per partition, when its last catch-up began (before it asked for the watermark)."""
        self._first: OrderedDict[str, tuple[int, bool]] = OrderedDict()
        """run -> (lowest bound seen, whether every entry of the run was seen since)."""
        self._expected_runs = expected_runs
        self._seen_filter: Bloom | None = None  # 12 MB: made on first use, not per CLI call
        self._forgotten = 0
        self.records_read = 0
        """Index records read so far (catch-ups and rescans): what lookups have cost."""
        self.rescans = 0
        self._notes: deque[tuple[str, int]] = deque()
        self._partition_locks = [threading.Lock() for _ in range(partitions)]
        self._state = threading.Lock()
        """Guards the bounds, the filter and the counters (held briefly, never over a read)."""

    def lookup(self, run_id: str, timeout: float) -> int | None:
        partition = partition_for(run_id, self.partitions)
        asked = time.monotonic()
        with self._partition_locks[partition]:
            # A catch-up that began after this lookup did covers every entry written before
            # it: lookups that queued behind it (a burst of runs starting) need no read.
            if self._caught_at.get(partition, -1.0) < asked:
                self._catch_up(partition, timeout)
            with self._state:
                self._apply_notes()
                known = self._first.get(run_id)
                if known is not None:
                    self._first.move_to_end(run_id)
                    if known[1]:
                        return known[0]
                elif not self._forgotten or run_id not in self._seen:
                    return None  # never seen by this process, and it has read every entry
            return self._rescan(run_id, partition, timeout)

    def note(self, run_id: str, offset: int) -> None:
        """This process's own entry for a run (taken without waiting: the writer calls it on
        the event loop)."""
        self._notes.append((run_id, offset))
        if len(self._notes) > 1024 and self._state.acquire(blocking=False):
            try:  # a process that writes and never reads keeps its notes bounded too
                self._apply_notes()
            finally:
                self._state.release()

    def _apply_notes(self) -> None:
        notes = self._notes
        while notes:
            self._record(*notes.popleft())

    @property
    def _seen(self) -> Bloom:
        if self._seen_filter is None:
            self._seen_filter = Bloom(self._expected_runs, 0.01)
        return self._seen_filter

    def _record(self, run: str, offset: int) -> None:
        known = self._first.get(run)
        if known is not None:
            self._first[run] = (min(known[0], offset), known[1])
            self._first.move_to_end(run)
            return
        # not held: exact if this process never saw the run before, else its older entries
        # may have been forgotten
        exact = run not in self._seen
        self._seen.add(run)
        self._hold(run, offset, exact)

    def _hold(self, run: str, offset: int, exact: bool) -> None:
        self._first[run] = (offset, exact)
        self._first.move_to_end(run)
        if len(self._first) > self.capacity:
            self._first.popitem(last=False)
            self._forgotten += 1

    def _rescan(self, run_id: str, partition: int, timeout: float) -> int | None:
        """Read the run's index partition up to where it was caught up, for this run alone."""
        high = self._read_to.get(partition, 0)
        lowest: int | None = None
        for _key, offset in self._read(partition, 0, high, timeout, only=run_id.encode()):
            lowest = offset if lowest is None else min(lowest, offset)
        with self._state:
            self.rescans += 1
            self._apply_notes()
            known = self._first.get(run_id)
            if known is not None:  # noted by this process (its own entry, maybe not yet read)
                lowest = known[0] if lowest is None else min(lowest, known[0])
            if lowest is None:
                return None
            self._hold(run_id, lowest, True)
            return lowest

    def _catch_up(self, partition: int, timeout: float) -> None:
        """(The partition's lock is held.)"""
        tp = TopicPartition(self.topic, partition)
        began = time.monotonic()
        with self._readers.one() as consumer:
            _low, high = watermarks(consumer, tp, timeout)
        start = self._read_to.get(partition, 0)
        if start < high:
            entries = self._read(partition, start, high, timeout)
            with self._state:
                for key, offset in entries:
                    self._record(key.decode(), offset)
            self._read_to[partition] = high
        self._caught_at[partition] = began

    def _read(
        self, partition: int, start: int, high: int, timeout: float, only: bytes | None = None
    ) -> list[tuple[bytes, int]]:
        """The (key, bound) of the index entries in ``[start, high)`` of a partition (of the
        run keyed ``only``, if given: a rescan holds one run's entries, not the partition's)."""
        if start >= high:
            return []
        out: list[tuple[bytes, int]] = []
        with self._readers.one() as consumer:
            consumer.assign([TopicPartition(self.topic, partition, start)])
            try:
                for msg in consume_until(consumer, start, high, timeout):
                    key, value = msg.key(), msg.value()
                    if key is not None and value is not None and (only is None or key == only):
                        out.append((key, int(json.loads(value)["offset"])))
            finally:
                # A consumer left assigned keeps a long-poll fetch in flight, and the next
                # request queues behind it on the connection (measured: ~10 ms per lookup).
                consumer.unassign()
        with self._state:
            self.records_read += high - start
        return out

    def held(self) -> int:
        """Runs whose bound is held in memory (at most ``capacity``)."""
        return len(self._first)
