"""Consumer-group cursors and snapshots on Kafka (blocking: tooling, worker threads)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from little.errors import ConfigurationError, LogError
from little.log._partitioner import partition_for
from little.log._port import CursorStore
from little.log._records import ResetTo
from little.log._topics import RUNS_TOPIC, SNAPSHOTS_TOPIC
from little.log.kafka.client import (
    SPEC,
    client_config,
    connect_admin,
    consume_ranges,
    list_offsets,
    produce_and_wait,
    topic_partitions,
    watermarks,
)
from little.snapshots import SnapshotStore


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
                spec = SPEC.earliest()
            elif to.latest:
                spec = SPEC.latest()
            else:
                assert to.timestamp is not None
                spec = SPEC.for_timestamp(int(to.timestamp.timestamp() * 1000))
            target = list_offsets(self._admin, self.topic, self.partitions, spec, self.timeout)
            if to.timestamp is not None:  # no record at or after the time: the end
                ends = list_offsets(
                    self._admin, self.topic, self.partitions, SPEC.latest(), self.timeout
                )
                target = {p: (o if o >= 0 else ends[p]) for p, o in target.items()}
        self.commit(group, target)
        return target

    def close(self) -> None:
        pass


class KafkaSnapshotStore(SnapshotStore):
    """Snapshots on the compacted ``little.snapshots.v1`` topic, keyed by run id.

    ``get`` scans the key's partition to its end and keeps the newest value: compaction bounds
    that to about one record per run of the partition. A snapshot is one record, so it must fit
    the producer's ``message.max.bytes`` (librdkafka's default: 1,000,000 bytes with the key) and
    the topic's ``max.message.bytes``; ``put`` refuses a bigger one with a ``LogError`` naming
    the run, and the run's previous snapshot stays.
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
        cfg = client_config(bootstrap_servers, config)
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
            self._producer, self.topic, partition, run_id, [(payload, ())], self.timeout
        )

    def get(self, run_id: str) -> bytes | None:
        return self.scan(partition_for(run_id, self.partitions)).get(run_id)

    def scan(self, partition: int) -> dict[str, bytes]:
        """The newest snapshot bytes of every run in ``partition``, read to its end once (a
        null value is a tombstone: the run has none; an empty one is an empty snapshot)."""
        return self.scan_partitions([partition])[partition]

    def scan_partitions(self, partitions: Sequence[int]) -> dict[int, dict[str, bytes]]:
        """``scan`` of several partitions, read at once (a coordinator taking over many)."""
        newest: dict[int, dict[str, bytes]] = {p: {} for p in partitions}
        with self._lock:
            ranges = {}
            for p in partitions:
                low, high = watermarks(self._consumer, TopicPartition(self.topic, p), self.timeout)
                if high > low:
                    ranges[p] = (low, high)
            if not ranges:
                return newest
            self._consumer.assign(
                [TopicPartition(self.topic, p, low) for p, (low, _) in ranges.items()]
            )
            try:
                for msg in consume_ranges(self._consumer, ranges, self.timeout):
                    key, value, partition = msg.key(), msg.value(), msg.partition()
                    if key is None or partition is None:
                        continue
                    run_id = key.decode() if isinstance(key, bytes) else str(key)
                    runs = newest[partition]
                    if value is not None:
                        runs[run_id] = value
                    else:
                        runs.pop(run_id, None)
            finally:
                self._consumer.unassign()
        return newest

    def close(self) -> None:
        self._producer.flush(self.timeout)
        self._consumer.close()
