"""The client kit of the Kafka backend: connections, bounded reads, produce-and-wait, the
delivery-error rules. What little's own Kafka clients outside the backend are built on (the
projector, the coordinator, commands; besides the backend's public classes in
``little.log.kafka``); everything here is blocking and runs off the loop.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from little.errors import (
    AppendOutcomeUnknownError,
    BrokerUnavailableError,
    ConfigurationError,
    KafkaAuthenticationError,
    LogError,
)
from little.log._records import Position, StoredRecord
from little.logging_setup import get_logger

__all__ = [
    "BROKERS_DOWN_LOG_EVERY",
    "LIBRDKAFKA_LOG",
    "SPEC",
    "UNKNOWN_OUTCOME",
    "BrokerWatch",
    "Readers",
    "client_config",
    "connect_admin",
    "consume_ranges",
    "consume_until",
    "delivery_error",
    "list_offsets",
    "produce_and_wait",
    "stored_record",
    "topic_partitions",
    "watermarks",
]

SPEC: Any = OffsetSpec  # its factory methods are untyped

# Delivery errors after which the record may or may not be in the log.
UNKNOWN_OUTCOME = {
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
LIBRDKAFKA_LOG = logging.getLogger("little.librdkafka")
LIBRDKAFKA_LOG.addHandler(logging.NullHandler())
LIBRDKAFKA_LOG.propagate = False


_logger = get_logger("little.log.kafka")

BROKERS_DOWN_LOG_EVERY = 60.0
"""Seconds between two ``kafka_brokers_down`` lines of one process for one bootstrap (one
line per outage; a long outage repeats it this often)."""


class BrokerWatch:
    """librdkafka's error callback for the clients of one bootstrap in this process.

    librdkafka retries by itself while brokers are down (producers until
    ``delivery.timeout.ms``); this turns its error stream into one ``kafka_brokers_down``
    warning per outage (``kafka_brokers_back`` when a write is acked again) and remembers a
    failed SASL authentication, which ``connect_admin`` reports at once instead of waiting
    for its timeout. Messages come from librdkafka and hold no credentials.

    A client reports its errors when it is next polled, so an idle one (a reader) may report
    an outage that is already over: for ``BROKERS_DOWN_LOG_EVERY`` after the brokers are back,
    a "down" report is taken for such a late one and not logged.
    """

    _all: ClassVar[dict[str, BrokerWatch]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, bootstrap_servers: str) -> None:
        self.bootstrap = bootstrap_servers
        self.down_since: float | None = None
        self._logged_at = -BROKERS_DOWN_LOG_EVERY
        self._back_at = -BROKERS_DOWN_LOG_EVERY
        self.auth_error: str | None = None

    @classmethod
    def of(cls, bootstrap_servers: str) -> BrokerWatch:
        with cls._lock:
            watch = cls._all.get(bootstrap_servers)
            if watch is None:
                watch = cls._all[bootstrap_servers] = cls(bootstrap_servers)
            return watch

    def __call__(self, err: KafkaError) -> None:
        code = err.code()
        if code == KafkaError._AUTHENTICATION:
            first = self.auth_error is None
            self.auth_error = err.str()
            if first:
                _logger.error(
                    "kafka_authentication_failed", bootstrap=self.bootstrap, error=err.str()
                )
        elif code == KafkaError._ALL_BROKERS_DOWN and self.auth_error is None:
            if err.str().startswith("0/"):
                return  # "0/2 brokers are down": the bootstrap entry retired, nothing is down
            now = time.monotonic()
            if self.down_since is None and now - self._back_at < BROKERS_DOWN_LOG_EVERY:
                return  # a late report of the outage that just ended
            if self.down_since is None:
                self.down_since = now
            if now - self._logged_at >= BROKERS_DOWN_LOG_EVERY:
                self._logged_at = now
                _logger.warning(
                    "kafka_brokers_down",
                    bootstrap=self.bootstrap,
                    error=err.str(),
                    effect="writers wait for their acks (librdkafka retries until "
                    "delivery.timeout.ms); no model or tool call starts meanwhile",
                )

    def up(self) -> None:
        """A write was acked: the outage, if one was logged, is over."""
        if self.down_since is not None:
            now = time.monotonic()
            down = now - self.down_since
            self.down_since = None
            self._logged_at = -BROKERS_DOWN_LOG_EVERY
            self._back_at = now
            _logger.info(
                "kafka_brokers_back", bootstrap=self.bootstrap, down_seconds=round(down, 1)
            )


def client_config(bootstrap_servers: str, extra: Mapping[str, Any] | None) -> dict[str, Any]:
    """Connection settings shared by every client: the security settings of
    ``KafkaClientSettings`` (``LITTLE_KAFKA_*``), then ``extra`` (SASL/SSL keys pass through
    unchanged), and the process's ``BrokerWatch`` for the bootstrap as the error callback."""
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    from little.log.kafka_settings import KafkaClientSettings

    try:
        security = KafkaClientSettings().librdkafka()
    except ValidationError as exc:  # said without the values, which may hold a password
        wrong = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ConfigurationError(f"LITTLE_KAFKA_* client settings: {wrong}") from None
    except SettingsError as exc:
        raise ConfigurationError(f"LITTLE_KAFKA_* client settings: {exc}") from None
    return {
        "bootstrap.servers": bootstrap_servers,
        "logger": LIBRDKAFKA_LOG,
        "error_cb": BrokerWatch.of(bootstrap_servers),
        **security,
        **(extra or {}),
    }


