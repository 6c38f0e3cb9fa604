"""A session may hold several exchanges: ``agent.run`` again continues the conversation."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest

import little
from little.events import ModelCalled, SessionCompleted, Usage
from little.harness import ModelResponse, ScriptedModel, ToolCallRequest, ToolContext, tool
from little.replay import replay_run
from little.runtime import StepContext, WorkflowContext, execute, resume, workflow

USAGE = Usage(input_tokens=10, output_tokens=5)
SCRIPT = (
    ModelResponse(content="Paris.", usage=USAGE, finish_reason="stop"),
    ModelResponse(
        tool_calls=(ToolCallRequest("c1", "lookup", {"q": "population"}),),
        usage=USAGE,
        finish_reason="tool_calls",
    ),
    ModelResponse(content="About 2.1 million.", usage=USAGE, finish_reason="stop"),
)


class Crash(BaseException):
    """Stands in for the process dying: not an Exception, so nothing records it."""


def test_second_run_continues_the_conversation_and_resumes_from_the_log(
    tmp_path: Path,
) -> None:
    models: list[ScriptedModel] = []
    lookups: list[int] = []
    crash = [True]

    @tool(description="Look something up.")
    def lookup(args: dict[str, Any], ctx: ToolContext) -> str:
        lookups.append(ctx.attempt)
        if crash[0]:
            crash[0] = False
            raise Crash  # dies inside the second exchange's tool call
        return "2,102,650"

    async def chat(step: StepContext, _: None) -> list[str | None]:
        model = ScriptedModel(SCRIPT)
        models.append(model)
        async with step.session("chat", model=model, tools=[lookup]) as agent:
            first = await agent.run("Capital of France?")
            second = await agent.run("How many people live there?")
            assert agent.turns == 3
        return [first, second]

    async def flow(ctx: WorkflowContext, input: None) -> Any:
        return await ctx.step("chat", chat, None)

    wf = workflow(f"exchanges-{uuid.uuid4().hex[:8]}", version="1")(flow)
    run_id = f"run_{uuid.uuid4().hex}"
    with little.local_world(tmp_path) as world:
        with pytest.raises(Crash):
            asyncio.run(execute(world, run_id, wf, None))
        assert [m.invocations for m in models] == [2]

        result = asyncio.run(resume(world, run_id, wf))
        assert (result.status, result.output) == ("completed", ["Paris.", "About 2.1 million."])
        # turns 1 and 2 were served from the log; only turn 3 was asked; the tool ran twice
        assert [m.invocations for m in models] == [2, 1]
        assert lookups == [1, 2]

        events = [x.event for x in world.read_run(run_id)]
        called = [e for e in events if isinstance(e, ModelCalled)]
        assert [e.turn for e in called] == [1, 2, 3]
        # the second exchange's first request carries the first exchange and the new question
        assert called[1].message_count == 3
        completed = [e for e in events if isinstance(e, SessionCompleted)]
        assert [(e.turns, e.output_json) for e in completed] == [(3, '"About 2.1 million."')]

        session = replay_run(world, run_id).state.session("chat#chat")
        assert session is not None
        assert (session.status, session.turn_count) == ("completed", 3)


def test_each_exchanges_request_key_commits_to_the_whole_conversation_before_it(
    tmp_path: Path,
) -> None:
    """An agent call's request key covers the sha256 of the canonical JSON of the whole
    conversation before it (kept incrementally, one message at a time): recomputed here from
    first principles, from the messages the model was shown, for every exchange of a session
    with tool calls, non-ASCII text and an empty conversation at the start."""
    from little._canonical import canonical_hash, canonical_json, sha256_hex
    from little.events import AgentCallAdmitted, SessionStarted
    from little.harness import ModelRequest

    seen: list[ModelRequest] = []

    class Recording(ScriptedModel):
        async def complete(self, request: ModelRequest) -> ModelResponse:
            seen.append(request)
            return await super().complete(request)

    @tool(description="Look something up.")
    def lookup(args: dict[str, Any], ctx: ToolContext) -> str:
        return "2,102,650 — «environ»"

    prompts = ["Capital of France?", "How many people live there? ☃", "Merci, et Lyon ?"]
    script = (*SCRIPT, ModelResponse(content="Lyon : 522 250.", usage=USAGE))

    async def chat(step: StepContext, _: None) -> None:
        async with step.session("chat", model=Recording(script), tools=[lookup]) as agent:
            for prompt in prompts:
                await agent.run(prompt, max_turns=3)

    async def flow(ctx: WorkflowContext, input: None) -> Any:
        return await ctx.step("chat", chat, None)

    wf = workflow(f"keys-{uuid.uuid4().hex[:8]}", version="1")(flow)
    run_id = f"run_{uuid.uuid4().hex}"
    with little.local_world(tmp_path) as world:
        asyncio.run(execute(world, run_id, wf, None))
        events = [x.event for x in world.read_run(run_id)]
    (started,) = [e for e in events if isinstance(e, SessionStarted)]
    admitted = [e for e in events if isinstance(e, AgentCallAdmitted)]
    # each exchange's first request: the conversation before it, then its prompt
    firsts = [r for r in seen if r.messages[-1].get("role") == "user"]
    assert [r.messages[-1]["content"] for r in firsts] == prompts
    assert len(admitted) == len(prompts)
    for occurrence, (event, request, prompt) in enumerate(
        zip(admitted, firsts, prompts, strict=True)
    ):
        before = list(request.messages[:-1])
        key = canonical_hash(
            {
                "manifest": started.manifest_hash,
                "node": ["chat", "chat", occurrence],
                "conversation": sha256_hex(canonical_json(before)),
                "prompt": prompt,
                "max_turns": 3,
            }
        )
        assert event.request_key == key
