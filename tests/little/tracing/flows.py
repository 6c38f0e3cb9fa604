"""The traced tests' workflow: a plain step, an agent session (a tool call, then an answer that
waits at a gate while the test wants the call in flight), and a sub-run."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from little.events import Usage
from little.harness import (
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
    ToolContext,
    ToolError,
    tool,
)
from little.runtime import StepContext, WorkflowContext, workflow

GATE = "TRACING_TEST_GATE"
"""A file path: while it does not exist, turn 2 of the model blocks (where the variable is set)."""


def _is_open(gate: str) -> bool:
    return os.path.exists(gate)


class GatedModel:
    """Turn 1 asks the ``lookup`` tool; turn 2 answers, after waiting for $GATE."""

    provider = "openai"
    name = "gpt-4o-mini"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        turn = 1 + sum(1 for m in request.messages if m.get("role") == "assistant")
        usage = Usage(input_tokens=1000 * turn, output_tokens=100)
        if turn == 1:
            call = ToolCallRequest("c1", "lookup", {"key": "kafka"})
            return ModelResponse(tool_calls=(call,), usage=usage, finish_reason="tool_calls")
        gate = os.environ.get(GATE)
        if gate:
            for _ in range(6000):  # 60 s at most
                if _is_open(gate):
                    break
                await asyncio.sleep(0.01)
        return ModelResponse(content="a log", usage=usage, finish_reason="stop")


@tool(description="Look a key up.", parameters={"type": "object"})
def lookup(args: dict[str, Any], ctx: ToolContext) -> str:
    return f"{args['key']}: an append-only log"


def _prepare(step: StepContext) -> str:
    return "prepared"


async def _ask(step: StepContext) -> str | None:
    async with step.session("agent", model=GatedModel(), tools=[lookup]) as agent:
        return await agent.run("What is Kafka?", max_turns=3)


def _double(step: StepContext, n: int) -> int:
    return 2 * n


@workflow("traced_child", version="1")
async def traced_child(ctx: WorkflowContext, input: dict[str, Any]) -> int:
    return int(await ctx.step("double", _double, int(input["n"])))


@workflow("traced", version="1")
async def traced(ctx: WorkflowContext, input: Any) -> dict[str, Any]:
    prepared = await ctx.step("prepare", _prepare)
    answer = await ctx.step("ask", _ask)
    doubled = await ctx.start_workflow("traced_child", {"n": 21})
    return {"prepared": prepared, "answer": answer, "doubled": doubled}


SECRET = "sk-test-0123456789"
"""What a failing tool and step quote in their errors: no span may carry it."""


class FailingToolModel:
    """Turn 1 calls ``leaky``; turn 2 answers."""

    provider = "openai"
    name = "gpt-4o-mini"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        turn = 1 + sum(1 for m in request.messages if m.get("role") == "assistant")
        usage = Usage(input_tokens=10, output_tokens=1)
        if turn == 1:
            call = ToolCallRequest("c1", "leaky", {})
            return ModelResponse(tool_calls=(call,), usage=usage, finish_reason="tool_calls")
        return ModelResponse(content="sorry", usage=usage, finish_reason="stop")


@tool(description="Fails quoting a key.", parameters={"type": "object"})
def leaky(args: dict[str, Any], ctx: ToolContext) -> str:
    raise ToolError(f"the provider refused key {SECRET}")


async def _ask_leaky(step: StepContext) -> str | None:
    async with step.session("agent", model=FailingToolModel(), tools=[leaky]) as agent:
        return await agent.run("Try.", max_turns=3)


def _fail(step: StepContext) -> None:
    raise RuntimeError(f"bad key {SECRET}")


@workflow("traced_failing", version="1")
async def traced_failing(ctx: WorkflowContext, input: Any) -> None:
    await ctx.step("ask", _ask_leaky)
    await ctx.step("fail", _fail)