_CONNECT_SLICE = 0.5


def connect_admin(
    bootstrap_servers: str, config: Mapping[str, Any] | None = None, *, timeout: float = 10.0
) -> AdminClient:
    """An AdminClient that has answered a metadata request, or ``BrokerUnavailableError``
    after ``timeout``, or ``KafkaAuthenticationError`` as soon as the brokers refuse the
    credentials."""
    settings = client_config(bootstrap_servers, config)
    admin = AdminClient(settings)
    watch = settings["error_cb"]
    if isinstance(watch, BrokerWatch):
        watch.auth_error = None  # this attempt's credentials may be new
    deadline = time.monotonic() + timeout
    while True:
        try:
            admin.list_topics(timeout=min(_CONNECT_SLICE, max(0.01, deadline - time.monotonic())))
            return admin
        except KafkaException as exc:
            admin.poll(0)  # serves the error callback: an authentication failure shows there
            refused = getattr(watch, "auth_error", None)
            if refused is not None:
                raise KafkaAuthenticationError(
                    f"the Kafka brokers at {bootstrap_servers} refused the SASL credentials of "
                    f"user {settings.get('sasl.username')!r} (authentication failed: {refused}). "
                    "Check LITTLE_KAFKA_SASL_USERNAME / LITTLE_KAFKA_SASL_PASSWORD."
                ) from None
            if time.monotonic() >= deadline:
                raise BrokerUnavailableError(
                    f"no Kafka broker answered at {bootstrap_servers} within {timeout:.0f}s "
                    f"({exc}). Start one with `deploy/local-kafka/kafka.sh start` or "
                    "`docker compose up redpanda`."
                ) from exc


