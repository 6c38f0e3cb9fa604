"""The Kafka backend of the EventLog port, on confluent-kafka (librdkafka); imported only by
``kafka_world`` and what runs on Kafka, never by ``import little``.

``client`` is the kit the rest of little uses for its own Kafka clients (the projector, the
coordinator, commands); ``_log`` is the event log, ``_index`` the run index it reads through,
``_stores`` the cursor and snapshot stores, ``_provision`` topic creation and drift.
"""

from little.log.kafka._log import PRODUCER_PROFILES, KafkaEventLog
from little.log.kafka._provision import TopicReport, apply_topics, require_no_drift
from little.log.kafka._stores import KafkaCursorStore, KafkaSnapshotStore
from little.log.kafka.client import connect_admin, topic_partitions

__all__ = [
    "PRODUCER_PROFILES",
    "KafkaCursorStore",
    "KafkaEventLog",
    "KafkaSnapshotStore",
    "TopicReport",
    "apply_topics",
    "connect_admin",
    "require_no_drift",
    "topic_partitions",
]
