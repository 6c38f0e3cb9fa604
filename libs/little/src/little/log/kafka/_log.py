"""The Kafka ``EventLog``: awaited appends through one delivery pump, bounded reads.

Appends go through an idempotent producer with acks=all and settle on delivery reports. Each
run lives in the partition Kafka's default partitioner gives its key, and has one produce
sequence in flight at a time. Reading one run starts at a lower bound of its first offset kept
in ``little.runs.index.v1``, so it never scans a shared partition from offset 0 (see
docs/architecture.md, "The EventLog port" and "Run index").
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer, TopicPartition

from little.errors import AppendOutcomeUnknownError, ConfigurationError, LogError
from little.log._partitioner import partition_for
from little.log._pending import InFlight, Outcome, PendingAppend
from little.log._port import EventLog
from little.log._records import OutgoingRecord, Position, StoredRecord
from little.log._topics import RUN_INDEX_TOPIC, RUNS_TOPIC
from little.log.kafka._index import RunIndex
from little.log.kafka.client import (
    SPEC,
    BrokerWatch,
    Readers,
    client_config,
    connect_admin,
    consume_until,
    delivery_error,
    list_offsets,
    stored_record,
    topic_partitions,
    watermarks,
)
from little.logging_setup import get_logger

log = get_logger("little.log.kafka")

PRODUCER_PROFILES: dict[str, dict[str, Any]] = {
    # Write-ahead appends wait for their ack before a model or tool runs: send at once.
    "latency": {"linger.ms": 0},
    # Bulk writers (imports, benchmarks, projections' side outputs): let batches fill.
    "throughput": {"linger.ms": 10, "batch.num.messages": 10000, "compression.type": "lz4"},
}

PUMP_WAIT_SECONDS = 0.05
"""How long the pump blocks in one poll while appends are in flight (a delivery report ends
the poll at once; between polls it retries full queues and refreshes bounds)."""
PUMP_IDLE_SECONDS = 1.0
"""How long the pump sleeps with nothing in flight before it serves librdkafka's own events
(logs, errors) and refreshes bounds; an append wakes it at once."""
BOUNDS_REFRESH_SECONDS = 10.0
"""How often the pump asks for the runs partitions' watermarks (index entry bounds)."""
READERS = 4
"""Consumers a log reads with at once (each one connection to the brokers it reads from)."""
ENTRIES_WRITTEN_KEPT = 100_000
"""Runs remembered as having an index entry from this process; a forgotten one gets another
entry on its next first append (one small record; readers take the minimum)."""


