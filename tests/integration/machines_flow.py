"""The workflow of the several-machines test: an agent turn, then a report past the inline
limit, so every run's step output and run output live in the artifact store.

``machines.report`` takes ``{"n": int, "latency": float}``: a one-turn agent session on a
ScriptedModel (``latency`` seconds), then a step whose output is ``report_text(run_id, n)``
(about 80 KB, different for every run), which is also the run's output.
"""

from __future__ import annotations

from typing import Any

from little.events import Usage
from little.harness import ModelResponse, ScriptedModel
from little.runtime import StepContext, WorkflowContext, workflow
from little.runtime._execution import LARGE_PAYLOAD


def report_text(run_id: str, n: int) -> str:
    line = f"run {run_id} section {n}: partitions order records, offsets track consumers.\n"
    return line * (LARGE_PAYLOAD // len(line) + 200)


@workflow("machines.report", version="1")
async def report(ctx: WorkflowContext, input: dict[str, Any]) -> str:
    async def draft(step: StepContext) -> str | None:
        model = ScriptedModel(
            [
                ModelResponse(
                    content=f"draft {input['n']}",
                    usage=Usage(input_tokens=50, output_tokens=5),
                    finish_reason="stop",
                )
            ],
            provider="openai",
            name="gpt-4o-mini",
            latency=float(input.get("latency", 0.2)),
        )
        async with step.session("agent", model=model) as agent:
            return await agent.run("Draft the report.", max_turns=1)

    async def expand(step: StepContext) -> str:
        return report_text(step.run_id, int(input["n"]))

    await ctx.step("draft", draft)
    return str(await ctx.step("expand", expand))
