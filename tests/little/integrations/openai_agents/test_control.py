"""little's control exceptions pass through the Agents SDK's error handling: a spent budget
ends the run as itself, whether it is met before a model request or raised inside a tool
(where the SDK would otherwise hand the model an error string and go on)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import little
from little.events import AgentCallSettled, ToolCallStarted
from little.runtime import run
from tests.little.integrations.openai_agents import agents_support as s
from tests.little.integrations.openai_agents.test_runner import (
    TICKET,
    answers,
    calls_dir,
    events,
    world,
)

__all__ = ["calls_dir", "world"]  # fixtures


def test_a_budget_spent_before_a_model_request_fails_the_run_as_itself(
    world: little.World, calls_dir: Path
) -> None:
    result = asyncio.run(run(world, s.triage, TICKET, max_tokens=30))
    assert result.status == "failed"
    assert "BudgetExceededError" in (result.error or ""), result.error
    # the first call spent 70 tokens in two requests; the second call's first never went out
    assert len(s.calls(calls_dir, "model")) == 2
    assert [c.outcome for c in events(world, result.run_id, AgentCallSettled)] == [
        "succeeded",
        "failed",
    ]


def test_a_budget_spent_inside_a_tool_is_not_turned_into_a_tool_error_string(
    world: little.World, calls_dir: Path
) -> None:
    result = asyncio.run(run(world, s.triage_over_budget, TICKET))
    assert result.status == "failed"
    assert "BudgetExceededError" in (result.error or ""), result.error
    assert len(s.calls(calls_dir, "model")) == 1  # the model never saw an error string


def test_a_budget_spent_inside_an_agent_as_tool_ends_the_run_answering_no_tool_call(
    world: little.World, calls_dir: Path
) -> None:
    """The lead's first request spends the budget; the expert's (inside the lead's
    ``expert.as_tool()`` call) is refused for it: the run fails as itself, the SDK's failure
    formatter never makes an error string of it, and the lead's tool call is answered by
    nothing on the log (neither a result nor a failure)."""
    ticket = {"ticket": "Where is my order A1?"}
    result = asyncio.run(run(world, s.as_tool_flow, ticket, max_tokens=20))
    assert result.status == "failed"
    assert "BudgetExceededError" in (result.error or ""), result.error
    assert [t.tool for t in events(world, result.run_id, ToolCallStarted)] == ["lookup_order"]
    assert answers(world, result.run_id) == []
    assert len(s.calls(calls_dir, "model")) == 1  # the model never saw an error string
