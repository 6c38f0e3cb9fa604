"""A model turn's tool calls, run concurrently: at most ``limit`` at once, answered in the
model's order.

Each call goes through the recording kernel as one on its own would (``Recorder.tool_call``):
answered from a record, or approved if it must be, ``harness.tool_call.started`` acked under its
own call id, invoked, its outcome recorded. What concurrency adds, and why it stays replayable:

* every call is asked (``Recorder.ask_tool``) in the model's order before any runs, so each
  one's occurrence (what a full replay takes receipts by) never depends on timing;
* the calls start in the model's order and each takes its ``started`` seq before its first
  await, so the write-ahead records are in the model's order (an approval wait ahead of one
  can move it later: seq order is the order records reached the writer, nothing reads more
  into it); results land in the order the calls finish;
* a result is made durable at once while another call of the turn still runs (not deferred
  to the next model call, which waits for the slowest): a crash then runs again only the calls
  without a terminal event. The last to finish is deferred as usual;
* the answers go back to the model in the order it asked, whatever order they finished in, so
  the request hash chain (and every replay of it) is the same;
* a failure that ends the run lets the others finish what they have in flight (recorded) and
  starts none still queued; a stop or an error that ends the writer cancels them at once; a
  wait (an approval) lets the others finish, then suspends the run for all of them
  (``little.runtime._groups.drain``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from little.harness import Tool, ToolCallRequest
from little.runtime._errors import BranchStopped
from little.runtime._groups import drain
from little.runtime._recording import Recorder

__all__ = ["DEFAULT_MAX_PARALLEL_TOOLS", "run_tool_calls"]

DEFAULT_MAX_PARALLEL_TOOLS = 8
"""How many tool calls of one model turn run at once, unless a session says otherwise."""


async def run_tool_calls(
    recorder: Recorder,
    turn: int,
    calls: Sequence[ToolCallRequest],
    tools: Mapping[str, Tool],
    live: dict[str, ToolCallRequest] | None,
    limit: int,
) -> list[str | None]:
    """The answers (result or error JSON) to ``calls``, the tool calls the model asked for in
    ``turn``, in its order; at most ``limit`` run at once (1: one after the other)."""
    if limit <= 1 or len(calls) <= 1:
        return [await recorder.tool_call(turn, c, tools.get(c.name), live) for c in calls]
    # the model's order, before any runs
    asked = [recorder.ask_tool(turn, c, tools.get(c.name)) for c in calls]
    gate = asyncio.Semaphore(limit)
    running = len(calls)
    failed: list[str] = []

    async def one(index: int) -> str | None:
        nonlocal running
        call = calls[index]
        async with gate:  # taken at once while free: the first ``limit`` start in order
            try:
                if failed:  # queued behind a sibling that failed: never started
                    raise BranchStopped(
                        recorder.spans.run_id, f"{recorder.session_id} turn {turn}", failed[0]
                    )
                content = await recorder.tool_call(
                    turn, call, tools.get(call.name), live, asked[index]
                )
            finally:
                running -= 1
            if running:
                # siblings still at work: this result is made durable now, not held back
                # until the slowest of them ends (a crash meanwhile would run it again)
                await recorder.flush()
            return content

    tasks = [asyncio.ensure_future(one(i)) for i in range(len(calls))]
    return await drain(tasks, [f"{turn}:{c.id}" for c in calls], failed.append)