def topic_partitions(admin: AdminClient, topic: str, *, timeout: float = 10.0) -> int:
    meta = admin.list_topics(topic=topic, timeout=timeout).topics.get(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        raise ConfigurationError(
            f"topic {topic} does not exist: create it with `little topics apply` "
            "(or kafka_world(..., provision=True))"
        )
    return len(meta.partitions)


# How long one consume waits when fewer records than asked are here: the rest may be
# transaction markers, which are counted in the offsets but never delivered.
_SHORT_POLL = 0.05


def consume_until(consumer: Consumer, start: int, high: int, timeout: float) -> Iterator[Message]:
    """Messages of the one assigned partition from ``start`` to below offset ``high``."""
    (tp,) = consumer.assignment()
    return consume_ranges(consumer, {tp.partition: (start, high)}, timeout)


def consume_ranges(
    consumer: Consumer, ranges: Mapping[int, tuple[int, int]], timeout: float
) -> Iterator[Message]:
    """Messages of the assigned partitions, each from ``start`` to below offset ``high``
    (``ranges``: partition -> (start, high)), in each partition's order, all partitions read
    at once.

    Asks for exactly the records left, so ``consume`` returns as soon as they are here; after
    a short batch a partition ends on the consumer's position, not on seeing offset
    ``high - 1``: the offsets left may be transaction markers (a projector's snapshots end in
    one), which are never delivered. ``timeout`` bounds the time with nothing to read.
    """
    left = {p: (start, high) for p, (start, high) in ranges.items() if start < high}
    assigned = {tp.partition: tp.topic for tp in consumer.assignment()}
    paused: list[TopicPartition] = []

    def done(partition: int) -> None:
        del left[partition]
        if left and partition in assigned:  # stop fetching it; the others may still be read
            tp = TopicPartition(assigned[partition], partition)
            consumer.pause([tp])
            paused.append(tp)

    idle_since = time.monotonic()
    try:
        while left:
            want = min(1000, sum(high - nxt for nxt, high in left.values()))
            batch = consumer.consume(num_messages=want, timeout=_SHORT_POLL)
            if batch:
                idle_since = time.monotonic()
            for msg in batch:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise LogError(f"read failed: {err}")
                partition = _int(msg.partition())
                if partition not in left:
                    continue
                offset = _int(msg.offset())
                high = left[partition][1]
                if offset < high:
                    yield msg
                if offset + 1 >= high:
                    done(partition)
                else:
                    left[partition] = (offset + 1, high)
            if left and len(batch) < want:
                for tp in consumer.position(consumer.assignment()):
                    if tp.partition in left and tp.offset >= left[tp.partition][1]:
                        done(tp.partition)
                if left and not batch and time.monotonic() - idle_since > timeout:
                    ends = ", ".join(f"{p}:{h}" for p, (_, h) in sorted(left.items()))
                    raise LogError(f"timed out reading up to offsets {ends} ({timeout:.0f}s idle)")
    finally:
        if paused:
            consumer.resume(paused)


class Readers:
    """Consumers for bounded reads (a run, a slice of a partition), lent one per read.

    Reads are mostly waits for fetches, so many runs starting at once (a coordinator taking a
    burst of StartRuns, each read before and after its claim) read side by side instead of
    queueing behind one consumer. Made on first need, at most ``size``.
    """

    def __init__(self, config: dict[str, Any], size: int) -> None:
        self._config = config
        self._size = size
        self._made: list[Consumer] = []
        self._free: queue.SimpleQueue[Consumer] = queue.SimpleQueue()
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def one(self) -> Iterator[Consumer]:
        try:
            consumer = self._free.get_nowait()
        except queue.Empty:
            with self._lock:
                make = len(self._made) < self._size
                if make:
                    consumer = self._new()
                    self._made.append(consumer)
            if not make:
                consumer = self._free.get()
        try:
            yield consumer
        finally:
            self._free.put(consumer)

    def _new(self) -> Consumer:
        return Consumer(
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

    def close(self) -> None:
        with self._lock:
            for consumer in self._made:
                consumer.close()
            self._made.clear()


def delivery_error(
    topic: str, key: str, partition: int, errors: Sequence[KafkaError]
) -> LogError | None:
    """What the delivery errors of one append mean: an unknown outcome when a record may have
    landed (timeouts, retriable errors), a failure when none did."""
    for err in errors:
        if err.code() in UNKNOWN_OUTCOME or err.retriable():
            return AppendOutcomeUnknownError(
                f"append of run {key} to {topic}[{partition}] has an unknown outcome: {err}"
            )
    if errors:
        return LogError(f"append of run {key} to {topic}[{partition}] failed: {errors[0]}")
    return None


def produce_and_wait(
    producer: Producer,
    topic: str,
    partition: int,
    key: str,
    items: Sequence[tuple[bytes, Sequence[tuple[str, bytes]]]],
    timeout: float,
) -> list[Position]:
    """Produce ``(payload, headers)`` records to one partition under one key, flush, and
    return their positions in order (blocking: snapshots and commands, written off the loop).

    Raises ``AppendOutcomeUnknownError`` when a record may or may not have landed (no report
    within ``timeout``, or a retriable error), ``LogError`` when it did not (also when the
    producer refuses a record before sending it, e.g. one over ``message.max.bytes``).
    """
    reports = _Deliveries(len(items))
    report = reports.report
    produce = producer.produce
    for index, (payload, headers) in enumerate(items):
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
            except KafkaException as exc:  # refused unsent: too large, unknown partition
                refused = (
                    f"append of run {key} to {topic}[{partition}] was refused "
                    f"({len(payload)} bytes): {exc.args[0].str()}"
                )
                if index == 0:
                    raise LogError(refused) from exc
                producer.flush(timeout + 5)
                raise AppendOutcomeUnknownError(
                    f"{refused}; its first {index} of {len(items)} records may have landed"
                ) from exc
    producer.flush(timeout + 5)  # also ends any linger at once
    if reports.waiting:
        raise AppendOutcomeUnknownError(
            f"append of run {key} to {topic}: no delivery report within {timeout:.0f}s"
        )
    error = delivery_error(topic, key, partition, reports.errors)
    if error is not None:
        raise error
    # One partition, one idempotent producer: the records landed in the order produced,
    # so the i-th smallest offset is the i-th record's.
    return [Position(partition, offset) for offset in sorted(reports.offsets)]


def watermarks(consumer: Consumer, tp: TopicPartition, timeout: float) -> tuple[int, int]:
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


def stored_record(msg: Message) -> StoredRecord:
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


_SETTLING_LEADERSHIP = frozenset(
    {
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.REPLICA_NOT_AVAILABLE,
        KafkaError.OFFSET_NOT_AVAILABLE,
    }
)
"""Errors of a partition whose leadership is still settling (a broker just restarted, a
leader election under way): retriable in Kafka's protocol, though librdkafka's admin results
do not always say so."""


def list_offsets(
    admin: AdminClient, topic: str, partitions: int, spec: OffsetSpec, timeout: float
) -> dict[int, int]:
    """Each partition's offset by ``spec``. An error the broker calls retriable (a leader
    epoch still settling after a restart, a leader not yet elected) is asked again, with a
    short backoff, until ``timeout`` has passed; then, as any other error, it is raised."""
    request = {TopicPartition(topic, p): spec for p in range(partitions)}
    deadline = time.monotonic() + timeout
    backoff = 0.05
    while True:
        futures = admin.list_offsets(request, request_timeout=timeout)
        try:
            return {tp.partition: int(f.result().offset) for tp, f in futures.items()}
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            retriable = isinstance(err, KafkaError) and (
                err.retriable() or err.code() in _SETTLING_LEADERSHIP
            )
            if not retriable or time.monotonic() + backoff > deadline:
                raise
        time.sleep(backoff)  # synchronous by contract: callers run it off the loop
        backoff = min(backoff * 2, 1.0)
