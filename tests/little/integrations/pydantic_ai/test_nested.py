"""Nested agents under ``durable``: an agent run inside another's tool is recorded in the same
step as an agent call of its own session, under its own node name, inside the outer tool call;
a replay serves the outer call whole (the inner agent never runs), and so does a simulation,
whose trace leaves out the calls made inside a tool call (the outer call stands for them)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import little
from little.events import AgentCallAdmitted, AgentCallSettled, ToolCallStarted, ToolCallSucceeded
from little.golden import write_golden
from little.runtime import run, simulate
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


def test_a_simulation_of_a_run_with_a_nested_agent_is_identical_invoking_nothing(
    tmp_path: Path,
) -> None:
    """Against the run and against its golden file: the outer call is served whole (the inner
    agent never runs), and the inner call's entry is not expected of it."""
    with little.local_world(tmp_path / "w") as world:
        source = asyncio.run(run(world, wf.nested, "Kafka"))
        assert source.status == "completed", source.error
        golden = write_golden(world, source.run_id, tmp_path / "nested.golden")
        wf.COUNTS.clear()
        simulated = asyncio.run(simulate(world, wf.nested, source.run_id))
    from_file = asyncio.run(simulate(None, wf.nested, tmp_path / "nested.golden"))
    assert golden.run_id == source.run_id
    for sim in (simulated, from_file):
        assert sim.divergence is None, sim.lines()
        assert sim.result is not None
        assert sim.result.output == source.output
    assert wf.COUNTS == {}  # no model, no tool, no inner agent


def test_an_agent_call_after_a_nested_one_is_served_by_a_replay_and_a_simulation(
    tmp_path: Path,
) -> None:
    """The expert's call, made inside the lead's tool call, takes its place in that tool call's
    scope, not the step's: a replay serving the lead's call whole (the expert never runs)
    finds the closing call where the source had it, and serves it too."""
    with little.local_world(tmp_path / "w") as world:
        source = asyncio.run(run(world, wf.nested_then, "Kafka"))
        assert source.status == "completed", source.error
        scopes = [
            (e.session_id, e.scope)
            for e in _events(world, source.run_id)
            if isinstance(e, AgentCallAdmitted)
        ]
        wf.COUNTS.clear()
        replay = asyncio.run(run(world, wf.nested_then, "Kafka", replay_from=source.run_id))
        assert replay.status == "completed", replay.error
        settled = [
            (e.session_id, e.replayed, e.miss_reason)
            for e in _events(world, replay.run_id)
            if isinstance(e, AgentCallSettled)
        ]
        simulated = asyncio.run(simulate(world, wf.nested_then, source.run_id))
    lead_tool = next(e for e in scopes if e[0] == "research#expert")[1]
    assert scopes == [
        ("research#lead", ""),
        ("research#expert", lead_tool),
        ("research#closing", ""),
    ]
    assert lead_tool.startswith("#0/")  # inside the first call of the step scope, its tool call
    assert replay.output == source.output
    assert settled == [("research#lead", True, None), ("research#closing", True, None)]
    assert simulated.divergence is None, simulated.lines()
    assert wf.COUNTS == {}  # no model, no tool, no agent ran again
