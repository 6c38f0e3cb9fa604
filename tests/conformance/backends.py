"""How the conformance suite opens each backend, in this process or in a child process."""

from __future__ import annotations

import json
from typing import Any

from little.log import EmbeddedCursorStore, EmbeddedEventLog, EventLog, load_topic_specs
from little.log._port import CursorStore


def open_log(spec: dict[str, Any]) -> EventLog:
    if spec["kind"] == "embedded":
        return EmbeddedEventLog(spec["path"], topic=spec["topic"], partitions=spec["partitions"])
    from little.log.kafka import KafkaEventLog

    return KafkaEventLog(
        spec["bootstrap"],
        topic=spec["topic"],
        index_topic=spec["index_topic"],
        producer_profile=spec.get("profile", "latency"),
    )


def open_cursors(spec: dict[str, Any], log: EventLog) -> CursorStore:
    if spec["kind"] == "embedded":
        assert isinstance(log, EmbeddedEventLog)
        return EmbeddedCursorStore(log)
    from little.log.kafka import KafkaCursorStore

    return KafkaCursorStore(spec["bootstrap"], topic=spec["topic"])


def create_kafka_topics(bootstrap: str, topic: str, index_topic: str, partitions: int) -> None:
    """Fresh topics for one test, with the configs of deploy/topics.yaml."""
    from dataclasses import replace

    from little.log.kafka import apply_topics

    specs = load_topic_specs()
    runs = replace(specs["little.runs.v1"], name=topic, partitions=partitions)
    index = replace(specs["little.runs.index.v1"], name=index_topic, partitions=partitions)
    apply_topics(bootstrap, [runs, index])


def dumps(spec: dict[str, Any]) -> str:
    return json.dumps(spec)
