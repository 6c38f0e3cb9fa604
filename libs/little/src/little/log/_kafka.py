"""The Kafka backend of the EventLog port, on confluent-kafka (librdkafka).

Appends go through an idempotent producer with acks=all and return only after delivery
reports. Each run lives in the partition Kafka's default partitioner gives its key. Reading
one run starts at a lower bound of its first offset kept in ``little.runs.index.v1``, so it
never scans a shared partition from offset 0 (see docs/architecture.md, "Run index").
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import structlog
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from little.errors import (
    AppendOutcomeUnknownError,
    BrokerUnavailableError,
    ConfigurationError,
    LogError,
)
from little.log._partitioner import partition_for
from little.log._port import (
    CursorStore,
    EventLog,
    OutgoingRecord,
    Position,
    ResetTo,
    StoredRecord,
)
from little.log._topics import RUN_INDEX_TOPIC, RUNS_TOPIC, SNAPSHOTS_TOPIC
from little.snapshots import SnapshotStore

log = structlog.get_logger("little.log.kafka")

_Spec: Any = OffsetSpec  # its factory methods are untyped

PRODUCER_PROFILES: dict[str, dict[str, Any]] = {
    # Write-ahead appends wait for their ack before a model or tool runs: send at once.
    "latency": {"linger.ms": 0},
    # Bulk writers (imports, benchmarks, projections' side outputs): let batches fill.
    "throughput": {"linger.ms": 10, "batch.num.messages": 10000, "compression.type": "lz4"},
}

# How long an append of each profile busy-polls for its delivery reports before it blocks.
# A blocked thread lets its CPU go idle; waking it and warming it up again cost more than the
# loopback round trip itself on small machines (measured in bench/durable_call.py), and a
# write-ahead append is on the critical path of every model and tool call. The bulk profile
# flushes and blocks: its batches wait for linger.ms and for each other anyway.
ACK_SPIN_SECONDS: dict[str, float] = {"latency": 0.002, "throughput": 0.0}

# Delivery errors after which the record may or may not be in the log.
_UNKNOWN_OUTCOME = {
    KafkaError._MSG_TIMED_OUT,
    KafkaError._TIMED_OUT,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError._TRANSPORT,
    KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    KafkaError._PURGE_INFLIGHT,
    KafkaError._FATAL,
}


# librdkafka's own log lines (connection refused, retries) go to this stdlib logger, which
# stays silent unless the application configures logging; errors reach callers as exceptions.
_librdkafka_log = logging.getLogger("little.librdkafka")
_librdkafka_log.addHandler(logging.NullHandler())
_librdkafka_log.propagate = False


def _client_config(bootstrap_servers: str, extra: Mapping[str, Any] | None) -> dict[str, Any]:
    """Connection settings shared by every client; SASL/SSL keys pass through unchanged."""
    return {"bootstrap.servers": bootstrap_servers, "logger": _librdkafka_log, **(extra or {})}


def connect_admin(
    bootstrap_servers: str, config: Mapping[str, Any] | None = None, *, timeout: float = 10.0
) -> AdminClient:
    """An AdminClient that has answered a metadata request, or ``BrokerUnavailableError``."""
    admin = AdminClient(_client_config(bootstrap_servers, config))
    try:
        admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise BrokerUnavailableError(
            f"no Kafka broker answered at {bootstrap_servers} within {timeout:.0f}s ({exc}). "
            "Start one with `deploy/local-kafka/kafka.sh start` or `docker compose up redpanda`."
        ) from exc
    return admin


def topic_partitions(admin: AdminClient, topic: str, *, timeout: float = 10.0) -> int:
    meta = admin.list_topics(topic=topic, timeout=timeout).topics.get(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        raise ConfigurationError(
            f"topic {topic} does not exist: create it with `little topics apply` "
            "(or kafka_world(..., provision=True))"
        )
    return len(meta.partitions)


class _RunIndex:
    """Lower bounds of each run's first offset, read from and written to the index topic.

    Every process that appends to a run it finds no entry for first writes one entry, the
    runs partition's high watermark fetched *before* its own first append, and waits for its
    ack. Entries are never compacted away and a reader takes the minimum over all entries of
    a run, so concurrent first writers cannot hide each other's records.
    """

    def __init__(self, config: dict[str, Any], topic: str, partitions: int) -> None:
        self.topic = topic
        self.partitions = partitions
        self._consumer = Consumer(
            {
                **config,
                "group.id": f"little-index-{uuid.uuid4()}",
                "enable.auto.commit": False,
                "enable.partition.eof": False,
                "isolation.level": "read_committed",
                # bounded reads, not tailing: a long-poll fetch in flight would delay the
                # next assign by up to its wait
                "fetch.wait.max.ms": 1,
            }
        )
        self._read_to: dict[int, int] = {}
        self._first: dict[str, int] = {}
        self._lock = threading.Lock()

    def lookup(self, run_id: str, timeout: float) -> int | None:
        partition = partition_for(run_id, self.partitions)
        with self._lock:
            self._catch_up(partition, timeout)
            return self._first.get(run_id)

    def note(self, run_id: str, offset: int) -> None:
        with self._lock:
            current = self._first.get(run_id)
            self._first[run_id] = offset if current is None else min(current, offset)

    def _catch_up(self, partition: int, timeout: float) -> None:
        tp = TopicPartition(self.topic, partition)
        _low, high = _watermarks(self._consumer, tp, timeout)
        start = self._read_to.get(partition, 0)
        if start >= high:
            return
        self._consumer.assign([TopicPartition(self.topic, partition, start)])
        try:
            for msg in _consume_until(self._consumer, start, high, timeout):
                key, value = msg.key(), msg.value()
                if key is not None and value is not None:
                    offset = int(json.loads(value)["offset"])
                    run = key.decode()
                    current = self._first.get(run)
                    self._first[run] = offset if current is None else min(current, offset)
        finally:
            # A consumer left assigned keeps a long-poll fetch in flight, and the next watermark
            # request queues behind it on the connection (measured: ~10 ms per lookup).
            self._consumer.unassign()
        self._read_to[partition] = high

    def close(self) -> None:
        self._consumer.close()


def _consume_until(consumer: Consumer, start: int, high: int, timeout: float) -> Iterator[Message]:
    """Messages of the one assigned partition from ``start`` to below offset ``high``.

    Asks for exactly the records left so ``consume`` returns as soon as they are here, and
    ends on the consumer's position, not on seeing offset ``high - 1``: that offset may be a
    transaction marker, which is never delivered.
    """
    next_offset = start
    idle = 0.0
    while next_offset < high:
        batch = consumer.consume(num_messages=min(1000, high - next_offset), timeout=0.5)
        if not batch:
            (tp,) = consumer.position(consumer.assignment())
            if tp.offset >= high:
                return
            idle += 0.5
            if idle > timeout:
                raise LogError(f"timed out reading up to offset {high} ({timeout:.0f}s idle)")
            continue
        idle = 0.0
        for msg in batch:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise LogError(f"read failed: {err}")
            offset = _int(msg.offset())
            if offset >= high:
                return
            yield msg
            next_offset = offset + 1


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
        self.timeout = timeout
        self._config = _client_config(bootstrap_servers, config)
        admin = connect_admin(bootstrap_servers, config)
        self.partitions = topic_partitions(admin, topic)
        self._admin = admin
        self._ack_spin = ACK_SPIN_SECONDS[producer_profile]
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
        self._reader = Consumer(
            {
                **self._config,
                "group.id": f"little-reader-{uuid.uuid4()}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                # bounded reads, not tailing: a long-poll fetch in flight would delay the
                # next assign by up to its wait
                "fetch.wait.max.ms": 1,
            }
        )
        self._reader_lock = threading.Lock()
        self._index = _RunIndex(self._config, index_topic, topic_partitions(admin, index_topic))
        self._index_topic = index_topic
        self._indexed: set[str] = set()
        self._closed = False

    # -- append ----------------------------------------------------------------------------

    def append(self, run_id: str, records: Sequence[OutgoingRecord]) -> list[Position]:
        if not records:
            return []
        partition = self.partition_for(run_id)
        if run_id not in self._indexed:
            self._ensure_indexed(run_id, partition)
        return produce_and_wait(
            self._producer,
            self.topic,
            partition,
            run_id,
            [(r.payload, r.headers) for r in records],
            self.timeout,
            self._ack_spin,
        )

    def _ensure_indexed(self, run_id: str, partition: int) -> None:
        if self._index.lookup(run_id, self.timeout) is None:
            with self._reader_lock:
                _low, high = _watermarks(
                    self._reader, TopicPartition(self.topic, partition), self.timeout
                )
            value = json.dumps({"topic": self.topic, "partition": partition, "offset": high})
            produce_and_wait(
                self._producer,
                self._index_topic,
                partition_for(run_id, self._index.partitions),
                run_id,
                [(value.encode(), [])],
                self.timeout,
                self._ack_spin,
            )
            self._index.note(run_id, high)
        self._indexed.add(run_id)

    # -- read ------------------------------------------------------------------------------

    def read_run(self, run_id: str, *, after: Position | None = None) -> Iterator[StoredRecord]:
        partition = self.partition_for(run_id)
        first = self.first_offset(run_id)
        if first is None:
            return iter(())
        start = first if after is None else max(first, after.offset + 1)
        return iter(self._read_range(partition, start, run_id))

    def _read_range(self, partition: int, start: int, run_id: str | None) -> list[StoredRecord]:
        tp = TopicPartition(self.topic, partition)
        with self._reader_lock:
            _low, high = _watermarks(self._reader, tp, self.timeout)
            if start >= high:
                return []
            self._reader.assign([TopicPartition(self.topic, partition, start)])
            try:
                return [
                    _stored(msg)
                    for msg in _consume_until(self._reader, start, high, self.timeout)
                    if run_id is None or msg.key() == run_id.encode()
                ]
            finally:
                self._reader.unassign()

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
        with self._reader_lock:
            while True:
                _low, high = _watermarks(self._reader, tp, self.timeout)
                if offset < high or time.monotonic() >= deadline:
                    break
                time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
            if offset >= high:
                return []
            self._reader.assign([TopicPartition(self.topic, partition, offset)])
            try:
                end = min(high, offset + limit)
                return [_stored(m) for m in _consume_until(self._reader, offset, end, self.timeout)]
            finally:
                self._reader.unassign()

    def end_offsets(self) -> dict[int, int]:
        return _list_offsets(self._admin, self.topic, self.partitions, _Spec.latest(), self.timeout)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._producer.flush(self.timeout)
        self._reader.close()
        self._index.close()


def produce_and_wait(
    producer: Producer,
    topic: str,
    partition: int,
    key: str,
    items: Sequence[tuple[bytes, Sequence[tuple[str, bytes]]]],
    timeout: float,
    spin: float,
) -> list[Position]:
    """Produce ``(payload, headers)`` records to one partition under one key and wait for
    every ack; returns their positions, in order.

    ``spin`` is how long to busy-poll for the delivery reports before blocking (0: flush the
    producer and block, see ACK_SPIN_SECONDS). Raises ``AppendOutcomeUnknownError`` when a
    record may or may not have landed (no report within ``timeout``, or a retriable error),
    ``LogError`` when it did not.
    """
    reports = _Deliveries(len(items))
    report = reports.report
    produce = producer.produce
    for payload, headers in items:
        while True:
            try:  # positional arguments, headers only when present: keyword arguments
                # cost more than the rest of the call (measured in bench/log_append.py)
                if headers:
                    produce(topic, payload, key, partition, report, headers=list(headers))
                else:
                    produce(topic, payload, key, partition, report)
                break
            except BufferError:
                producer.poll(0.1)
    _await_deliveries(producer, reports, timeout, spin)
    if reports.waiting:
        raise AppendOutcomeUnknownError(
            f"append of run {key} to {topic}: no delivery report within {timeout:.0f}s"
        )
    for err in reports.errors:
        if err.code() in _UNKNOWN_OUTCOME or err.retriable():
            raise AppendOutcomeUnknownError(
                f"append of run {key} to {topic}[{partition}] has an unknown outcome: {err}"
            )
        raise LogError(f"append of run {key} to {topic}[{partition}] failed: {err}")
    # One partition, one idempotent producer: the records landed in the order produced,
    # so the i-th smallest offset is the i-th record's.
    return [Position(partition, offset) for offset in sorted(reports.offsets)]


def _await_deliveries(
    producer: Producer, reports: _Deliveries, timeout: float, spin: float
) -> None:
    """Serve delivery reports until every one of this append's arrived (or the timeout).

    Other threads' appends may share the producer; each waits for its own reports only.
    """
    if not spin:
        producer.flush(timeout + 5)  # also ends any linger at once
        return
    now = time.perf_counter()
    spin_until = now + spin
    while reports.waiting > 0 and now < spin_until:
        producer.poll(0)
        now = time.perf_counter()
    deadline = now + timeout + 5
    while reports.waiting > 0 and now < deadline:
        producer.poll(min(0.05, deadline - now))
        now = time.perf_counter()


def _watermarks(consumer: Consumer, tp: TopicPartition, timeout: float) -> tuple[int, int]:
    """(low, high) offsets of a partition, asked of the broker (never a cached value)."""
    try:
        low, high = consumer.get_watermark_offsets(tp, timeout=timeout, cached=False)
    except KafkaException as exc:
        raise LogError(f"cannot read the offsets of {tp.topic}[{tp.partition}]: {exc}") from exc
    return int(low), int(high)


class _Deliveries:
    """The delivery reports of one append: ``report`` is its callback (a plain function: it
    runs once per record), ``offsets`` and ``errors`` what came back."""

    __slots__ = ("errors", "expected", "offsets", "report")

    def __init__(self, expected: int) -> None:
        self.expected = expected
        offsets: list[int] = []
        errors: list[KafkaError] = []
        self.offsets = offsets
        self.errors = errors

        def report(err: KafkaError | None, msg: Message) -> None:
            if err is None:
                offsets.append(_int(msg.offset()))
            else:
                errors.append(err)

        self.report = report

    @property
    def waiting(self) -> int:
        return self.expected - len(self.offsets) - len(self.errors)


def _int(value: int | None) -> int:
    if value is None:
        raise LogError("the broker returned a record without partition or offset")
    return value


def _stored(msg: Message) -> StoredRecord:
    key = msg.key()
    _ts_type, ts = msg.timestamp()
    headers = msg.headers() or []
    return StoredRecord(
        run_id=key.decode() if isinstance(key, bytes) else (key or ""),
        partition=_int(msg.partition()),
        offset=_int(msg.offset()),
        timestamp_ms=ts,
        payload=msg.value() or b"",
        headers=tuple(
            (k, v if isinstance(v, bytes) else (v or "").encode())
            for k, v in (headers.items() if isinstance(headers, dict) else headers)
        ),
    )


def _list_offsets(
    admin: AdminClient, topic: str, partitions: int, spec: OffsetSpec, timeout: float
) -> dict[int, int]:
    request = {TopicPartition(topic, p): spec for p in range(partitions)}
    futures = admin.list_offsets(request, request_timeout=timeout)
    return {tp.partition: int(f.result().offset) for tp, f in futures.items()}


class KafkaCursorStore(CursorStore):
    """Consumer-group offsets of one topic, through the Kafka admin API.

    ``commit`` and ``reset`` use ``alter_consumer_group_offsets``, which Kafka refuses while the
    group has live members (as ``kafka-consumer-groups --reset-offsets`` does): stop the group's
    consumers first. Live consumers commit through their own consumer.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        topic: str = RUNS_TOPIC,
        config: Mapping[str, Any] | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.topic = topic
        self.timeout = timeout
        self._admin = connect_admin(bootstrap_servers, config)
        self.partitions = topic_partitions(self._admin, topic)

    def commit(self, group: str, offsets: Mapping[int, int]) -> None:
        from confluent_kafka import ConsumerGroupTopicPartitions

        for p, o in offsets.items():
            if not 0 <= p < self.partitions:
                raise ConfigurationError(f"partition {p} does not exist in {self.topic}")
            if o < 0:
                raise ConfigurationError(f"cannot commit negative offset {o} for partition {p}")
        request = [
            ConsumerGroupTopicPartitions(
                group, [TopicPartition(self.topic, p, o) for p, o in offsets.items()]
            )
        ]
        try:
            for f in self._admin.alter_consumer_group_offsets(
                request, request_timeout=self.timeout
            ).values():
                f.result()
        except KafkaException as exc:
            raise LogError(f"cannot move offsets of group {group} on {self.topic}: {exc}") from exc

    def committed(self, group: str) -> dict[int, int]:
        from confluent_kafka import ConsumerGroupTopicPartitions

        request = [
            ConsumerGroupTopicPartitions(
                group, [TopicPartition(self.topic, p) for p in range(self.partitions)]
            )
        ]
        result = self._admin.list_consumer_group_offsets(request, request_timeout=self.timeout)
        out: dict[int, int] = {}
        for f in result.values():
            for tp in f.result().topic_partitions:
                if tp.topic == self.topic and tp.offset >= 0:
                    out[tp.partition] = int(tp.offset)
        return out

    def reset(self, group: str, to: ResetTo) -> dict[int, int]:
        if to.offsets is not None:
            target = dict(to.offsets)
        else:
            if to.earliest:
                spec = _Spec.earliest()
            elif to.latest:
                spec = _Spec.latest()
            else:
                assert to.timestamp is not None
                spec = _Spec.for_timestamp(int(to.timestamp.timestamp() * 1000))
            target = _list_offsets(self._admin, self.topic, self.partitions, spec, self.timeout)
            if to.timestamp is not None:  # no record at or after the time: the end
                ends = _list_offsets(
                    self._admin, self.topic, self.partitions, _Spec.latest(), self.timeout
                )
                target = {p: (o if o >= 0 else ends[p]) for p, o in target.items()}
        self.commit(group, target)
        return target

    def close(self) -> None:
        pass


