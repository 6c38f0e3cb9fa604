"""The public API as a user types against it, checked by ``mypy --strict`` in ``make test``
(``make typecheck``) and run by tests/typecheck/test_typed_api.py.

Only exported names are imported. ``assert_type`` pins what a type checker infers: a
workflow keeps its function's signature, a replay has a typed state.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any, assert_type

from little import (
    LittleError,
    MaterializedRunState,
    PartialReplay,
    ProjectionReplay,
    ReplayResult,
    World,
    local_world,
    replay_in_mode,
    replay_run,
)
from little.events import Usage
from little.harness import (
    Document,
    Image,
    ImageUrl,
    ModelResponse,
    ScriptedModel,
    Text,
    Tool,
    ToolContext,
    tool,
)
from little.replay import ReplayEnvelope, replay_envelope
from little.runtime import (
    AgentStream,
    CompactionPolicy,
    RunResult,
    StepContext,
    Workflow,
    WorkflowContext,
    lookup,
    registered,
    run,
    versions,
    workflow,
)


@tool(description="Look a word up.", parameters={"type": "object"})
def define(args: dict[str, Any], ctx: ToolContext) -> str:
    return f"{args.get('word', '?')}: a word ({ctx.call_id})"


def outline(step: StepContext, topic: str) -> list[str]:
    return [f"{topic}: what", f"{topic}: why"]


@workflow("typed_brief", version="1")
async def brief(ctx: WorkflowContext, topic: str) -> dict[str, Any]:
    """Outline a topic, then ask an agent about it."""
    parts = await ctx.step("outline", outline, topic)

    async def ask(step: StepContext) -> str | None:
        model = ScriptedModel(
            [ModelResponse(content="short answer", usage=Usage(input_tokens=5, output_tokens=2))]
        )
        compact = CompactionPolicy(max_messages=40, keep_last=8)  # not due: one exchange
        async with step.session("agent", model=model, tools=[define], compact=compact) as agent:
            return await agent.run(f"Explain {topic}")

    answer = await ctx.step("ask", ask)
    return {"parts": parts, "answer": answer}


typed: Workflow[[WorkflowContext, str], dict[str, Any]] = brief
assert_type(define, Tool)


async def _checked_not_run(ctx: WorkflowContext) -> None:
    """What mypy says of calls to a workflow (strict mode fails on an unneeded ignore, so
    each ignore below is an error mypy must find)."""
    assert_type(await brief(ctx, "kafka"), dict[str, Any])
    await brief(ctx, 42)  # type: ignore[arg-type]
    await brief(ctx)  # type: ignore[call-arg]
    wrong: Workflow[[WorkflowContext, int], dict[str, Any]] = brief  # type: ignore[assignment]
    del wrong


async def _panel_not_run(step: StepContext) -> None:
    """A panel: (session, prompt) legs of one step, answers in leg order."""
    model = ScriptedModel([ModelResponse(content="yes")])
    async with step.session("a", model=model) as a, step.session("b", model=model) as b:
        answers = await step.panel([(a, "Is it a log?"), (b, "Is it a log?")], max_turns=2)
        assert_type(answers, list[str | None])
    await step.panel([a])  # type: ignore[arg-type]


async def _structured_not_run(step: StepContext) -> None:
    """Structured output: run() answers with the model it is asked for (or the session's)."""
    from pydantic import BaseModel

    class Invoice(BaseModel):
        number: str

    model = ScriptedModel([ModelResponse(content='{"number": "A-1"}')])
    async with step.session("free", model=model) as free:
        assert_type(await free.run("Text?"), str | None)
        assert_type(await free.run("Invoice?", output=Invoice), Invoice)
        assert_type(await free.run("Any?", output={"type": "object"}), Any)
    async with step.session("typed", model=model, output=Invoice, max_parallel_tools=2) as typed:
        assert_type(await typed.run("Invoice?"), Invoice)


async def _streamed_not_run(step: StepContext) -> None:
    """Streaming: deltas are text; the answer is what run() would have returned."""
    model = ScriptedModel([["Kafka ", "is a log."]])
    async with step.session("agent", model=model) as agent:
        stream = agent.stream("Kafka?")
        assert_type(stream, AgentStream[str | None])
        async for delta in stream:
            assert_type(delta, str)
        assert_type(stream.answer, str | None)
        assert_type(await agent.run("Again?", on_delta=print), str | None)


async def _parts_not_run(step: StepContext) -> None:
    """Images and documents: a prompt is text or a list of parts (a string in it is text)."""
    model = ScriptedModel([ModelResponse(content="A receipt.")])
    async with step.session("agent", model=model) as agent:
        photo = Image(b"\x89PNG", "image/png")
        assert_type(await agent.run(["What is this?", photo]), str | None)
        prompt = [Text("Compare"), ImageUrl("https://example.com/a.png"), Document(b"%PDF")]
        assert_type(await agent.run(prompt), str | None)
        async for delta in agent.stream(["Again?", photo]):
            assert_type(delta, str)
        await agent.run([b"raw bytes"])  # type: ignore[list-item]


async def _patched_not_run(ctx: WorkflowContext, step: StepContext) -> None:
    """Patches: a plain bool, on the workflow's scopes and inside steps; ids are strings."""
    assert_type(ctx.patched("rank-facts"), bool)
    assert_type(step.patched("two-drafts"), bool)
    assert_type(ctx.deprecate_patch("rank-facts"), None)
    ctx.patched(1)  # type: ignore[arg-type]


@workflow("typed_brief", version="0", resume_only=True)
async def brief_v0(ctx: WorkflowContext, topic: str) -> dict[str, Any]:
    """An older version, kept to resume the runs it started."""
    return {"parts": await ctx.step("outline", outline, topic), "answer": None}


async def main(data_dir: Path) -> MaterializedRunState:
    world = local_world(data_dir, partitions=2)
    assert_type(world, World)
    with world:
        result = await run(world, brief, "kafka")
        assert_type(result, RunResult)
        if result.status != "completed":
            raise LittleError(f"run {result.run_id}: {result.status} ({result.error})")
        replay = replay_run(world, result.run_id)
        assert_type(replay, ReplayResult)
        state = replay.state
        assert_type(state, MaterializedRunState)
        assert_type(result.replay, ReplayEnvelope | None)
        envelope = replay_envelope(state)
        assert envelope == result.replay  # every result carries it
        assert_type(envelope.diverged_at_node, tuple[str | None, str | None, int | None] | None)
        assert not envelope.replayed
        # one API for the replay modes, typed by mode
        skipped = await replay_in_mode(world, result.run_id)
        assert_type(skipped, ReplayResult)
        partial = await replay_in_mode(world, result.run_id, mode="partial", from_seq=1)
        assert_type(partial, PartialReplay)
        assert_type(partial.state, MaterializedRunState | None)
        projected = await replay_in_mode(world, None, mode="projection-only")
        assert_type(projected, ProjectionReplay)
        assert [s.run_id for s in projected.states] == [result.run_id]
    assert lookup("typed_brief") is brief is typed
    assert registered()["typed_brief"] is brief  # the newest registered without resume_only
    assert_type(versions("typed_brief"), Mapping[str, Workflow[..., Any]])
    assert list(versions("typed_brief")) == ["1", "0"]
    assert lookup("typed_brief", "0") is brief_v0
    assert list(inspect.signature(brief).parameters) == ["ctx", "topic"]
    return state


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        print(asyncio.run(main(Path(tmp))).status)
