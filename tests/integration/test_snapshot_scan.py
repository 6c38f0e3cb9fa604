"""Scanning snapshot partitions the way a coordinator taking over does: several at once, each
ending in a transaction marker (the projector writes its snapshots in transactions)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer

from little.log import partition_for
from little.log.kafka import KafkaSnapshotStore
from tests.conformance.backends import create_snapshots_topic

pytestmark = pytest.mark.kafka

PARTITIONS = 4


def runs_of(partition: int, n: int) -> list[str]:
    ids = (f"scan-{partition}-{i}" for i in range(10_000))
    return [r for r in ids if partition_for(r, PARTITIONS) == partition][:n]


def test_a_scan_of_several_transactional_partitions_reads_each_to_its_end(
    kafka_bootstrap_servers: str, unique: str
) -> None:
    topic = f"t{unique}.snapshots"
    create_snapshots_topic(kafka_bootstrap_servers, topic, PARTITIONS)
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap_servers, "transactional.id": f"scan-{uuid.uuid4()}"}
    )
    producer.init_transactions(30)
    expected: dict[int, dict[str, bytes]] = {p: {} for p in range(PARTITIONS)}
    # partition 0: two transactions, a replaced snapshot and a tombstone; partition 1: one
    # transaction of 300 records; partition 2: an aborted transaction only; partition 3: empty
    for round_ in range(2):
        producer.begin_transaction()
        for r in runs_of(0, 5):
            producer.produce(topic, f"{r}@{round_}".encode(), key=r, partition=0)
            expected[0][r] = f"{r}@{round_}".encode()
        if round_ == 1:
            gone = runs_of(0, 5)[0]
            producer.produce(topic, None, key=gone, partition=0)
            del expected[0][gone]
        producer.commit_transaction(30)
    producer.begin_transaction()
    for r in runs_of(1, 300):
        producer.produce(topic, r.encode(), key=r, partition=1)
        expected[1][r] = r.encode()
    producer.commit_transaction(30)
    producer.begin_transaction()
    for r in runs_of(2, 3):
        producer.produce(topic, b"never", key=r, partition=2)
    producer.abort_transaction(30)
    producer.flush(30)

    store = KafkaSnapshotStore(kafka_bootstrap_servers, topic=topic)
    try:
        assert store.scan_partitions(list(range(PARTITIONS))) == expected
        assert store.scan(1) == expected[1]  # one partition alone, the store reused
        assert store.scan_partitions([3, 0]) == {3: {}, 0: expected[0]}
    finally:
        store.close()