class KafkaSnapshotStore(SnapshotStore):
    """Snapshots on the compacted ``little.snapshots.v1`` topic, keyed by run id.

    ``get`` scans the key's partition to its end and keeps the newest value: compaction bounds
    that to about one record per run of the partition.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        topic: str = SNAPSHOTS_TOPIC,
        config: Mapping[str, Any] | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.topic = topic
        self.timeout = timeout
        cfg = _client_config(bootstrap_servers, config)
        admin = connect_admin(bootstrap_servers, config)
        self.partitions = topic_partitions(admin, topic)
        self._producer = Producer(
            {**cfg, "enable.idempotence": True, "acks": "all", "linger.ms": 5}
        )
        self._consumer = Consumer(
            {
                **cfg,
                "group.id": f"little-snapshots-{uuid.uuid4()}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 1,
            }
        )
        self._lock = threading.Lock()

    def put(self, run_id: str, payload: bytes) -> None:
        partition = partition_for(run_id, self.partitions)
        produce_and_wait(
            self._producer, self.topic, partition, run_id, [(payload, ())], self.timeout, 0.0
        )

    def get(self, run_id: str) -> bytes | None:
        return self.scan(partition_for(run_id, self.partitions)).get(run_id)

    def scan(self, partition: int) -> dict[str, bytes]:
        """The newest snapshot bytes of every run in ``partition``, read to its end once (an
        empty value is a tombstone: the run has none)."""
        tp = TopicPartition(self.topic, partition)
        newest: dict[str, bytes] = {}
        with self._lock:
            low, high = _watermarks(self._consumer, tp, self.timeout)
            if high <= low:
                return newest
            self._consumer.assign([TopicPartition(self.topic, partition, low)])
            try:
                for msg in _consume_until(self._consumer, low, high, self.timeout):
                    key, value = msg.key(), msg.value()
                    if key is None:
                        continue
                    run_id = key.decode() if isinstance(key, bytes) else str(key)
                    if value:
                        newest[run_id] = value
                    else:
                        newest.pop(run_id, None)
            finally:
                self._consumer.unassign()
        return newest

    def close(self) -> None:
        self._producer.flush(self.timeout)
        self._consumer.close()
