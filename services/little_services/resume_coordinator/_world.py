"""The coordinator's world: the Kafka log under configured topic names, and its snapshots.

Snapshots are an optimisation of folding, never needed for correctness (a run without one is
folded from its start), so the coordinator keeps the snapshots of the partitions it owns in
memory: read once per partition on assignment, written through when it snapshots a run. A
``get`` never reads the topic, which would mean reading a whole compacted partition per call.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import structlog

from little._world import World
from little.artifacts import ArtifactStore
from little.errors import ConfigurationError, LogError
from little.events import EventCodec
from little.log import load_topic_specs, partition_for
from little.log._kafka import (
    KafkaCursorStore,
    KafkaEventLog,
    KafkaSnapshotStore,
    connect_admin,
    topic_partitions,
)
from little.log._provision import apply_topics
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

    def scan(self, partition: int) -> dict[str, bytes]:
        """The newest snapshot bytes of every run in ``partition``, read from the compacted
        partition once."""
        return self.store.scan(partition)

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
    """Connect to Kafka with the configured topics; check they are co-partitioned."""
    bootstrap = settings.bootstrap()
    config: dict[str, Any] = {}
    if settings.provision_topics:
        specs = load_topic_specs()
        names = {
            "little.runs.v1": settings.runs_topic,
            "little.commands.v1": settings.commands_topic,
            "little.snapshots.v1": settings.snapshots_topic,
            "little.runs.index.v1": settings.runs_index_topic,
        }
        apply_topics(bootstrap, [replace(specs[k], name=v) for k, v in names.items()])
    admin = connect_admin(bootstrap, config)
    counts = {
        topic: topic_partitions(admin, topic)
        for topic in (settings.runs_topic, settings.commands_topic, settings.snapshots_topic)
    }
    if len(set(counts.values())) != 1:
        raise ConfigurationError(
            "the runs, commands and snapshots topics must have the same partition count "
            f"(partition ownership is run ownership): {counts}"
        )
    snapshots = OwnedSnapshots(
        KafkaSnapshotStore(bootstrap, topic=settings.snapshots_topic, config=config)
    )
    registry = None
    if settings.schema_registry_url:
        from confluent_kafka.schema_registry import SchemaRegistryClient

        registry = SchemaRegistryClient.new_client({"url": settings.schema_registry_url})
    try:
        world = World(
            log=KafkaEventLog(
                bootstrap,
                topic=settings.runs_topic,
                index_topic=settings.runs_index_topic,
                config=config,
                producer_profile=settings.producer_profile,
            ),
            cursors=KafkaCursorStore(bootstrap, topic=settings.runs_topic, config=config),
            artifacts=ArtifactStore(settings.artifacts()),
            codec=EventCodec(registry=registry, topic=settings.runs_topic),
            snapshots=snapshots,
            description=f"kafka:{bootstrap}/{settings.runs_topic}",
        )
    except LogError:
        snapshots.close()
        raise
    return world, snapshots
