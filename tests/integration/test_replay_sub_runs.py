"""Sub-runs in a replay (issue 26 item 6), on the embedded world and on the real broker: a
replaying run's sub-run replays the sub-run the recorded run started at the same call. An
unchanged one is served from it whole, marked as any served call is, and the parent's later
calls stay served; a changed one diverges inside itself, and the parent latches from there."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

import little
from little.events import AgentCallSettled, RunStarted
from little.replay import replay_envelope, replay_run
from little.report import replay_line, report_data
from little.runtime import run
from tests.little.runtime import replay_workflows as rw
from tests.worlds import world_of_param

_versions = itertools.count()


@pytest.fixture(
    params=["embedded", pytest.param("kafka", marks=pytest.mark.kafka)],
)
def world(request: pytest.FixtureRequest, tmp_path: Path, unique: str) -> Iterator[little.World]:
    rw.MODELS.clear()
    with world_of_param(request, tmp_path, f"t.{unique}.") as w:
        yield w


def v() -> str:
    return f"s{next(_versions)}"


def settled(world: little.World, run_id: str) -> list[AgentCallSettled]:
    return [e for x in world.read_run(run_id) if isinstance(e := x.event, AgentCallSettled)]


def marks(world: little.World, run_id: str) -> list[tuple[str | None, bool, str | None]]:
    return [(e.step_path, e.replayed, e.miss_reason) for e in settled(world, run_id)]


def invoked() -> dict[str, int]:
    return {stage: rw.invocations(stage) for stage in ("research", "sketch", "write")}


def test_an_unchanged_sub_run_is_served_from_the_recorded_one_and_the_parent_stays_served(
    world: little.World,
) -> None:
    first = asyncio.run(run(world, rw.parent(v()), "Kafka"))
    assert first.status == "completed"
    (recorded_sub,) = replay_run(world, first.run_id).state.sub_runs
    second = asyncio.run(run(world, rw.parent(v()), "Kafka", replay_from=first.run_id))
    assert second.status == "completed"
    assert second.output == first.output
    # nothing was invoked again: not the sub-run's model, not the parent's later call
    assert invoked() == {"research": 1, "sketch": 1, "write": 1}
    assert marks(world, second.run_id) == [("research", True, None), ("write", True, None)]
    assert second.replay is not None
    assert (second.replay.replayed_calls, second.replay.fresh_calls) == (2, 0)

    # the sub-run is a replay of the recorded sub-run, marked as one on every surface
    (sub,) = replay_run(world, second.run_id).state.sub_runs
    started = next(
        e for x in world.read_run(sub.sub_run_id) if isinstance(e := x.event, RunStarted)
    )
    assert (started.replay_source_run_id, started.replay_refused_reason) == (
        recorded_sub.sub_run_id,
        None,
    )
    (call,) = settled(world, sub.sub_run_id)
    assert (call.step_path, call.replayed, call.source_run_id) == (
        "sketch",
        True,
        recorded_sub.sub_run_id,
    )
    replayed = replay_run(world, sub.sub_run_id)
    data = report_data(replayed)  # `little report --json`
    envelope = data["replay"]
    assert (envelope["replayed"], envelope["source_run_id"]) == (True, recorded_sub.sub_run_id)
    assert (envelope["replayed_calls"], envelope["fresh_calls"]) == (1, 0)
    assert replay_line(replay_envelope(replayed.state)) == (  # `little report`, `little status`
        f"replay of {recorded_sub.sub_run_id}: 1/1 agent call(s) reused a recorded run "
        "(not fresh evidence)"
    )
    sub_state = replayed.state
    assert (sub_state.usage.calls, sub_state.avoided_usage.calls) == (0, 1)  # billed nothing


def test_a_changed_sub_run_diverges_inside_itself_and_the_parent_latches_from_there(
    world: little.World,
) -> None:
    first = asyncio.run(run(world, rw.parent(v()), "Kafka"))
    assert first.status == "completed"
    second = asyncio.run(
        run(world, rw.parent(v(), sketch="Draw "), "Kafka", replay_from=first.run_id)
    )
    assert second.status == "completed"
    assert invoked() == {"research": 1, "sketch": 2, "write": 2}
    # write's request is unchanged (it does not read the sketch), but it came after a sub-run
    # that did fresh work
    assert marks(world, second.run_id) == [
        ("research", True, None),
        ("write", False, "sub-run-fresh"),
    ]
    (sub,) = replay_run(world, second.run_id).state.sub_runs
    assert marks(world, sub.sub_run_id) == [("sketch", False, "key-mismatch")]
