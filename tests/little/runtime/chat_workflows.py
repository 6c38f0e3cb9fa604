"""A workflow for the chat-jsonl export tests, in a module of its own that passes the
replay-safety scan: one agent session with a system prompt and a tool, two exchanges of two
turns each (the first turn of each asks for tools), and a model that keeps every request it
is sent, so a test can hold the requests rebuilt from the log against them."""

from __future__ import annotations

from typing import Any

from little.events import Usage
from little.harness import (
    ModelRequest,
    ModelResponse,
    ScriptedModel,
    ToolCallRequest,
    ToolContext,
    tool,
)
from little.runtime import Retry, StepContext, WorkflowContext, workflow

NAME = "tests.chat.glossary"
SYSTEM = "You are a glossary. Answer in one line."
USAGE = Usage(input_tokens=100, output_tokens=20)
REQUESTS: list[ModelRequest] = []
"""Every request a model of this module was sent in this process, in order."""

SCRIPT = (
    ModelResponse(
        tool_calls=(
            ToolCallRequest("d1", "define", {"word": "kafka"}),
            ToolCallRequest("d2", "define", {"word": "topic"}),
        ),
        usage=USAGE,
        finish_reason="tool_calls",
    ),
    ModelResponse(content="Kafka: a log of topics.", usage=USAGE, finish_reason="stop"),
    ModelResponse(
        tool_calls=(ToolCallRequest("d3", "define", {"word": "offset"}),),
        usage=USAGE,
        finish_reason="tool_calls",
    ),
    ModelResponse(content="An offset: a place in the log.", usage=USAGE, finish_reason="stop"),
)


FIRST_ATTEMPT = (
    ModelResponse(
        tool_calls=(ToolCallRequest("d0", "define", {"word": "stream"}),),
        usage=USAGE,
        finish_reason="tool_calls",
    ),
    *SCRIPT[1:],
)
"""What the model answers the first attempt of a step that fails (``fail_at``): another
first answer, so the two attempts' second requests differ."""


class ModelDown(Exception):
    pass


class RecordingModel(ScriptedModel):
    def __init__(self, *args: Any, fail_at: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fail_at = fail_at

    async def complete(self, request: ModelRequest) -> ModelResponse:
        REQUESTS.append(request)
        if len(REQUESTS) == self.fail_at:
            raise ModelDown("the model is down")
        return await super().complete(request)


@tool(
    description="Look a word up.",
    parameters={"type": "object", "properties": {"word": {"type": "string"}}},
)
def define(args: dict[str, Any], ctx: ToolContext) -> dict[str, str]:
    return {"word": args["word"], "meaning": f"{args['word']}: a term of logs"}


def glossary(v: str, second: str = "And an offset?", fail_at: int | None = None) -> Any:
    """The workflow as version ``v``; ``second`` is the second exchange's prompt (edit it and
    replay: the first exchange is served from the record, the second runs fresh). With
    ``fail_at=n`` the model fails the n-th request this process sends (``REQUESTS`` cleared
    first), answering ``FIRST_ATTEMPT`` until then, and the step is tried again (its session
    opened anew)."""

    async def ask(step: StepContext) -> list[str | None]:
        first = fail_at is not None and not REQUESTS  # the attempt that will fail
        script = FIRST_ATTEMPT if first else SCRIPT
        model = RecordingModel(script, provider="openai", name="gpt-4o-mini", fail_at=fail_at)
        async with step.session("glossary", model=model, tools=[define], system=SYSTEM) as agent:
            return [await agent.run("What is Kafka?"), await agent.run(second)]

    async def flow(ctx: WorkflowContext, _: Any) -> Any:
        return await ctx.step("ask", ask, retry=Retry(max_attempts=2))

    return workflow(NAME, version=v)(flow)
