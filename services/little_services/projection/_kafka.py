"""The projector on Kafka: a consumer group, and one transactional producer per partition.

For each batch: fold, write the store (durable), then per input partition one transaction
holding that partition's snapshots, its dead letters and its consumer offset
(``send_offsets_to_transaction``). A crash never leaves a snapshot or a dead letter visible
(read_committed) without the offset that covers it, nor the reverse. The transactional id
is derived from group, topic and partition (``<group>.<topic>.<partition>``, never changed):
the instance that gets a partition initialises it, which fences a zombie still holding the
partition and aborts the transaction it left open (DESIGN §4, "as faust does").
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import structlog
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from little import World
from little.errors import LogError
from little.log import StoredRecord, partition_for
from little.log.kafka import client as kafka_client
from little.log.kafka.client import connect_admin, stored_record, topic_partitions, watermarks
from little_services.projection._core import PartitionBatch, ProjectionConfig, ProjectionCore
from little_services.projection._driver import (
    Projector,
    ProjectorFencedError,
    ProjectorListener,
    ProjectorStalledError,
    ProjectorStatus,
    ProjectorTotals,
)
from little_services.projection._store import ProjectionStore

log = structlog.get_logger("little_services.projection.kafka")

_FENCED = {KafkaError.PRODUCER_FENCED, KafkaError._FENCED, KafkaError.INVALID_PRODUCER_EPOCH}

# Fault injection for crash tests: SIGKILL this process inside its n-th transaction, after the
# store write and after the snapshots, dead letters and offsets were sent, before the commit.
# Unset in normal use; read once at import.
_CRASH_IN_TRANSACTION = int(os.environ.get("LITTLE_PROJECTOR_CRASH_IN_TRANSACTION") or 0)


_ERROR_POLL_SECONDS = 0.5
"""How often the loop, while it waits for transactions, serves the producers' error callbacks."""


def transactional_id(config: ProjectionConfig, partition: int) -> str:
    """The transactional id of one input partition. Derived, documented, never changed."""
    return f"{config.group}.{config.topic}.{partition}"


