"""An exact duplicate of an accepted event on the embedded world: the same record's bytes
appended again, later in the run's partition (what a mirror or a re-produce leaves). The run
stays readable and resumable, the copy is skipped and counted, and the report says so; another
event at an accepted seq stays an integrity error (issue 13)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import little
from little.errors import RuntimeIntegrityError
from little.events import StepCompleted, StepStarted
from little.log import OutgoingRecord, StoredRecord
from little.replay import replay_run
from little.runtime import StepContext, WorkflowContext, run, workflow
from little_services.projection import MemoryProjectionStore, ProjectionConfig, create_projector
from tests.cli import little_cli

RUN = "run-copied"
CRASH: list[bool] = []
CALLS: list[str] = []


class Crash(BaseException):
    """The process dies before the second step completes."""


async def _one(step: StepContext, x: int) -> int:
    CALLS.append("one")
    return x + 1


async def _two(step: StepContext, x: int) -> int:
    CALLS.append("two")
    if CRASH:
        CRASH.clear()
        raise Crash
    return x * 10


@workflow("tests.duplicates.two_steps", version="1")
async def two_steps(ctx: WorkflowContext, x: int) -> int:
    y: int = await ctx.step("one", _one, x)
    z: int = await ctx.step("two", _two, y)
    return z


def record_of(world: little.World, run_id: str, cls: type[Any]) -> StoredRecord:
    return next(
        r for r in world.log.read_run(run_id) if world.decode(r).event.type == cls.event_type
    )


def reproduce(world: little.World, record: StoredRecord) -> None:
    """The same bytes and headers again, appended to the run's partition."""
    world.log.append(record.run_id, [OutgoingRecord(record.payload, record.headers)])


def test_a_copy_of_an_accepted_record_is_skipped_the_run_resumes_and_the_report_says_so(
    tmp_path: Path,
) -> None:
    data = tmp_path / "w"
    CALLS.clear()
    with little.local_world(data) as world:
        CRASH.append(True)
        with pytest.raises(Crash):
            asyncio.run(run(world, two_steps, 1, run_id=RUN))
        reproduce(world, record_of(world, RUN, StepCompleted))  # step one's completion again
        result = asyncio.run(run(world, two_steps, 1, run_id=RUN))  # the resume reads it
        assert (result.status, result.output) == ("completed", 20)
        assert CALLS == ["one", "two", "two"]  # step one never ran again
        state = replay_run(world, RUN).state
        assert state.status == "completed"
        assert state.duplicate_events == 1
        assert state.step("one").visits == 1  # type: ignore[union-attr]

        store = MemoryProjectionStore()
        with create_projector(world, store, ProjectionConfig()) as projector:
            totals = projector.run(until_caught_up=True)
        row = store.get(RUN)
        assert row is not None
        assert (row.status, row.integrity, totals.dead_letters) == ("completed", None, 0)
        assert row.state.duplicate_events == 1

    report = little_cli("report", RUN, "--json", "--data-dir", str(data))
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["duplicate_events"] == 1
    table = little_cli("report", RUN, "--data-dir", str(data))
    assert table.returncode == 0, table.stderr
    assert "1 exact duplicate(s) skipped" in " ".join(table.stdout.split())


def test_another_event_at_an_accepted_seq_stays_an_integrity_error(tmp_path: Path) -> None:
    with little.local_world(tmp_path / "w") as world:
        asyncio.run(run(world, two_steps, 1, run_id=RUN))
        started = world.decode(record_of(world, RUN, StepStarted)).event
        other = StepStarted(
            run_id=RUN, seq=started.seq, epoch=started.epoch, step_path="one", step_id="one"
        )
        world.append([other])  # a new event (its own id) at an accepted seq
        with pytest.raises(RuntimeIntegrityError, match="another event than the one accepted"):
            replay_run(world, RUN)
        store = MemoryProjectionStore()
        with create_projector(world, store, ProjectionConfig()) as projector:
            assert projector.run(until_caught_up=True).dead_letters == 1
        row = store.get(RUN)
        assert row is not None
        assert row.status == "integrity_error"
        assert row.integrity is not None
        assert other.event_id in row.integrity.message
