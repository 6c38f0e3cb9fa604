"""The Kafka run index on a real broker: a run's first append reads nothing, lookups stay
correct in bounded memory, and a broker-side view of the entries agrees.

(The index is Kafka's alone: the embedded log reads a run by its sqlite index.)"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from little.log import OutgoingRecord
from little.log.kafka import KafkaEventLog
from tests.conformance.backends import create_kafka_topics

pytestmark = pytest.mark.kafka

PARTITIONS = 3


@pytest.fixture
def topics(kafka_bootstrap_servers: str, unique: str) -> dict[str, Any]:
    spec = {"bootstrap": kafka_bootstrap_servers, "topic": f"i{unique}.runs"}
    spec["index_topic"] = f"i{unique}.index"
    create_kafka_topics(kafka_bootstrap_servers, spec["topic"], spec["index_topic"], PARTITIONS)
    return spec


def open_log(spec: dict[str, Any]) -> KafkaEventLog:
    return KafkaEventLog(spec["bootstrap"], topic=spec["topic"], index_topic=spec["index_topic"])


@pytest.fixture
def history(topics: dict[str, Any]) -> Iterator[dict[str, int]]:
    """300 runs written by another process's log: the index topic holds their entries."""
    writer = open_log(topics)
    firsts = {}

    async def write() -> None:
        async def one(i: int) -> None:
            (first,) = await writer.submit(f"old-{i}", [OutgoingRecord(b"a")])
            await writer.submit(f"old-{i}", [OutgoingRecord(b"b")])
            firsts[f"old-{i}"] = first.offset

        await asyncio.gather(*(one(i) for i in range(300)))

    asyncio.run(write())
    writer.close()
    return firsts


def test_a_runs_first_append_reads_nothing_of_the_index(
    topics: dict[str, Any], history: dict[str, int]
) -> None:
    log = open_log(topics)
    try:

        async def start() -> None:
            await log.submit("brand-new", [OutgoingRecord(b"claim")])
            await log.submit("brand-new", [OutgoingRecord(b"started")])

        asyncio.run(start())
        assert log._index.records_read == 0  # no catch-up of 300 entries to start one run
    finally:
        log.close()
    reader = open_log(topics)
    try:
        assert [r.payload for r in reader.read_run("brand-new")] == [b"claim", b"started"]
    finally:
        reader.close()


def test_lookups_stay_exact_in_bounded_memory(
    topics: dict[str, Any], history: dict[str, int]
) -> None:
    reader = open_log(topics)
    reader._index.capacity = 20
    try:
        for run, first in history.items():  # 300 runs through a memory of 20
            found = reader.first_offset(run)
            assert found is not None, run
            assert found <= first, run
            assert [r.payload for r in reader.read_run(run)] == [b"a", b"b"]
        assert reader._index.held() <= 20
        for run in list(history)[:30]:  # forgotten long ago: found again by a rescan
            assert [r.payload for r in reader.read_run(run)] == [b"a", b"b"]
        assert reader._index.rescans >= 30
        before = reader._index.rescans
        for i in range(50):  # never seen: an exact "no" without reading the partition again
            assert reader.first_offset(f"never-{i}") is None
        assert reader._index.rescans == before
    finally:
        reader.close()
