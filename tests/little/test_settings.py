"""One declaration of where the world is: every service and command reads the same variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from little import TopicNames
from little.cli._commands import CommandSettings
from little.log import COMMANDS_TOPIC, DLQ_TOPIC, RUN_INDEX_TOPIC, RUNS_TOPIC, load_topic_specs
from little.settings import LittleSettings
from little_services.projection import ProjectionSettings
from little_services.resume_coordinator._settings import CoordinatorSettings

ROLES = {
    "LITTLE_RUNS_TOPIC": "acme.runs",
    "LITTLE_RUNS_INDEX_TOPIC": "acme.index",
    "LITTLE_SNAPSHOTS_TOPIC": "acme.snapshots",
    "LITTLE_COMMANDS_TOPIC": "acme.commands",
    "LITTLE_DLQ_TOPIC": "acme.dlq",
}


def test_every_service_and_command_reads_the_same_topic_and_artifact_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name, value in ROLES.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LITTLE_ARTIFACTS_DIR", str(tmp_path / "shared"))
    expected = TopicNames("acme.runs", "acme.commands", "acme.snapshots", "acme.index", "acme.dlq")
    for cls in (LittleSettings, ProjectionSettings, CoordinatorSettings, CommandSettings):
        settings = cls()
        assert settings.topics() == expected, cls.__name__
        assert settings.artifacts() == tmp_path / "shared", cls.__name__
    config = ProjectionSettings().projection_config()
    assert (config.topic, config.snapshots_topic, config.dlq_topic) == (
        "acme.runs",
        "acme.snapshots",
        "acme.dlq",
    )


def test_one_topic_prefix_names_all_five_topics_everywhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``LITTLE_TOPIC_PREFIX`` prefixes every topic, a default or a renamed one, as
    ``kafka_world(topic_prefix=)`` does, for every service and command; once (a copy of the
    settings does not prefix again)."""
    for name in ROLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LITTLE_TOPIC_PREFIX", "staging.")
    monkeypatch.setenv("LITTLE_DLQ_TOPIC", "acme.dlq")
    expected = TopicNames(dlq="acme.dlq").prefixed("staging.")
    assert expected.runs == "staging." + RUNS_TOPIC
    for cls in (LittleSettings, ProjectionSettings, CoordinatorSettings, CommandSettings):
        settings = cls()
        assert settings.topics() == expected, cls.__name__
        assert settings.model_copy(update={"partitions": 3}).topics() == expected
    config = ProjectionSettings().projection_config()
    assert (config.topic, config.dlq_topic) == (expected.runs, "staging.acme.dlq")
    assert CoordinatorSettings().commands_topic == "staging." + COMMANDS_TOPIC


def test_defaults_are_the_names_in_topics_yaml(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [*ROLES, "LITTLE_ARTIFACTS_DIR"]:
        monkeypatch.delenv(name, raising=False)
    names = LittleSettings().topics()
    assert names == TopicNames()
    assert set(names.by_spec().values()) == set(load_topic_specs())
    assert LittleSettings(data_dir=Path("d")).artifacts() == Path("d") / "artifacts"


def test_topic_names_rename_the_bundled_specs_and_prefix_every_name() -> None:
    names = TopicNames(runs="a.runs").prefixed("p.")
    assert names.runs == "p.a.runs"
    assert names.dlq == "p." + DLQ_TOPIC
    assert TopicNames().prefixed("") == TopicNames()
    specs = load_topic_specs()
    renamed = {s.name: s for s in names.specs(specs)}
    assert renamed["p.a.runs"].config == specs[RUNS_TOPIC].config
    assert renamed["p." + RUN_INDEX_TOPIC].partitions == specs[RUN_INDEX_TOPIC].partitions
    assert len(renamed) == len(specs)


def test_the_embedded_world_from_settings_keeps_artifacts_where_told(tmp_path: Path) -> None:
    settings = LittleSettings(data_dir=tmp_path / "data", artifacts_dir=tmp_path / "shared")
    with settings.world() as world:
        assert world.description == f"embedded:{tmp_path / 'data'}"
        ref = world.artifacts.put("run-1", b"payload", "application/octet-stream")
    assert (tmp_path / "shared").is_dir()
    assert not (tmp_path / "data" / "artifacts").exists()
    assert ref.size == len(b"payload")