class KafkaEventLog(EventLog):
    """An ``EventLog`` on a Kafka (or Redpanda) topic."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        topic: str = RUNS_TOPIC,
        index_topic: str = RUN_INDEX_TOPIC,
        config: Mapping[str, Any] | None = None,
        producer_profile: str = "latency",
        timeout: float = 30.0,
    ) -> None:
        if producer_profile not in PRODUCER_PROFILES:
            raise ConfigurationError(
                f"producer_profile must be one of {sorted(PRODUCER_PROFILES)}, not {producer_profile!r}"
            )
        self.topic = topic
        self._config = client_config(bootstrap_servers, config)
        if "delivery.timeout.ms" in self._config:  # how long an append waits out an outage
            timeout = int(self._config["delivery.timeout.ms"]) / 1000
        self.timeout = timeout
        watch = self._config["error_cb"]  # a caller's own error_cb replaces ours
        self._watch = watch if isinstance(watch, BrokerWatch) else BrokerWatch.of(bootstrap_servers)
        admin = connect_admin(bootstrap_servers, config)
        self.partitions = topic_partitions(admin, topic)
        self._admin = admin
        settings = {**PRODUCER_PROFILES[producer_profile], **(config or {})}
        self._linger = float(settings.get("linger.ms", 0)) > 0
        self._holding = 0
        self._hold_until = 0.0
        self._pump_may_poll = threading.Event()
        self._work = threading.Event()
        self._hold_lock = threading.Lock()
        self._producer = Producer(
            {
                **self._config,
                "enable.idempotence": True,
                "acks": "all",
                "delivery.timeout.ms": int(timeout * 1000),
                **PRODUCER_PROFILES[producer_profile],
                **{
                    k: v
                    for k, v in (config or {}).items()
                    if k.startswith(("linger", "batch", "compression"))
                },
            }
        )
        self._readers = Readers(self._config, READERS)
        self._index = RunIndex(self._readers, index_topic, topic_partitions(admin, index_topic))
        self._index_topic = index_topic
        self.append_timeout = timeout + 10
        self._closed = False
        # -- the write path: see _start, _pump and docs/architecture.md ("Awaited appends")
        self._lock = threading.Lock()
        self._flight = InFlight(on_settle=self._release_pump)
        self._completed: deque[_Append] = deque()
        self._settling = threading.Lock()
        """Held by the one thread settling ``_completed`` (``_settle_completed``)."""
        self._waiting: dict[str, _Waiting] = {}
        """Runs whose next appends wait in order: for their index entry, or for queue room."""
        self._backlog: set[str] = set()
        self._busy: dict[str, int] = {}
        """Per run, its appends produced and not settled yet (one sequence at a time)."""
        self._indexed = _Recent(ENTRIES_WRITTEN_KEPT)
        """Runs this process wrote an index entry for (recent ones: one more entry is harmless)."""
        ends = list_offsets(admin, topic, self.partitions, SPEC.latest(), timeout)
        self._bounds = [ends[p] for p in range(self.partitions)]
        """Per partition, an offset at or below the next record's: watermarks and acks seen."""
        self._refreshing = False
        self._stopping = False
        self._pump_thread = threading.Thread(
            target=self._pump, name=f"little-delivery-{topic}", daemon=True
        )
        self._pump_thread.start()

    # -- append ----------------------------------------------------------------------------

    def _start(
        self,
        run_id: str,
        records: Sequence[OutgoingRecord],
        pending: PendingAppend,
        after: PendingAppend | None,
    ) -> None:
        if self._closed:
            raise LogError(f"append of run {run_id} to {self.topic}: the log is closed")
        append = _Append(self, run_id, self.partition_for(run_id), records, pending)
        self._flight.add(pending)
        if pending.blocking:
            # its thread waits for it anyway: it serves the reports itself, and the pump
            # stays out of the way (one thread serving, no GIL tug of war)
            self._hold_pump(pending, self.timeout)
            pending.serve = self._serve_own
        else:
            # The pump serves it, woken now if it sleeps idle (a sleeping pump that found this
            # append only at its next idle check stalled a lone run). An awaiter never waits
            # awake on the loop's thread: that burnt a core's worth of polling per append.
            # Set once: the pump clears it only after it woke, and looks at what is in flight
            # (this append, added above) after clearing it.
            if not self._work.is_set():
                self._work.set()
        try:
            with self._lock:
                self._place(run_id, append, after)
        except Exception as exc:  # never leave a waiter (or a hold) behind
            self._flight.settle([(pending, LogError(f"append of run {run_id}: {exc}"))])
            raise

    def _place(self, run_id: str, append: _Append, after: PendingAppend | None) -> None:
        """Send the append, or queue it behind the run's index entry or sequence in flight
        (caller holds the lock)."""
        if self._closed:  # closed while this append was on its way in
            self._flight.settle(
                [(append.pending, LogError(f"append of run {run_id}: the log is closed"))]
            )
            return
        if after is not None and after.doomed:
            # the writer's previous append failed, as decided under this lock: nothing of
            # the run may follow it
            self._flight.settle([(append.pending, _after_failure(self.topic, run_id))])
            return
        waiting = self._waiting.get(run_id)
        if waiting is not None:  # earlier appends of the run wait: this one goes after
            waiting.appends.append(append)
        elif run_id not in self._indexed:
            waiting = self._waiting[run_id] = _Waiting(deque([append]), _Waiting.INDEX)
            self._write_index_entry(run_id, waiting)
        elif self._busy.get(run_id):
            # One produce sequence of a run in flight at a time: a later record of the run
            # never lands after an earlier one failed (a seq gap the fold rejects). Appends
            # that queue meanwhile go out together when it is acked.
            self._waiting[run_id] = _Waiting(deque([append]), _Waiting.BUSY)
        else:
            self._send(run_id, [append])

    def _write_index_entry(self, run_id: str, waiting: _Waiting) -> None:
        """Produce the run's index entry (caller holds the lock); its records follow its ack.

        Its bound is an offset this process saw taken in the partition (a watermark or an
        ack), so every record produced after it lands above it: no request is needed. A full
        queue leaves it to the pump to retry, like any append.
        """
        partition = waiting.appends[0].partition
        bound = self._bounds[partition]
        value = json.dumps({"topic": self.topic, "partition": partition, "offset": bound})
        entry = _IndexEntry(self, run_id)
        try:
            self._producer.produce(
                self._index_topic,
                value.encode(),
                run_id,
                partition_for(run_id, self._index.partitions),
                entry.report,
            )
        except BufferError:
            self._backlog.add(run_id)
            return
        except KafkaException as exc:
            self._fail_waiting(run_id, LogError(f"index entry of run {run_id}: {exc}"))
            return
        self._index.note(run_id, bound)
        waiting.entry_sent = True

    def _indexed_ack(self, run_id: str, err: KafkaError | None) -> None:
        """The index entry's delivery report: release the run's appends."""
        with self._lock:
            if self._closed:
                self._fail_waiting(run_id, LogError(f"append of run {run_id}: the log closed"))
                return
            if err is not None:
                self._fail_waiting(
                    run_id,
                    LogError(
                        f"append of run {run_id} to {self.topic}: its index entry was not "
                        f"written ({err}), so nothing was appended"
                    ),
                )
                return
            self._indexed.add(run_id)
            waiting = self._waiting.get(run_id)
            if waiting is None:
                return
            if self._busy.get(run_id):  # forgotten as indexed while a sequence was in flight
                waiting.reason = _Waiting.BUSY
            else:
                del self._waiting[run_id]
                self._send(run_id, list(waiting.appends))

    def _send(self, run_id: str, appends: list[_Append]) -> None:
        """Produce appends of one run in order, as one sequence in flight (caller holds the
        lock). A full queue parks the rest for the pump; a produce that fails ends the run's
        sequence: the appends after it are not sent (they fail, known not written)."""
        for i, append in enumerate(appends):
            sent = self._produce(append)
            if sent is _FULL:
                self._waiting[run_id] = _Waiting(deque(appends[i:]), _Waiting.ROOM)
                self._backlog.add(run_id)
                return
            self._busy[run_id] = self._busy.get(run_id, 0) + 1
            if sent is _FAILED:
                append.pending.doomed = True
                error = _after_failure(self.topic, run_id)
                for later in appends[i + 1 :]:
                    later.pending.doomed = True
                self._flight.settle([(a.pending, error) for a in appends[i + 1 :]])
                return

    def _fail_waiting(self, run_id: str, error: LogError) -> None:
        """Fail the run's waiting appends (caller holds the lock); one parked partly sent has
        an unknown outcome."""
        waiting = self._waiting.pop(run_id, None)
        self._backlog.discard(run_id)
        if waiting is not None:
            for a in waiting.appends:
                a.pending.doomed = True
            self._flight.settle(
                (
                    a.pending,
                    AppendOutcomeUnknownError(f"{error} (after some of its records were sent)")
                    if a.sent
                    else error,
                )
                for a in waiting.appends
            )

    def _produce(self, append: _Append) -> object:
        """Hand an append's records to librdkafka: ``_SENT``, ``_FULL`` (its queue is full:
        retried from where it stopped) or ``_FAILED`` (a record could not be produced; the
        append completes with that error once the records before it report)."""
        produce = self._producer.produce
        topic, key, partition, report = self.topic, append.run_id, append.partition, append.report
        records = append.records
        sent = append.sent
        try:
            for record in records[sent:] if sent else records:
                # positional arguments, headers only when present: keyword arguments cost more
                # than the rest of the call (measured in bench/log_append.py)
                if record.headers:
                    produce(
                        topic, record.payload, key, partition, report, headers=list(record.headers)
                    )
                else:
                    produce(topic, record.payload, key, partition, report)
                sent += 1
        except BufferError:
            append.sent = sent
            return _FULL
        except KafkaException as exc:
            append.sent = sent
            append.partial = sent > 0  # earlier records of it may land
            append.fail_unsent(exc.args[0])
            return _FAILED
        append.sent = sent
        return _SENT

    def in_flight(self) -> tuple[int, float]:
        return self._flight.stats()

    def _serve_own(self, pending: PendingAppend) -> None:
        """A blocking append's wait: poll in short slices on its own thread, each ended by the
        first report that comes, until its own are in (``_poll_here``)."""
        try:
            deadline = time.perf_counter() + self.timeout + 5
            while not pending.settled and time.perf_counter() < deadline:
                self._poll_here(0.01)
        finally:
            self._release_pump(pending)

    def _poll_here(self, timeout: float = 0.0) -> None:
        """Poll the producer on this thread (flush when lingering: it ends a linger at once),
        serving every report that comes; settle what completed, retry what a full queue
        parked."""
        if self._linger:
            self._producer.flush(timeout)
        else:
            self._producer.poll(timeout)
        if self._completed:
            self._settle_completed()
        if self._backlog:
            self._retry_backlog()

    def _hold_pump(self, pending: PendingAppend, seconds: float) -> None:
        """No pump polls until the holds are released or their time is up. A hold is released
        once: by its waiter, or when its append settles (so one never awaited cannot keep the
        pump off, and one settled before its waiter came does not either)."""
        with self._hold_lock:  # blocking appends of several threads may hold at once
            pending.holds_pump = True
            self._holding += 1
            self._hold_until = max(self._hold_until, time.monotonic() + seconds + 0.001)
            self._pump_may_poll.clear()

    def _release_pump(self, pending: PendingAppend) -> None:
        with self._hold_lock:
            if not pending.holds_pump:
                return
            pending.holds_pump = False
            self._holding -= 1
            if not self._holding:
                self._hold_until = 0.0  # no hold outlives the last holder
                self._pump_may_poll.set()
        if not pending.settled:
            self._work.set()  # its waiter gave up waiting (a timeout): the pump takes over

    # -- the delivery pump -----------------------------------------------------------------

    def _pump(self) -> None:
        """Serve the producer's delivery reports and resolve each append's waiter in batches.

        It polls while appends are in flight, unless a blocking append's thread polls for its
        own reports meanwhile (``_hold_pump``); it sleeps while none are, woken by the next
        append; it also retries what a full queue parked and keeps the partitions' bounds
        fresh.
        """
        poll = self._producer.poll
        refresh_at = time.monotonic() + BOUNDS_REFRESH_SECONDS
        while not self._stopping:
            try:
                held = self._hold_until - time.monotonic()
                if self._holding and held > 0:  # a blocking waiter polls for its reports
                    self._pump_may_poll.wait(held)
                    continue
                if not self._flight and not self._backlog:
                    # Nothing in flight: wait for work outside librdkafka, so that a blocking
                    # waiter who polls for its own reports (and holds the pump off) never finds
                    # the pump parked in poll, where it would take the reports first.
                    self._work.wait(PUMP_IDLE_SECONDS)
                    self._work.clear()
                    # librdkafka's own events (logs, errors) get served; so do the reports of
                    # an append that woke the pump late (a loaded machine): settled below, or
                    # they would wait out the next poll's PUMP_WAIT_SECONDS
                    poll(0)
                else:
                    poll(PUMP_WAIT_SECONDS)
                if self._completed:
                    self._settle_completed()
                if self._backlog:
                    self._retry_backlog()
                refresh_at = self._maybe_refresh(refresh_at)
            except Exception as exc:  # a bug here must not leave every writer hanging
                log.error("delivery_pump_error", error=f"{type(exc).__name__}: {exc}")

    def _maybe_refresh(self, refresh_at: float) -> float:
        """Refresh the partitions' bounds when due (busy or idle); the next due time."""
        now = time.monotonic()
        if now < refresh_at:
            return refresh_at
        self._refresh_bounds()
        return now + BOUNDS_REFRESH_SECONDS

    def _retry_backlog(self) -> None:
        with self._lock:
            for run_id in list(self._backlog):
                self._backlog.discard(run_id)
                waiting = self._waiting.get(run_id)
                if waiting is None:
                    continue
                if waiting.reason == _Waiting.INDEX:
                    if not waiting.entry_sent:
                        self._write_index_entry(run_id, waiting)
                elif waiting.reason == _Waiting.ROOM:
                    del self._waiting[run_id]
                    self._send(run_id, list(waiting.appends))

    def _settle_completed(self, *, wait: bool = False) -> None:
        """Settle the appends whose last report came (on the pump's thread, or a waiter's),
        and send what queued behind a run's sequence once it is all acked.

        One thread settles at a time: the one that takes ``_settling``. Another that finds it
        taken leaves the appends to it (``wait``: waits for it, then settles what is left); the
        owner looks again after letting go, so an append completed meanwhile is never left
        behind. (Two threads popping one deque could both see its last append, and the
        slower one failed on an empty deque, losing what it had popped.)"""
        done = self._completed
        owner = self._settling
        while done and owner.acquire(wait):
            try:
                self._settle_owned(done)
            finally:
                owner.release()

    def _settle_owned(self, done: deque[_Append]) -> None:
        """Pop and settle every completed append (the caller holds ``_settling``: the only
        thread popping)."""
        batch: list[tuple[PendingAppend, Outcome]] = []
        bounds = self._bounds
        try:
            while done:
                append = done.popleft()
                outcome = append.outcome()
                run_id = append.run_id
                with self._lock:
                    if append.settled:  # two threads saw its last report: settle it once
                        continue
                    append.settled = True
                    busy = self._busy.get(run_id, 1) - 1
                    if busy > 0:
                        self._busy[run_id] = busy
                    else:
                        self._busy.pop(run_id, None)
                    waiting = self._waiting.get(run_id)
                    if isinstance(outcome, BaseException):
                        append.pending.doomed = True  # seen by the writer's next submit (``after``)
                        if waiting is not None:  # whatever they wait for: none may follow it
                            self._fail_waiting(run_id, _after_failure(self.topic, run_id))
                    elif busy <= 0 and waiting is not None and waiting.reason == _Waiting.BUSY:
                        if self._closed:
                            self._fail_waiting(
                                run_id, LogError(f"append of run {run_id}: the log closed first")
                            )
                        else:
                            del self._waiting[run_id]
                            self._send(run_id, list(waiting.appends))
                if not isinstance(outcome, BaseException) and outcome:
                    if self._watch.down_since is not None:
                        self._watch.up()
                    last = outcome[-1].offset + 1
                    if last > bounds[append.partition]:
                        bounds[append.partition] = last
                batch.append((append.pending, outcome))
        finally:  # what was popped is settled, whatever happened after
            self._flight.settle(batch)

    def _refresh_bounds(self) -> None:
        """Ask for the partitions' watermarks without waiting (so the bound of an index entry
        in a partition this process does not write stays recent)."""
        if self._refreshing:
            return
        self._refreshing = True
        request = {TopicPartition(self.topic, p): SPEC.latest() for p in range(self.partitions)}
        try:
            futures = self._admin.list_offsets(request, request_timeout=self.timeout)
        except KafkaException:
            self._refreshing = False
            return
        left = [len(futures)]

        def done(partition: int, future: Any) -> None:
            try:
                offset = int(future.result().offset)
                if offset > self._bounds[partition]:
                    self._bounds[partition] = offset
            except Exception:  # a refresh that fails leaves the older bound, still valid
                pass
            left[0] -= 1
            if left[0] == 0:
                self._refreshing = False

        for tp, future in futures.items():
            future.add_done_callback(functools.partial(done, tp.partition))

    # -- read ------------------------------------------------------------------------------

    def read_run(self, run_id: str, *, after: Position | None = None) -> Iterator[StoredRecord]:
        partition = self.partition_for(run_id)
        if after is not None:  # a cursor of the run: no index lookup needed
            return iter(self._read_range(partition, after.offset + 1, run_id))
        first = self.first_offset(run_id)
        if first is None:
            return iter(())
        return iter(self._read_range(partition, first, run_id))

    def _read_range(self, partition: int, start: int, run_id: str | None) -> list[StoredRecord]:
        tp = TopicPartition(self.topic, partition)
        with self._readers.one() as reader:
            _low, high = watermarks(reader, tp, self.timeout)
            if start >= high:
                return []
            reader.assign([TopicPartition(self.topic, partition, start)])
            try:
                key = None if run_id is None else run_id.encode()
                return [
                    stored_record(msg)
                    for msg in consume_until(reader, start, high, self.timeout)
                    if key is None or msg.key() == key
                ]
            finally:
                reader.unassign()

    def first_offset(self, run_id: str) -> int | None:
        return self._index.lookup(run_id, self.timeout)

    def read_partition(
        self, partition: int, offset: int, *, limit: int = 1000, timeout: float = 0.0
    ) -> list[StoredRecord]:
        if not 0 <= partition < self.partitions:
            raise ConfigurationError(
                f"partition {partition} does not exist in {self.topic} "
                f"({self.partitions} partitions)"
            )
        tp = TopicPartition(self.topic, partition)
        deadline = time.monotonic() + timeout
        with self._readers.one() as reader:
            while True:
                _low, high = watermarks(reader, tp, self.timeout)
                if offset < high or time.monotonic() >= deadline:
                    break
                time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
            if offset >= high:
                return []
            reader.assign([TopicPartition(self.topic, partition, offset)])
            try:
                end = min(high, offset + limit)
                return [stored_record(m) for m in consume_until(reader, offset, end, self.timeout)]
            finally:
                reader.unassign()

    def end_offsets(self) -> dict[int, int]:
        return list_offsets(self._admin, self.topic, self.partitions, SPEC.latest(), self.timeout)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stopping = True
        self._pump_may_poll.set()  # a held or idle pump wakes to stop
        self._work.set()
        self._pump_thread.join()
        self._producer.flush(self.timeout)  # serves the last delivery reports on this thread
        self._settle_completed(wait=True)
        with self._lock:
            for run_id, waiting in list(self._waiting.items()):
                del self._waiting[run_id]
                self._flight.settle(
                    (
                        a.pending,
                        AppendOutcomeUnknownError(
                            f"append of run {run_id}: the log closed with it partly sent"
                        )
                        if a.sent
                        else LogError(f"append of run {run_id}: the log closed before it was sent"),
                    )
                    for a in waiting.appends
                )
        left = self._flight.pending()
        if left:
            self._flight.settle(
                (p, AppendOutcomeUnknownError(f"append to {self.topic}: the log closed first"))
                for p in left
            )
        self._readers.close()


