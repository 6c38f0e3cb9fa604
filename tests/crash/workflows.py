"""Purpose-built workflows for the crash tests (registered on import).

``fan_out``: one agent session whose model asks, in one turn, for ``n`` ``run_workflow`` tool
calls, each running the ``square`` workflow as a sub-run; its second turn sums the results it
was given. ``square`` SIGKILLs its own process when it starts as sub-run number
``$CRASH_TEST_KILL_AT_SQUARE`` (a crash-on-condition hook, set only for the first process).

``gated``: an agent session whose model blocks inside every call until the file
``$CRASH_TEST_GATE`` exists (where that variable is set), then a ``square`` sub-run.

``diverge``: an agent whose turn-3 reply depends on the process that produced it (a model
that is not deterministic), so a resume that re-invokes turn 3 gets another answer and the
tool call it asks for is new.

Every real invocation is logged to ``$LITTLE_EXAMPLE_CALLS_DIR`` like the reference example.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

from little.events import Usage
from little.examples.research import _log_call
from little.harness import (
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
    ToolContext,
    tool,
)
from little.runtime import StepContext, WorkflowContext, workflow, workflow_tool

KILL_AT_SQUARE = "CRASH_TEST_KILL_AT_SQUARE"


def _turn(request: ModelRequest) -> int:
    return 1 + sum(1 for m in request.messages if m.get("role") == "assistant")


class FanOutModel:
    """Turn 1: ``n`` run_workflow calls (square of 1..n); turn 2: the sum of the results."""

    provider = "openai"
    name = "gpt-4o-mini"

    def __init__(self, n: int) -> None:
        self.n = n

    async def complete(self, request: ModelRequest) -> ModelResponse:
        turn = _turn(request)
        _log_call("model", turn=turn)
        usage = Usage(input_tokens=100 * turn, output_tokens=10)
        if turn == 1:
            calls = tuple(
                ToolCallRequest(f"c{i}", "run_workflow", {"workflow": "square", "input": {"i": i}})
                for i in range(1, self.n + 1)
            )
            return ModelResponse(tool_calls=calls, usage=usage, finish_reason="tool_calls")
        results = [json.loads(m["content"]) for m in request.messages if m["role"] == "tool"]
        return ModelResponse(content=f"sum={sum(results)}", usage=usage, finish_reason="stop")


@workflow("square", version="1")
async def square(ctx: WorkflowContext, input: dict[str, Any]) -> int:
    i = int(input["i"])
    if os.environ.get(KILL_AT_SQUARE) == str(i):
        os.kill(os.getpid(), signal.SIGKILL)

    def compute(step: StepContext) -> int:
        _log_call("steps", step=f"square:{step.step_path}", run_id=ctx.run_id, i=i)
        return i * i

    return int(await ctx.step("compute", compute))


async def _dispatch(step: StepContext, n: int) -> str | None:
    _log_call("steps", step=step.step_path)
    # one sub-run after the other: these crash tests name the exact calls done at a crash
    # (a turn's concurrent tool calls have their own, tests/crash/test_parallel_tools.py)
    async with step.session(
        "orchestrator", model=FanOutModel(n), tools=[workflow_tool(step)], max_parallel_tools=1
    ) as agent:
        return await agent.run(f"Square 1..{n} with sub-runs and add them up.", max_turns=3)


@workflow("fan_out", version="1")
async def fan_out(ctx: WorkflowContext, input: dict[str, Any]) -> str | None:
    answer = await ctx.step("dispatch", _dispatch, int(input["n"]))
    return None if answer is None else str(answer)


class DivergingModel:
    """Turns 1-2 fixed; turn 3 asks to echo the pid of the process that answered; turn 4
    reports what the echo returned."""

    provider = "openai"
    name = "gpt-4o-mini"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        turn = _turn(request)
        _log_call("model", turn=turn)
        usage = Usage(input_tokens=100 * turn, output_tokens=10)
        if turn <= 2:
            call = ToolCallRequest(f"c{turn}", "echo", {"text": f"turn {turn}"})
            return ModelResponse(tool_calls=(call,), usage=usage, finish_reason="tool_calls")
        if turn == 3:
            call = ToolCallRequest("c3", "echo", {"text": f"answered by {os.getpid()}"})
            return ModelResponse(tool_calls=(call,), usage=usage, finish_reason="tool_calls")
        last = json.loads(request.messages[-1]["content"])
        return ModelResponse(content=f"final: {last}", usage=usage, finish_reason="stop")


@tool(description="Echo a text.", parameters={"type": "object"})
def echo(args: dict[str, Any], ctx: ToolContext) -> str:
    _log_call("tools", tool="echo", call_id=ctx.call_id, key=ctx.idempotency_key, args=args)
    return str(args["text"])


async def _converse(step: StepContext) -> str | None:
    _log_call("steps", step=step.step_path)
    async with step.session("agent", model=DivergingModel(), tools=[echo]) as agent:
        return await agent.run("Echo three times.", max_turns=5)


@workflow("diverge", version="1")
async def diverge(ctx: WorkflowContext, input: Any) -> str | None:
    answer = await ctx.step("converse", _converse)
    return None if answer is None else str(answer)


GATE = "CRASH_TEST_GATE"
"""A file path: while it does not exist, ``gated``'s model blocks (only where the variable is
set). Lets a test hold a process inside a model call for as long as it needs."""


def _is_open(gate: str) -> bool:
    return os.path.exists(gate)


class GatedModel:
    """Turn 1 asks for one echo; turn 2 answers. Blocks before answering while $GATE is
    missing."""

    provider = "openai"
    name = "gpt-4o-mini"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        turn = _turn(request)
        _log_call("model", turn=turn)
        gate = os.environ.get(GATE)
        if gate:
            for _ in range(6000):  # 60 s at most
                if _is_open(gate):
                    break
                await asyncio.sleep(0.01)
        usage = Usage(input_tokens=100 * turn, output_tokens=10)
        if turn == 1:
            call = ToolCallRequest("c1", "echo", {"text": "gated"})
            return ModelResponse(tool_calls=(call,), usage=usage, finish_reason="tool_calls")
        return ModelResponse(content="done", usage=usage, finish_reason="stop")


async def _ask(step: StepContext) -> str | None:
    _log_call("steps", step=step.step_path)
    async with step.session("agent", model=GatedModel(), tools=[echo]) as agent:
        return await agent.run("Echo once.", max_turns=3)


@workflow("gated", version="1")
async def gated(ctx: WorkflowContext, input: Any) -> dict[str, Any]:
    answer = await ctx.step("ask", _ask)
    squared = await ctx.start_workflow("square", {"i": 7})
    return {"answer": answer, "squared": squared}


# -- ``busy``: many of these run at once in one process (the concurrent crash test) ----------


class PairModel:
    """Turn 1 asks ``add`` for seed + the branch's number; turn 2 answers with the result.
    Sleeps a few ms per call so that many runs' appends are in flight together."""

    provider = "openai"
    name = "gpt-4o-mini"

    def __init__(self, run_id: str, session: str) -> None:
        self.run_id = run_id
        self.session = session

    async def complete(self, request: ModelRequest) -> ModelResponse:
        turn = _turn(request)
        _log_call("model", key=f"{self.run_id}|{self.session}|{turn}")
        await asyncio.sleep(0.002 + 0.001 * (hash(self.run_id) % 5))
        usage = Usage(input_tokens=50 * turn, output_tokens=5)
        if turn == 1:
            args = json.loads(request.messages[0]["content"])
            call = ToolCallRequest("c1", "add", args)
            return ModelResponse(tool_calls=(call,), usage=usage, finish_reason="tool_calls")
        result = json.loads(request.messages[-1]["content"])
        return ModelResponse(content=f"{self.session}={result}", usage=usage, finish_reason="stop")


