"""Parallel tool calls (issue 28 item 2): the tool calls of one model turn run concurrently (at
most ``max_parallel_tools`` at once), each recorded write-ahead under its own call id, and their
answers go back to the model in the order it asked; a resume runs again only the calls without
a terminal event, and a full replay serves each from its own receipt."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import little
from little.events import ToolCallFailed, ToolCallStarted, ToolCallSucceeded, WaitStarted
from little.harness import ToolContext, tool
from little.runtime import (
    SessionDivergedError,
    StepContext,
    WorkflowContext,
    decide_approval,
    execute,
    follow,
    run,
    workflow,
)
from tests.little.runtime import parallel_tool_workflows as pw
from tests.little.runtime.parallel_tool_workflows import BENCH


@pytest.fixture
def world(tmp_path: Path) -> Iterator[little.World]:
    with little.local_world(tmp_path / "world") as w:
        BENCH.reset(w)
        yield w


def events(world: little.World, run_id: str) -> list[little.Event]:
    return [x.event for x in world.read_run(run_id)]


def tool_messages(request_index: int) -> list[tuple[str, str]]:
    request = BENCH.requests[request_index]
    return [(m["tool_call_id"], m["content"]) for m in request.messages if m["role"] == "tool"]


def test_a_turns_tool_calls_run_concurrently_and_answer_in_the_models_order(
    world: little.World,
) -> None:
    result = asyncio.run(run(world, pw.trio, None))
    assert (result.status, result.output) == ("completed", "all done"), result.error
    # a waited for b, b for c: only concurrent calls could end, and they ended c, b, a
    assert [e for e in BENCH.order if e.startswith("exit")] == ["exit c", "exit b", "exit a"]
    assert BENCH.order.index("enter a") < BENCH.order.index("exit b")  # a waited while b ran
    # each call's write-ahead record was in the log before its tool ran
    assert sorted(BENCH.written_ahead) == ["a", "b", "c"]  # in whatever order they started
    # the model was told the results in the order it asked
    assert tool_messages(1) == [
        ("c1", json.dumps("a done (attempt 1)")),
        ("c2", json.dumps("b done (attempt 1)")),
        ("c3", json.dumps("c done (attempt 1)")),
    ]
    log = events(world, result.run_id)
    started = [e for e in log if isinstance(e, ToolCallStarted)]
    ended = [e for e in log if isinstance(e, ToolCallSucceeded)]
    # one write-ahead record per call, under its own id, in the model's order, all before any
    # result; the results land as they finished
    assert [e.call_id for e in started] == ["1:c1", "1:c2", "1:c3"]
    assert max(e.seq for e in started) < min(e.seq for e in ended)
    assert [e.call_id for e in ended] == ["1:c3", "1:c2", "1:c1"]
    assert len({e.idempotency_key for e in started}) == 3


@pytest.mark.parametrize(("limit", "peak"), [(None, 3), (2, 2), (1, 1)])
def test_at_most_max_parallel_tools_run_at_once(
    world: little.World, limit: int | None, peak: int
) -> None:
    BENCH.reset(world, limit)
    target = min(limit or 8, 3)
    result = asyncio.run(run(world, pw.meet, {"n": 3, "target": target}))
    assert result.status == "completed", result.error
    assert BENCH.peak == peak
    assert not [e for e in events(world, result.run_id) if isinstance(e, ToolCallFailed)]
    assert [c for c, _ in tool_messages(1)] == ["m0", "m1", "m2"]


def test_max_parallel_tools_must_be_one_or_more(world: little.World) -> None:
    BENCH.reset(world, 0)
    result = asyncio.run(run(world, pw.trio, None))
    assert result.status == "failed"
    assert "max_parallel_tools must be a whole number of 1 or more" in (result.error or "")


def test_a_resume_runs_again_only_the_calls_without_a_terminal_event(
    world: little.World,
) -> None:
    BENCH.crash_at = "a"  # a dies once b and c ended
    run_id = "run_parallel_resume"
    with pytest.raises(pw.Crash):
        asyncio.run(execute(world, run_id, pw.trio, None))
    log = events(world, run_id)
    assert [e.call_id for e in log if isinstance(e, ToolCallStarted)] == ["1:c1", "1:c2", "1:c3"]
    # c and b ended while a still ran: their results are durable, not waiting for a's
    assert [e.call_id for e in log if isinstance(e, ToolCallSucceeded)] == ["1:c3", "1:c2"]

    BENCH.order.clear()
    result = asyncio.run(execute(world, run_id, pw.trio, None))
    assert (result.status, result.output) == ("completed", "all done"), result.error
    assert BENCH.order == ["enter a", "exit a"]  # only a ran again
    assert tool_messages(-1) == [
        ("c1", json.dumps("a done (attempt 2)")),
        ("c2", json.dumps("b done (attempt 1)")),
        ("c3", json.dumps("c done (attempt 1)")),
    ]


def test_a_full_replay_serves_each_concurrent_call_from_its_own_receipt(
    world: little.World,
) -> None:
    source = asyncio.run(run(world, pw.tickets, None))
    assert source.status == "completed", source.error
    assert BENCH.order == ["1:t2", "1:t1"]  # the second asked finished first
    recorded = tool_messages(1)
    assert recorded == [("t1", json.dumps("ticket of 1:t1")), ("t2", json.dumps("ticket of 1:t2"))]

    BENCH.reset(world)
    replay = asyncio.run(little.replay_in_mode(world, source.run_id, mode="full"))
    assert replay.status == "completed", replay.error
    assert BENCH.order == []  # no tool ran
    # two calls of one tool with the same arguments: each got its own receipt, by the order
    # the model asked them, not the order they happened to finish in
    assert tool_messages(1) == recorded
    replayed = [e for e in events(world, replay.run_id) if isinstance(e, ToolCallSucceeded)]
    assert {e.replayed_from_run_id for e in replayed} == {source.run_id}


def test_calls_needing_approval_wait_while_their_siblings_run_and_finish(
    world: little.World,
) -> None:
    first = asyncio.run(run(world, pw.gated, None))
    assert first.status == "waiting", first.error
    assert BENCH.order == ["enter w", "exit w"]  # the call needing nobody ran
    log = events(world, first.run_id)
    asked = [e for e in log if isinstance(e, WaitStarted)]
    # both approvals asked at once, each its own wait
    assert sorted((e.name, e.ordinal) for e in asked) == [
        ("work#agent/1:p1", 0),
        ("work#agent/1:p2", 1),
    ]
    assert set(first.waiting_for) == {"approval:work#agent/1:p1", "approval:work#agent/1:p2"}
    # w's result is durable: the run waits holding nothing
    assert [e.call_id for e in log if isinstance(e, ToolCallSucceeded)] == ["1:w1"]

    asyncio.run(decide_approval(world, first.run_id, "work#agent/1:p1", approved=True))
    asyncio.run(decide_approval(world, first.run_id, "work#agent/1:p2", approved=False))
    BENCH.order.clear()
    done = asyncio.run(follow(world, first.run_id))
    assert (done.status, done.output) == ("completed", "all done"), done.error
    assert BENCH.order == ["pay 5"]  # w not again, p2 rejected
    contents = dict(tool_messages(-1))
    assert [c for c, _ in tool_messages(-1)] == ["p1", "w1", "p2"]
    assert contents["p1"] == json.dumps("paid 5")
    assert contents["w1"] == json.dumps("w done (attempt 1)")
    assert "rejected by a person" in contents["p2"]


def test_each_concurrent_tool_call_is_its_own_span_under_the_sessions(
    world: little.World, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", provider)  # this test's only, restored after

    result = asyncio.run(run(world, pw.trio, None))
    assert result.status == "completed", result.error
    spans = exporter.get_finished_spans()
    (session,) = [s for s in spans if s.name == "invoke_agent agent"]
    tools = [s for s in spans if s.name == "execute_tool work"]
    assert sorted(str((s.attributes or {})["little.call_id"]) for s in tools) == [
        "1:c1",
        "1:c2",
        "1:c3",
    ]
    assert {s.parent.span_id for s in tools if s.parent} == {session.context.span_id}
    assert all(s.parent is not None for s in tools)
    # open at once: each started before any ended
    assert max(s.start_time or 0 for s in tools) < min(s.end_time or 0 for s in tools)


def test_a_call_queued_behind_an_integrity_latch_never_runs(world: little.World) -> None:
    """An integrity error latched while a turn's calls run (here by the first call, standing
    in for a sibling branch's resume check): the calls already running finish, no queued one
    starts or is recorded, and the run ends by the error."""
    ran: list[str] = []

    async def ask(step: StepContext, _: None) -> Any:
        @tool(description="Work.")
        async def work(args: dict[str, Any], ctx: ToolContext) -> str:
            ran.append(str(args["n"]))
            if args["n"] == 1:
                step._x.integrity.latch(SessionDivergedError("latched mid-turn (test)"))
            return "ok"

        script = (
            pw.calls(*((f"k{n}", "work", {"n": n}) for n in (1, 2, 3))),
            pw.ANSWER,
        )
        model = pw.Recording(script)
        async with step.session("agent", model=model, tools=[work], max_parallel_tools=2) as a:
            return await a.run("go")

    async def flow(ctx: WorkflowContext, _: None) -> Any:
        return await ctx.step("work", ask, None)

    wf = workflow("tests.parallel.latched", version="1")(flow)
    with pytest.raises(SessionDivergedError, match="latched mid-turn"):
        asyncio.run(execute(world, "run_parallel_latched", wf, None))
    assert sorted(ran) == ["1", "2"]  # the third was queued behind the bound: never started
    log = events(world, "run_parallel_latched")
    assert "1:k3" not in {e.call_id for e in log if isinstance(e, ToolCallStarted)}
