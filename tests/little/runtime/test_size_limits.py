"""Size limits (issue 13): no event over the broker's record size is ever attempted. A large
payload with an artifact ref goes to the artifact store (a 5 MB session answer included,
``harness.session.completed`` v2); a field without one (tool arguments here) is refused when
the event is made, before it takes a seq, and the run fails saying which field, instead of an
append the broker refuses again on every resume. (The same on Kafka through a crash:
``tests/crash/test_large_payloads.py``.)"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import little
from little.events import SessionCompleted, ToolCallStarted, Usage
from little.harness import ModelResponse, ScriptedModel, ToolCallRequest, ToolContext, tool
from little.replay import replay_run
from little.runtime import StepContext, WorkflowContext, execute, workflow

USAGE = Usage(input_tokens=10, output_tokens=5)
LIMIT = 1_000_000


@tool(description="Echo a text.")
def echo(args: dict[str, Any], ctx: ToolContext) -> str:
    return str(args["text"])[:10]


def _flow(script: tuple[ModelResponse, ...]) -> Any:
    async def converse(step: StepContext, _: None) -> str | None:
        async with step.session("agent", model=ScriptedModel(script), tools=[echo]) as agent:
            return await agent.run("Go.", max_turns=3)

    async def flow(ctx: WorkflowContext, input: None) -> Any:
        return await ctx.step("converse", converse, None)

    return flow


def _largest_record(world: little.World, run_id: str) -> int:
    return max(len(r.payload) for r in world.log.read_run(run_id))


def test_a_5_mb_answer_goes_to_the_artifact_store(tmp_path: Path) -> None:
    answer = "a" * (5 * 1024 * 1024)
    wf = workflow("size-answer", version="1")(
        _flow((ModelResponse(content=answer, usage=USAGE, finish_reason="stop"),))
    )
    with little.local_world(tmp_path) as world:
        result = asyncio.run(execute(world, "big-answer", wf, None))
        assert (result.status, result.output) == ("completed", answer)
        assert _largest_record(world, "big-answer") < LIMIT // 10
        (done,) = [
            e.event for e in world.read_run("big-answer") if isinstance(e.event, SessionCompleted)
        ]
        assert done.output_json is None
        assert done.output_ref is not None
        assert world.artifacts.get(done.output_ref) == f'"{answer}"'.encode()
        (session,) = replay_run(world, "big-answer").state.sessions
        assert session.output_ref == done.output_ref


def test_a_field_without_a_ref_over_the_limit_fails_the_run_saying_which(tmp_path: Path) -> None:
    call = ToolCallRequest("c1", "echo", {"text": "x" * 2_000_000})
    wf = workflow("size-arguments", version="1")(
        _flow((ModelResponse(tool_calls=(call,), usage=USAGE, finish_reason="tool_calls"),))
    )
    with little.local_world(tmp_path) as world:
        result = asyncio.run(execute(world, "big-arguments", wf, None))
        assert result.status == "failed"
        assert result.error is not None
        assert "harness.tool_call.started" in result.error
        assert "arguments_json" in result.error
        assert _largest_record(world, "big-arguments") < LIMIT
        events = [e.event for e in world.read_run("big-arguments")]
        assert not [e for e in events if isinstance(e, ToolCallStarted)]
        state = replay_run(world, "big-arguments").state
        assert state.status == "failed"  # and the log is whole: it folds


def test_the_limit_is_in_bytes_as_avro_writes_strings(tmp_path: Path) -> None:
    """400,000 CJK characters are 1.2 MB of UTF-8: under a character count, over the record."""
    call = ToolCallRequest("c1", "echo", {"text": "字" * 400_000})
    wf = workflow("size-arguments-utf8", version="1")(
        _flow((ModelResponse(tool_calls=(call,), usage=USAGE, finish_reason="tool_calls"),))
    )
    with little.local_world(tmp_path) as world:
        result = asyncio.run(execute(world, "big-utf8", wf, None))
        assert result.status == "failed"
        assert result.error is not None
        assert "arguments_json" in result.error
        assert _largest_record(world, "big-utf8") < LIMIT


class Huge(Exception):
    pass


def test_an_error_message_over_the_limit_is_cut_so_the_failure_is_recorded(
    tmp_path: Path,
) -> None:
    async def fail(ctx: WorkflowContext, input: None) -> None:
        raise Huge("e" * 2_000_000)

    wf = workflow("size-error", version="1")(fail)
    with little.local_world(tmp_path) as world:
        result = asyncio.run(execute(world, "big-error", wf, None))
        assert result.status == "failed"
        assert _largest_record(world, "big-error") < LIMIT
        state = replay_run(world, "big-error").state
        assert state.status == "failed"  # the failure is in the log: a resume need not meet it
        assert state.error is not None
        assert state.error.endswith("[cut: 2,000,000 bytes in all]")
        assert asyncio.run(execute(world, "big-error", wf, None)).status == "failed"
