"""A Pydantic AI agent under ``durable``: each run is a recorded agent call, each model request
and tool call recorded write-ahead; a run served from a record invokes nothing and builds the
same requests."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import little
from little.events import (
    AgentCallAdmitted,
    AgentCallSettled,
    ModelCalled,
    ModelResponded,
    SessionStarted,
    ToolCallStarted,
    ToolCallSucceeded,
)
from little.runtime import run
from tests.little.integrations.pydantic_ai import workflows as wf


def _events(world: little.World, run_id: str) -> list[Any]:
    return [r.event for r in world.read_run(run_id)]


def _of(events: list[Any], cls: type) -> list[Any]:
    return [e for e in events if isinstance(e, cls)]


def test_each_run_is_an_agent_call_with_its_model_requests_and_tool_calls_recorded(
    tmp_path: Path,
) -> None:
    wf.COUNTS.clear()
    with little.local_world(tmp_path / "w") as world:
        result = asyncio.run(run(world, wf.version("1"), "Kafka"))
        assert result.status == "completed", result.error
        events = _events(world, result.run_id)
    assert result.output == {
        "first": "answer to [Brief me on Kafka] using facts(Brief me on Kafka)",
        "second": "answer to [Shorter.]",
    }
    (started,) = _of(events, SessionStarted)
    assert started.session_name == "researcher"
    assert started.model == "function:function:answer:stream_answer"
    assert [e.ordinal for e in _of(events, AgentCallAdmitted)] == [0, 1]
    settled = _of(events, AgentCallSettled)
    assert [(e.ordinal, e.outcome, e.model_calls) for e in settled] == [
        (0, "succeeded", 2),
        (1, "succeeded", 1),
    ]
    called = _of(events, ModelCalled)
    assert [e.turn for e in called] == [1, 2, 3]
    assert called[0].previous_request_hash is None
    assert [c.previous_request_hash for c in called[1:]] == [c.request_hash for c in called[:2]]
    assert [e.usage.input_tokens for e in _of(events, ModelResponded)] == [101, 103, 105]
    (tool,) = _of(events, ToolCallStarted)
    assert (tool.tool, tool.call_id) == ("search", "1:call-1")
    assert tool.idempotency_key == f"{result.run_id}/research/1:call-1"
    (done,) = _of(events, ToolCallSucceeded)
    assert done.result_json == '"facts(Brief me on Kafka)"'
    assert wf.COUNTS == {"model": 3, "tool:search": 1}


def test_a_spent_budget_ends_the_run_even_when_a_framework_error_hook_answers_for_it(
    tmp_path: Path,
) -> None:
    """little's control errors pass through the framework's error handling: a user's
    ``on_model_request_error`` that answers for any failed request does not swallow a spent
    budget (the run fails as itself, and the model is never asked past the budget)."""
    wf.COUNTS.clear()
    flow = wf.version("recover", recover=True)
    with little.local_world(tmp_path / "w") as world:
        result = asyncio.run(run(world, flow, "Kafka", max_tokens=200))
        events = _events(world, result.run_id)
    assert result.status == "failed"
    assert "BudgetExceededError" in str(result.error), result.error
    assert wf.COUNTS["model"] == 2  # the third request is refused before the model is asked
    assert len(_of(events, ModelCalled)) == 2


def test_parallel_tool_calls_are_recorded_and_served_on_a_resume(tmp_path: Path) -> None:
    """Two tool calls in one model turn, run at once by the framework: each recorded with its
    own call id; the resume (after a durable wait) serves both from the log."""
    from little.runtime import follow, send_signal

    wf.COUNTS.clear()
    flow = wf.version("parallel-pause", pause=True)
    with little.local_world(tmp_path / "w") as world:
        first = asyncio.run(run(world, flow, "Kafka and Pulsar"))
        assert first.status == "waiting", first.error
        asyncio.run(send_signal(world, first.run_id, "go"))
        done = asyncio.run(follow(world, first.run_id))
        events = _events(world, first.run_id)
    assert done.status == "completed", done.error
    assert done.output["first"] == (
        "answer to [Brief me on Kafka and Pulsar] using facts(Kafka) + facts(Pulsar)"
    )
    started = sorted(e.call_id for e in _of(events, ToolCallStarted))
    assert started == ["1:call-1-0", "1:call-1-1"]
    assert len(_of(events, ToolCallSucceeded)) == 2
    assert wf.COUNTS == {"model": 3, "tool:search": 2}  # the resume ran the second call only


def test_iter_is_a_recorded_agent_call_too(tmp_path: Path) -> None:
    wf.COUNTS.clear()
    with little.local_world(tmp_path / "w") as world:
        result = asyncio.run(run(world, wf.version("iter", iterate=True), "Kafka"))
        assert result.status == "completed", result.error
        events = _events(world, result.run_id)
    assert result.output["first"] == "answer to [Brief me on Kafka] using facts(Brief me on Kafka)"
    settled = _of(events, AgentCallSettled)
    assert [(e.ordinal, e.outcome, e.model_calls) for e in settled] == [
        (0, "succeeded", 2),
        (1, "succeeded", 1),
    ]
    assert len(_of(events, ModelCalled)) == 3


def test_a_responses_usage_maps_cached_and_reasoning_tokens() -> None:
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.usage import RequestUsage

    from little.integrations.pydantic_ai import _Response

    native = ModelResponse(
        parts=[TextPart("x")],
        usage=RequestUsage(
            input_tokens=1000, output_tokens=50, cache_read_tokens=600, output_reasoning_tokens=30
        ),
    )
    usage = _Response(native).usage
    assert (usage.input_tokens, usage.output_tokens) == (1000, 50)
    assert (usage.cached_input_tokens, usage.reasoning_tokens) == (600, 30)
    again = _Response.decode(_Response(native).to_json(), usage)  # as a resume reads it back
    assert again.native.parts == native.parts
    assert again.native.run_id is None  # the framework stamps this run's own


def _outer_model(messages: list[Any], info: Any) -> Any:
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart

    wf.COUNTS["outer"] += 1
    returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
    if returns:
        return ModelResponse(parts=[TextPart(f"outer got {returns[0].content}")])
    return ModelResponse(parts=[ToolCallPart("ask_expert", {"q": "why"}, tool_call_id="x1")])


def _expert_model(messages: list[Any], info: Any) -> Any:
    from pydantic_ai.messages import ModelResponse, TextPart

    wf.COUNTS["expert"] += 1
    return ModelResponse(parts=[TextPart("because")])


async def _nested(step: Any, topic: str) -> str:
    from pydantic_ai import Agent
    from pydantic_ai.models.function import FunctionModel

    from little.integrations.pydantic_ai import durable

    outer: Agent[None, str] = Agent(FunctionModel(_outer_model), name="outer")
    expert = durable(step, Agent(FunctionModel(_expert_model), name="expert"))

    @outer.tool_plain
    async def ask_expert(q: str) -> str:  # an agent as a tool: a recorded call of its own
        return str((await expert.run(q)).output)

    return str((await durable(step, outer).run(topic)).output)


def test_an_agent_called_from_a_tool_is_recorded_as_a_session_of_its_own(tmp_path: Path) -> None:
    from little.runtime import WorkflowContext, workflow

    @workflow("tests.pyai.nested")
    async def nested(ctx: WorkflowContext, topic: str) -> str:
        return str(await ctx.step("s", _nested, topic))

    wf.COUNTS.clear()
    with little.local_world(tmp_path / "w") as world:
        result = asyncio.run(run(world, nested, "go"))
        events = _events(world, result.run_id)
    assert (result.status, result.output) == ("completed", "outer got because")
    settled = [(e.session_id, e.ordinal) for e in _of(events, AgentCallSettled)]
    assert settled == [("s#expert", 1), ("s#outer", 0)]  # the nested call inside the outer
    assert [e.session_id for e in _of(events, ModelCalled)] == ["s#outer", "s#expert", "s#outer"]
