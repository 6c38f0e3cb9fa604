"""Workflows for the panel tests, in a module that passes the replay-safety scan: a research
call, then a panel of three judges asked about its answer (``ctx.panel``)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from little.events import Usage
from little.harness import ModelResponse, ScriptedModel
from little.runtime import Retry, StepContext, WorkflowContext, workflow

USAGE = Usage(input_tokens=50, output_tokens=10)
LEGS = ("judge0", "judge1", "judge2")
MODELS: dict[str, list[ScriptedModel]] = {}
"""Every model built in this process, by session name: tests count real invocations."""
BASE = {
    "research": "Find facts about ",
    "judge0": "Judge: ",
    "judge1": "Judge: ",
    "judge2": "Judge: ",
}


def invocations(name: str) -> int:
    return sum(m.invocations for m in MODELS.get(name, []))


def _calls_log(name: str) -> Path | None:
    """Where a child process of the crash tests logs its real invocations (by session)."""
    calls_dir = os.environ.get("LITTLE_EXAMPLE_CALLS_DIR")
    if not calls_dir:
        return None
    Path(calls_dir).mkdir(parents=True, exist_ok=True)
    return Path(calls_dir) / f"panel-{name}.jsonl"


def model(name: str, prompt: str, latency: float = 0.0) -> ScriptedModel:
    made = ScriptedModel(
        (ModelResponse(content=f"{name}: on [{prompt}]", usage=USAGE, finish_reason="stop"),),
        provider="openai",
        name="gpt-4o-mini",
        latency=latency,
        invocation_log=_calls_log(name),
    )
    MODELS.setdefault(name, []).append(made)
    return made


async def research(step: StepContext, prompt: str) -> str | None:
    async with step.session("research", model=model("research", prompt)) as agent:
        return await agent.run(prompt)


def judged(prompts: dict[str, str], latency: float) -> Any:
    async def judge(step: StepContext, about: str) -> list[str | None]:
        asked = [(name, prompts[name] + about) for name in LEGS]
        async with contextlib.AsyncExitStack() as stack:
            legs = [
                (
                    await stack.enter_async_context(
                        step.session(name, model=model(name, prompt, latency))
                    ),
                    prompt,
                )
                for name, prompt in asked
            ]
            return await step.panel(legs)

    return judge


def panel_flow(
    name: str, v: str, *, with_research: bool = True, latency: float = 0.0, **edits: str
) -> Any:
    """Register ``name`` version ``v``: research (unless ``with_research`` is False), then
    a panel of three judges; ``edits`` change prompts by session name."""
    prompts = {**BASE, **edits}
    judge = judged(prompts, latency)

    async def flow(ctx: WorkflowContext, topic: str) -> Any:
        about = topic
        if with_research:
            about = str(await ctx.step("research", research, prompts["research"] + topic))
        # retried on a failure: a terminal one (a mixed panel) must not be
        return await ctx.step("judge", judge, about, retry=Retry(max_attempts=3))

    return workflow(name, version=v)(flow)
