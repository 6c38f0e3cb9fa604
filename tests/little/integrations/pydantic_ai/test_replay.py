"""``replay_from`` over a Pydantic AI agent: an unchanged call is served whole from the recorded
run (the framework's loop runs over the recorded responses and tool results, invoking nothing),
an edited one runs fresh with its miss reason, and the request hash chain goes on as recorded."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import little
from little.events import AgentCallSettled, ModelCalled, ToolCallStarted
from little.runtime import run, simulate
from tests.little.integrations.pydantic_ai import workflows as wf


def _events(world: little.World, run_id: str) -> list[Any]:
    return [r.event for r in world.read_run(run_id)]


def _settled(events: list[Any]) -> list[tuple[int, str, bool, str | None]]:
    return [
        (e.ordinal, e.outcome, e.replayed, e.miss_reason)
        for e in events
        if isinstance(e, AgentCallSettled)
    ]


def test_an_unchanged_replay_is_served_whole_invoking_nothing(tmp_path: Path) -> None:
    with little.local_world(tmp_path / "w") as world:
        source = asyncio.run(run(world, wf.version("1"), "Kafka"))
        assert source.status == "completed", source.error
        wf.COUNTS.clear()
        replay = asyncio.run(run(world, wf.version("1"), "Kafka", replay_from=source.run_id))
        assert replay.status == "completed", replay.error
        events = _events(world, replay.run_id)
        # a simulation checks every served turn's request hash against the recorded one
        simulated = asyncio.run(simulate(world, wf.version("1"), source.run_id))
    assert wf.COUNTS == {}  # zero invocations: no model, no tool
    assert replay.output == source.output
    assert _settled(events) == [(0, "succeeded", True, None), (1, "succeeded", True, None)]
    assert not [e for e in events if isinstance(e, ModelCalled | ToolCallStarted)]
    assert simulated.identical, simulated.lines()


def test_editing_the_second_prompt_serves_the_first_call_and_runs_the_second_fresh(
    tmp_path: Path,
) -> None:
    with little.local_world(tmp_path / "w") as world:
        source = asyncio.run(run(world, wf.version("1"), "Kafka"))
        assert source.status == "completed", source.error
        wf.COUNTS.clear()
        edited = wf.version("edited", follow_up="In five words.")
        replay = asyncio.run(run(world, edited, "Kafka", replay_from=source.run_id))
        assert replay.status == "completed", replay.error
        src, rep = _events(world, source.run_id), _events(world, replay.run_id)
    assert _settled(rep) == [(0, "succeeded", True, None), (1, "succeeded", False, "key-mismatch")]
    assert replay.output == {
        "first": source.output["first"],
        "second": "answer to [In five words.]",
    }
    assert wf.COUNTS == {"model": 1}  # only the edited call's one request; no tool
    src_called = [e for e in src if isinstance(e, ModelCalled)]
    (fresh,) = [e for e in rep if isinstance(e, ModelCalled)]
    assert fresh.turn == 3  # numbered after the served call's two turns
    assert fresh.previous_request_hash == src_called[1].request_hash  # the chain goes on
