"""One workflow in two versions, for the coordinator's deploy tests (``deploy_*`` modules
register them as a deploy would).

``v1`` researches (a plain step) and then writes (an agent session); ``v2`` ranks the facts
between the two. The writer's model latency is the input's unless the process sets
``COORDINATOR_TEST_LATENCY`` (a coordinator whose runs must stay in flight until it is
killed); its invocations go to ``$COORDINATOR_TEST_CALLS_DIR/<run id>.jsonl``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from little.harness import ModelResponse, ScriptedModel
from little.runtime import StepContext, WorkflowContext

NAME = "coordinator.versioned"


def research(step: StepContext, topic: str) -> list[str]:
    return [f"{topic} offsets", f"{topic} brokers"]


def rank(step: StepContext, facts: list[str]) -> list[str]:
    return sorted(facts)


def invocation_log(run_id: str) -> Path | None:
    calls = os.environ.get("COORDINATOR_TEST_CALLS_DIR")
    if not calls:
        return None
    Path(calls).mkdir(parents=True, exist_ok=True)
    return Path(calls) / f"{run_id}.jsonl"


async def write(step: StepContext, facts: list[str], latency: float, tag: str) -> str:
    model = ScriptedModel(
        [ModelResponse(content=f"{tag}: " + " / ".join(facts), finish_reason="stop")],
        latency=float(os.environ.get("COORDINATOR_TEST_LATENCY") or latency),
        invocation_log=invocation_log(step.run_id),
    )
    async with step.session("writer", model=model) as agent:
        return str(await agent.run("Write up: " + ", ".join(facts)))


async def v1(ctx: WorkflowContext, input: dict[str, Any]) -> str:
    facts = await ctx.step("research", research, input["topic"])
    return str(await ctx.step("write", write, facts, input.get("latency", 0.05), "v1"))


async def v2(ctx: WorkflowContext, input: dict[str, Any]) -> str:
    facts = await ctx.step("research", research, input["topic"])
    facts = await ctx.step("rank", rank, facts)
    return str(await ctx.step("write", write, facts, input.get("latency", 0.05), "v2"))
