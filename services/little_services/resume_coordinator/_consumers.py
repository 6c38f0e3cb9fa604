"""The coordinator's two Kafka consumers, each polled by its own thread.

* ``CommandConsumer``: the group member on the commands topic. Its rebalance callbacks run on
  its thread and wait for the event loop: a revoked partition is given up only after the runs
  it owns stopped at an event boundary and its settled command offsets are committed.
* ``RunsTail``: follows the runs topic partitions the coordinator owns, from the end they had
  when assigned, reading headers, so leases see every run's progress and foreign claims
  without decoding; only the calls' events are handed over whole, for the call metrics.

Neither touches coordinator state: everything is handed to the event loop.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

import structlog
from confluent_kafka import (
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from little.log.kafka.client import client_config
from little_services.resume_coordinator._core import RunEvent

log = structlog.get_logger("little.coordinator")


class CommandConsumer:
    """Polls the commands topic in the coordinator's consumer group on a dedicated thread."""

    def __init__(
        self,
        *,
        bootstrap: str,
        topic: str,
        group: str,
        client_id: str,
        session_timeout_ms: int,
        heartbeat_interval_ms: int,
        loop: asyncio.AbstractEventLoop,
        on_command: Callable[[int, int, bytes | None, bytes | None, Any], None],
        on_assigned: Callable[[list[int], dict[int, int]], None],
        on_revoked: Callable[[list[int], bool], Coroutine[Any, Any, dict[int, int]]],
        callback_timeout: float,
        runs_topic: str | None = None,
    ) -> None:
        self.topic = topic
        self.runs_topic = runs_topic
        self._loop = loop
        self._on_command = on_command
        self._on_assigned = on_assigned
        self._on_revoked = on_revoked
        self._callback_timeout = callback_timeout
        self._consumer = Consumer(
            {
                **client_config(bootstrap, None),
                "group.id": group,
                "client.id": client_id,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "partition.assignment.strategy": "cooperative-sticky",
                "session.timeout.ms": session_timeout_ms,
                "heartbeat.interval.ms": heartbeat_interval_ms,
                "isolation.level": "read_committed",
            }
        )
        self._commits: queue.SimpleQueue[tuple[int, int]] = queue.SimpleQueue()
        self._closing = threading.Event()
        self.closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="commands-consumer", daemon=True)

    def start(self) -> None:
        self._consumer.subscribe(
            [self.topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._lost
        )
        self._thread.start()

    def commit(self, partition: int, offset: int) -> None:
        """Ask the consumer thread to commit ``offset`` (the next command to read) for ``partition``."""
        self._commits.put((partition, offset))

    def close(self) -> None:
        """Leave the group (revoking every partition through the callbacks) and stop the thread."""
        self._closing.set()

    def alive(self) -> bool:
        return self._thread.is_alive()

    # -- the consumer thread ---------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._closing.is_set():
                msg = self._consumer.poll(0.1)
                self._drain_commits()
                if msg is None:
                    continue
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        log.warning("commands_consumer_error", error=str(err))
                    continue
                partition, offset = msg.partition(), msg.offset()
                if partition is None or offset is None:
                    continue
                self._loop.call_soon_threadsafe(
                    self._on_command,
                    partition,
                    offset,
                    msg.value(),
                    msg.key(),
                    msg.headers() or [],
                )
            self._drain_commits()
            self._consumer.close()  # leaves the group: on_revoke stops the runs and commits
        except Exception as exc:
            log.error("commands_consumer_crashed", error=f"{type(exc).__name__}: {exc}")
        finally:
            self.closed.set()

    def _drain_commits(self) -> None:
        latest: dict[int, int] = {}
        while True:
            try:
                partition, offset = self._commits.get_nowait()
            except queue.Empty:
                break
            latest[partition] = max(offset, latest.get(partition, -1))
        self._commit(latest, sync=False)

    def _commit(self, offsets: dict[int, int], *, sync: bool) -> None:
        if not offsets:
            return
        tps = [TopicPartition(self.topic, p, o) for p, o in offsets.items()]
        try:
            if sync:
                self._consumer.commit(offsets=tps, asynchronous=False)
            else:
                self._consumer.commit(offsets=tps, asynchronous=True)
        except KafkaException as exc:
            log.warning("commit_failed", offsets=offsets, error=str(exc))

    def _call(self, coro: Coroutine[Any, Any, dict[int, int]]) -> dict[int, int]:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(timeout=self._callback_timeout)

    def _assigned(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        mine = sorted(tp.partition for tp in partitions)
        log.info("partitions_assigned", partitions=mine)
        self._start_new_partitions_at_end(partitions)
        ends = self._runs_ends(mine)
        # Not waited for; queued on the loop before any command fetched after the assignment.
        self._loop.call_soon_threadsafe(self._on_assigned, mine, ends)

    def _runs_ends(self, partitions: list[int]) -> dict[int, int]:
        """The runs topic's end offsets of these partitions now, before any command of theirs
        is fetched: where the tail starts, so it sees every event their runs write here."""
        ends: dict[int, int] = {}
        if self.runs_topic is None:
            return ends
        for p in partitions:
            try:
                _, high = self._consumer.get_watermark_offsets(
                    TopicPartition(self.runs_topic, p), timeout=10, cached=False
                )
                ends[p] = int(high)
            except KafkaException as exc:
                log.warning("runs_end_unknown", partition=p, error=str(exc))
        return ends

    def _start_new_partitions_at_end(self, partitions: list[TopicPartition]) -> None:
        """A partition the group never committed starts at its end, not at the first retained
        command (a new group, or topics renamed, would otherwise replay a week of commands),
        and that start is committed at once: a member that dies before settling anything
        leaves the next one reading from there, so no command is skipped."""
        try:
            committed = self._consumer.committed(
                [TopicPartition(self.topic, tp.partition) for tp in partitions], timeout=10
            )
            starts = []
            for tp in committed:
                if tp.offset < 0:
                    _, high = self._consumer.get_watermark_offsets(
                        TopicPartition(self.topic, tp.partition), timeout=10, cached=False
                    )
                    starts.append(TopicPartition(self.topic, tp.partition, high))
            if starts:
                self._consumer.commit(offsets=starts, asynchronous=False)
                log.info(
                    "commands_start_at_end",
                    offsets={tp.partition: tp.offset for tp in starts},
                    reason="the group had no committed offset for these partitions",
                )
        except KafkaException as exc:  # then they start at the earliest retained command
            log.warning("commands_start_unknown", error=str(exc))

    def _revoked(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._give_up(partitions, lost=False)

    def _lost(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._give_up(partitions, lost=True)

    def _give_up(self, partitions: list[TopicPartition], *, lost: bool) -> None:
        mine = sorted(tp.partition for tp in partitions)
        if not mine:
            return
        log.info("partitions_revoked", partitions=mine, lost=lost)
        try:
            offsets = self._call(self._on_revoked(mine, lost))
        except Exception as exc:
            log.error("revocation_failed", partitions=mine, error=f"{type(exc).__name__}: {exc}")
            return
        if not lost:
            self._drain_commits()
            self._commit(offsets, sync=True)


class RunsTail:
    """Follows owned partitions of the runs topic from their end; hands headers to the loop."""

    def __init__(
        self,
        *,
        bootstrap: str,
        topic: str,
        loop: asyncio.AbstractEventLoop,
        on_events: Callable[[list[RunEvent]], None],
        on_record: Callable[[str, bytes], None] | None = None,
    ) -> None:
        self.topic = topic
        self._loop = loop
        self._on_events = on_events
        self._on_record = on_record
        """Called on this thread with (type, value) of the calls' events (for metrics)."""
        self._consumer = Consumer(
            {
                **client_config(bootstrap, None),
                "group.id": f"little-coordinator-tail-{uuid.uuid4()}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 100,
            }
        )
        self._changes: queue.SimpleQueue[tuple[str, list[int], dict[int, int]]] = (
            queue.SimpleQueue()
        )
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name="runs-tail", daemon=True)
        self.positioned: frozenset[int] = frozenset()
        """Partitions the tail follows from a known offset (replaced whole, read anywhere)."""

    def start(self) -> None:
        self._thread.start()

    def add(self, partitions: list[int], ends: dict[int, int] | None = None) -> None:
        """Follow ``partitions`` from ``ends`` (read at the assignment), else from their end
        when the tail gets to them."""
        self._changes.put(("add", partitions, dict(ends or {})))

    def remove(self, partitions: list[int]) -> None:
        self._changes.put(("remove", partitions, {}))

    def close(self) -> None:
        self._closing.set()
        self._thread.join(timeout=5)

    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            while not self._closing.is_set():
                self._apply_changes()
                if not self._consumer.assignment():
                    self._closing.wait(0.05)
                    continue
                batch = self._consumer.consume(num_messages=1000, timeout=0.1)
                events = [e for e in map(_run_event, batch) if e is not None]
                if self._on_record is not None:
                    try:
                        self._records(batch)
                    except Exception as exc:  # metrics must never stop the leases' tail
                        log.warning("call_metrics_failed", error=f"{type(exc).__name__}: {exc}")
                if events:
                    self._loop.call_soon_threadsafe(self._on_events, events)
        except Exception as exc:
            log.error("runs_tail_crashed", error=f"{type(exc).__name__}: {exc}")
        finally:
            self._consumer.close()

    def _records(self, batch: list[Message]) -> None:
        assert self._on_record is not None
        for msg in batch:
            if msg.error() is not None:
                continue
            kind = dict(msg.headers() or []).get("little.type")
            if kind is None:
                continue
            kind = _text(kind)
            if kind in CALL_TYPES:
                value = msg.value()
                if isinstance(value, bytes):
                    self._on_record(kind, value)

    def _apply_changes(self) -> None:
        while True:
            try:
                kind, partitions, ends = self._changes.get_nowait()
            except queue.Empty:
                return
            if kind == "add":
                self._consumer.incremental_assign(
                    [TopicPartition(self.topic, p, ends.get(p, self._end(p))) for p in partitions]
                )
                self.positioned = self.positioned | frozenset(partitions)
            else:
                self.positioned = self.positioned - frozenset(partitions)
                current = {tp.partition for tp in self._consumer.assignment()}
                gone = [TopicPartition(self.topic, p) for p in partitions if p in current]
                if gone:
                    self._consumer.incremental_unassign(gone)

    def _end(self, partition: int) -> int:
        """The partition's end now (not when the first fetch resolves OFFSET_END, which can be
        after the runs of a new assignment wrote their first events)."""
        try:
            _, high = self._consumer.get_watermark_offsets(
                TopicPartition(self.topic, partition), timeout=10, cached=False
            )
            return int(high)
        except KafkaException as exc:
            log.warning("runs_tail_end_unknown", partition=partition, error=str(exc))
            return OFFSET_END


CALL_TYPES = frozenset(
    {"harness.model.called", "harness.model.responded", "harness.tool_call.started"}
)


def _run_event(msg: Message) -> RunEvent | None:
    if msg.error() is not None:
        return None
    headers = dict(msg.headers() or [])
    run_id, kind, epoch = (
        headers.get("little.run_id"),
        headers.get("little.type"),
        headers.get("little.epoch"),
    )
    partition = msg.partition()
    if run_id is None or kind is None or partition is None:
        return None
    return partition, _text(run_id), _text(kind), int(_text(epoch or b"0"))


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
