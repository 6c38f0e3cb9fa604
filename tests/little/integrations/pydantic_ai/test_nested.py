"""Nested agents under ``durable``: an agent run inside another's tool is recorded in the same
step as an agent call of its own session, under its own node name, inside the outer tool call;
a replay serves the outer call whole (the inner agent never runs)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import little
from little.events import AgentCallAdmitted, AgentCallSettled, ToolCallStarted, ToolCallSucceeded
from little.runtime import run
from tests.little.integrations.pydantic_ai import workflows as wf


def _events(world: little.World, run_id: str) -> list[Any]:
    return [r.event for r in world.read_run(run_id)]


def test_an_agent_run_in_a_tool_is_its_own_recorded_call_inside_the_tool_call(
    tmp_path: Path,
) -> None:
    wf.COUNTS.clear()
    with little.local_world(tmp_path / "w") as world:
        result = asyncio.run(run(world, wf.nested, "Kafka"))
        assert result.status == "completed", result.error
        events = _events(world, result.run_id)
    assert result.output == "lead: expert on [About Kafka]"
    admitted = [
        (e.session_id, e.ordinal, e.node_label) for e in events if isinstance(e, AgentCallAdmitted)
    ]
    assert admitted == [("research#lead", 0, "lead"), ("research#expert", 1, "expert")]
    # the expert's call opens and settles inside the lead's tool call
    kinds = [
        (type(e).__name__, e.session_id)
        for e in events
        if isinstance(e, AgentCallAdmitted | AgentCallSettled | ToolCallStarted | ToolCallSucceeded)
    ]
    assert kinds == [
        ("AgentCallAdmitted", "research#lead"),
        ("ToolCallStarted", "research#lead"),
        ("AgentCallAdmitted", "research#expert"),
        ("AgentCallSettled", "research#expert"),
        ("ToolCallSucceeded", "research#lead"),
        ("AgentCallSettled", "research#lead"),
    ]
    assert wf.COUNTS == {"model:lead": 2, "model:expert": 1, "tool:ask_expert": 1}


def test_a_replay_serves_the_outer_call_whole_and_never_runs_the_inner_agent(
    tmp_path: Path,
) -> None:
    with little.local_world(tmp_path / "w") as world:
        source = asyncio.run(run(world, wf.nested, "Kafka"))
        wf.COUNTS.clear()
        replay = asyncio.run(run(world, wf.nested, "Kafka", replay_from=source.run_id))
        assert replay.status == "completed", replay.error
        events = _events(world, replay.run_id)
    assert replay.output == source.output
    assert wf.COUNTS == {}
    settled = [(e.session_id, e.replayed) for e in events if isinstance(e, AgentCallSettled)]
    assert settled == [("research#lead", True)]
