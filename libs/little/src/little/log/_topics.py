"""Topic specifications from ``deploy/topics.yaml`` (bundled copy in the package)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from little.errors import ConfigurationError

RUNS_TOPIC = "little.runs.v1"
COMMANDS_TOPIC = "little.commands.v1"
SNAPSHOTS_TOPIC = "little.snapshots.v1"
RUN_INDEX_TOPIC = "little.runs.index.v1"
DLQ_TOPIC = "little.runs.dlq.v1"


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    replication_factor: int
    config: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TopicNames:
    """What one world calls each of little's topics, by role.

    The defaults are the names in ``deploy/topics.yaml``. A deployment may rename topics
    (``LITTLE_RUNS_TOPIC`` and the rest, read by ``LittleSettings``) or prefix them all (several
    worlds on one cluster); every service and the CLI then use the same names.
    """

    runs: str = RUNS_TOPIC
    commands: str = COMMANDS_TOPIC
    snapshots: str = SNAPSHOTS_TOPIC
    runs_index: str = RUN_INDEX_TOPIC
    dlq: str = DLQ_TOPIC

    def prefixed(self, prefix: str) -> TopicNames:
        if not prefix:
            return self
        return TopicNames(*(prefix + name for name in self.by_spec().values()))

    def by_spec(self) -> dict[str, str]:
        """Each role's name in ``topics.yaml`` -> its name in this world (in field order)."""
        return {
            RUNS_TOPIC: self.runs,
            COMMANDS_TOPIC: self.commands,
            SNAPSHOTS_TOPIC: self.snapshots,
            RUN_INDEX_TOPIC: self.runs_index,
            DLQ_TOPIC: self.dlq,
        }

    def specs(self, specs: Mapping[str, TopicSpec]) -> list[TopicSpec]:
        """``specs`` (from ``load_topic_specs``) under this world's names; topics of the file
        that are none of little's roles keep their own names."""
        names = self.by_spec()
        return [replace(spec, name=names.get(key, spec.name)) for key, spec in specs.items()]


def load_topic_specs(
    path: str | Path | None = None,
    *,
    partitions: int | None = None,
    replication_factor: int | None = None,
    min_insync_replicas: int | None = None,
) -> dict[str, TopicSpec]:
    """Read topic specs; overrides (arguments, then ``LITTLE_TOPIC_*`` env) win over the file."""
    text = (
        Path(path).read_text("utf-8")
        if path is not None
        else (resources.files("little") / "topics.yaml").read_text("utf-8")
    )
    import yaml  # here: a process that never reads topics.yaml never imports it

    try:
        doc: Any = yaml.safe_load(text)
        defaults = doc.get("defaults", {})
        topics = doc["topics"]
    except Exception as exc:
        raise ConfigurationError(f"topics file {path or 'bundled'} is not valid: {exc}") from exc
    parts = partitions or _int_env("LITTLE_TOPIC_PARTITIONS")
    rf = replication_factor or _int_env("LITTLE_TOPIC_REPLICATION_FACTOR")
    isr = min_insync_replicas or _int_env("LITTLE_TOPIC_MIN_INSYNC_REPLICAS")
    specs: dict[str, TopicSpec] = {}
    for name, body in topics.items():
        body = body or {}
        config = {**defaults.get("config", {}), **body.get("config", {})}
        config = {str(k): str(v) for k, v in config.items()}
        if isr is not None:
            config["min.insync.replicas"] = str(isr)
        specs[name] = TopicSpec(
            name=name,
            partitions=int(parts or body.get("partitions") or defaults.get("partitions", 1)),
            replication_factor=int(
                rf or body.get("replication_factor") or defaults.get("replication_factor", 1)
            ),
            config=config,
        )
    runs, commands = specs.get(RUNS_TOPIC), specs.get(COMMANDS_TOPIC)
    if runs and commands and runs.partitions != commands.partitions:
        raise ConfigurationError(
            f"{RUNS_TOPIC} has {runs.partitions} partitions but {COMMANDS_TOPIC} has "
            f"{commands.partitions}: they must be equal (partition ownership is run ownership)"
        )
    return specs


def _int_env(name: str) -> int | None:
    value = os.environ.get(name)
    if value in (None, ""):
        return None
    try:
        return int(value)
    except ValueError as exc:
        raise ConfigurationError(f"{name}={value!r} is not an integer") from exc
