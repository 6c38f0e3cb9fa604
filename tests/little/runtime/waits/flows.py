"""Workflows that wait: a timer, a signal, a signal with a timeout, waits in parallel
branches, a wait inside a step and inside a sub-run. Steps append to the file named by
``LITTLE_TEST_STEP_LOG`` (with the pid), so a test can count what ran, and where."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from little.events import Usage
from little.harness import (
    ModelRequest,
    ModelResponse,
    ScriptedModel,
    Tool,
    ToolCallRequest,
    ToolContext,
)
from little.runtime import StepContext, WaitTimeoutError, Workflow, WorkflowContext, workflow

LOG = "LITTLE_TEST_STEP_LOG"


def log_step(name: str, **fields: Any) -> None:
    path = os.environ.get(LOG)
    if path:
        with Path(path).open("a") as f:
            f.write(json.dumps({"pid": os.getpid(), "step": name, **fields}) + "\n")


def steps(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def mark(name: str) -> Any:
    def fn(step: StepContext, *args: Any) -> str:
        log_step(name)
        return name

    return fn


@workflow("waits.nap", version="1")
async def nap(ctx: WorkflowContext, input: dict[str, Any]) -> dict[str, Any]:
    """before -> sleep(input.seconds) -> after."""
    await ctx.step("before", mark("before"))
    await ctx.sleep(input["seconds"])
    await ctx.step("after", mark("after"))
    return {"slept": input["seconds"]}


@workflow("waits.order", version="1")
async def order(ctx: WorkflowContext, input: Any) -> dict[str, Any]:
    """Waits for the signal ``approved`` and returns its payload."""
    await ctx.step("placed", mark("placed"))
    decision = await ctx.wait_for_signal("approved")
    shipped = await ctx.step("ship", mark("ship"))
    return {"decision": decision, "shipped": shipped}


@workflow("waits.deadline", version="1")
async def deadline(ctx: WorkflowContext, input: dict[str, Any]) -> dict[str, Any]:
    """Waits for ``reply`` at most input.timeout seconds; a timeout is caught."""
    try:
        reply = await ctx.wait_for_signal("reply", timeout=input["timeout"])
    except WaitTimeoutError:
        reply = None
    await ctx.step("after", mark("after"))
    return {"reply": reply}


@workflow("waits.two_signals", version="1")
async def two_signals(ctx: WorkflowContext, input: Any) -> list[Any]:
    """Two waits on one signal name: each takes the next signal sent, in order."""
    first = await ctx.wait_for_signal("item")
    second = await ctx.wait_for_signal("item")
    return [first, second]


@workflow("waits.branches", version="1")
async def branches(ctx: WorkflowContext, input: dict[str, Any]) -> dict[str, Any]:
    """Branch ``a`` sleeps, branch ``b`` waits for a signal: the run waits for both."""

    async def a(bctx: WorkflowContext) -> str:
        await bctx.sleep(input["seconds"])
        return str(await bctx.step("a-done", mark("a-done")))

    async def b(bctx: WorkflowContext) -> Any:
        return await bctx.wait_for_signal("go")

    return await ctx.parallel("both", {"a": a, "b": b})


@workflow("waits.in_step", version="1")
async def in_step(ctx: WorkflowContext, input: dict[str, Any]) -> str:
    """A step that sleeps in its own code: a resume runs the step again up to its wait."""

    async def slow(step: StepContext) -> str:
        log_step("slow-start")
        await step.sleep(input["seconds"])
        log_step("slow-end")
        return "done"

    return str(await ctx.step("slow", slow))


@workflow("waits.child", version="1")
async def child(ctx: WorkflowContext, input: Any) -> Any:
    return await ctx.wait_for_signal("child-go")


@workflow("waits.parent", version="1")
async def parent(ctx: WorkflowContext, input: Any) -> Any:
    """A sub-run that waits for a signal: the parent waits with it."""
    got = await ctx.start_workflow("waits.child", None)
    await ctx.step("after", mark("after"))
    return got


# -- approvals -------------------------------------------------------------------------------


def transfer_tool() -> Tool:
    def transfer(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        log_step("transfer", amount=args["amount"])
        return {"sent": args["amount"]}

    return Tool("transfer", transfer, "Move money.", requires_approval=True)


class Banker:
    """Asks for a transfer, then answers with what the tool told it (or that it was refused).
    Its reply depends only on the request, as a model's would."""

    provider = "scripted"
    name = "banker"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if not any(m.get("role") == "assistant" for m in request.messages):
            return ModelResponse(
                tool_calls=(ToolCallRequest("t1", "transfer", {"amount": 250}),),
                usage=Usage(input_tokens=20, output_tokens=8),
            )
        last = request.messages[-1]
        return ModelResponse(
            content=f"done: {last['content']}", usage=Usage(input_tokens=10, output_tokens=5)
        )


