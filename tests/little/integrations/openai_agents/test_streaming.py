"""``LittleRunner.run_streamed``: live on a fresh turn (each delta reaches the consumer while
the model is still streaming), replayed on a served one (the SDK's own events synthesised from
the recorded response, the same text)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

import little
from little.events import AgentCallSettled, ModelResponded
from little.runtime import run
from tests.little.integrations.openai_agents import agents_support as s
from tests.little.integrations.openai_agents.test_runner import calls_dir, events, world

__all__ = ["calls_dir", "world"]  # fixtures

TICKET = {"ticket": "Where is my order A1?"}
TEXT = "order A1 shipped (re: Where is my order A1?)"


@pytest.fixture
def live_gate() -> Iterator[None]:
    s.LIVE["first delta"] = asyncio.Event()
    yield
    s.LIVE.clear()


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_a_fresh_stream_is_live_and_recorded_when_it_ends(
    world: little.World, calls_dir: Path, live_gate: None, api: str
) -> None:
    # the fake holds its stream after the first chunk until the consumer has seen a delta:
    # a buffered stream would never end
    result = asyncio.run(run(world, s.stream_flow, {**TICKET, "api": api}))
    assert result.status == "completed", result.error
    assert "".join(result.output["deltas"]).strip() == TEXT
    assert len(result.output["deltas"]) > 1
    assert result.output["final"].strip() == TEXT
    responded = events(world, result.run_id, ModelResponded)
    assert len(responded) == 2
    # the fake bills 10 tokens a message (Chat Completions sends the system prompt as one)
    assert responded[1].usage.input_tokens == {"chat": 40, "responses": 30}[api]
    assert [c.outcome for c in events(world, result.run_id, AgentCallSettled)] == ["succeeded"]


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_a_served_stream_replays_the_recorded_text_as_the_sdks_events(
    world: little.World, calls_dir: Path, api: str
) -> None:
    ticket = {**TICKET, "api": api}
    first = asyncio.run(run(world, s.stream_flow, ticket))
    assert first.status == "completed", first.error
    before = len(s.calls(calls_dir, "model"))
    again = asyncio.run(run(world, s.stream_flow, ticket, replay_from=first.run_id))
    assert again.status == "completed", again.error
    assert len(s.calls(calls_dir, "model")) == before
    assert [c.replayed for c in events(world, again.run_id, AgentCallSettled)] == [True]
    assert "".join(again.output["deltas"]).strip() == TEXT
    assert again.output["final"] == first.output["final"]


def test_a_consumer_that_closes_the_stream_early_settles_the_call_failed_and_stops_the_run(
    world: little.World, calls_dir: Path
) -> None:
    result = asyncio.run(run(world, s.stream_stopped, TICKET))
    assert result.status == "completed", result.error
    logged = [x.event for x in world.read_run(result.run_id)]
    settled = [e for e in logged if isinstance(e, AgentCallSettled)]
    assert [e.outcome for e in settled] == ["failed"]
    # nothing of the cancelled run is written after its step completed
    types = [e.type for e in logged]
    step_done = types.index("StepCompleted")
    assert not [t for t in types[step_done:] if t.startswith(("harness.", "agent."))], types
    assert s.calls(calls_dir, "tool") == []
