"""A Pydantic AI agent as a durable little workflow (needs ``little-workflow[pydantic-ai]``).

``little run little.examples.pydantic_ai_research:brief --input '"Kafka"'`` runs it on the
embedded world; kill the process (``LITTLE_CRASH_AFTER_CALL=2`` kills it right after the
model's second request returned) and ``little resume <run-id> --workflows
little.examples.pydantic_ai_research`` serves the search and the first request from the log
and asks the model again only for the request that was in flight.

The model is Pydantic AI's ``FunctionModel`` standing in for ``openai:gpt-4o-mini`` (so the
report prices it; ``Agent("openai:gpt-4o-mini")`` works the same); it and the tool log their real invocations to ``$LITTLE_EXAMPLE_CALLS_DIR``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from little.integrations.pydantic_ai import durable
from little.runtime import StepContext, Workflow, WorkflowContext, workflow

__all__ = ["BRIEF_EDITED", "EDITED_FOLLOW_UP", "FOLLOW_UP", "brief", "researcher", "search"]

FOLLOW_UP = "Shorter."
EDITED_FOLLOW_UP = "One line."


def _log(kind: str, **fields: Any) -> None:
    calls_dir = os.environ.get("LITTLE_EXAMPLE_CALLS_DIR")
    if calls_dir:
        Path(calls_dir).mkdir(parents=True, exist_ok=True)
        with (Path(calls_dir) / f"{kind}.jsonl").open("a") as f:
            f.write(json.dumps({"pid": os.getpid(), **fields}) + "\n")


def _reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    last = messages[-1]
    found = [p for p in last.parts if isinstance(p, ToolReturnPart)]
    _log("pyai-model", n=len(messages))
    usage = RequestUsage(input_tokens=400 + 40 * len(messages), output_tokens=60)
    if len(messages) == 1:
        return ModelResponse(
            parts=[ToolCallPart("search", {"q": "kafka log"}, tool_call_id="s1")], usage=usage
        )
    if found:
        return ModelResponse(
            parts=[TextPart(f"Kafka is a replicated log ({found[0].content}).")], usage=usage
        )
    return ModelResponse(parts=[TextPart("A replicated log.")], usage=usage)


class _StandIn(FunctionModel):
    """A ``FunctionModel`` that calls itself ``openai:gpt-4o-mini``, so the report prices it."""

    @property
    def system(self) -> str:
        return "openai"


researcher = Agent(
    _StandIn(_reply, model_name="gpt-4o-mini"), name="researcher", instructions="Be brief."
)


@researcher.tool_plain
def search(q: str) -> str:
    """Search the web (a stand-in)."""
    _log("pyai-tool", tool="search", q=q)
    return f"3 sources on {q}"


async def _research(step: StepContext, topic: str, follow_up: str = FOLLOW_UP) -> dict[str, Any]:
    agent = durable(step, researcher)
    first = await agent.run(f"Brief me on {topic}")
    shorter = await agent.run(follow_up, message_history=first.all_messages())
    return {"brief": first.output, "short": shorter.output}


@workflow("pydantic_ai_research", version="1")
async def brief(ctx: WorkflowContext, topic: str) -> dict[str, Any]:
    """One step, one Pydantic AI agent, two recorded agent calls."""
    result: dict[str, Any] = await ctx.step("research", _research, topic)
    return result


async def _brief_edited(ctx: WorkflowContext, topic: str) -> dict[str, Any]:
    result: dict[str, Any] = await ctx.step("research", _research, topic, EDITED_FOLLOW_UP)
    return result


BRIEF_EDITED = Workflow("pydantic_ai_research", "1-edited", _brief_edited)
"""``brief`` with its follow-up prompt edited, for ``little demo --framework pydantic-ai``'s
recorded-call replay. Not registered, so looking up the workflow still gives version 1."""
