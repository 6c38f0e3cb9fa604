"""Opening a projector's parts from settings: the world it reads, its store, its driver.

Settings come from the environment (prefix ``LITTLE_``) like the rest of little. With no
Kafka bootstrap the embedded world is projected; with one, the Kafka driver with per-partition
transactions. A rebuild (``_setup``) and its worker processes (``_workers``) open their parts
here; this module never imports either.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from little import World
from little.log import EmbeddedEventLog
from little.settings import LittleSettings
from little_services.projection._core import DEFAULT_GROUP, ProjectionConfig
from little_services.projection._driver import Projector, ProjectorListener
from little_services.projection._ports import PortProjector
from little_services.projection._sqlite import SqliteProjectionStore
from little_services.projection._store import ProjectionStore


class ProjectionSettings(LittleSettings):
    """The projector's settings; every field is ``LITTLE_<NAME>`` in the environment."""

    projector_group: str = DEFAULT_GROUP
    """The projector's consumer group on the runs topic (its own per deployment when topics
    are prefixed); its committed offsets are the projection's replay cursors."""
    projection_store: str | None = None
    """Where run states are kept: an sqlite file [default: ``<data_dir>/projection.sqlite3``],
    or a PostgreSQL database (``postgresql://user:password@host:5432/db``, needs
    ``little-services[postgresql]``) that several projector instances share, so any one's API
    serves every run."""
    snapshot_every: int = ProjectionConfig.snapshot_every
    """Write a run's snapshot every this many of its events (resume and replay start there)."""
    projector_batch: int = ProjectionConfig.batch_size
    """Records folded per partition batch (one store write and one offset commit each)."""
    projector_cache_runs: int = ProjectionConfig.cache_runs
    """Run states kept in memory between batches."""
    projector_instance_id: str | None = None
    """``group.instance.id`` (static membership): restarts take partitions back at once."""
    projector_session_timeout_ms: int | None = None
    """The projector group's session timeout [default: librdkafka's]."""
    projector_stall_seconds: float = ProjectionConfig.stall_seconds
    """A Kafka transaction unfinished after this long is stuck (a librdkafka defect after a
    broker restart): the projector exits 75, to be restarted, and resumes from its offsets."""

    def store_location(self) -> str:
        """The store's file path or database URL."""
        return self.projection_store or str(self.data_dir / "projection.sqlite3")

    def store_description(self) -> str:
        """``store_location`` without a password (for logs)."""
        from little_services.projection._postgres import redact

        return redact(self.store_location())

    def projection_config(self) -> ProjectionConfig:
        return ProjectionConfig(
            topic=self.runs_topic,
            group=self.projector_group,
            snapshots_topic=self.snapshots_topic,
            dlq_topic=self.dlq_topic,
            snapshot_every=self.snapshot_every,
            batch_size=self.projector_batch,
            cache_runs=self.projector_cache_runs,
            stall_seconds=self.projector_stall_seconds,
        )


def open_world(settings: ProjectionSettings, *, bootstrap_servers: str | None = None) -> World:
    """The world to project: Kafka at the bootstrap (with the settings' topics), else embedded."""
    return settings.world(bootstrap_servers=bootstrap_servers)


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
        from little_services.projection._kafka import KafkaProjector

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


def open_store(settings: ProjectionSettings, path: Path | None = None) -> ProjectionStore:
    """The store the settings name (``path``, a sqlite file, wins)."""
    return open_store_at(str(path) if path is not None else settings.store_location())


def open_store_at(location: str, *, synchronous: str = "FULL") -> ProjectionStore:
    """A ``postgresql://`` URL opens ``PostgresProjectionStore``; anything else is the path of
    an sqlite file (``synchronous`` is its sqlite setting)."""
    from little_services.projection._postgres import PostgresProjectionStore, is_postgres_url

    if is_postgres_url(location):
        return PostgresProjectionStore(location)
    return SqliteProjectionStore(Path(location), synchronous=synchronous)


def shared_store_location(store: ProjectionStore) -> tuple[str, str] | None:
    """Where other processes open ``store`` (location, sqlite synchronous), if they can."""
    from little_services.projection._postgres import PostgresProjectionStore

    if isinstance(store, SqliteProjectionStore):
        return str(store.path), store.synchronous
    if isinstance(store, PostgresProjectionStore):
        return store.url, "FULL"
    return None
