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

``content_parts``: the real ``openai`` client (over an ``httpx2`` ``MockTransport``) is asked
about a photo given as bytes (kept in the artifact store); turn 1 calls ``photograph``, whose
result holds a page image (kept there too); turn 2 answers. Each HTTP request is logged to
``http.jsonl`` with the sha256 of its body and of every image it carries as a ``data:`` URL.

Every real invocation is logged to ``$LITTLE_EXAMPLE_CALLS_DIR`` like the reference example.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import signal
from typing import Any

import httpx2
import openai
from pydantic import BaseModel

import little
from little.events import ToolCallStarted, ToolCallSucceeded, Usage
from little.examples.research import _log_call
from little.harness import (
    Image,
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
    ToolContext,
    tool,
)
from little.harness.adapters import OpenAIModel
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


PHOTO = bytes(range(256)) * 64  # 16 KiB: over the inline limit, kept in the artifact store
PAGE = bytes(reversed(range(256))) * 48


def _completion(message: dict[str, Any], finish: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-parts",
        "object": "chat.completion",
        "created": 1747900000,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 900, "completion_tokens": 9, "total_tokens": 909},
    }


def _reads_images(request: httpx2.Request) -> httpx2.Response:
    """Turn 1 asks for ``photograph``; turn 2 answers."""
    body = json.loads(request.content)
    images = [
        hashlib.sha256(base64.b64decode(part["image_url"]["url"].partition(",")[2])).hexdigest()
        for message in body["messages"]
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if part.get("type") == "image_url"
    ]
    turn = 1 + sum(1 for m in body["messages"] if m["role"] == "assistant")
    digest = hashlib.sha256(request.content).hexdigest()
    _log_call("http", turn=turn, body=digest, images=images)
    if turn == 1:
        call = {
            "id": "call_P",
            "type": "function",
            "function": {"name": "photograph", "arguments": "{}"},
        }
        return httpx2.Response(
            200,
            json=_completion(
                {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
            ),
        )
    return httpx2.Response(
        200, json=_completion({"role": "assistant", "content": "A receipt."}, "stop")
    )


@tool(description="Photograph the page.", parameters={"type": "object"})
def photograph(args: dict[str, Any], ctx: ToolContext) -> Any:
    _log_call("tools", tool="photograph", call_id=ctx.call_id, attempt=ctx.attempt)
    return ["page 1", Image(PAGE, "image/png")]


async def _read(step: StepContext) -> str | None:
    client = openai.AsyncOpenAI(
        api_key="sk-test",
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(_reads_images)),
    )
    model = OpenAIModel("gpt-4o-mini", client=client)
    async with step.session("agent", model=model, tools=[photograph]) as agent:
        return await agent.run(["What is this?", Image(PHOTO, "image/jpeg")])


@workflow("content_parts", version="1")
async def content_parts(ctx: WorkflowContext, input: Any) -> str | None:
    return await ctx.step("read", _read)
