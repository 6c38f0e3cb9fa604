"""Workflows for the parallel tool call tests (registered, so a full replay finds them).

``trio``: one model turn asks for three ``work`` calls, ``a`` (which ends only after ``b``
has), ``b`` (only after ``c``) and ``c``: run one after the other they could never finish, run
concurrently they finish c, b, a. ``tickets``: two calls of one tool with the same arguments,
the first ending only after the second. ``gated``: a turn whose second call needs a person's
approval. ``BENCH`` is what the tools saw, reset by each test.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from little.events import ToolCallStarted, Usage
from little.harness import ModelRequest, ModelResponse, ScriptedModel, ToolCallRequest, tool
from little.harness import ToolContext as Ctx
from little.runtime import StepContext, WorkflowContext, workflow

USAGE = Usage(input_tokens=10, output_tokens=5)
SAFETY = 20.0
"""Seconds a tool waits for a sibling before giving up (only ever reached when the calls of a
turn do not run concurrently: the wait then fails the tool, and the test with it)."""


@dataclass
class Bench:
    world: Any = None
    limit: int | None = None
    done: dict[str, asyncio.Event] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    """``enter x`` / ``exit x`` as the tools ran."""
    written_ahead: list[str] = field(default_factory=list)
    """The calls whose ``harness.tool_call.started`` was in the log when the tool ran."""
    requests: list[ModelRequest] = field(default_factory=list)
    active: int = 0
    peak: int = 0
    entered: int = 0
    crash_at: str | None = None
    """A call whose tool raises ``Crash`` once its siblings ended."""

    meeting: asyncio.Condition | None = None

    def met(self) -> asyncio.Condition:
        if self.meeting is None:
            self.meeting = asyncio.Condition()
        return self.meeting

    def event(self, name: str) -> asyncio.Event:
        return self.done.setdefault(name, asyncio.Event())

    def reset(self, world: Any = None, limit: int | None = None) -> None:
        self.__init__(world, limit)  # type: ignore[misc]


BENCH = Bench()


class Crash(BaseException):
    """Stands in for the process dying inside a tool: not an Exception, nothing records it."""


class Recording(ScriptedModel):
    async def complete(self, request: ModelRequest) -> ModelResponse:
        BENCH.requests.append(request)
        return await super().complete(request)


def _in_log(run_id: str, call_id: str) -> bool:
    return any(
        isinstance(x.event, ToolCallStarted) and x.event.call_id == call_id
        for x in BENCH.world.read_run(run_id)
    )


@tool(description="Work, once another call's work is done.", parameters={"type": "object"})
async def work(args: dict[str, Any], ctx: Ctx) -> str:
    name = str(args["name"])
    if BENCH.world is not None and _in_log(ctx.run_id, ctx.call_id):
        BENCH.written_ahead.append(name)
    BENCH.order.append(f"enter {name}")
    BENCH.entered += 1
    BENCH.active += 1
    BENCH.peak = max(BENCH.peak, BENCH.active)
    met = BENCH.met()
    async with met:
        met.notify_all()
    try:
        target = args.get("meet")
        if target:  # all meet here: ``target`` at once, or every call that will ever come
            async with met:
                await asyncio.wait_for(
                    met.wait_for(
                        lambda: BENCH.active >= int(target) or BENCH.entered >= int(args["of"])
                    ),
                    SAFETY,
                )
        after = args.get("after")
        if after:
            await asyncio.wait_for(BENCH.event(str(after)).wait(), SAFETY)
        if BENCH.crash_at == name:
            for sibling in args.get("siblings") or ():
                await asyncio.wait_for(BENCH.event(str(sibling)).wait(), SAFETY)
            BENCH.crash_at = None
            raise Crash
    finally:
        BENCH.active -= 1
    BENCH.order.append(f"exit {name}")
    BENCH.event(name).set()
    return f"{name} done (attempt {ctx.attempt})"


@tool(description="A ticket.", parameters={"type": "object"})
async def ticket(args: dict[str, Any], ctx: Ctx) -> str:
    if ctx.call_id == "1:t1":  # the first asked ends after the second
        await asyncio.wait_for(BENCH.event("1:t2").wait(), SAFETY)
    BENCH.order.append(ctx.call_id)
    BENCH.event(ctx.call_id).set()
    return f"ticket of {ctx.call_id}"


@tool(description="Pay.", parameters={"type": "object"}, requires_approval=True)
def pay(args: dict[str, Any], ctx: Ctx) -> str:
    BENCH.order.append(f"pay {args['amount']}")
    return f"paid {args['amount']}"


def calls(*requests: tuple[str, str, dict[str, Any]]) -> ModelResponse:
    return ModelResponse(
        tool_calls=tuple(ToolCallRequest(i, n, a) for i, n, a in requests),
        usage=USAGE,
        finish_reason="tool_calls",
    )


ANSWER = ModelResponse(content="all done", usage=USAGE, finish_reason="stop")
TRIO = (
    calls(
        ("c1", "work", {"name": "a", "after": "b", "siblings": ["b", "c"]}),
        ("c2", "work", {"name": "b", "after": "c", "siblings": ["a", "c"]}),
        ("c3", "work", {"name": "c", "siblings": ["a", "b"]}),
    ),
    ANSWER,
)


async def _session(step: StepContext, script: tuple[ModelResponse, ...], tools: list[Any]) -> Any:
    kw: dict[str, Any] = {}
    if BENCH.limit is not None:
        kw["max_parallel_tools"] = BENCH.limit
    async with step.session("agent", model=Recording(script), tools=tools, **kw) as agent:
        return await agent.run("go")


@workflow("tests.parallel.trio", version="1")
async def trio(ctx: WorkflowContext, input: Any) -> Any:
    return await ctx.step("work", _session, TRIO, [work])


def meeting(n: int, target: int) -> tuple[ModelResponse, ...]:
    return (
        calls(*((f"m{i}", "work", {"name": f"m{i}", "meet": target, "of": n}) for i in range(n))),
        ANSWER,
    )


@workflow("tests.parallel.meet", version="1")
async def meet(ctx: WorkflowContext, input: dict[str, int]) -> Any:
    return await ctx.step("work", _session, meeting(input["n"], input["target"]), [work])


TICKETS = (calls(("t1", "ticket", {}), ("t2", "ticket", {})), ANSWER)


@workflow("tests.parallel.tickets", version="1")
async def tickets(ctx: WorkflowContext, input: Any) -> Any:
    return await ctx.step("work", _session, TICKETS, [ticket])


GATED = (
    calls(
        ("p1", "pay", {"amount": 5}),
        ("w1", "work", {"name": "w"}),
        ("p2", "pay", {"amount": 7}),
    ),
    ANSWER,
)


@workflow("tests.parallel.gated", version="1")
async def gated(ctx: WorkflowContext, input: Any) -> Any:
    return await ctx.step("work", _session, GATED, [pay, work])
