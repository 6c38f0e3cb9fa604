"""The embedded world: events in, the same events out, with positions and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

import little
from little.events import RunClaimed, RunStarted, StepStarted
from little.log import OutgoingRecord


def test_append_and_read_back_equal_events(tmp_path: Path) -> None:
    with little.local_world(tmp_path) as world:
        events = [
            RunClaimed(run_id="r1", owner="me", observed_seq=-1),
            RunStarted(run_id="r1", seq=0, workflow="wf", workflow_version="1"),
            StepStarted(run_id="r1", seq=1, step_id="a", step_path="a"),
        ]
        positions = world.append(events)
        logged = list(world.read_run("r1"))
    assert [x.event for x in logged] == events
    assert [(x.partition, x.offset) for x in logged] == [(p.partition, p.offset) for p in positions]


def test_reopened_world_sees_what_was_written(tmp_path: Path) -> None:
    with little.local_world(tmp_path) as world:
        world.append([RunStarted(run_id="r2", seq=0, workflow="wf", workflow_version="1")])
    with little.local_world(tmp_path) as again:
        assert [x.event.type for x in again.read_run("r2")] == ["RunStarted"]


def test_one_append_holds_one_run(tmp_path: Path) -> None:
    with little.local_world(tmp_path) as world, pytest.raises(ValueError, match="one run"):
        world.append(
            [
                RunStarted(run_id="a", seq=0, workflow="wf", workflow_version="1"),
                RunStarted(run_id="b", seq=0, workflow="wf", workflow_version="1"),
            ]
        )


def test_undecodable_record_names_run_partition_and_offset(tmp_path: Path) -> None:
    with little.local_world(tmp_path) as world:
        world.append([RunStarted(run_id="r3", seq=0, workflow="wf", workflow_version="1")])
        pos = world.log.append("r3", [OutgoingRecord(b"not avro at all")])[0]
        reader = world.read_run("r3")
        next(reader)
        with pytest.raises(little.RecordDecodeError) as err:
            next(reader)
    message = str(err.value)
    assert "run r3" in message
    assert f"partition {pos.partition} offset {pos.offset}" in message
    assert "not-avro-framing" in message


def test_partition_count_of_an_existing_world_cannot_change(tmp_path: Path) -> None:
    little.local_world(tmp_path, partitions=4).close()
    with pytest.raises(little.ConfigurationError, match="has 4 partitions"):
        little.local_world(tmp_path, partitions=8)
