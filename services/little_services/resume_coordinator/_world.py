"""The coordinator's world: the Kafka log under configured topic names, and its snapshots.

Snapshots are an optimisation of folding, never needed for correctness (a run without one is
folded from its start), so the coordinator keeps the snapshots of the partitions it owns in
memory: read once per partition on assignment, written through when it snapshots a run. A
``get`` never reads the topic, which would mean reading a whole compacted partition per call.
"""

from __future__ import annotations

import threading
from dataclasses import replace

import structlog

from little import World
from little.errors import ConfigurationError
from little.log import load_topic_specs, partition_for
from little.log.kafka import KafkaSnapshotStore, apply_topics, connect_admin, topic_partitions
from little.snapshots import SnapshotStore
from little_services.resume_coordinator._settings import CoordinatorSettings

log = structlog.get_logger("little.coordinator")


class OwnedSnapshots(SnapshotStore):
    """Snapshots of the live runs of the owned partitions, in memory; writes go through.

    Only runs the coordinator may execute are kept (``remember``, ``put``), and a run is
    dropped when it ends, so memory follows the live runs, not every run ever snapshotted.
    """

    def __init__(self, store: KafkaSnapshotStore) -> None:
        self.store = store
        self.partitions = store.partitions
        self._cache: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def scan(self, partitions: list[int]) -> dict[int, dict[str, bytes]]:
        """The newest snapshot bytes of every run in ``partitions``, read from the compacted
        partitions once, all at once."""
        return self.store.scan_partitions(partitions)

    def remember(self, run_id: str, payload: bytes) -> None:
        with self._lock:
            self._cache.setdefault(run_id, payload)  # a put since the scan began is newer

    def drop(self, run_id: str) -> None:
        with self._lock:
            self._cache.pop(run_id, None)

    def forget(self, partitions: set[int]) -> None:
        with self._lock:
            for run_id in [r for r in self._cache if self.partition_of(r) in partitions]:
                del self._cache[run_id]

    def partition_of(self, run_id: str) -> int:
        return partition_for(run_id, self.partitions)

    def put(self, run_id: str, payload: bytes) -> None:
        self.store.put(run_id, payload)
        with self._lock:
            self._cache[run_id] = payload

    def get(self, run_id: str) -> bytes | None:
        with self._lock:
            return self._cache.get(run_id)

    def close(self) -> None:
        self.store.close()


def open_world(settings: CoordinatorSettings) -> tuple[World, OwnedSnapshots]:
    """The world the settings name (``LittleSettings.world``), with the snapshots of the owned
    partitions kept in memory; checks the runs, commands and snapshots topics are
    co-partitioned."""
    bootstrap = settings.bootstrap()
    topics = settings.topics()
    if settings.provision_topics:
        mine = {topics.runs, topics.commands, topics.snapshots, topics.runs_index}
        apply_topics(bootstrap, [s for s in topics.specs(load_topic_specs()) if s.name in mine])
    admin = connect_admin(bootstrap, {})
    counts = {
        topic: topic_partitions(admin, topic)
        for topic in (topics.runs, topics.commands, topics.snapshots)
    }
    if len(set(counts.values())) != 1:
        raise ConfigurationError(
            "the runs, commands and snapshots topics must have the same partition count "
            f"(partition ownership is run ownership): {counts}"
        )
    world = settings.world()
    if not isinstance(world.snapshots, KafkaSnapshotStore):  # a Kafka bootstrap is required
        world.close()
        raise ConfigurationError(
            f"the resume coordinator needs a Kafka world, not {world.description}"
        )
    snapshots = OwnedSnapshots(world.snapshots)
    return replace(world, snapshots=snapshots), snapshots