@tool(description="Add two numbers.", parameters={"type": "object"})
def add(args: dict[str, Any], ctx: ToolContext) -> int:
    _log_call("tools", key=ctx.idempotency_key)
    return int(args["x"]) + int(args["y"])


async def _pair(step: StepContext, name: str, seed: int, y: int) -> str | None:
    model = PairModel(step.run_id, f"{step.step_path}#{name}")
    async with step.session(name, model=model, tools=[add]) as agent:
        return await agent.run(json.dumps({"x": seed, "y": y}), max_turns=3)


@workflow("busy", version="1")
async def busy(ctx: WorkflowContext, input: dict[str, Any]) -> dict[str, Any]:
    i = int(input["i"])
    seed = await ctx.step("seed", lambda step: i * 10)
    ctx.random()  # a recorded value: deferred, it rides with the run's next acked event

    def branch(y: int) -> Any:
        async def run_branch(b: WorkflowContext) -> str | None:
            return str(await b.step("ask", _pair, "agent", seed, y))

        return run_branch

    answers = await ctx.parallel("fan", {"a": branch(1), "b": branch(2)})
    total = await ctx.step("total", lambda step: [answers["a"], answers["b"]])
    return {"i": i, "answers": total}


def _route(step: StepContext) -> str:
    """Answers "left" the first time it is ever asked, "right" after: a resume that decided
    again would take the other route."""
    asked = _calls_logged("steps", step.step_path)
    _log_call("steps", step=step.step_path)
    return "left" if asked == 0 else "right"


