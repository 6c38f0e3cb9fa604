"""Wiring a projector from settings: the world it reads, its store, its driver, a rebuild.

Settings come from the environment (prefix ``LITTLE_``) like the rest of little. With no
Kafka bootstrap the embedded world is projected; with one, the Kafka driver with per-partition
transactions. Topic names are settings so tests and side-by-side projections can use their own.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from little._world import World, local_world
from little.artifacts import ArtifactStore
from little.errors import LogError
from little.events import EventCodec
from little.log import (
    DLQ_TOPIC,
    RUN_INDEX_TOPIC,
    RUNS_TOPIC,
    SNAPSHOTS_TOPIC,
    EmbeddedEventLog,
    ResetTo,
)
from little.projection._core import DEFAULT_GROUP, ProjectionConfig
from little.projection._driver import Projector, ProjectorListener, ProjectorTotals
from little.projection._ports import PortProjector
from little.projection._sqlite import SqliteProjectionStore
from little.projection._store import ProjectionStore
from little.settings import LittleSettings


class ProjectionSettings(LittleSettings):
    """The projector's settings; every field is ``LITTLE_<NAME>`` in the environment."""

    projector_group: str = DEFAULT_GROUP
    runs_topic: str = RUNS_TOPIC
    runs_index_topic: str = RUN_INDEX_TOPIC
    snapshots_topic: str = SNAPSHOTS_TOPIC
    dlq_topic: str = DLQ_TOPIC
    projection_store: Path | None = None
    """The sqlite file of run states [default: ``<data_dir>/projection.sqlite3``]."""
    snapshot_every: int = 100
    projector_batch: int = 5000
    projector_cache_runs: int = 2000
    projector_instance_id: str | None = None
    """``group.instance.id`` (static membership): restarts take partitions back at once."""
    projector_session_timeout_ms: int | None = None
    artifacts_dir: Path | None = None

    def store_path(self) -> Path:
        return self.projection_store or self.data_dir / "projection.sqlite3"

    def projection_config(self) -> ProjectionConfig:
        return ProjectionConfig(
            topic=self.runs_topic,
            group=self.projector_group,
            snapshots_topic=self.snapshots_topic,
            dlq_topic=self.dlq_topic,
            snapshot_every=self.snapshot_every,
            batch_size=self.projector_batch,
            cache_runs=self.projector_cache_runs,
        )


def open_world(settings: ProjectionSettings, *, bootstrap_servers: str | None = None) -> World:
    """The world to project: Kafka at the bootstrap (with the settings' topics), else embedded."""
    bootstrap = bootstrap_servers or settings.kafka_bootstrap
    if not bootstrap:
        return local_world(settings.data_dir, partitions=settings.partitions)
    from little.log._kafka import KafkaCursorStore, KafkaEventLog, KafkaSnapshotStore

    registry = None
    if settings.schema_registry_url:
        from confluent_kafka.schema_registry import SchemaRegistryClient

        registry = SchemaRegistryClient.new_client({"url": settings.schema_registry_url})
    return World(
        log=KafkaEventLog(
            bootstrap,
            topic=settings.runs_topic,
            index_topic=settings.runs_index_topic,
            producer_profile=settings.producer_profile,
        ),
        cursors=KafkaCursorStore(bootstrap, topic=settings.runs_topic),
        artifacts=ArtifactStore(settings.artifacts_dir or settings.data_dir / "artifacts"),
        codec=EventCodec(registry=registry, topic=settings.runs_topic),
        snapshots=KafkaSnapshotStore(bootstrap, topic=settings.snapshots_topic),
        description=f"kafka:{bootstrap}",
    )


def create_projector(
    world: World,
    store: ProjectionStore,
    config: ProjectionConfig,
    *,
    bootstrap_servers: str | None = None,
    client_config: Mapping[str, Any] | None = None,
    listener: ProjectorListener | None = None,
    instance_id: str | None = None,
    session_timeout_ms: int | None = None,
) -> Projector:
    """The Kafka driver when a bootstrap is given, else the port driver over ``world``."""
    if bootstrap_servers:
        from little.projection._kafka import KafkaProjector

        return KafkaProjector(
            world,
            store,
            config,
            bootstrap_servers=bootstrap_servers,
            client_config=client_config,
            listener=listener,
            instance_id=instance_id,
            session_timeout_ms=session_timeout_ms,
        )
    dead_letters = None
    if isinstance(world.log, EmbeddedEventLog):
        dead_letters = EmbeddedEventLog(
            world.log.path, topic=config.dlq_topic, partitions=world.log.partitions
        )
    return PortProjector(world, store, config, listener=listener, dead_letters=dead_letters)


def projector_from_settings(
    settings: ProjectionSettings,
    world: World,
    store: ProjectionStore,
    *,
    listener: ProjectorListener | None = None,
) -> Projector:
    return create_projector(
        world,
        store,
        settings.projection_config(),
        bootstrap_servers=settings.kafka_bootstrap,
        listener=listener,
        instance_id=settings.projector_instance_id,
        session_timeout_ms=settings.projector_session_timeout_ms,
    )


def open_store(settings: ProjectionSettings, path: Path | None = None) -> SqliteProjectionStore:
    return SqliteProjectionStore(path or settings.store_path())


def tune_gc() -> None:
    """Fewer, larger garbage collections, for a process that folds a long log.

    A projector keeps thousands of run states alive, and CPython's default thresholds walk
    that heap again and again (about 7% of a rebuild's time, measured); folding makes few
    reference cycles. Entry points (the service, ``little projections rebuild``) call this
    once after start-up; the library never changes the collector on its own.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


@dataclass(frozen=True)
class RebuildResult:
    reset_to: dict[int, int]
    totals: ProjectorTotals
    seconds: float


def rebuild(
    world: World,
    store: ProjectionStore,
    config: ProjectionConfig,
    to: ResetTo,
    *,
    bootstrap_servers: str | None = None,
    client_config: Mapping[str, Any] | None = None,
    listener: ProjectorListener | None = None,
    stop: threading.Event | None = None,
) -> RebuildResult:
    """Reset the projector group's offsets and refold in-process until caught up.

    The group must have no live members (stop the projector first), as for
    ``kafka-consumer-groups --reset-offsets``. From the earliest offsets the store is cleared
    first; from anywhere else the projector's own reconciliation drops or refolds what the
    reset uncovered (the same path a reset with Kafka's tool takes).
    """
    began = time.perf_counter()
    try:
        reset_to = world.cursors.reset(config.group, to)
    except LogError as exc:
        raise LogError(
            f"{exc}. Is a projector of group {config.group} still running? Stop it first."
        ) from exc
    if to.earliest:
        store.clear()
    projector = create_projector(
        world,
        store,
        config,
        bootstrap_servers=bootstrap_servers,
        client_config=client_config,
        listener=listener,
    )
    try:
        totals = projector.run(stop, until_caught_up=True)
    finally:
        projector.close()
    return RebuildResult(reset_to, totals, time.perf_counter() - began)
