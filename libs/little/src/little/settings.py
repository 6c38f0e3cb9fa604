"""Settings from the environment (prefix ``LITTLE_``), shared by the CLI and the services."""

from __future__ import annotations

from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict


class LittleSettings(BaseSettings):
    """Where the world is. With no Kafka bootstrap set, the embedded world is used."""

    model_config = SettingsConfigDict(env_prefix="LITTLE_", extra="ignore")

    data_dir: Path = Path(".little")
    kafka_bootstrap: str | None = None
    schema_registry_url: str | None = None
    partitions: int = 12
    producer_profile: str = "latency"
