"""The workflow bench/replay_modes.py records and replays, in a module of its own: it must
pass the replay-safety scan (the benchmark's own module reads the clock, to time things)."""

from __future__ import annotations

from typing import Any

from little.events import Usage
from little.harness import ModelResponse, ScriptedModel
from little.runtime import StepContext, WorkflowContext, workflow

USAGE = Usage(input_tokens=400, output_tokens=60)


def pipeline(calls: int, latency: float, version: str) -> Any:
    async def ask(step: StepContext, n: int) -> str | None:
        model = ScriptedModel(
            (ModelResponse(content=f"answer {n}", usage=USAGE, finish_reason="stop"),),
            provider="openai",
            name="gpt-4o-mini",
            latency=latency,
        )
        async with step.session("agent", model=model) as agent:
            return await agent.run(f"Question {n}")

    async def flow(ctx: WorkflowContext, _: Any) -> Any:
        return [await ctx.step(f"s{n}", ask, n) for n in range(calls)]

    return workflow("bench.replay_modes", version=version)(flow)
