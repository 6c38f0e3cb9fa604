"""What a session's tool makes through its step (a recorded value, a durable wait, a sub-run)
takes the tool call's scope, not the step's sequence: a resume, a ``replay_from`` or a
simulation that serves the session's call whole never runs the tool again, and the step's own
values, waits and sub-runs after it must still be found at their recorded places."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import little
from little.events import RunStarted, SubRunReserved, Usage, ValueRecorded, WaitStarted
from little.harness import ModelResponse, ScriptedModel, ToolCallRequest, ToolContext, tool
from little.runtime import (
    StepContext,
    Workflow,
    WorkflowContext,
    execute,
    run,
    send_signal,
    simulate,
    workflow,
    workflow_tool,
)

USAGE = Usage(input_tokens=10, output_tokens=2)
CHILD = "tests.made_in_tools.child"
SEEN: list[Any] = []
"""What the step's own code saw after the session, per execution."""


@pytest.fixture
def world(tmp_path: Path) -> Iterator[little.World]:
    SEEN.clear()
    with little.local_world(tmp_path / "w") as w:
        yield w


@workflow(CHILD, version="1")
async def child(ctx: WorkflowContext, what: Any) -> Any:
    return f"child did {what}"


def lead(
    step: StepContext, body: Callable[[], Awaitable[Any]], side_effecting: bool = False
) -> Any:
    """A session whose one tool call runs ``body`` (in the tool), then answers."""

    @tool(description="Do it.", side_effecting=side_effecting)
    async def do_it(args: dict[str, Any], ctx: ToolContext) -> Any:
        return await body()

    return step.session("lead", model=calling("do_it"), tools=[do_it])


def calling(tool_name: str, arguments: dict[str, Any] | None = None) -> ScriptedModel:
    """A model that calls ``tool_name`` once (call ``c1``), then answers."""
    return ScriptedModel(
        (
            ModelResponse(
                tool_calls=(ToolCallRequest("c1", tool_name, arguments or {}),),
                usage=USAGE,
                finish_reason="tool_calls",
            ),
            ModelResponse(content="lead done", usage=USAGE, finish_reason="stop"),
        ),
        provider="openai",
        name="gpt-4o-mini",
    )


def flow(make: Callable[[StepContext], Awaitable[Any]]) -> Workflow:
    async def fn(ctx: WorkflowContext, _: Any) -> Any:
        return await ctx.step("work", make)

    return Workflow("tests.made_in_tools", "1", fn)


# -- recorded values ----------------------------------------------------------------------


def drawing(wait: bool, side_effecting: bool = False) -> Callable[[StepContext], Awaitable[Any]]:
    """A step whose session's tool draws a value, then draws one of its own."""

    async def work(step: StepContext) -> Any:
        async def body() -> float:
            return step.random()

        async with lead(step, body, side_effecting) as session:
            await session.run("go")
        mine = step.random()
        SEEN.append(mine)
        if wait:
            await step.wait_for_signal("resume")
        return mine

    return work


def values(wait: bool, side_effecting: bool = False) -> Workflow:
    return flow(drawing(wait, side_effecting))


def test_a_value_after_a_tool_s_value_is_the_same_on_a_resume(world: little.World) -> None:
    """The run waits after the step's value; the resume serves the session's call whole (its
    tool, which also drew a value, does not run) and the step sees its own value again."""
    first = asyncio.run(execute(world, "r", values(wait=True), None))
    assert first.status == "waiting", first.error
    asyncio.run(send_signal(world, "r", "resume"))
    done = asyncio.run(execute(world, "r", values(wait=True)))
    assert done.status == "completed", done.error
    assert [SEEN[0], SEEN[0]] == SEEN
    assert done.output == SEEN[0]
    recorded = [
        (e.step_path, e.ordinal)
        for x in world.read_run("r")
        if isinstance(e := x.event, ValueRecorded)
    ]
    assert recorded == [("work#0/1:c1/", 0), ("work", 0)]  # the tool's, then the step's


def test_a_value_after_a_tool_s_value_is_served_by_a_replay_and_a_simulation(
    world: little.World,
) -> None:
    source = asyncio.run(run(world, values(wait=False), None))
    assert source.status == "completed", source.error
    replay = asyncio.run(run(world, values(wait=False), None, replay_from=source.run_id))
    assert replay.status == "completed", replay.error
    assert replay.output == source.output
    assert replay.replay is not None
    assert replay.replay.replayed_calls == 1
    # a side-effecting tool is not run again by a simulation either: its value is not drawn
    golden = asyncio.run(run(world, values(wait=False, side_effecting=True), None))
    simulated = asyncio.run(simulate(world, values(wait=False, side_effecting=True), golden.run_id))
    assert simulated.divergence is None, simulated.lines()
    assert simulated.result is not None
    assert simulated.result.output == golden.output


