"""Topic specs come from deploy/topics.yaml, with per-environment overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from little.errors import ConfigurationError
from little.log import COMMANDS_TOPIC, RUNS_TOPIC, SNAPSHOTS_TOPIC, load_topic_specs
from tests.paths import REPO


def test_bundled_specs_are_the_deploy_file() -> None:
    assert load_topic_specs() == load_topic_specs(REPO / "deploy" / "topics.yaml")


def test_runs_kept_forever_snapshots_compacted_commands_copartitioned() -> None:
    specs = load_topic_specs()
    assert specs[RUNS_TOPIC].config["retention.ms"] == "-1"
    assert specs[RUNS_TOPIC].config["cleanup.policy"] == "delete"
    assert specs[SNAPSHOTS_TOPIC].config["cleanup.policy"] == "compact"
    assert specs[COMMANDS_TOPIC].partitions == specs[RUNS_TOPIC].partitions


def test_overrides_from_arguments_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    specs = load_topic_specs(partitions=4, replication_factor=1, min_insync_replicas=1)
    assert {s.partitions for s in specs.values()} == {4}
    assert {s.config["min.insync.replicas"] for s in specs.values()} == {"1"}
    monkeypatch.setenv("LITTLE_TOPIC_REPLICATION_FACTOR", "2")
    assert {s.replication_factor for s in load_topic_specs().values()} == {2}
    monkeypatch.setenv("LITTLE_TOPIC_PARTITIONS", "many")
    with pytest.raises(ConfigurationError, match="LITTLE_TOPIC_PARTITIONS"):
        load_topic_specs()


def test_runs_and_commands_partition_counts_must_match(tmp_path: Path) -> None:
    bad = tmp_path / "topics.yaml"
    bad.write_text(
        "topics:\n  little.runs.v1: {partitions: 12}\n  little.commands.v1: {partitions: 6}\n"
    )
    with pytest.raises(ConfigurationError, match="must be equal"):
        load_topic_specs(bad)


def test_broken_file_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "topics.yaml"
    bad.write_text("nothing: here\n")
    with pytest.raises(ConfigurationError, match="not valid"):
        load_topic_specs(bad)
