"""The EventLog port and its backends: Kafka (confluent-kafka) and embedded (sqlite)."""

from little.log._embedded import EmbeddedCursorStore, EmbeddedEventLog, EmbeddedSnapshotStore
from little.log._partitioner import murmur2, partition_for
from little.log._pending import PendingAppend
from little.log._port import CursorStore, EventLog
from little.log._records import Header, OutgoingRecord, Position, ResetTo, StoredRecord
from little.log._topics import (
    COMMANDS_TOPIC,
    DLQ_TOPIC,
    RUN_INDEX_TOPIC,
    RUNS_TOPIC,
    SNAPSHOTS_TOPIC,
    TopicNames,
    TopicSpec,
    load_topic_specs,
)

__all__ = [
    "COMMANDS_TOPIC",
    "DLQ_TOPIC",
    "RUNS_TOPIC",
    "RUN_INDEX_TOPIC",
    "SNAPSHOTS_TOPIC",
    "CursorStore",
    "EmbeddedCursorStore",
    "EmbeddedEventLog",
    "EmbeddedSnapshotStore",
    "EventLog",
    "Header",
    "OutgoingRecord",
    "PendingAppend",
    "Position",
    "ResetTo",
    "StoredRecord",
    "TopicNames",
    "TopicSpec",
    "load_topic_specs",
    "murmur2",
    "partition_for",
]
