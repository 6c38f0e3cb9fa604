"""Edited code for the committed golden runs: workflows that behave as the ones that recorded
them but are other code (another module, other bytes, so another source identity)."""

from __future__ import annotations

from little.runtime import StepContext, Workflow, WorkflowContext


def _first_clause(step: StepContext, text: str) -> str:
    head, _, _ = text.partition(";")
    return head[:80]


async def _summarise(ctx: WorkflowContext, text: str) -> str:
    shortened = await ctx.step("shorten", _first_clause, text)
    return str(shortened)


summarise = Workflow("summarise", "1", _summarise)
"""``little.examples.research.summarise``, rewritten (not registered)."""