def _calls_logged(kind: str, step_path: str) -> int:
    d = os.environ.get("LITTLE_EXAMPLE_CALLS_DIR")
    path = Path(d) / f"{kind}.jsonl" if d else None
    if path is None or not path.exists():
        return 0
    return sum(1 for line in path.read_text().splitlines() if json.loads(line)["step"] == step_path)


@workflow("decides", version="1")
async def decides(ctx: WorkflowContext, input: Any) -> str:
    target = await ctx.decide("route", _route)

    def go(step: StepContext) -> str:
        _log_call("steps", step=step.step_path)
        return f"went {target}"

    return str(await ctx.step(str(target), go))


def _validate(step: StepContext, draft: str) -> str:
    """A validator (seed 004, "validation decisions"): passes a draft that names its subject,
    rejects the rest; its verdict routes the run (publish or revise)."""
    _log_call("steps", step=step.step_path)
    return "publish" if "kafka" in draft else "revise"


@workflow("validated", version="1")
async def validated(ctx: WorkflowContext, input: Any) -> str:
    """A draft, a validation decision on it, then the step its verdict names."""

    def write(step: StepContext) -> str:
        _log_call("steps", step=step.step_path)
        return f"a post about {input}"

    draft = str(await ctx.step("draft", write))
    verdict = await ctx.decide("validate", _validate, draft)

    def act(step: StepContext) -> str:
        _log_call("steps", step=step.step_path)
        return f"{verdict}: {draft}"

    return str(await ctx.step(str(verdict), act))


# -- bulky: 5 MB through a tool result and a model response (issue 13, size limits) ---------

BULK_BYTES = 5 * 1024 * 1024


def bulk_text(seed: str, size: int = BULK_BYTES) -> str:
    """``size`` characters that depend on ``seed`` (so two payloads are told apart)."""
    unit = f"{seed}:0123456789abcdefghijklmnopqrstuvwxyz;"
    return (unit * (size // len(unit) + 1))[:size]


class BulkyModel:
    """Turn 1: ask for the ``bulk`` tool; turn 2: a 5 MB answer built from what it returned."""

    provider = "openai"
    name = "gpt-4o-mini"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        turn = _turn(request)
        _log_call("model", turn=turn)
        usage = Usage(input_tokens=10 * turn, output_tokens=5)
        if turn == 1:
            call = ToolCallRequest("b1", "bulk", {"seed": "tool"})
            return ModelResponse(tool_calls=(call,), usage=usage, finish_reason="tool_calls")
        result = request.messages[-1]["content"]
        assert len(result) >= BULK_BYTES, len(result)
        return ModelResponse(content=bulk_text(f"model-{len(result)}"), usage=usage)


@tool(description="A 5 MB result.", parameters={"type": "object"})
def bulk(args: dict[str, Any], ctx: ToolContext) -> str:
    _log_call("tools", tool="bulk", call_id=ctx.call_id, key=ctx.idempotency_key, args=args)
    return bulk_text(str(args["seed"]))


async def _bulky(step: StepContext) -> str | None:
    async with step.session("agent", model=BulkyModel(), tools=[bulk]) as agent:
        return await agent.run("Fetch the bulk and answer with it.", max_turns=3)


@workflow("bulky", version="1")
async def bulky(ctx: WorkflowContext, input: Any) -> str | None:
    answer = await ctx.step("converse", _bulky)
    return None if answer is None else str(answer)
