"""Settings from the environment (prefix ``LITTLE_``), shared by the CLI and the services.

Where the world is (data directory or Kafka bootstrap, schema registry, topic names, artifact
directory) is declared here once. The projector, the resume coordinator and every ``little``
command read these same variables through ``LittleSettings.world``, so a deployment that
renames a topic or moves the artifacts renames it for all of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic_settings import BaseSettings, SettingsConfigDict

from little.log import (
    COMMANDS_TOPIC,
    DLQ_TOPIC,
    RUN_INDEX_TOPIC,
    RUNS_TOPIC,
    SNAPSHOTS_TOPIC,
    TopicNames,
)

__all__ = ["LittleSettings"]

if TYPE_CHECKING:
    from little._world import World


class LittleSettings(BaseSettings):
    """Where the world is. With no Kafka bootstrap set, the embedded world is used."""

    model_config = SettingsConfigDict(env_prefix="LITTLE_", extra="ignore")

    data_dir: Path = Path(".little")
    kafka_bootstrap: str | None = None
    schema_registry_url: str | None = None
    partitions: int = 12
    producer_profile: str = "latency"
    runs_topic: str = RUNS_TOPIC
    runs_index_topic: str = RUN_INDEX_TOPIC
    snapshots_topic: str = SNAPSHOTS_TOPIC
    commands_topic: str = COMMANDS_TOPIC
    dlq_topic: str = DLQ_TOPIC
    """Topic names on Kafka (the embedded world keeps its own, in one sqlite file)."""
    artifacts_dir: Path | None = None
    """The artifact directory, shared by every process of a world [default:
    ``<data_dir>/artifacts``]."""

    def topics(self) -> TopicNames:
        return TopicNames(
            runs=self.runs_topic,
            commands=self.commands_topic,
            snapshots=self.snapshots_topic,
            runs_index=self.runs_index_topic,
            dlq=self.dlq_topic,
        )

    def artifacts(self) -> Path:
        return self.artifacts_dir or self.data_dir / "artifacts"

    def world(self, *, bootstrap_servers: str | None = None, provision: bool = False) -> World:
        """Kafka at the bootstrap (the argument, else ``LITTLE_KAFKA_BOOTSTRAP``) under these
        topic names; with neither, the embedded world in ``data_dir``."""
        from little._world import kafka_world, local_world

        bootstrap = bootstrap_servers or self.kafka_bootstrap
        if not bootstrap:
            return local_world(
                self.data_dir, partitions=self.partitions, artifacts_dir=self.artifacts()
            )
        return kafka_world(
            bootstrap,
            schema_registry_url=self.schema_registry_url,
            artifacts_dir=self.artifacts(),
            provision=provision,
            producer_profile=self.producer_profile,
            topics=self.topics(),
        )
