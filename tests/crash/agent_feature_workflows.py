"""Crash-test workflows of the native harness's features (issue 28), run by
``tests.crash.runner`` in child processes.

``parallel_tools``: one model turn asks for three tool calls, ``slow`` (c1), ``fast`` (c2) and
``slow`` again (c3), run concurrently. Where ``$CRASH_TEST_KILL_WHEN_DURABLE`` names the data
dir, each ``slow`` call waits until the log there holds all three calls started and ``fast``'s
result, then SIGKILLs its process: a crash after the first of three concurrent calls finished
and was recorded, the other two in flight. Elsewhere ``slow`` returns at once. The model's
second turn logs the tool answers it was given, in order.

``structured``: one agent call asking for a ``Forecast``; the model's first answer lacks a
field, so the session sends it back with the error and asks again (a second recorded turn).

Every real invocation is logged to ``$LITTLE_EXAMPLE_CALLS_DIR`` like the reference example.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from typing import Any

from pydantic import BaseModel

import little
from little.events import ToolCallStarted, ToolCallSucceeded, Usage
from little.examples.research import _log_call
from little.harness import ModelRequest, ModelResponse, ToolCallRequest, ToolContext, tool
from little.runtime import StepContext, WorkflowContext, workflow

KILL_WHEN_DURABLE = "CRASH_TEST_KILL_WHEN_DURABLE"
SAFETY = 60.0
"""Seconds ``slow`` waits for its siblings before giving up (reached only when the calls do
not run concurrently: the call then fails, the run ends and the test sees no kill)."""


def _turn(request: ModelRequest) -> int:
    return 1 + sum(1 for m in request.messages if m.get("role") == "assistant")


class ParallelModel:
    """Turn 1: slow(c1), fast(c2), slow(c3); turn 2: their answers, as given, in one text."""

    provider = "openai"
    name = "gpt-4o-mini"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        turn = _turn(request)
        usage = Usage(input_tokens=100 * turn, output_tokens=10)
        if turn == 1:
            _log_call("model", turn=turn)
            calls = (
                ToolCallRequest("c1", "slow", {"n": 1}),
                ToolCallRequest("c2", "fast", {"n": 2}),
                ToolCallRequest("c3", "slow", {"n": 3}),
            )
            return ModelResponse(tool_calls=calls, usage=usage, finish_reason="tool_calls")
        answers = [
            (m["tool_call_id"], m["content"]) for m in request.messages if m["role"] == "tool"
        ]
        _log_call("model", turn=turn, answers=answers)
        text = "; ".join(json.loads(content) for _, content in answers)
        return ModelResponse(content=text, usage=usage, finish_reason="stop")


def _durable(data_dir: str, run_id: str) -> bool:
    with little.local_world(data_dir) as world:
        events = [x.event for x in world.read_run(run_id)]
    started = {e.call_id for e in events if isinstance(e, ToolCallStarted)}
    done = {e.call_id for e in events if isinstance(e, ToolCallSucceeded)}
    return started == {"1:c1", "1:c2", "1:c3"} and done == {"1:c2"}


@tool(description="Slow work.", parameters={"type": "object"})
async def slow(args: dict[str, Any], ctx: ToolContext) -> str:
    _log_call("tools", tool="slow", call_id=ctx.call_id, attempt=ctx.attempt)
    data_dir = os.environ.get(KILL_WHEN_DURABLE)
    if data_dir:
        async with asyncio.timeout(SAFETY):
            # another world's view of the log: nothing in this process to wait on instead
            while not await asyncio.to_thread(_durable, data_dir, ctx.run_id):  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        os.kill(os.getpid(), signal.SIGKILL)
    return f"slow {args['n']} (attempt {ctx.attempt})"


@tool(description="Fast work.", parameters={"type": "object"})
def fast(args: dict[str, Any], ctx: ToolContext) -> str:
    _log_call("tools", tool="fast", call_id=ctx.call_id, attempt=ctx.attempt)
    return f"fast {args['n']} (attempt {ctx.attempt})"


async def _work(step: StepContext) -> str | None:
    async with step.session("agent", model=ParallelModel(), tools=[slow, fast]) as agent:
        return await agent.run("Do the three things at once.")


@workflow("parallel_tools", version="1")
async def parallel_tools(ctx: WorkflowContext, input: Any) -> str | None:
    return await ctx.step("work", _work)


class Forecast(BaseModel):
    city: str
    celsius: float


class StructuredModel:
    """Turn 1: a forecast without ``celsius``; turn 2 (told the error): a valid one."""

    provider = "openai"
    name = "gpt-4o-mini"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        turn = _turn(request)
        assert request.output is not None
        assert request.output.name == "Forecast"
        _log_call("model", turn=turn, last=request.messages[-1]["content"])
        usage = Usage(input_tokens=100 * turn, output_tokens=10)
        text = '{"city": "Paris"}' if turn == 1 else '{"city": "Paris", "celsius": 18}'
        return ModelResponse(content=text, usage=usage, finish_reason="stop")


async def _forecast(step: StepContext) -> Forecast:
    async with step.session("agent", model=StructuredModel()) as agent:
        return await agent.run("Forecast for Paris?", output=Forecast)


@workflow("structured", version="1")
async def structured(ctx: WorkflowContext, input: Any) -> dict[str, Any]:
    forecast = await ctx.step("forecast", _forecast)
    assert isinstance(forecast, Forecast)  # the validated object, fresh or resumed
    return forecast.model_dump()
