"""``RunResult.replay``: every result of ``run`` / ``resume`` carries the run's replay envelope,
the one the fold of its log gives (seed 003, "A replayed run is always marked")."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import little
from little.replay import ReplayEnvelope, replay_envelope, replay_run
from little.runtime import RunResult, WorkflowContext, resume, run, workflow
from tests.little.runtime import replay_workflows as rw

_versions = itertools.count()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[little.World]:
    rw.MODELS.clear()
    rw.FAIL.clear()
    with little.local_world(tmp_path) as w:
        yield w
    rw.FAIL.clear()


def version(**edits: str) -> Any:
    return rw.version(f"rr{next(_versions)}", **edits)


def folded(world: little.World, result: RunResult) -> ReplayEnvelope:
    return replay_envelope(replay_run(world, result.run_id).state)


def test_an_ordinary_run_is_recorded_and_not_a_replay(world: little.World) -> None:
    result = asyncio.run(run(world, version(), "Kafka"))
    assert result.replay == ReplayEnvelope(recorded=True, not_recorded_reason=None, fresh_calls=3)
    assert result.replay == folded(world, result)
    # a result read back from the log of a run that ended says the same
    assert asyncio.run(resume(world, result.run_id)).replay == result.replay


def test_a_failed_replay_carries_its_envelope(world: little.World) -> None:
    v = version()
    rw.FAIL.add("write")
    source = asyncio.run(run(world, v, "Kafka"))
    assert source.status == "failed"
    assert source.replay is not None
    assert source.replay.fresh_calls == 3  # the failed call too: it settled
    failed = asyncio.run(run(world, v, "Kafka", replay_from=source.run_id))  # still down
    assert failed.status == "failed"
    assert failed.replay == ReplayEnvelope(
        replayed=True,
        recorded=True,
        source_run_id=source.run_id,
        not_recorded_reason=None,
        replayed_calls=2,
        fresh_calls=1,
        diverged_at_call=2,
        diverged_at_node=("write", "write", 0),
        miss_reason="recorded-failure",
        mode="repairable",
    )
    assert failed.replay == folded(world, failed)
    assert asyncio.run(resume(world, failed.run_id)).replay == failed.replay


def test_a_run_with_no_agent_calls_is_not_recorded_and_a_replay_from_it_is_refused(
    world: little.World,
) -> None:
    @workflow(rw.NAME, version=f"quiet{next(_versions)}")
    async def quiet(ctx: WorkflowContext, topic: str) -> str:
        return topic

    source = asyncio.run(run(world, quiet, "Kafka"))
    assert source.replay is not None
    assert (source.replay.recorded, source.replay.not_recorded_reason) == (
        False,
        "no-agent-calls",
    )
    replay = asyncio.run(run(world, version(), "Kafka", replay_from=source.run_id))
    assert replay.replay is not None
    assert replay.replay.refused_reason == "no-recorded-calls"  # what not recorded means
    assert (replay.replay.replayed, replay.replay.fresh_calls, replay.replay.recorded) == (
        False,
        3,
        True,
    )
    assert replay.replay == folded(world, replay)


def test_a_run_result_built_by_hand_keeps_its_positions() -> None:
    result = RunResult("r", "completed", 1, None, 2, 0)
    assert (result.served_calls, result.reinvoked_calls, result.replay) == (2, 0, None)