_SENT, _FULL, _FAILED = object(), object(), object()


class _Waiting:
    """A run's appends that wait to be produced, in order: behind the run's index entry
    (``INDEX``), behind its sequence in flight (``BUSY``), or for room in librdkafka's queue
    (``ROOM``)."""

    INDEX, BUSY, ROOM = "index", "busy", "room"
    __slots__ = ("appends", "entry_sent", "reason")

    def __init__(self, appends: deque[_Append], reason: str) -> None:
        self.appends = appends
        self.reason = reason
        self.entry_sent = False


class _Append:
    """One append on the producer: its records, its waiter and the delivery reports back.

    ``report`` is the delivery callback of each of its records (a bound method: no closure per
    record); the report that completes it queues the append for settling. Reports may be
    served by two threads at once (the pump, a waiter), so completion is read off the lists
    (each append to them is atomic) and settling is guarded: one thread at a time pops the
    completed appends (``_settling``), and an append queued twice settles once (``settled``,
    under the log's lock).
    """

    __slots__ = (
        "errors",
        "log",
        "offsets",
        "partial",
        "partition",
        "pending",
        "records",
        "report",
        "run_id",
        "sent",
        "settled",
        "total",
    )

    def __init__(
        self,
        log: KafkaEventLog,
        run_id: str,
        partition: int,
        records: Sequence[OutgoingRecord],
        pending: PendingAppend,
    ) -> None:
        self.log = log
        self.run_id = run_id
        self.partition = partition
        self.records = records
        self.pending = pending
        self.total = len(records)
        """Reports to expect (the produced records, plus one for a failed produce)."""
        self.sent = 0
        self.partial = False
        self.settled = False
        self.offsets: list[int | None] = []
        self.errors: list[KafkaError] = []
        self.report = self._report

    def _report(self, err: KafkaError | None, msg: Message) -> None:
        # runs once per record: kept to the minimum
        if err is None:
            self.offsets.append(msg.offset())
        else:
            self.errors.append(err)
        if len(self.offsets) + len(self.errors) >= self.total:
            self.log._completed.append(self)

    def fail_unsent(self, error: KafkaError) -> None:
        """A record could not be produced: it and the ones after it will never report."""
        self.total = self.sent + 1
        self.errors.append(error)
        if len(self.offsets) + len(self.errors) >= self.total:
            self.log._completed.append(self)

    def outcome(self) -> Outcome:
        offsets = [o for o in self.offsets if o is not None]
        missing = len(offsets) < len(self.offsets)
        error = delivery_error(self.log.topic, self.run_id, self.partition, self.errors)
        if error is not None and self.partial and not isinstance(error, AppendOutcomeUnknownError):
            error = AppendOutcomeUnknownError(f"{error} (after some of its records were sent)")
        if error is None and missing:
            error = AppendOutcomeUnknownError(
                f"append of run {self.run_id} to {self.log.topic}[{self.partition}]: a delivery "
                "report had no offset"
            )
        if error is not None:
            return error
        # One partition, one idempotent producer: the records landed in the order produced,
        # so the i-th smallest offset is the i-th record's.
        offsets.sort()
        return [Position(self.partition, offset) for offset in offsets]


def _after_failure(topic: str, run_id: str) -> LogError:
    return LogError(
        f"append of run {run_id} to {topic}: not sent, an earlier append of the run failed"
    )


class _IndexEntry:
    __slots__ = ("log", "run_id")

    def __init__(self, log: KafkaEventLog, run_id: str) -> None:
        self.log = log
        self.run_id = run_id

    def report(self, err: KafkaError | None, _msg: Message) -> None:
        self.log._indexed_ack(self.run_id, err)


class _Recent:
    """A bounded set that forgets its least recently added members."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, key: str) -> bool:
        return key in self._items

    def add(self, key: str) -> None:
        items = self._items
        items[key] = None
        items.move_to_end(key)
        if len(items) > self.capacity:
            items.popitem(last=False)
