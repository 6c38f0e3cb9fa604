"""The whole path on a real broker: kafka_world, topics from deploy/topics.yaml, replay and
snapshots on Kafka, and the report CLI against it."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

import little
from little.events import RunClaimed
from little.log import RUNS_TOPIC, SNAPSHOTS_TOPIC, load_topic_specs
from little.log.kafka import apply_topics
from little.replay import Snapshot, encode_snapshot, replay_run
from tests.cli import little_cli
from tests.sample_runs import first_writer, second_writer

pytestmark = pytest.mark.kafka


@pytest.fixture
def world(kafka_bootstrap_servers: str, tmp_path: object) -> Iterator[little.World]:
    with little.kafka_world(
        kafka_bootstrap_servers, provision=True, artifacts_dir=f"{tmp_path}/artifacts"
    ) as w:
        yield w


def test_topics_are_provisioned_as_specified_and_report_no_drift(
    kafka_bootstrap_servers: str, world: little.World
) -> None:
    reports = apply_topics(kafka_bootstrap_servers, load_topic_specs().values(), create=False)
    assert {r.name: r.status for r in reports} == {name: "ok" for name in load_topic_specs()}
    assert world.log.partitions == load_topic_specs()[RUNS_TOPIC].partitions


def test_crashed_run_replays_from_kafka_and_from_a_kafka_snapshot(
    world: little.World, unique: str
) -> None:
    run_id = f"run-{unique}"
    world.append(first_writer(run_id))
    before = replay_run(world, run_id)
    assert before.pending_step_paths == ("research",)
    world.snapshots.put(run_id, encode_snapshot(Snapshot.of(before.state)))
    world.append([RunClaimed(run_id=run_id, epoch=2, owner="w2", observed_seq=9)])
    world.append(second_writer(run_id, 9))

    full = replay_run(world, run_id, use_snapshot=False)
    late = replay_run(world, run_id)
    assert full.state.status == "completed"
    assert late.from_snapshot == before.state.last_position
    assert late.events_folded == 5
    assert late.state == full.state
    assert full.state.avoided_usage.calls == 1


def test_snapshot_topic_keeps_the_newest_per_run(world: little.World, unique: str) -> None:
    world.snapshots.put(f"a-{unique}", b"first")
    world.snapshots.put(f"a-{unique}", b"second")
    world.snapshots.put(f"b-{unique}", b"other")
    assert world.snapshots.get(f"a-{unique}") == b"second"
    assert world.snapshots.get(f"none-{unique}") is None
    assert SNAPSHOTS_TOPIC == "little.snapshots.v1"


def test_report_cli_on_kafka(
    world: little.World, unique: str, kafka_bootstrap_servers: str
) -> None:
    run_id = f"cli-{unique}"
    world.append(first_writer(run_id))
    out = little_cli(
        "report",
        run_id,
        "--json",
        env={"LITTLE_KAFKA_BOOTSTRAP": kafka_bootstrap_servers, "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["status"] == "running"
    assert [s["should_run"] for s in report["steps"]] == [False, True]


def test_confluent_wire_format_on_kafka_with_a_registry(
    kafka_bootstrap_servers: str, unique: str, tmp_path: object
) -> None:
    """With a registry configured, records on the topic are Confluent-framed and read back."""
    with little.kafka_world(
        kafka_bootstrap_servers,
        schema_registry_url=f"mock://{unique}",
        provision=True,
        artifacts_dir=f"{tmp_path}/a",
    ) as world:
        run_id = f"sr-{unique}"
        world.append(first_writer(run_id))
        raw = list(world.log.read_run(run_id))
        assert {r.payload[:1] for r in raw} == {b"\x00"}
        assert replay_run(world, run_id).pending_step_paths == ("research",)
        subjects = world.codec.registry.get_subjects()  # type: ignore[union-attr]
        assert f"{RUNS_TOPIC}-little.events.RunStarted" in subjects


def test_the_cli_uses_the_topic_names_the_environment_gives(
    kafka_bootstrap_servers: str, unique: str, tmp_path: object, world: little.World
) -> None:
    """``LITTLE_RUNS_TOPIC`` and the other topic variables rename the topics for every
    ``little`` command as for the services: ``topics apply`` creates them under those names,
    and ``events`` reads a run written there (it read the default topic before). The
    ``world`` fixture provisions the default topics, which the last step reads."""
    names = little.TopicNames().prefixed(f"t.{unique}.")
    env = {
        "PATH": "/usr/bin:/bin",
        "LITTLE_KAFKA_BOOTSTRAP": kafka_bootstrap_servers,
        "LITTLE_ARTIFACTS_DIR": f"{tmp_path}/artifacts",
        "LITTLE_RUNS_TOPIC": names.runs,
        "LITTLE_RUNS_INDEX_TOPIC": names.runs_index,
        "LITTLE_SNAPSHOTS_TOPIC": names.snapshots,
        "LITTLE_COMMANDS_TOPIC": names.commands,
        "LITTLE_DLQ_TOPIC": names.dlq,
    }
    applied = little_cli("topics", "apply", env=env)
    assert applied.returncode == 0, applied.stderr
    for name in names.by_spec().values():
        assert name in applied.stdout
    reports = apply_topics(kafka_bootstrap_servers, names.specs(load_topic_specs()), create=False)
    assert {r.status for r in reports} == {"ok"}

    run_id = f"named-{unique}"
    with little.kafka_world(
        kafka_bootstrap_servers, topics=names, artifacts_dir=f"{tmp_path}/artifacts"
    ) as world:
        world.append(first_writer(run_id))
    out = little_cli("events", run_id, "--json", env=env)
    assert out.returncode == 0, out.stderr
    types = [json.loads(line)["type"] for line in out.stdout.splitlines()]
    assert types == [e.event_type for e in first_writer(run_id)]
    defaults = {k: v for k, v in env.items() if not k.endswith("_TOPIC")}
    default = little_cli("events", run_id, env=defaults)
    assert default.returncode == 1
    assert f"run {run_id} has no events" in default.stderr


def test_one_topic_prefix_setting_names_all_five_topics_for_the_cli(
    kafka_bootstrap_servers: str, unique: str, tmp_path: object
) -> None:
    """``LITTLE_TOPIC_PREFIX`` alone does what ``kafka_world(topic_prefix=)`` does: ``topics
    apply`` creates the five prefixed topics and ``events`` reads a run written there."""
    prefix = f"p.{unique}."
    env = {
        "PATH": "/usr/bin:/bin",
        "LITTLE_KAFKA_BOOTSTRAP": kafka_bootstrap_servers,
        "LITTLE_ARTIFACTS_DIR": f"{tmp_path}/artifacts",
        "LITTLE_TOPIC_PREFIX": prefix,
    }
    applied = little_cli("topics", "apply", env=env)
    assert applied.returncode == 0, applied.stderr
    names = little.TopicNames().prefixed(prefix)
    for name in names.by_spec().values():
        assert name in applied.stdout
    reports = apply_topics(kafka_bootstrap_servers, names.specs(load_topic_specs()), create=False)
    assert {r.name: r.status for r in reports} == dict.fromkeys(names.by_spec().values(), "ok")
    run_id = f"prefixed-{unique}"
    with little.kafka_world(
        kafka_bootstrap_servers, topic_prefix=prefix, artifacts_dir=f"{tmp_path}/artifacts"
    ) as world:
        world.append(first_writer(run_id))
    out = little_cli("events", run_id, "--json", env=env)
    assert out.returncode == 0, out.stderr
    types = [json.loads(line)["type"] for line in out.stdout.splitlines()]
    assert types == [e.event_type for e in first_writer(run_id)]


def test_topics_apply_fix_sets_drifted_configs_and_only_reports_partition_counts(
    kafka_bootstrap_servers: str, unique: str
) -> None:
    """Drift you can fix: ``--fix`` prints what it changes, then sets retention and cleanup
    back to the specs'; a partition count is reported (changing it would move runs), and a
    replication factor capped at the broker count says so."""
    from dataclasses import replace

    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    from little.log.kafka.client import connect_admin

    names = little.TopicNames().prefixed(f"fix.{unique}.")
    specs = names.specs(load_topic_specs())
    by_name = {s.name: s for s in specs}
    apply_topics(
        kafka_bootstrap_servers,
        [replace(s, partitions=1) if s.name == names.dlq else s for s in specs],
    )
    admin = connect_admin(kafka_bootstrap_servers)
    drifted = {
        names.runs: [("retention.ms", "3600000")],
        names.snapshots: [("cleanup.policy", "delete")],
    }
    for topic, entries in drifted.items():
        resource = ConfigResource(
            ConfigResource.Type.TOPIC,
            topic,
            incremental_configs=[
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in entries
            ],
        )
        admin.incremental_alter_configs([resource])[resource].result()
    env = {
        "PATH": "/usr/bin:/bin",
        "LITTLE_KAFKA_BOOTSTRAP": kafka_bootstrap_servers,
        "LITTLE_RUNS_TOPIC": names.runs,
        "LITTLE_RUNS_INDEX_TOPIC": names.runs_index,
        "LITTLE_SNAPSHOTS_TOPIC": names.snapshots,
        "LITTLE_COMMANDS_TOPIC": names.commands,
        "LITTLE_DLQ_TOPIC": names.dlq,
    }
    checked = little_cli("topics", "apply", "--check", env=env)
    assert checked.returncode == 2
    fixed = little_cli("topics", "apply", "--fix", env=env)
    assert fixed.returncode == 2, fixed.stderr  # the dlq's partition count is still off
    assert f"{names.runs}: will set retention.ms: 3600000 (want -1)" in fixed.stdout
    assert f"{names.snapshots}: will set cleanup.policy: delete (want compact)" in fixed.stdout
    assert "capped at 1" in fixed.stdout
    after = {r.name: r for r in apply_topics(kafka_bootstrap_servers, specs, create=False)}
    assert after[names.runs].status == "ok"
    assert after[names.snapshots].status == "ok"
    (dlq_drift,) = after[names.dlq].drift
    assert dlq_drift.startswith(f"partitions: 1 (want {by_name[names.dlq].partitions}; not changed")
    assert after[names.runs].notes == (
        "replication factor 3 capped at 1: the cluster has 1 broker",
    )


def test_a_finished_outer_loop_run_again_appends_nothing_on_kafka(
    world: little.World, unique: str
) -> None:
    import asyncio

    from little.events import RunCompleted
    from little.runtime import outer_loop
    from little.runtime._outer_loop import loop_run_id
    from tests.little.runtime import loops

    loop_id = f"done-{unique}"
    first = asyncio.run(outer_loop(world, loop_id, loops.cycle, {"goal": "ship"}, cycles=1))
    before = [(r.offset, r.event.event_id) for r in world.read_run(loop_run_id(loop_id))]
    again = asyncio.run(outer_loop(world, loop_id, loops.cycle, {"goal": "ship"}, cycles=1))
    after = list(world.read_run(loop_run_id(loop_id)))
    assert again == first
    assert [(r.offset, r.event.event_id) for r in after] == before
    assert isinstance(after[-1].event, RunCompleted)
