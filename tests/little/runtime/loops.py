"""Workflows for the runtime tests: an outer-loop cycle with a planner session, and a loop."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from little.events import Usage
from little.harness import ModelResponse, ScriptedModel
from little.runtime import StepContext, WorkflowContext, workflow

LOG = "LITTLE_TEST_STEP_LOG"


def log_step(name: str) -> None:
    path = os.environ.get(LOG)
    if path:
        with Path(path).open("a") as f:
            f.write(json.dumps({"pid": os.getpid(), "step": name}) + "\n")


async def plan(step: StepContext, cycle_input: dict[str, Any]) -> str | None:
    log_step(f"plan-{cycle_input['cycle']}")
    model = ScriptedModel(
        [
            ModelResponse(
                content=f"plan for cycle {cycle_input['cycle']}",
                usage=Usage(input_tokens=10, output_tokens=5),
            )
        ]
    )
    manifest = {"outer_loop_context_hash": cycle_input["outer_loop_context_hash"]}
    async with step.session("planner", model=model, manifest=manifest) as planner:
        return await planner.run(f"goal: {cycle_input['context']['goal']}")


@workflow("test.cycle", version="1")
async def cycle(ctx: WorkflowContext, cycle_input: dict[str, Any]) -> dict[str, Any]:
    planned = await ctx.step("plan", plan, cycle_input)

    def act(step: StepContext) -> str:
        log_step(f"act-{cycle_input['cycle']}")
        return f"did {planned}"

    return {"cycle": cycle_input["cycle"], "result": await ctx.step("act", act)}


@workflow("test.revise", version="1")
async def revise(ctx: WorkflowContext, input: dict[str, Any]) -> list[str]:
    """draft -> review -> draft ... until review says done (max 3 visits)."""
    drafts: list[str] = []
    target: str | None = "draft"
    while target == "draft":

        def draft(step: StepContext) -> str:
            log_step(f"draft-{step.visit}")
            return f"draft v{step.visit}"

        drafts.append(await ctx.step("draft", draft, max_visits=3))

        def review(step: StepContext) -> str | None:
            log_step(f"review-{step.visit}")
            return "draft" if step.visit < input["rounds"] else None

        target = await ctx.decide("review", review, max_visits=3)
    return drafts


@workflow("test.values", version="1")
async def values(ctx: WorkflowContext, _: Any) -> list[Any]:
    """Records clock/random/uuid values at run, branch and step scope."""
    now, rnd, uid = ctx.now().isoformat(), ctx.random(), str(ctx.uuid4())

    async def branch(b: WorkflowContext) -> float:
        return b.random()

    branches = await ctx.parallel("p", {"x": branch, "y": branch})
    in_step = await ctx.step("s", lambda step: [step.random(), str(step.uuid4())])
    late = ctx.random()  # recorded after the step: the crash below lands before it
    return [now, rnd, uid, branches, in_step, late]