def test_values_made_in_tools_in_parallel_branches_are_served_by_a_replay(
    world: little.World,
) -> None:
    """Each branch's step draws in its tool and then itself: the tool's values stand in the
    branch's step (``fan/a/t#0/1:c1/``), and a replay serves each step its own."""

    async def fan(ctx: WorkflowContext, _: Any) -> Any:
        return await ctx.parallel(
            "fan", {b: lambda c: c.step("t", drawing(wait=False)) for b in ("a", "b")}
        )

    fanned = Workflow("tests.made_in_tools.fan", "1", fan)
    source = asyncio.run(run(world, fanned, None))
    assert source.status == "completed", source.error
    replay = asyncio.run(run(world, fanned, None, replay_from=source.run_id))
    assert replay.status == "completed", replay.error
    assert replay.output == source.output
    places = sorted(
        (e.step_path, e.ordinal)
        for x in world.read_run(replay.run_id)
        if isinstance(e := x.event, ValueRecorded) and e.source_run_id == source.run_id
    )
    assert places == [("fan/a/t", 0), ("fan/b/t", 0)]  # the tools' never drawn: served whole


# -- durable waits ------------------------------------------------------------------------


def waits() -> Workflow:
    async def work(step: StepContext) -> Any:
        async def body() -> Any:
            return await step.wait_for_signal("go")

        async with lead(step, body) as session:
            await session.run("start")
        mine = await step.wait_for_signal("go")
        SEEN.append(mine)
        return mine

    return flow(work)


def test_a_wait_after_a_tool_s_wait_takes_its_own_signal_on_a_resume(
    world: little.World,
) -> None:
    """The tool waits for ``go`` (the first signal), the step then waits for ``go`` again: the
    resume after the second signal serves the session's call whole, and the step's wait is
    its own, not the tool's (which took the first signal). A simulation, which runs the tool
    again, ends each wait with the signal the golden run's wait at its place took."""
    assert asyncio.run(execute(world, "r", waits(), None)).status == "waiting"
    asyncio.run(send_signal(world, "r", "go", {"n": 1}))
    assert asyncio.run(execute(world, "r", waits())).status == "waiting"  # the step's wait
    asyncio.run(send_signal(world, "r", "go", {"n": 2}))
    done = asyncio.run(execute(world, "r", waits()))
    assert done.status == "completed", done.error
    assert done.output == {"n": 2}
    started = [
        (e.step_path, e.ordinal)
        for x in world.read_run("r")
        if isinstance(e := x.event, WaitStarted)
    ]
    assert started == [("work#0/1:c1/", 0), ("work", 0)]
    # a simulation runs the tool again: each wait ends as the golden run's at its place did
    simulated = asyncio.run(simulate(world, waits(), "r"))
    assert simulated.divergence is None, simulated.lines()
    assert simulated.result is not None
    assert simulated.result.output == {"n": 2}
    assert SEEN[-1] == {"n": 2}


# -- sub-runs -----------------------------------------------------------------------------


def sub_runs(wait: bool = True, side_effecting: bool = False) -> Workflow:
    async def work(step: StepContext) -> Any:
        async def body() -> Any:
            return await step.start_workflow(CHILD, "the tool's part")

        async with lead(step, body, side_effecting) as session:
            await session.run("go")
        mine = await step.start_workflow(CHILD, "the step's part")
        SEEN.append(mine)
        if wait:
            await step.wait_for_signal("resume")
        return mine

    return flow(work)


def test_a_sub_run_after_a_tool_s_sub_run_is_its_own_on_a_resume(world: little.World) -> None:
    assert asyncio.run(execute(world, "r", sub_runs(), None)).status == "waiting"
    asyncio.run(send_signal(world, "r", "resume"))
    done = asyncio.run(execute(world, "r", sub_runs()))
    assert done.status == "completed", done.error
    assert SEEN == ["child did the step's part"] * 2
    assert done.output == "child did the step's part"
    reserved = [e.call_id for x in world.read_run("r") if isinstance(e := x.event, SubRunReserved)]
    assert reserved == ["work#0/1:c1/sub1", "work/sub1"]


def test_a_simulation_not_running_a_tool_again_leaves_its_sub_run_out(
    world: little.World,
) -> None:
    """A side-effecting tool is not run again by a simulation (its recorded result is served):
    the sub-run it started is not started again, and the step's own sub-run is simulated
    against the golden run's at the same call."""
    golden = asyncio.run(run(world, sub_runs(wait=False, side_effecting=True), None))
    assert golden.status == "completed", golden.error
    simulated = asyncio.run(
        simulate(world, sub_runs(wait=False, side_effecting=True), golden.run_id)
    )
    assert simulated.divergence is None, simulated.lines()
    assert simulated.result is not None
    assert simulated.result.output == golden.output == "child did the step's part"