class KafkaProjector(Projector):
    """Consumes ``config.topic`` in group ``config.group`` and folds it into ``store``.

    ``instance_id`` sets ``group.instance.id`` (static membership): a restarted instance takes
    its partitions back at once instead of waiting for the dead member's session to expire.
    ``heartbeat_interval_ms`` bounds how long a member keeps consuming before it notices a
    rebalance (librdkafka's default is 3 s; a rebuild's workers use less).
    """

    def __init__(
        self,
        world: World,
        store: ProjectionStore,
        config: ProjectionConfig,
        *,
        bootstrap_servers: str,
        client_config: Mapping[str, Any] | None = None,
        listener: ProjectorListener | None = None,
        instance_id: str | None = None,
        session_timeout_ms: int | None = None,
        heartbeat_interval_ms: int | None = None,
        timeout: float = 30.0,
    ) -> None:
        super().__init__(ProjectionCore(world, store, config), listener)
        self.config = config
        self.timeout = timeout
        self._client = kafka_client.client_config(bootstrap_servers, client_config)
        admin = connect_admin(bootstrap_servers, client_config)
        topic_partitions(admin, config.topic)
        self._snapshot_partitions = topic_partitions(admin, config.snapshots_topic)
        self._dlq_partitions = topic_partitions(admin, config.dlq_topic)
        consumer_config: dict[str, Any] = {
            **self._client,
            "group.id": config.group,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            "fetch.wait.max.ms": 100,
        }
        if instance_id:
            consumer_config["group.instance.id"] = instance_id
        if session_timeout_ms:
            consumer_config["session.timeout.ms"] = session_timeout_ms
        if heartbeat_interval_ms:
            consumer_config["heartbeat.interval.ms"] = heartbeat_interval_ms
        self._consumer = Consumer(consumer_config)
        self._producers: dict[int, Producer] = {}
        self._targets: dict[int, int] = {}
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="projector-txn")
        self._stalled = False
        """A transaction's thread is stuck in librdkafka (``ProjectorStalledError``): closing
        must not wait for it, and the process must end with os._exit (its exit would)."""
        self._caught_up = False
        self._closed = False
        self._stop = threading.Event()
        self._transactions = itertools.count(1)
        self._pending: list[tuple[PartitionBatch, Future[bool], float]] = []
        self._totals = ProjectorTotals()

    # -- rebalances --------------------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        ps = sorted(tp.partition for tp in partitions)
        if self._stop.is_set():
            # Stopping: take nothing (a producer per partition would only delay the exit);
            # the group gives them to a member that stays once this one has left. Happens
            # when other members leave first, as a rebuild's workers do at the end.
            consumer.assign([])
            log.info("partitions_declined_when_stopping", partitions=ps)
            return
        # Producers first: initialising a partition's transactional id fences a zombie and
        # aborts its open transaction, whose pending offset commit would otherwise hold up the
        # committed-offset fetch below until the transaction timed out.
        for p, producer in zip(ps, self._pool.map(self._new_producer, ps), strict=True):
            self._producers[p] = producer
        committed = consumer.committed(
            [TopicPartition(self.config.topic, p) for p in ps], timeout=self.timeout
        )
        starts: list[TopicPartition] = []
        for tp in committed:
            low, high = watermarks(
                consumer, TopicPartition(self.config.topic, tp.partition), self.timeout
            )
            offset = tp.offset if tp.offset is not None and tp.offset >= 0 else None
            start = self.core.open_partition(tp.partition, offset, earliest=low)
            self._targets[tp.partition] = high
            starts.append(TopicPartition(self.config.topic, tp.partition, start))
        consumer.assign(starts)
        self._caught_up = False
        log.info(
            "partitions_assigned", partitions=ps, starts={t.partition: t.offset for t in starts}
        )
        self._update_status()
        self.listener.assigned(ps)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        ps = sorted(tp.partition for tp in partitions)
        self._land_commits()  # the transactions of revoked partitions finish first
        for p in ps:
            self.core.close_partition(p)
            self._targets.pop(p, None)
            self._drop_producer(p)
        with contextlib.suppress(KafkaException):  # closing, or the assignment is gone
            consumer.unassign()
        log.info("partitions_revoked", partitions=ps)
        self._update_status()
        self.listener.revoked(ps)

    def _drop_producer(self, partition: int) -> None:
        producer = self._producers.pop(partition, None)
        if producer is None:
            return
        try:
            producer.flush(self.timeout)  # no transaction is open between batches
        except KafkaException as exc:  # fenced or failed: nothing of it may land anyway
            log.info("producer_dropped", partition=partition, error=str(exc))

    def _new_producer(self, partition: int) -> Producer:
        producer = Producer(
            {
                **self._client,
                "transactional.id": transactional_id(self.config, partition),
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "compression.type": "lz4",
            }
        )
        try:
            producer.init_transactions(self.timeout)
        except KafkaException as exc:
            raise LogError(
                f"cannot initialise transactions for partition {partition}: {exc}"
            ) from exc
        return producer

    # -- the loop ----------------------------------------------------------------------------

    def run(
        self, stop: threading.Event | None = None, *, until_caught_up: bool = False
    ) -> ProjectorTotals:
        self._stop = stop = stop or threading.Event()
        self._totals = totals = ProjectorTotals()
        self._consumer.subscribe(
            [self.config.topic],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_revoke,
        )
        try:
            while not stop.is_set():
                messages = self._consumer.consume(self.config.batch_size, timeout=0.2)
                if messages:
                    self._process(messages)
                else:
                    self._land_commits()
                self._after_poll(bool(messages))
                if until_caught_up and self._caught_up:
                    break
        finally:
            self._land_commits()
        return totals

    def _process(self, messages: list[Message]) -> None:
        """Fold a batch while the previous batch's transactions commit, then store it and
        start its own transactions. A partition's next store write waits for its commit."""
        began = time.perf_counter()
        open_partitions = self.core.positions()
        by_partition: dict[int, list[StoredRecord]] = {}
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.fatal():
                    raise LogError(f"consumer failed: {err}")
                log.warning("consume_error", error=str(err))
                continue
            p = msg.partition()
            if p is None or p not in open_partitions:
                continue  # revoked while this message was in flight
            by_partition.setdefault(p, []).append(_record(msg))
        headers = _HeadersOf(messages)
        batches = [self.core.fold(p, recs, headers) for p, recs in sorted(by_partition.items())]
        aborted = self._land_commits()
        # A batch folded after an aborted transaction of its partition is dropped: the
        # partition is consumed again from the aborted batch's start.
        batches = [b for b in batches if b.partition not in aborted]
        if not batches:
            return
        self.core.persist(batches)
        metadata = self._consumer.consumer_group_metadata()
        self._pending = [(b, self._pool.submit(self._commit, b, metadata), began) for b in batches]

    def _land_commits(self) -> set[int]:
        """Wait for the transactions in flight; returns the partitions whose one aborted."""
        pending, self._pending = self._pending, []
        if not pending:
            return set()
        # A transaction's calls each wait at most self.timeout (commit: three tries); past
        # the stall bound (150 s by default: five of those) it is stuck in librdkafka
        # (ProjectorStalledError), not slow.
        bound = self.config.stall_seconds
        results = []
        for b, future, began in pending:
            try:
                results.append((b, self._wait_serving_errors(future, bound), began))
            except FutureTimeout:
                self._stalled = True
                raise ProjectorStalledError(
                    f"partition {b.partition}: its transaction did not finish within "
                    f"{bound:.0f}s (librdkafka's send_offsets_to_transaction can hang after "
                    "the group coordinator broker restarted: confluentinc/librdkafka#5456); "
                    "restart the projector, it resumes from the committed offsets"
                ) from None
        self.core.settle([b for b, ok, _ in results if ok])
        aborted: set[int] = set()
        now = time.perf_counter()
        for batch, ok, began in results:
            if ok:
                self._totals.add(batch)
                self.listener.committed(batch, now - began)
            elif batch.partition in self._producers:
                # The transaction was aborted: consume the batch again. The store already
                # holds it, so its snapshots and dead letters are produced again.
                aborted.add(batch.partition)
                self.core.seek(batch.partition, batch.start)
                self._consumer.seek(TopicPartition(self.config.topic, batch.partition, batch.start))
        return aborted

    def _wait_serving_errors(self, future: Future[bool], bound: float) -> bool:
        """``future``'s result, waited in slices for at most ``bound`` seconds; between slices the
        producers' error callbacks are served (``poll(0)``, thread-safe). The consumer is not
        polled while its loop waits here, so without this a broker lost mid-transaction would
        be reported only when the transactions give up (``kafka_brokers_down`` late or never)."""
        deadline = time.monotonic() + bound
        while True:
            left = max(0.0, deadline - time.monotonic())
            try:
                return future.result(timeout=min(_ERROR_POLL_SECONDS, left))
            except FutureTimeout:
                if time.monotonic() >= deadline:
                    raise
            for producer in list(self._producers.values()):
                producer.poll(0)

    def _commit(self, batch: PartitionBatch, metadata: Any) -> bool:
        """One transaction: the batch's snapshots, dead letters and offset. False if aborted."""
        producer = self._producers.get(batch.partition)
        if producer is None:
            return False
        try:
            producer.begin_transaction()
            for run_id, payload in batch.snapshots:
                self._produce(
                    producer,
                    self.config.snapshots_topic,
                    run_id,
                    payload,
                    None,
                    partition_for(run_id, self._snapshot_partitions),
                )
            for dl in batch.dead_letters:
                target = (
                    partition_for(dl.run_id, self._dlq_partitions)
                    if dl.run_id
                    else dl.partition % self._dlq_partitions
                )
                self._produce(
                    producer, self.config.dlq_topic, dl.run_id, dl.payload, dl.headers, target
                )
            producer.send_offsets_to_transaction(
                [TopicPartition(self.config.topic, batch.partition, batch.end)],
                metadata,
                self.timeout,
            )
            if next(self._transactions) == _CRASH_IN_TRANSACTION:
                os.kill(os.getpid(), signal.SIGKILL)
            for _retry in range(2):
                try:
                    producer.commit_transaction(self.timeout)
                    return True
                except KafkaException as exc:
                    if not exc.args[0].retriable():
                        raise
            producer.commit_transaction(self.timeout)  # the third and last attempt
            return True
        except KafkaException as exc:
            err: KafkaError = exc.args[0]
            if err.code() in _FENCED or err.fatal():
                raise ProjectorFencedError(
                    f"partition {batch.partition}: transactional id "
                    f"{transactional_id(self.config, batch.partition)} was fenced ({err}); "
                    "another projector owns it now"
                ) from exc
            if err.txn_requires_abort():
                log.warning("transaction_aborted", partition=batch.partition, error=str(err))
                producer.abort_transaction(self.timeout)
                return False
            raise LogError(f"commit of partition {batch.partition} failed: {err}") from exc

    @staticmethod
    def _produce(
        producer: Producer,
        topic: str,
        key: str | None,
        value: bytes,
        headers: Sequence[tuple[str, bytes]] | None,
        partition: int,
    ) -> None:
        while True:
            try:
                producer.produce(
                    topic,
                    value=value,
                    key=key,
                    partition=partition,
                    headers=list(headers) if headers else None,
                )
                return
            except BufferError:
                producer.poll(0.05)

    def _after_poll(self, consumed: bool) -> None:
        positions = self.core.positions()
        if not consumed and positions:
            # Positions past transaction markers (if any writer used transactions) count too.
            for tp in self._consumer.position(
                [TopicPartition(self.config.topic, p) for p in positions]
            ):
                if tp.offset is not None and tp.offset > positions.get(tp.partition, 0):
                    positions[tp.partition] = tp.offset
        if (
            not self._caught_up
            and positions
            and all(positions[p] >= self._targets.get(p, 0) for p in positions)
        ):
            self._caught_up = True
            log.info("projection_caught_up", positions=positions)
            self.listener.caught_up()
        self._update_status(positions)

    def _update_status(self, positions: dict[int, int] | None = None) -> None:
        positions = positions if positions is not None else self.core.positions()
        lag: dict[int, int] = {}
        for p, position in positions.items():
            _low, high = self._consumer.get_watermark_offsets(
                TopicPartition(self.config.topic, p), cached=True
            )
            if high is not None and high >= 0:
                lag[p] = max(0, int(high) - position)
        if lag:
            self.listener.lag(lag)
        self._status = ProjectorStatus(
            assigned=tuple(sorted(positions)),
            positions=positions,
            lag=lag,
            caught_up=self._caught_up,
            consuming=bool(positions),
        )

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._consumer.close()  # revokes: producers are flushed and dropped
        finally:
            for p in list(self._producers):
                self._drop_producer(p)
            self._pool.shutdown(wait=not self._stalled)
            self._status = ProjectorStatus(caught_up=self._caught_up)


def _record(msg: Message) -> StoredRecord:
    """A consumed message as the port's record, without its headers: this runs for every
    record, and headers are read only to dead-letter one (``_HeadersOf``)."""
    key = msg.key()
    return StoredRecord(
        key.decode() if key else "",
        msg.partition() or 0,
        msg.offset() or 0,
        msg.timestamp()[1],
        msg.value() or b"",
    )


class _HeadersOf:
    """The headers of a batch's records, looked up in its messages on first need."""

    def __init__(self, messages: list[Message]) -> None:
        self._messages = messages
        self._index: dict[tuple[int, int], Message] | None = None

    def __call__(self, rec: StoredRecord) -> tuple[tuple[str, bytes], ...]:
        if self._index is None:
            self._index = {
                (m.partition() or 0, m.offset() or 0): m
                for m in self._messages
                if m.error() is None
            }
        msg = self._index.get((rec.partition, rec.offset))
        return () if msg is None else stored_record(msg).headers
