"""A workflow for the full-replay tests (a module of its own that passes the replay-safety
scan): one agent session with a lookup tool, asked by a model of the test's choosing; and the
models a full replay names by ``module:factory``."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from little.events import Usage
from little.harness import ModelRequest, ModelResponse, ScriptedModel, ToolCallRequest, ToolContext
from little.harness import tool as make_tool
from little.runtime import RunControl, StepContext, WorkflowContext, workflow

NAME = "tests.full_replay.research"
USAGE = Usage(input_tokens=1_000, output_tokens=100)
LOOKUPS: list[str] = []
"""Every real invocation of the lookup tool in this process, by query."""
REQUESTS: list[ModelRequest] = []
"""Every request the replay models were really asked, in order."""
STOP: dict[str, RunControl] = {}
"""A control the "stopping" model stops at its second turn (a stop is a crash for resume)."""
CALLS_DIR = "LITTLE_TEST_FULL_REPLAY_DIR"
"""Where processes of the crash test log the models' invocations and the tool's."""
HANG_AT = "LITTLE_TEST_FULL_REPLAY_HANG_AT"
"""A turn at which ``hanging_calls`` never answers (the crash test kills it there)."""


def _log(name: str) -> Path | None:
    where = os.environ.get(CALLS_DIR)
    return Path(where) / name if where else None


@make_tool(description="Look a topic up.")
def lookup(args: dict[str, Any], ctx: ToolContext) -> str:
    LOOKUPS.append(str(args["query"]))
    log = _log("lookups.jsonl")
    if log is not None:
        with log.open("a") as f:
            f.write(json.dumps({"pid": os.getpid(), "query": args["query"]}) + "\n")
    return f"facts about {args['query']}"


def _turn(*calls: tuple[str, str]) -> ModelResponse:
    return ModelResponse(
        tool_calls=tuple(ToolCallRequest(cid, "lookup", {"query": q}) for cid, q in calls),
        usage=USAGE,
        finish_reason="tool_calls",
    )


def _answer(text: str) -> ModelResponse:
    return ModelResponse(content=text, usage=USAGE, finish_reason="stop")


ORIGINAL = (_turn(("a", "kafka")), _answer("kafka is a log"))


class _Recording(ScriptedModel):
    async def complete(self, request: ModelRequest) -> ModelResponse:
        REQUESTS.append(request)
        turn = sum(1 for m in request.messages if m.get("role") == "assistant")
        if turn == 1 and "stop" in STOP:
            STOP["stop"].stop("the test stops the run at turn 2")
        return await super().complete(request)


def same_calls() -> _Recording:
    """Another model that makes the original's tool call, then answers."""
    return _Recording(
        (_turn(("x", "kafka")), _answer("kafka, in other words")),
        provider="anthropic",
        name="claude-haiku-4-5",
    )


def new_calls() -> _Recording:
    """Another model that makes the original's call and one the original never made."""
    return _Recording(
        (_turn(("x", "kafka")), _turn(("y", "raft")), _answer("kafka and raft")),
        provider="anthropic",
        name="claude-haiku-4-5",
    )


class _Hanging(ScriptedModel):
    async def complete(self, request: ModelRequest) -> ModelResponse:
        turn = sum(1 for m in request.messages if m.get("role") == "assistant") + 1
        response = await super().complete(request)  # logged as invoked first
        if str(turn) == os.environ.get(HANG_AT):
            await asyncio.Event().wait()  # in flight until the process is killed
        return response


def hanging_calls() -> _Hanging:
    """``new_calls``, logging its invocations, and never answering turn ``$HANG_AT``."""
    return _Hanging(
        (_turn(("x", "kafka")), _turn(("y", "raft")), _answer("kafka and raft")),
        provider="anthropic",
        name="claude-haiku-4-5",
        invocation_log=_log("model.jsonl"),
    )


MODEL: dict[str, Any] = {"model": lambda: ScriptedModel(ORIGINAL, provider="openai", name="gpt-4o")}


@workflow(NAME)
async def research(ctx: WorkflowContext, topic: str) -> str | None:
    async def ask(step: StepContext) -> str | None:
        async with step.session("researcher", model=MODEL["model"](), tools=[lookup]) as agent:
            return await agent.run(f"research {topic}")

    return await ctx.step("research", ask)


@workflow("tests.full_replay.other")
async def other(ctx: WorkflowContext, topic: str) -> str:
    return topic


NUMBERED: list[str] = []
"""Every real invocation of the numbered tool: its n-th result says n."""


@make_tool(description="Say how many times it ran.")
def numbered(args: dict[str, Any], ctx: ToolContext) -> str:
    NUMBERED.append(str(args["q"]))
    return f"result {len(NUMBERED)}"


def _numbered_turn() -> ModelResponse:
    return ModelResponse(
        tool_calls=(ToolCallRequest("n", "numbered", {"q": "same"}),),
        usage=USAGE,
        finish_reason="tool_calls",
    )


class _EchoesTool(ScriptedModel):
    """Calls ``numbered`` once, then answers with what it said; stops the run (``STOP``) at
    the first turn of the session asked about step two."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        REQUESTS.append(request)
        turn = sum(1 for m in request.messages if m.get("role") == "assistant")
        if turn == 0 and "stop" in STOP and "two" in str(request.messages[0].get("content")):
            STOP.pop("stop").stop("the test stops the run in step two")
        if turn == 0:
            return _numbered_turn()
        return _answer(str(request.messages[-1]["content"]))


def echoes_tool() -> _EchoesTool:
    return _EchoesTool((), provider="anthropic", name="claude-haiku-4-5")


@workflow("tests.full_replay.twice")
async def twice(ctx: WorkflowContext, _: Any) -> list[str | None]:
    async def ask(step: StepContext, which: str) -> str | None:
        model = ScriptedModel((_numbered_turn(), _answer("done")), provider="openai", name="o")
        async with step.session("asker", model=model, tools=[numbered]) as agent:
            await agent.run(f"step {which}")
            return None

    await ctx.step("one", ask, "one")
    await ctx.step("two", ask, "two")
    return [None]


@workflow("tests.full_replay.parent")
async def parent(ctx: WorkflowContext, topic: str) -> Any:
    async def delegate(step: StepContext) -> Any:
        return await step.start_workflow(NAME, topic, call_id="delegate")

    return await ctx.step("delegate", delegate)


WRITER = (_answer("a write-up"),)


@workflow("tests.full_replay.pair")
async def pair(ctx: WorkflowContext, topic: str) -> list[str | None]:
    """Two agents: ``researcher`` (``MODEL``, the lookup tool) then ``writer`` (a model of its
    own): a full replay may change one agent's model and keep the other's."""

    async def ask(step: StepContext) -> str | None:
        async with step.session("researcher", model=MODEL["model"](), tools=[lookup]) as agent:
            return await agent.run(f"research {topic}")

    async def write(step: StepContext, facts: str | None) -> str | None:
        model = ScriptedModel(WRITER, provider="openai", name="gpt-4o-mini")
        async with step.session("writer", model=model, tools=[lookup]) as agent:
            return await agent.run(f"write up {facts}")

    facts = await ctx.step("research", ask)
    return [facts, await ctx.step("write", write, facts)]
