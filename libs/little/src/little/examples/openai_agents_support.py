"""An OpenAI Agents SDK agent as a durable little workflow (needs
``little-workflow[openai-agents]``).

``little run little.examples.openai_agents_support:support --input '"Where is my order A1?"'``
runs it on the embedded world: two runner calls (the ticket, whose answer looks the order up
with a function tool, then a follow-up over the first call's items), each one agent call
through ``LittleRunner``. ``little demo --framework openai-agents`` crashes it right after the
model answered its second request and resumes it.

The model is the SDK's own ``OpenAIChatCompletionsModel`` over the real ``openai`` client,
whose transport (``httpx2.MockTransport``) answers Chat Completions JSON as
``gpt-4o-mini`` would be billed (so the report prices it): no network, no key. The model and
the tool log their real invocations to ``$LITTLE_EXAMPLE_CALLS_DIR``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx2
import openai
from agents import Agent, OpenAIChatCompletionsModel, RunConfig, function_tool

from little.integrations.openai_agents import LittleRunner
from little.runtime import StepContext, Workflow, WorkflowContext, workflow

__all__ = ["EDITED_FOLLOW_UP", "FOLLOW_UP", "SUPPORT_EDITED", "lookup_order", "support"]

FOLLOW_UP = "Shorter."
EDITED_FOLLOW_UP = "One line."


def _log(kind: str, **fields: Any) -> None:
    calls_dir = os.environ.get("LITTLE_EXAMPLE_CALLS_DIR")
    if calls_dir:
        Path(calls_dir).mkdir(parents=True, exist_ok=True)
        with (Path(calls_dir) / f"{kind}.jsonl").open("a") as f:
            f.write(json.dumps({"pid": os.getpid(), **fields}) + "\n")


def _completion(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The stand-in's answer: a ticket looks its order up; a tool's result is summed up."""
    last = messages[-1]
    if last["role"] == "tool":
        return {"content": f"Your order: {last['content']}."}
    if sum(m["role"] == "user" for m in messages) == 1:
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "lookup_order", "arguments": '{"order": "A1"}'},
        }
        return {"content": None, "tool_calls": [call]}
    return {"content": "A1 shipped."}


def _reply(request: httpx2.Request) -> httpx2.Response:
    messages = json.loads(request.content)["messages"]
    _log("oa-model", n=len(messages))
    message = _completion(messages)
    prompt = 400 + 40 * len(messages)
    return httpx2.Response(
        200,
        json={
            "id": f"chatcmpl-{len(messages)}",
            "object": "chat.completion",
            "created": 1747900000,
            "model": "gpt-4o-mini",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "refusal": None, **message},
                    "logprobs": None,
                    "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": 60,
                "total_tokens": prompt + 60,
            },
        },
    )


@function_tool
def lookup_order(order: str) -> str:
    """Look an order up (a stand-in)."""
    _log("oa-tool", tool="lookup_order", q=order)
    return f"order {order} shipped on 2026-11-30"


def _agent() -> Agent[Any]:
    client = openai.AsyncOpenAI(
        api_key="sk-stand-in",
        base_url="https://api.openai.com/v1",
        max_retries=0,
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(_reply)),
    )
    return Agent(
        name="support",
        instructions="Answer support tickets briefly.",
        model=OpenAIChatCompletionsModel("gpt-4o-mini", openai_client=client),
        tools=[lookup_order],
    )


async def _support(step: StepContext, ticket: str, follow_up: str = FOLLOW_UP) -> dict[str, Any]:
    agent, config = _agent(), RunConfig(tracing_disabled=True)
    first = await LittleRunner.run(step, agent, ticket, max_turns=4, run_config=config)
    items = [*first.to_input_list(), {"role": "user", "content": follow_up}]
    second = await LittleRunner.run(step, agent, items, max_turns=4, run_config=config)
    return {"answer": str(first.final_output), "short": str(second.final_output)}


@workflow("openai_agents_support", version="1")
async def support(ctx: WorkflowContext, ticket: str) -> dict[str, Any]:
    """One step, one Agents SDK agent, two recorded runner calls."""
    result: dict[str, Any] = await ctx.step("support", _support, ticket)
    return result


async def _support_edited(ctx: WorkflowContext, ticket: str) -> dict[str, Any]:
    result: dict[str, Any] = await ctx.step("support", _support, ticket, EDITED_FOLLOW_UP)
    return result


SUPPORT_EDITED = Workflow("openai_agents_support", "1-edited", _support_edited)
"""``support`` with its follow-up edited, for ``little demo --framework openai-agents``'s
recorded-call replay. Not registered, so looking up the workflow still gives version 1."""
