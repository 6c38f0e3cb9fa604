"""The SnapshotStore conformance suite (``little.testing``) on every backend: embedded, Kafka."""

from __future__ import annotations

from pathlib import Path

import pytest

from little.log import EmbeddedSnapshotStore
from little.snapshots import SnapshotStore
from little.testing import BackendSpec, LimitedSnapshotStoreConformance, SnapshotStoreConformance
from tests.conformance.backends import create_snapshots_topic


class TestEmbeddedSnapshotStore(SnapshotStoreConformance):
    # sqlite keeps a blob up to 1e9 bytes (SQLITE_MAX_LENGTH): no limit worth trying, so the
    # suite without the size-limit test

    @pytest.fixture
    def backend_spec(self, tmp_path: Path) -> BackendSpec:
        return {"path": str(tmp_path / "log.sqlite3")}

    def open_store(self, spec: BackendSpec) -> SnapshotStore:
        return EmbeddedSnapshotStore(spec["path"])


@pytest.mark.kafka
class TestKafkaSnapshotStore(LimitedSnapshotStoreConformance):
    # One record per snapshot, within librdkafka's default message.max.bytes (1,000,000)
    large_payload_bytes = 900_000
    refused_payload_bytes = 1_100_000

    @pytest.fixture
    def backend_spec(self, kafka_bootstrap_servers: str, unique: str) -> BackendSpec:
        topic = f"t{unique}.snapshots"
        create_snapshots_topic(kafka_bootstrap_servers, topic, self.partitions)
        return {"bootstrap": kafka_bootstrap_servers, "topic": topic}

    def open_store(self, spec: BackendSpec) -> SnapshotStore:
        from little.log.kafka import KafkaSnapshotStore

        return KafkaSnapshotStore(spec["bootstrap"], topic=spec["topic"])
