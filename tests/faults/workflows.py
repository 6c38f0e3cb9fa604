"""Workflows of the fault tests (registered on import).

``faults.secretive``: a three-turn agent session whose prompt, tool arguments
(``api_key``) and tool results (``token``) carry the secrets in ``$FAULTS_SECRETS``
(``prompt,key,token``); the tool logs the arguments it was really given.

``faults.chatter``: one agent session of ``turns`` model turns on a ScriptedModel (each but
the last asks for one ``note`` tool call) with ``latency`` seconds per call. Every real model
invocation is appended to ``$FAULTS_CALLS_DIR/<run id>.model.jsonl`` and every tool invocation
to ``<run id>.tools.jsonl``, so a test in another process can tell what really ran.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from little.events import Usage
from little.harness import ModelResponse, ScriptedModel, ToolCallRequest, ToolContext, tool
from little.runtime import StepContext, WorkflowContext, workflow

CALLS_DIR = "FAULTS_CALLS_DIR"


def calls_file(run_id: str, kind: str) -> Path | None:
    base = os.environ.get(CALLS_DIR)
    if not base:
        return None
    Path(base).mkdir(parents=True, exist_ok=True)
    return Path(base) / f"{run_id}.{kind}.jsonl"


def script(turns: int) -> list[ModelResponse]:
    usage = Usage(input_tokens=100, output_tokens=10)
    asks = [
        ModelResponse(
            tool_calls=(ToolCallRequest(f"c{t}", "note", {"text": f"turn {t}"}),),
            usage=usage,
            finish_reason="tool_calls",
        )
        for t in range(1, turns)
    ]
    return [*asks, ModelResponse(content="done", usage=usage, finish_reason="stop")]


@tool(
    description="Take a note.",
    parameters={"type": "object", "properties": {"text": {"type": "string"}}},
)
def note(args: dict[str, Any], ctx: ToolContext) -> str:
    path = calls_file(ctx.run_id, "tools")
    if path is not None:
        with path.open("a") as f:
            f.write(json.dumps({"call_id": ctx.call_id, "pid": os.getpid()}) + "\n")
    return f"noted {args['text']}"


@workflow("faults.chatter", version="1")
async def chatter(ctx: WorkflowContext, input: dict[str, Any]) -> str | None:
    turns = int(input.get("turns", 10))

    async def converse(step: StepContext) -> str | None:
        model = ScriptedModel(
            script(turns),
            provider="openai",
            name="gpt-4o-mini",
            latency=float(input.get("latency", 0.1)),
            invocation_log=calls_file(step.run_id, "model"),
        )
        async with step.session("agent", model=model, tools=[note]) as agent:
            return await agent.run("Take notes.", max_turns=turns + 1)

    return await ctx.step("converse", converse)


def _secrets() -> tuple[str, str, str]:
    prompt, key, token = os.environ.get("FAULTS_SECRETS", "p,k,t").split(",")
    return prompt, key, token


@tool(
    description="Look something up with an API key.",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}},
)
def lookup(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    path = calls_file(ctx.run_id, "tools")
    if path is not None:
        with path.open("a") as f:
            f.write(json.dumps({"call_id": ctx.call_id, "args": args}) + "\n")
    return {"data": f"about {args['q']}", "token": _secrets()[2]}


@workflow("faults.secretive", version="1")
async def secretive(ctx: WorkflowContext, input: dict[str, Any]) -> str | None:
    prompt_secret, key, _ = _secrets()
    usage = Usage(input_tokens=100, output_tokens=10)
    replies = [
        ModelResponse(
            tool_calls=(ToolCallRequest(f"c{t}", "lookup", {"q": f"q{t}", "api_key": key}),),
            usage=usage,
            finish_reason="tool_calls",
        )
        for t in (1, 2)
    ]
    replies.append(ModelResponse(content="all looked up", usage=usage, finish_reason="stop"))

    async def converse(step: StepContext) -> str | None:
        model = ScriptedModel(replies, invocation_log=calls_file(step.run_id, "model"))
        async with step.session("agent", model=model, tools=[lookup]) as agent:
            return await agent.run(f"Use the customer's card {prompt_secret} to look things up.")

    return await ctx.step("converse", converse)


@workflow("faults.provider", version="1")
async def provider(ctx: WorkflowContext, input: dict[str, Any]) -> str | None:
    """One turn on the real OpenAI adapter (key and base URL from the SDK's environment)."""
    from little.harness.adapters.openai import OpenAIModel

    async def converse(step: StepContext) -> str | None:
        async with step.session("agent", model=OpenAIModel("gpt-4o-mini")) as agent:
            return await agent.run("Say hello.", max_turns=1)

    return await ctx.step("converse", converse)
