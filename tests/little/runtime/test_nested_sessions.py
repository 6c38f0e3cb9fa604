"""A session opened inside another session's tool (a native nested agent): its agent call takes
the tool call's scope, so a replay or a simulation that serves the outer call whole (or runs its
tool again to compare) still finds the step's later agent calls at their recorded places."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import little
from little.events import AgentCallAdmitted, AgentCallSettled, Usage
from little.harness import ModelResponse, ScriptedModel, ToolCallRequest, ToolContext, tool
from little.runtime import StepContext, WorkflowContext, run, simulate, workflow

USAGE = Usage(input_tokens=10, output_tokens=2)
MODELS: dict[str, ScriptedModel] = {}


def scripted(name: str, *responses: ModelResponse) -> ScriptedModel:
    MODELS[name] = ScriptedModel(responses, provider="openai", name="gpt-4o-mini")
    return MODELS[name]


def answer(text: str) -> ModelResponse:
    return ModelResponse(content=text, usage=USAGE, finish_reason="stop")


async def talk(step: StepContext) -> list[Any]:
    @tool(description="Ask the expert.")
    async def ask_expert(args: dict[str, Any], ctx: ToolContext) -> str:
        async with step.session("expert", model=scripted("expert", answer("hi"))) as expert:
            return str(await expert.run(f"help with {args['q']}"))

    ask = ToolCallRequest("c1", "ask_expert", {"q": "x"})
    lead_model = scripted(
        "lead",
        ModelResponse(tool_calls=(ask,), usage=USAGE, finish_reason="tool_calls"),
        answer("lead done"),
    )
    async with step.session("lead", model=lead_model, tools=[ask_expert]) as lead:
        first = await lead.run("go")
    async with step.session("closing", model=scripted("closing", answer("closed"))) as closing:
        second = await closing.run("close")
    return [first, second]


@workflow("tests.nested_sessions", version="1")
async def nested(ctx: WorkflowContext, _: Any) -> Any:
    return await ctx.step("talk", talk)


def invocations() -> dict[str, int]:
    return {name: model.invocations for name, model in MODELS.items()}


def test_a_later_call_is_served_after_a_session_opened_in_a_tool(tmp_path: Path) -> None:
    with little.local_world(tmp_path / "w") as world:
        source = asyncio.run(run(world, nested, None))
        assert source.status == "completed", source.error
        scopes = [
            (e.session_id, e.scope)
            for x in world.read_run(source.run_id)
            if isinstance(e := x.event, AgentCallAdmitted)
        ]
        MODELS.clear()
        replay = asyncio.run(run(world, nested, None, replay_from=source.run_id))
        assert replay.status == "completed", replay.error
        settled = [
            (e.session_id, e.replayed)
            for x in world.read_run(replay.run_id)
            if isinstance(e := x.event, AgentCallSettled)
        ]
        replay_asked = invocations()
        MODELS.clear()
        simulated = asyncio.run(simulate(world, nested, source.run_id))
    assert scopes == [
        ("talk#lead", ""),
        (
            "talk#expert",
            "#0/1:c1/",
        ),  # inside the first call of the scope, its tool call c1 (turn 1)
        ("talk#closing", ""),
    ]
    assert replay.output == source.output == ["lead done", "closed"]
    # the lead's call served whole (its tool, the expert, never ran), the closing call served
    assert settled == [("talk#lead", True), ("talk#closing", True)]
    assert replay_asked == {"lead": 0, "closing": 0}  # the expert's session never opened
    # the simulation runs the lead's tool again: the expert's call is served at its place
    assert simulated.divergence is None, simulated.lines()
    assert invocations() == {"expert": 0, "lead": 0, "closing": 0}


async def side_by_side(step: StepContext) -> list[Any]:
    """Two sessions of one step at once: B's two calls are made while A's tool call is under
    way (A's tool waits for them), yet neither is inside the other."""
    b_done = asyncio.Event()

    @tool(description="Wait for B.")
    async def wait_for_b(args: dict[str, Any], ctx: ToolContext) -> str:
        await b_done.wait()
        return "b is done"

    async def a() -> str:
        wait = ToolCallRequest("w1", "wait_for_b", {})
        a_model = scripted(
            "a",
            ModelResponse(tool_calls=(wait,), usage=USAGE, finish_reason="tool_calls"),
            answer("a done"),
        )
        async with step.session("a", model=a_model, tools=[wait_for_b]) as session:
            return str(await session.run("go"))

    async def b() -> list[str]:
        async with step.session("b", model=scripted("b", answer("b1"), answer("b2"))) as session:
            out = [str(await session.run("one")), str(await session.run("two"))]
        b_done.set()
        return out

    return list(await asyncio.gather(a(), b()))


@workflow("tests.side_by_side_sessions", version="1")
async def gathered(ctx: WorkflowContext, _: Any) -> Any:
    return await ctx.step("both", side_by_side)


def test_sessions_running_side_by_side_are_not_taken_for_nested_ones(tmp_path: Path) -> None:
    with little.local_world(tmp_path / "w") as world:
        source = asyncio.run(run(world, gathered, None))
        assert source.status == "completed", source.error
        scopes = {
            e.session_id: e.scope
            for x in world.read_run(source.run_id)
            if isinstance(e := x.event, AgentCallAdmitted)
        }
        MODELS.clear()
        simulated = asyncio.run(simulate(world, gathered, source.run_id))
    assert source.output == ["a done", ["b1", "b2"]]
    assert scopes == {"both#a": "", "both#b": ""}
    assert simulated.divergence is None, simulated.lines()
    assert simulated.result is not None
    assert simulated.result.output == source.output
    assert invocations() == {"a": 0, "b": 0}


FIRST = {"branch": "a"}
DONE: dict[str, asyncio.Event] = {}


def branch_talk(branch: str) -> Any:
    """A lead session whose tool opens an expert session, in branch ``branch``; the branch
    that is not ``FIRST`` waits until the first one's lead has answered."""

    async def talk(step: StepContext) -> str:
        @tool(description="Ask the expert.")
        async def ask_expert(args: dict[str, Any], ctx: ToolContext) -> str:
            async with step.session(
                "expert", model=scripted(f"{branch}.expert", answer("hi"))
            ) as e:
                return str(await e.run("help"))

        if FIRST["branch"] != branch:
            await DONE[FIRST["branch"]].wait()
        ask = ToolCallRequest("c1", "ask_expert", {"q": "x"})
        lead_model = scripted(
            f"{branch}.lead",
            ModelResponse(tool_calls=(ask,), usage=USAGE, finish_reason="tool_calls"),
            answer(f"{branch} done"),
        )
        async with step.session("lead", model=lead_model, tools=[ask_expert]) as lead:
            out = str(await lead.run("go"))
        DONE[branch].set()
        return out

    return talk


@workflow("tests.nested_in_branches", version="1")
async def fan(ctx: WorkflowContext, _: Any) -> Any:
    DONE.update(a=asyncio.Event(), b=asyncio.Event())
    return await ctx.parallel(
        "fan",
        {
            "a": lambda c: c.step("t", branch_talk("a")),
            "b": lambda c: c.step("t", branch_talk("b")),
        },
    )


def test_a_nested_call_s_place_does_not_depend_on_how_branches_interleave(
    tmp_path: Path,
) -> None:
    """Recorded with branch a first, simulated with branch b first: each nested call's scope
    names the outer call by its rank in its branch, not by its run-wide ordinal."""
    with little.local_world(tmp_path / "w") as world:
        FIRST["branch"] = "a"
        source = asyncio.run(run(world, fan, None))
        assert source.status == "completed", source.error
        scopes = sorted(
            (e.session_id, e.scope)
            for x in world.read_run(source.run_id)
            if isinstance(e := x.event, AgentCallAdmitted)
        )
        FIRST["branch"] = "b"
        MODELS.clear()
        simulated = asyncio.run(simulate(world, fan, source.run_id))
    assert scopes == [
        ("fan/a/t#expert", "fan/a/#0/1:c1/"),
        ("fan/a/t#lead", "fan/a/"),
        ("fan/b/t#expert", "fan/b/#0/1:c1/"),
        ("fan/b/t#lead", "fan/b/"),
    ]
    assert simulated.divergence is None, simulated.lines()
    assert sum(invocations().values()) == 0


@workflow("tests.bad_branch_name", version="1")
async def bad_branch(ctx: WorkflowContext, name: str) -> Any:
    async def one(step: StepContext) -> int:
        return 1

    return await ctx.parallel("fan", {name: lambda c: c.step("s", one)})


def test_a_branch_name_holding_a_scope_separator_is_refused_in_one_line(tmp_path: Path) -> None:
    with little.local_world(tmp_path / "w") as world:
        for name in ("a#1", "a/b", ""):
            result = asyncio.run(run(world, bad_branch, name))
            assert result.status == "failed"
            assert result.error is not None
            assert f"branch name {name!r} must be non-empty and contain no '#' or '/'" in (
                result.error
            )
            assert "\n" not in result.error