# -- patches ------------------------------------------------------------------------------


def everything(patch: list[bool] | None) -> Workflow:
    """A tool that opens a session, draws a value, starts a sub-run; then the step waits (a
    patch after the wait, in the code deployed while it waited, when ``patch`` is given)."""

    async def work(step: StepContext) -> Any:
        async def body() -> Any:
            expert = ScriptedModel(
                [ModelResponse(content="hi", usage=USAGE, finish_reason="stop")],
                provider="openai",
                name="gpt-4o-mini",
            )
            async with step.session("expert", model=expert) as session:
                said = await session.run("help")
            return [said, step.random(), await step.start_workflow(CHILD, "the tool's part")]

        async with lead(step, body) as session:
            await session.run("go")
        mine = await step.wait_for_signal("go")
        if patch is not None:
            patch.append(step.patched("after-the-wait"))
        return mine

    return flow(work)


def test_a_patch_after_the_wait_a_run_waited_at_takes_the_new_path(world: little.World) -> None:
    """The run waited (on the old code) before the patch point: its resume on the new code is at
    the run's frontier and takes the new path, though the session's tool (served whole on the
    resume, so not run) made a session, a value and a sub-run through the step."""
    assert asyncio.run(execute(world, "r", everything(None), None)).status == "waiting"
    asyncio.run(send_signal(world, "r", "go", "went"))
    answers: list[bool] = []
    done = asyncio.run(execute(world, "r", everything(answers)))
    assert (done.status, done.output, answers) == ("completed", "went", [True])


# -- runs logged before the tools' scopes ---------------------------------------------------


def parked_in_tool() -> Workflow:
    """The tool starts a sub-run, draws a value and waits for ``go`` (a person); then the step
    starts a sub-run of its own."""

    async def work(step: StepContext) -> Any:
        async def body() -> Any:
            part = await step.start_workflow(CHILD, "the tool's part")
            drawn = step.random()
            await step.wait_for_signal("go")
            return {"part": part, "drawn": drawn}

        async with lead(step, body) as session:
            await session.run("start")
        mine = await step.start_workflow(CHILD, "the step's part")
        SEEN.append(mine)
        return mine

    return flow(work)


