"""The EventLog conformance suite (``little.testing``) on every backend: embedded sqlite, Kafka."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from little.log import (
    CursorStore,
    EmbeddedCursorStore,
    EmbeddedEventLog,
    EventLog,
    ResetTo,
)
from little.testing import BackendSpec, EventLogConformance
from tests.conformance.backends import create_kafka_topics


class TestEmbeddedEventLog(EventLogConformance):
    @pytest.fixture
    def backend_spec(self, tmp_path: Path, unique: str) -> BackendSpec:
        return {"path": str(tmp_path / "log.sqlite3"), "topic": f"t{unique}.runs"}

    def open_log(self, spec: BackendSpec) -> EventLog:
        return EmbeddedEventLog(spec["path"], topic=spec["topic"], partitions=self.partitions)

    def open_cursors(self, spec: BackendSpec, log: EventLog) -> CursorStore:
        assert isinstance(log, EmbeddedEventLog)
        return EmbeddedCursorStore(log)


@pytest.mark.kafka
class TestKafkaEventLog(EventLogConformance):
    @pytest.fixture
    def backend_spec(self, kafka_bootstrap_servers: str, unique: str) -> BackendSpec:
        spec = {
            "bootstrap": kafka_bootstrap_servers,
            "topic": f"t{unique}.runs",
            "index_topic": f"t{unique}.index",
        }
        create_kafka_topics(
            kafka_bootstrap_servers, spec["topic"], spec["index_topic"], self.partitions
        )
        return spec

    def open_log(self, spec: BackendSpec) -> EventLog:
        from little.log.kafka import KafkaEventLog

        return KafkaEventLog(
            spec["bootstrap"], topic=spec["topic"], index_topic=spec["index_topic"]
        )

    def open_cursors(self, spec: BackendSpec, log: EventLog) -> CursorStore:
        from little.log.kafka import KafkaCursorStore

        return KafkaCursorStore(spec["bootstrap"], topic=spec["topic"])


def test_reset_needs_exactly_one_target() -> None:
    """The port's own value type, the same on every backend."""
    with pytest.raises(ValueError, match="exactly one"):
        ResetTo(earliest=True, latest=True)
    with pytest.raises(ValueError, match="timezone"):
        ResetTo(timestamp=datetime(2026, 1, 1))
