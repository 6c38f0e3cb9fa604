"""``workflow_tool``: a harness tool that runs a registered workflow as a durable sub-run of the
step whose session calls it. It only adapts ``StepContext.start_workflow`` to a tool; the sub-run
is reserved and recorded there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from little.harness import Tool, ToolContext

if TYPE_CHECKING:
    from little.runtime._context import StepContext


def workflow_tool(step: StepContext, name: str = "run_workflow") -> Tool:
    """A tool that runs a registered workflow as a sub-run: ``{"workflow": ..., "input": ...}``.

    The sub-run id is reserved per tool call before the sub-run starts; a re-invoked call gets
    the same id, and a sub-run whose own log is already complete is not executed again.
    """

    async def run_workflow(args: dict[str, Any], ctx: ToolContext) -> Any:
        return await step.start_workflow(args["workflow"], args.get("input"), call_id=ctx.call_id)

    return Tool(
        name,
        run_workflow,
        "Run a registered workflow as a durable sub-run and return its output.",
        {
            "type": "object",
            "properties": {"workflow": {"type": "string"}, "input": {}},
            "required": ["workflow"],
        },
    )
