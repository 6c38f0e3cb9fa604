"""What a replay cannot reproduce is refused with a one-line error naming the feature, before
anything is recorded or invoked: never silently unrecorded."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import little
from little.events import AgentCallAdmitted
from little.runtime import run
from tests.little.integrations.openai_agents import agents_support as s
from tests.little.integrations.openai_agents.test_runner import calls_dir, events, world

__all__ = ["calls_dir", "world"]  # fixtures


@pytest.mark.parametrize(
    ("feature", "named"),
    [
        ("previous_response_id", "previous_response_id"),
        ("auto_previous_response_id", "previous_response_id"),
        ("conversation_id", "OpenAI Conversations"),
        ("session", "session="),
        ("local shell", "local shell tools"),
        ("computer", "computer tools"),
        ("realtime", "realtime agents"),
        ("mcp", "two MCP servers of one name"),
        ("handoff object", "handoff(...) object"),
    ],
)
def test_a_feature_a_replay_cannot_reproduce_is_refused_naming_it(
    world: little.World, calls_dir: Path, feature: str, named: str
) -> None:
    result = asyncio.run(run(world, s.refused, {"feature": feature}))
    assert result.status == "failed"
    assert result.error is not None
    assert "UnsupportedFeatureError" in result.error
    assert named in result.error
    assert "little.integrations.openai_agents (run " in result.error
    assert "step handle)" in result.error
    assert "\n" not in result.error
    assert events(world, result.run_id, AgentCallAdmitted) == []
    assert s.calls(calls_dir, "model") == []
