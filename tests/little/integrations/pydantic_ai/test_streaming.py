"""``run_stream`` under ``durable``: live on a fresh call (each delta reaches the consumer before
the model produced the next; ``responded`` is written when the stream ends) and replayed on a
served one (the framework's own events synthesised from the recorded response)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import little
from little.events import AgentCallSettled, ModelFailed, ModelResponded
from little.integrations.pydantic_ai import durable
from little.runtime import StepContext, WorkflowContext, run, workflow
from tests.little.integrations.pydantic_ai import workflows as wf

TEXT = "answer to [Shorter.]"


def test_a_fresh_stream_is_live_and_recorded_when_it_ends(tmp_path: Path) -> None:
    wf.STREAMED.clear()
    wf.TIMELINE.clear()
    with little.local_world(tmp_path / "w") as world:
        result = asyncio.run(run(world, wf.version("stream", stream=True), "Kafka"))
        assert result.status == "completed", result.error
        events = [r.event for r in world.read_run(result.run_id)]
    assert result.output["second"] == TEXT
    (deltas,) = wf.STREAMED
    assert "".join(deltas) == TEXT
    assert len(deltas) > 1  # word by word, not one block
    # live: the consumer had the first word before the model produced the last one
    assert wf.TIMELINE.index("consumed 0") < wf.TIMELINE.index(f"produced {len(deltas) - 1}")
    responded = [e for e in events if isinstance(e, ModelResponded)]
    assert len(responded) == 3
    assert '"content":"answer to [Shorter.]"' in (responded[-1].response_json or "")


def test_a_served_stream_replays_the_recorded_text_invoking_nothing(tmp_path: Path) -> None:
    flow = wf.version("stream", stream=True)
    with little.local_world(tmp_path / "w") as world:
        source = asyncio.run(run(world, flow, "Kafka"))
        assert source.status == "completed", source.error
        wf.STREAMED.clear()
        wf.TIMELINE.clear()
        wf.COUNTS.clear()
        replay = asyncio.run(run(world, flow, "Kafka", replay_from=source.run_id))
        assert replay.status == "completed", replay.error
        events = [r.event for r in world.read_run(replay.run_id)]
    assert wf.COUNTS == {}
    assert [e.replayed for e in events if isinstance(e, AgentCallSettled)] == [True, True]
    (deltas,) = wf.STREAMED
    assert "".join(deltas) == TEXT  # the recorded text, through the framework's stream
    assert not [t for t in wf.TIMELINE if t.startswith("produced")]
    assert replay.output == source.output


async def _stop_early(step: StepContext, prompt: str) -> str:
    agent = durable(step, wf.researcher())
    async with agent.run_stream(prompt) as s:
        async for _ in s.stream_text(delta=True, debounce_by=None):
            break  # the consumer has what it needed
    return "stopped"


@workflow("tests.pyai.stop_early")
async def stop_early(ctx: WorkflowContext, prompt: str) -> str:
    return await ctx.step("s", _stop_early, prompt)


def test_a_consumer_that_stops_a_stream_early_records_the_request_as_failed(
    tmp_path: Path,
) -> None:
    with little.local_world(tmp_path / "w") as world:
        result = asyncio.run(run(world, stop_early, "Tell me a long story"))
        events = [r.event for r in world.read_run(result.run_id)]
    assert (result.status, result.output) == ("completed", "stopped")
    (failed,) = [e for e in events if isinstance(e, ModelFailed)]
    assert failed.error_type == "StreamStoppedError"
    assert "consumer stopped before its end" in failed.message
    assert not [e for e in events if isinstance(e, ModelResponded)]


def test_a_streamed_call_walked_again_on_a_resume_replays_its_text_from_the_log(
    tmp_path: Path,
) -> None:
    """The first call streams; the run then waits for a signal; the resume walks that call's
    requests again from the run's own log: its stream replays the recorded text, no model."""
    from little.runtime import follow, send_signal

    wf.STREAMED.clear()
    wf.COUNTS.clear()
    flow = wf.version("stream-first", stream_first=True, pause=True)
    with little.local_world(tmp_path / "w") as world:
        first = asyncio.run(run(world, flow, "Kafka"))
        assert first.status == "waiting", first.error
        asyncio.run(send_signal(world, first.run_id, "go"))
        done = asyncio.run(follow(world, first.run_id))
    assert done.status == "completed", done.error
    live, replayed = wf.STREAMED
    text = "answer to [Brief me on Kafka] using facts(Brief me on Kafka)"
    assert "".join(live) == text
    assert "".join(replayed) == text  # the recorded response, through the framework's stream
    assert wf.COUNTS == {"model": 3, "tool:search": 1}  # two requests and the search, once
