"""A workflow only some coordinators have (``LITTLE_WORKFLOWS``): for parking tests."""

from __future__ import annotations

from typing import Any

from little.runtime import StepContext, WorkflowContext, workflow

NAME = "tests.late"


@workflow(NAME, version="1")
async def late(ctx: WorkflowContext, input: dict[str, Any]) -> str:
    def hello(step: StepContext, who: str) -> str:
        return f"hello {who}"

    return str(await ctx.step("hello", hello, input["who"]))