def test_a_run_logged_before_the_tools_scopes_resumes_in_its_tool_numbered_as_it_was(
    world: little.World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run started by the code before ``RunStarted.tool_scopes`` (v6) numbered what its tools
    made in the step's sequences. One parked in a tool's wait across the upgrade resumes
    numbered as it was recorded: the tool runs again and is served its sub-run, value and
    wait at the step's places, and the step's own sub-run is a new one, not the tool's."""
    from little.runtime import _runner

    monkeypatch.setattr(_runner, "_tool_scopes", lambda source: None)  # as the code before
    assert asyncio.run(execute(world, "r", parked_in_tool(), None)).status == "waiting"
    monkeypatch.undo()
    (started,) = [e for x in world.read_run("r") if isinstance(e := x.event, RunStarted)]
    assert started.tool_scopes is None
    asyncio.run(send_signal(world, "r", "go"))
    done = asyncio.run(execute(world, "r", parked_in_tool()))
    assert done.status == "completed", done.error
    assert done.output == "child did the step's part"
    logged = [x.event for x in world.read_run("r")]
    assert [e.call_id for e in logged if isinstance(e, SubRunReserved)] == [
        "work/sub1",
        "work/sub2",
    ]
    assert [(e.step_path, e.ordinal) for e in logged if isinstance(e, ValueRecorded)] == [
        ("work", 0)
    ]
    assert [(e.step_path, e.ordinal) for e in logged if isinstance(e, WaitStarted)] == [("work", 0)]


def test_a_new_run_numbers_what_its_tools_make_in_their_scopes(world: little.World) -> None:
    done = asyncio.run(execute(world, "r", parked_in_tool(), None))
    assert done.status == "waiting"
    (started,) = [e for x in world.read_run("r") if isinstance(e := x.event, RunStarted)]
    assert started.tool_scopes is True
    asyncio.run(send_signal(world, "r", "go"))
    assert asyncio.run(execute(world, "r", parked_in_tool())).status == "completed"
    reserved = [e.call_id for x in world.read_run("r") if isinstance(e := x.event, SubRunReserved)]
    assert reserved == ["work#0/1:c1/sub1", "work/sub1"]


def delegating(answers: list[bool] | None) -> Workflow:
    """The session's tool is ``workflow_tool`` (a sub-run started with the tool call's id);
    then the step waits (a patch after the wait, in the code deployed while it waited, when
    ``answers`` is given)."""

    async def work(step: StepContext) -> Any:
        model = calling("run_workflow", {"workflow": CHILD, "input": "x"})
        async with step.session("lead", model=model, tools=[workflow_tool(step)]) as session:
            await session.run("go")
        mine = await step.wait_for_signal("go")
        if answers is not None:
            answers.append(step.patched("after-the-wait"))
        return mine

    return flow(work)


def test_a_patch_after_a_wait_past_a_workflow_tool_s_sub_run_takes_the_new_path(
    world: little.World,
) -> None:
    """The sub-run ``workflow_tool`` started (with the tool call's id) is the tool call's work:
    the resume serves the session's call whole, never reaching it, and the run is at its
    frontier at the wait, so a patch there answers True."""
    assert asyncio.run(execute(world, "r", delegating(None), None)).status == "waiting"
    asyncio.run(send_signal(world, "r", "go", "went"))
    answers: list[bool] = []
    done = asyncio.run(execute(world, "r", delegating(answers)))
    assert (done.status, done.output, answers) == ("completed", "went", [True])


def parked_past_a_named_sub_run(answers: list[bool] | None) -> Workflow:
    """The tool starts a sub-run with an id of its own, then waits for ``go``; after the
    session the step asks a patch (in the code deployed while it waited)."""

    async def work(step: StepContext) -> Any:
        async def body() -> Any:
            part = await step.start_workflow(CHILD, "x", call_id="custom")
            await step.wait_for_signal("go")
            return part

        async with lead(step, body) as session:
            await session.run("go")
        if answers is not None:
            answers.append(step.patched("after-the-session"))
        return "ok"

    return flow(work)


def test_a_patch_after_a_tool_run_again_past_its_named_sub_run_takes_the_new_path(
    world: little.World,
) -> None:
    """A sub-run a tool starts with an id of its own counts for patches where the log counts
    it (the step's: the log cannot tell it apart), live as recorded: the tool runs again on the
    resume, reaches it, and the patch after the session answers True."""
    assert (
        asyncio.run(execute(world, "r", parked_past_a_named_sub_run(None), None)).status
        == "waiting"
    )
    asyncio.run(send_signal(world, "r", "go", "went"))
    answers: list[bool] = []
    done = asyncio.run(execute(world, "r", parked_past_a_named_sub_run(answers)))
    assert (done.status, answers) == ("completed", [True])


def delegating_by_id() -> Workflow:
    """A side-effecting tool starting a sub-run with its tool call's id (as ``workflow_tool``
    does): a simulation serves the tool from the record and never starts the sub-run."""

    async def work(step: StepContext) -> Any:
        @tool(description="Delegate.", side_effecting=True)
        async def delegate(args: dict[str, Any], ctx: ToolContext) -> Any:
            return await step.start_workflow(CHILD, "x", call_id=ctx.call_id)

        async with step.session("lead", model=calling("delegate"), tools=[delegate]) as session:
            return await session.run("go")

    return flow(work)


def test_a_simulation_serving_a_tool_leaves_out_the_sub_run_it_started_with_its_id(
    world: little.World,
) -> None:
    golden = asyncio.run(execute(world, "r", delegating_by_id(), None))
    assert golden.status == "completed", golden.error
    simulated = asyncio.run(simulate(world, delegating_by_id(), "r"))
    assert simulated.divergence is None, simulated.lines()


def test_a_replay_numbers_what_tools_make_as_its_source_did(
    world: little.World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replay matches the recorded run's values by place, so it numbers what its tools make
    as its source did: in the step's sequences for a run logged before the tools' scopes, in
    the tools' for one since (whose step value it is then served, the tool's call whole)."""
    from little.runtime import _runner

    def scopes_of(run_id: str) -> bool | None:
        (started,) = [e for x in world.read_run(run_id) if isinstance(e := x.event, RunStarted)]
        return started.tool_scopes

    monkeypatch.setattr(_runner, "_tool_scopes", lambda source: None)  # as the code before
    old = asyncio.run(run(world, values(wait=False), None))
    assert old.status == "completed", old.error
    monkeypatch.undo()
    new = asyncio.run(run(world, values(wait=False), None))
    assert new.status == "completed", new.error
    of_old = asyncio.run(run(world, values(wait=False), None, replay_from=old.run_id))
    assert (of_old.status, scopes_of(of_old.run_id)) == ("completed", None)
    of_new = asyncio.run(run(world, values(wait=False), None, replay_from=new.run_id))
    assert (of_new.status, scopes_of(of_new.run_id)) == ("completed", True)
    assert of_new.output == new.output
