"""Settings from the environment (prefix ``LITTLE_``), shared by the CLI and the services.

Where the world is (data directory or Kafka bootstrap, schema registry, topic names, artifact
directory) is declared here once. The projector, the resume coordinator and every ``little``
command read these same variables through ``LittleSettings.world``, so a deployment that
renames a topic or moves the artifacts renames it for all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import AliasChoices, model_validator
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings, SettingsConfigDict

from little.log import (
    COMMANDS_TOPIC,
    DLQ_TOPIC,
    RUN_INDEX_TOPIC,
    RUNS_TOPIC,
    SNAPSHOTS_TOPIC,
    TopicNames,
)
from little.log.kafka_settings import KafkaClientSettings

__all__ = ["KafkaClientSettings", "LittleSettings", "SettingDoc", "describe_settings"]

if TYPE_CHECKING:
    from little._world import World


class LittleSettings(BaseSettings):
    """Where the world is. With no Kafka bootstrap set, the embedded world is used."""

    model_config = SettingsConfigDict(
        env_prefix="LITTLE_", extra="ignore", use_attribute_docstrings=True
    )

    data_dir: Path = Path(".little")
    """The embedded world's directory (its sqlite log, artifacts and projection), used when
    no Kafka bootstrap is set."""
    kafka_bootstrap: str | None = None
    """Kafka's bootstrap servers (``host:port,...``); set, the world is on Kafka."""
    schema_registry_url: str | None = None
    """A Confluent-compatible schema registry: events are framed with its schema ids
    (Confluent wire format) instead of single-object encoding."""
    partitions: int = 12
    """Partitions of the embedded world's log (Kafka topics have their own count)."""
    producer_profile: str = "latency"
    """``latency`` (linger 0, for interactive runs) or ``throughput`` (batching)."""
    runs_topic: str = RUNS_TOPIC
    """The run events topic."""
    runs_index_topic: str = RUN_INDEX_TOPIC
    """The run index topic (each run's first offset)."""
    snapshots_topic: str = SNAPSHOTS_TOPIC
    """The compacted run snapshots topic."""
    commands_topic: str = COMMANDS_TOPIC
    """The StartRun / ResumeRun / CancelRun topic the resume coordinator consumes."""
    dlq_topic: str = DLQ_TOPIC
    """The projector's dead-letter topic (records it could not decode or fold)."""
    topic_prefix: str = ""
    """Put before the name of each of the five topics, the default or a ``LITTLE_*_TOPIC``
    setting alike, as ``kafka_world(topic_prefix=)`` does: one setting moves a deployment to
    its own topics (``staging.`` gives ``staging.little.runs.v1``...)."""
    artifacts_dir: Path | None = None
    """The artifact directory, shared by every process of a world [default:
    ``<data_dir>/artifacts``]; unused when ``LITTLE_ARTIFACTS_URL`` is set."""
    artifacts_url: str | None = None
    """The artifact store as a URL: ``s3://bucket/prefix`` keeps artifacts in S3-compatible
    object storage, reachable from every host (endpoint and credentials from the standard
    ``AWS_*`` variables: ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
    ``AWS_REGION``; needs ``little-workflow[s3]``). Wins over ``LITTLE_ARTIFACTS_DIR``."""

    redactor: str | None = None
    """``module:attr`` of a redactor (``little.redaction``) every run of this process records
    through: it strips secrets from prompts, model responses, tool arguments and results
    before they are written."""

    model_max_retries: int = 2
    """Retries of a model turn that failed with a rate limit, a 5xx or a dropped connection
    (the OpenAI and Anthropic adapters; each attempt is recorded, the SDK's own retries are
    off). An adapter's ``max_retries=`` wins. A 4xx is never retried."""
    model_retry_delay: float = 0.5
    """Seconds before a model turn's first retry; each later retry waits twice as long (at
    least the provider's ``retry-after``). An adapter's ``retry_delay=`` wins."""
    model_retry_max_delay: float = 30.0
    """The longest wait between two attempts of a model turn, in seconds. An adapter's
    ``retry_max_delay=`` wins."""

    @model_validator(mode="after")
    def _apply_topic_prefix(self) -> LittleSettings:
        # Applied once, when the settings are read: the fields hold the names in use, so
        # every reader of ``runs_topic``... (and ``topics()``) sees the prefixed name.
        if self.topic_prefix:
            named = TopicNames(
                runs=self.runs_topic,
                commands=self.commands_topic,
                snapshots=self.snapshots_topic,
                runs_index=self.runs_index_topic,
                dlq=self.dlq_topic,
            ).prefixed(self.topic_prefix)
            for field, name in (
                ("runs_topic", named.runs),
                ("commands_topic", named.commands),
                ("snapshots_topic", named.snapshots),
                ("runs_index_topic", named.runs_index),
                ("dlq_topic", named.dlq),
            ):
                object.__setattr__(self, field, name)
            object.__setattr__(self, "topic_prefix", "")  # applied: a copy must not add it twice
        return self

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
        redact = self.load_redactor()
        if not bootstrap:
            return local_world(
                self.data_dir,
                partitions=self.partitions,
                artifacts_dir=self.artifacts(),
                artifacts_url=self.artifacts_url,
                redact=redact,
            )
        return kafka_world(
            bootstrap,
            schema_registry_url=self.schema_registry_url,
            artifacts_dir=self.artifacts(),
            artifacts_url=self.artifacts_url,
            provision=provision,
            producer_profile=self.producer_profile,
            topics=self.topics(),
            redact=redact,
        )

    def load_redactor(self) -> Any:
        """The callable ``LITTLE_REDACTOR`` names (None when unset)."""
        if not self.redactor:
            return None
        import importlib

        from little.errors import ConfigurationError

        module, _, attr = self.redactor.partition(":")
        try:
            found = getattr(importlib.import_module(module), attr or "redact")
        except (ImportError, AttributeError) as exc:
            raise ConfigurationError(
                f"LITTLE_REDACTOR={self.redactor!r}: cannot load it ({exc})"
            ) from None
        if not callable(found):
            raise ConfigurationError(f"LITTLE_REDACTOR={self.redactor!r} is not callable")
        return found


@dataclass(frozen=True)
class SettingDoc:
    """One environment variable of a settings class: for ``--help`` and docs/settings.md."""

    env: tuple[str, ...]
    """Its names, the preferred first (a per-service name before the shared one)."""
    default: str
    meaning: str


def describe_settings(cls: type[BaseSettings]) -> list[SettingDoc]:
    """Every field of ``cls`` as the environment names it, with its default and docstring."""
    prefix = str(cls.model_config.get("env_prefix") or "")
    found = []
    for name, field in cls.model_fields.items():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices):
            env = tuple(str(choice) for choice in alias.choices)
        elif isinstance(alias, str):
            env = (alias,)
        else:
            env = (f"{prefix}{name}".upper(),)
        if field.default is PydanticUndefined:
            default = "(required)"
        elif field.default is None:
            default = "(unset)"
        elif field.default == "":
            default = "(empty)"
        elif isinstance(field.default, bool):
            default = "true" if field.default else "false"
        else:
            default = str(field.default)
        meaning = " ".join((field.description or "").split())
        found.append(SettingDoc(env, default, meaning))
    return found