@workflow("waits.pay", version="1")
async def pay(ctx: WorkflowContext, input: Any) -> str | None:
    async def agent(step: StepContext) -> str | None:
        async with step.session("banker", model=Banker(), tools=[transfer_tool()]) as s:
            return await s.run("pay the invoice")

    result = await ctx.step("agent", agent)
    return None if result is None else str(result)


GATED = {"tool": False, "session": False}
"""``waits.pay_gated``'s approval: its transfer tool declared ``requires_approval`` (``tool``),
or its session asking before every tool call (``session``); a test flips them between runs."""


@workflow("waits.pay_gated", version="1")
async def pay_gated(ctx: WorkflowContext, input: Any) -> str | None:
    """``pay``, with its approvals as ``GATED`` says (a replay under other approvals)."""

    async def agent(step: StepContext) -> str | None:
        transfer = transfer_tool()
        tool = Tool(transfer.name, transfer.fn, transfer.description, requires_approval=False)
        if GATED["tool"]:
            tool = transfer
        approval = GATED["session"]
        async with step.session("banker", model=Banker(), tools=[tool], approval=approval) as s:
            return await s.run("pay the invoice")

    result = await ctx.step("agent", agent)
    return None if result is None else str(result)


# -- simulation ------------------------------------------------------------------------------


async def draft(step: StepContext) -> str | None:
    model = ScriptedModel(
        [ModelResponse(content="a draft", usage=Usage(input_tokens=9, output_tokens=3))]
    )
    async with step.session("writer", model=model) as writer:
        return await writer.run("write a draft")


async def review_body(ctx: WorkflowContext, input: dict[str, Any], signal: str) -> dict[str, Any]:
    text = await ctx.step("draft", draft)
    verdict = await ctx.wait_for_signal(signal)
    await ctx.sleep(input["seconds"])
    return {"draft": text, "verdict": verdict}


@workflow("waits.review", version="1")
async def review(ctx: WorkflowContext, input: dict[str, Any]) -> dict[str, Any]:
    """A model call, then a signal and a timer: a golden run for simulate."""
    return await review_body(ctx, input, "verdict")


async def _review_other_signal(ctx: WorkflowContext, input: dict[str, Any]) -> dict[str, Any]:
    return await review_body(ctx, input, "second-opinion")


review_edited = Workflow("waits.review", "1", _review_other_signal)
"""The same workflow edited to wait for another signal (not registered)."""


async def _review_catching(ctx: WorkflowContext, input: dict[str, Any]) -> dict[str, Any]:
    text = await ctx.step("draft", draft)
    try:
        verdict = await ctx.wait_for_signal("second-opinion")
    except Exception:
        verdict = "ship it"  # what the golden run's signal said
    await ctx.sleep(input["seconds"])
    return {"draft": text, "verdict": verdict}


review_caught = Workflow("waits.review", "1", _review_catching)
"""``review_edited`` catching whatever its wait raises and going on as the golden run did
(not registered)."""


# -- edge cases the review found -------------------------------------------------------------


class TwoTransfers:
    """Asks for two transfers in turn (each needs an approval), then answers."""

    provider = "scripted"
    name = "two-transfers"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        turns = sum(1 for m in request.messages if m.get("role") == "assistant")
        if turns < 2:
            call = ToolCallRequest(f"t{turns}", "transfer", {"amount": 100 * (turns + 1)})
            return ModelResponse(tool_calls=(call,), usage=Usage(input_tokens=5, output_tokens=2))
        return ModelResponse(content="both done", usage=Usage(input_tokens=5, output_tokens=2))


@workflow("waits.pay_twice", version="1")
async def pay_twice(ctx: WorkflowContext, input: Any) -> str | None:
    async def agent(step: StepContext) -> str | None:
        async with step.session("banker", model=TwoTransfers(), tools=[transfer_tool()]) as s:
            return await s.run("pay both invoices")

    result = await ctx.step("agent", agent)
    return None if result is None else str(result)


@workflow("waits.same_name", version="1")
async def same_name(ctx: WorkflowContext, input: Any) -> dict[str, Any]:
    """Two branches wait for the same signal name at once: each takes its own signal."""

    async def one(bctx: WorkflowContext) -> Any:
        return await bctx.wait_for_signal("item")

    return await ctx.parallel("both", {"a": one, "b": one})


@workflow("waits.child_then_own", version="1")
async def child_then_own(ctx: WorkflowContext, input: Any) -> list[Any]:
    """A sub-run waits for ``child-go``; the parent waits for ``go`` after it."""
    got = await ctx.start_workflow("waits.child", None)
    mine = await ctx.wait_for_signal("go")
    return [got, mine]


@workflow("waits.swallow", version="1")
async def swallow(ctx: WorkflowContext, input: Any) -> str:
    """Catches everything around a wait: the run must not complete past it."""
    try:
        reply = await ctx.wait_for_signal("never")
    except Exception:  # what a user should not do, on purpose
        reply = "swallowed"
    return str(await ctx.step("after", mark("after"), reply))


@workflow("waits.forever", version="1")
async def forever(ctx: WorkflowContext, input: Any) -> None:
    await ctx.sleep(float("inf"))
