"""Which partition a run lives in: the Java client's default partitioner (murmur2 of the key).

Using the Java client's function means a producer keyed by run id with that partitioner (Java's
default; librdkafka and its bindings with ``partitioner=murmur2_random``, not their default
``consistent_random``, which is CRC32) puts a run's records and its commands in the same
partition number, which is what makes partition ownership run ownership. A run's stream is its
partition: a record of the run found in another one is no part of it (``read_run`` never reads
it; the projector dead-letters it as ``misrouted``).
"""

from __future__ import annotations

import functools

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: signed 32-bit result, seed 0x9747b28c."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    end = length - (length % 4)
    for i in range(0, end, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length % 4
    if rest == 3:
        h ^= data[end + 2] << 16
    if rest >= 2:
        h ^= data[end + 1] << 8
    if rest >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


@functools.lru_cache(maxsize=65_536)
def partition_for(run_id: str, partitions: int) -> int:
    """``toPositive(murmur2(key)) % partitions``, exactly as Kafka's default partitioner.

    Cached: every append of a run asks again, and murmur2 in Python costs microseconds.
    """
    return (murmur2(run_id.encode("utf-8")) & 0x7FFFFFFF) % partitions
