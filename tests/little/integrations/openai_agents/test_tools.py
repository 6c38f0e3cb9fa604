"""Function tools under ``LittleRunner``: a side-effecting one is never served from a recorded
run; one gated by a person (``little_tool(..., requires_approval=True)`` or the SDK's own
``needs_approval``) becomes little's durable approval wait: the run suspends holding no
process, a decision is sent, the resumed run calls the tool once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import little
from little.events import AgentCallSettled, ToolCallStarted, ToolCallSucceeded
from little.runtime import decide_approval, resume, run
from tests.little.integrations.openai_agents import agents_support as s
from tests.little.integrations.openai_agents.test_runner import answers, calls_dir, events, world

__all__ = ["calls_dir", "world"]  # fixtures

REFUND = {"ticket": "Please refund order A1"}
CALL = "handle#refunds/1:call_2"  # the session, the turn and the model's call id


def test_a_side_effecting_tool_is_never_served_from_a_recorded_run(
    world: little.World, calls_dir: Path
) -> None:
    first = asyncio.run(run(world, s.refund_flow, {**REFUND, "gate": "none"}))
    assert first.status == "completed", first.error
    assert first.output == "order A1 refunded (re: Please refund order A1)"
    again = asyncio.run(
        run(world, s.refund_flow, {**REFUND, "gate": "none"}, replay_from=first.run_id)
    )
    assert again.status == "completed", again.error
    assert [(c.replayed, c.miss_reason) for c in events(world, again.run_id, AgentCallSettled)] == [
        (False, "side-effecting-call")
    ]
    assert [c["tool"] for c in s.calls(calls_dir, "tool")] == ["refund", "refund"]


@pytest.mark.parametrize("gate", ["little", "sdk", "sdk-callable"])
def test_a_gated_tool_waits_for_a_person_durably_then_runs_once(
    world: little.World, calls_dir: Path, gate: str
) -> None:
    first = asyncio.run(run(world, s.refund_flow, {**REFUND, "gate": gate}))
    assert first.status == "waiting", first.error
    assert s.calls(calls_dir, "tool") == []
    assert events(world, first.run_id, ToolCallStarted) == []
    asyncio.run(decide_approval(world, first.run_id, CALL, approved=True))
    done = asyncio.run(resume(world, first.run_id))
    assert done.status == "completed", done.error
    assert done.output == "order A1 refunded (re: Please refund order A1)"
    assert [c["tool"] for c in s.calls(calls_dir, "tool")] == ["refund"]
    assert len(events(world, first.run_id, ToolCallSucceeded)) == 1
    # the first model request was answered from the log on the resume
    assert len(s.calls(calls_dir, "model")) == 2


def test_a_rejected_call_reaches_the_model_as_the_tools_error(
    world: little.World, calls_dir: Path
) -> None:
    first = asyncio.run(run(world, s.refund_flow, {**REFUND, "gate": "little"}))
    assert first.status == "waiting", first.error
    asyncio.run(decide_approval(world, first.run_id, CALL, approved=False, reason="too late"))
    done = asyncio.run(resume(world, first.run_id))
    assert done.status == "completed", done.error
    assert "rejected by a person: too late" in str(done.output)
    assert s.calls(calls_dir, "tool") == []


def test_a_gated_tool_inside_an_agent_as_tool_suspends_the_run_answering_no_outer_call(
    world: little.World, calls_dir: Path
) -> None:
    """The expert's tool waits for a person inside the lead's ``expert.as_tool()`` call: the
    run waits (the suspension is no tool error the SDK formats for the lead's model), neither
    tool call answered on the log; approved, the resume runs the expert's tool once and the
    lead's call completes."""
    ticket = {"ticket": "Where is my order A1?", "gate": True}
    first = asyncio.run(run(world, s.as_tool_flow, ticket))
    assert first.status == "waiting", first.error
    started = events(world, first.run_id, ToolCallStarted)
    assert [(t.session_id, t.tool) for t in started] == [("handle#lead", "lookup_order")]
    assert answers(world, first.run_id) == []
    assert s.calls(calls_dir, "tool") == []
    asyncio.run(decide_approval(world, first.run_id, "handle#expert/1:call_2", approved=True))
    done = asyncio.run(resume(world, first.run_id))
    assert done.status == "completed", done.error
    assert done.output == "order A1 shipped (re: Where is order A1?) (re: Where is my order A1?)"
    assert [c["order"] for c in s.calls(calls_dir, "tool")] == ["A1"]
    assert len(events(world, first.run_id, ToolCallSucceeded)) == 2
