"""Runs land where Kafka's own default partitioner puts their key."""

from __future__ import annotations

import pytest

from little.log import murmur2, partition_for

# Vectors from Apache Kafka's UtilsTest.testMurmur2 (the Java client's partitioner hash).
KAFKA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize(("data", "expected"), KAFKA_VECTORS)
def test_murmur2_matches_kafka(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_partition_is_positive_hash_modulo_count() -> None:
    for run in ("run-1", "a-little-bit-longer-string", "ü-unicode"):
        for n in (1, 3, 12, 64):
            p = partition_for(run, n)
            assert 0 <= p < n
            assert p == (murmur2(run.encode()) & 0x7FFFFFFF) % n


def test_runs_spread_over_partitions() -> None:
    counts = [0] * 12
    for i in range(12_000):
        counts[partition_for(f"run_{i}", 12)] += 1
    assert min(counts) > 800  # roughly uniform: 1000 expected each
