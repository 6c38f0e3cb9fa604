"""Workflows for the integrity crash tests: each catches every error of its work and answers
``"fallback"``, after asking one more model for help, as user code may well do.

``guarded``: a step with one model call (``first``), a step with a large output (``notes``,
kept as an artifact), a parallel group with one model call per branch (``fan``), then a step
with one model call (``second``). Edits change second's prompt or system prompt, or the
group's branch set. ``panel``: research, then a panel of three judges (as the panel tests'),
under the same ``except``. Every model call appends to
``$LITTLE_EXAMPLE_CALLS_DIR/integrity-<session>.jsonl``, so a test sees which models ran.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from little.events import Usage
from little.harness import ModelResponse, ScriptedModel
from little.runtime import StepContext, WorkflowContext, workflow
from tests.little.runtime import panel_workflows

GUARDED = "tests.integrity.guarded"
PANEL = "tests.integrity.panel"
USAGE = Usage(input_tokens=40, output_tokens=8)
BASE = {
    "first": "Find facts about ",
    "second": "Write up: ",
    "system": "Be brief.",
    "branches": "a,b",
}
NOTES = 70_000
"""Characters of the notes step's output: over 64 KiB, so it is kept as an artifact."""


def _model(name: str, prompt: str) -> ScriptedModel:
    calls_dir = os.environ.get("LITTLE_EXAMPLE_CALLS_DIR")
    log = None
    if calls_dir:
        Path(calls_dir).mkdir(parents=True, exist_ok=True)
        log = Path(calls_dir) / f"integrity-{name}.jsonl"
    return ScriptedModel(
        (ModelResponse(content=f"{name}: on [{prompt[:60]}]", usage=USAGE, finish_reason="stop"),),
        provider="openai",
        name="gpt-4o-mini",
        invocation_log=log,
    )


async def ask(step: StepContext, name: str, prompt: str, system: str = "Be brief.") -> str | None:
    async with step.session(name, model=_model(name, prompt), system=system) as agent:
        return await agent.run(prompt)


def notes(step: StepContext, topic: str) -> str:
    return f"notes on {topic}: " + "n" * NOTES


async def fallback(ctx: WorkflowContext, error: Exception) -> str:
    """What a workflow may do with an error it caught: swallow it, try another model, and
    answer something."""
    with contextlib.suppress(Exception):
        await ctx.step("fallback", ask, "fallback", f"Recover from {type(error).__name__}")
    return "fallback"


def guarded(v: str, **edits: str) -> Any:
    """Register the guarded pipeline as version ``v`` with ``edits`` (keys of ``BASE``)."""
    p = {**BASE, **edits}

    def angle(name: str, about: str) -> Any:
        async def branch(bctx: WorkflowContext) -> Any:
            return await bctx.step("angle", ask, f"angle-{name}", f"Angle {name} on {about}")

        return branch

    async def flow(ctx: WorkflowContext, topic: str) -> Any:
        try:
            first = await ctx.step("first", ask, "first", p["first"] + topic)
            kept = await ctx.step("notes", notes, topic)
            branches = p["branches"].split(",")
            angles = await ctx.parallel("fan", {b: angle(b, str(first)) for b in branches})
            second = await ctx.step("second", ask, "second", p["second"] + str(angles), p["system"])
        except Exception as exc:
            return await fallback(ctx, exc)
        return [first, len(kept), angles, second]

    return workflow(GUARDED, version=v)(flow)


def panel(v: str, **edits: str) -> Any:
    """Register the guarded panel (research, then three judges) as version ``v``."""
    prompts = {**panel_workflows.BASE, **edits}
    judge = panel_workflows.judged(prompts, 0.0)

    async def flow(ctx: WorkflowContext, topic: str) -> Any:
        try:
            about = await ctx.step(
                "research", panel_workflows.research, prompts["research"] + topic
            )
            return await ctx.step("judge", judge, str(about))
        except Exception as exc:
            return await fallback(ctx, exc)

    return workflow(PANEL, version=v)(flow)
