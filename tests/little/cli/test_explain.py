"""``little explain <run> <seq>`` (issue 15 item 9): why a tool call happened, from the run's
events alone: the model turn whose response requested it, that turn's request, the agent call
and session, the step, the decision that chose the step, the branch and the run."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import little
from little.events import ModelCalled, StepStarted, ToolCallSucceeded
from little.harness import ModelResponse, ScriptedModel, ToolCallRequest, ToolContext, tool
from little.report import explain
from little.runtime import StepContext, WorkflowContext, run, workflow
from tests.cli import little_cli


@tool(description="Look a word up.")
def look_up(args: dict[str, Any], ctx: ToolContext) -> str:
    return f"{args.get('q')}: a word"


async def research(step: StepContext) -> str | None:
    model = ScriptedModel(
        (
            ModelResponse(
                tool_calls=(
                    ToolCallRequest("c1", "look_up", {"q": "kafka"}),
                    ToolCallRequest("c2", "look_up", {"q": "log"}),
                ),
                finish_reason="tool_calls",
            ),
            ModelResponse(content="kafka is a log", finish_reason="stop"),
        ),
        provider="openai",
        name="gpt-4o-mini",
    )
    async with step.session("agent", model=model, tools=[look_up]) as agent:
        return await agent.run("What is kafka?")


@workflow("tests.explain.routed")
async def routed(ctx: WorkflowContext, topic: str) -> Any:
    route = await ctx.decide("route", lambda step: "deep")
    assert route is not None

    async def branch(bctx: WorkflowContext) -> Any:
        return await bctx.step(route, research)

    return await ctx.parallel("fan", {"x": branch})


@pytest.fixture
def ran(tmp_path: Path) -> tuple[Path, str, list[little.events.LoggedEvent]]:
    with little.local_world(tmp_path) as world:
        result = asyncio.run(run(world, routed, "kafka"))
        assert result.status == "completed"
        return tmp_path, result.run_id, list(world.read_run(result.run_id))


def seq_of(events: list[little.events.LoggedEvent], cls: type, **fields: Any) -> int:
    (found,) = [
        x.event.seq
        for x in events
        if isinstance(x.event, cls) and all(getattr(x.event, k) == v for k, v in fields.items())
    ]
    return found


def test_a_tool_call_is_traced_to_the_turn_that_asked_for_it_and_what_led_there(
    ran: tuple[Path, str, list[little.events.LoggedEvent]],
) -> None:
    _, _, events = ran
    second = seq_of(events, ToolCallSucceeded, call_id="1:c2")
    causes = explain(events, second)
    roles = [(c.role, c.event.event.type) for c in causes]
    assert roles == [
        ("event", "harness.tool_call.succeeded"),
        ("started as", "harness.tool_call.started"),
        ("requested by", "harness.model.responded"),
        ("asked by", "harness.model.called"),
        ("in agent call", "agent.call.admitted"),
        ("in session", "harness.session.started"),
        ("in step", "StepStarted"),
        ("decided by", "DecisionRecorded"),
        ("in branch", "ParallelBranchScheduled"),
        ("in run", "RunStarted"),
    ]
    by_role = {c.role: c for c in causes}
    assert by_role["requested by"].detail == (
        "model turn 1 of openai:gpt-4o-mini: its response asked for look_up (1:c2)"
    )
    assert by_role["asked by"].event.event.seq == seq_of(events, ModelCalled, turn=1)
    assert by_role["in step"].detail == "step fan/x/deep (attempt 1, visit 1)"
    assert by_role["decided by"].detail == "decision route (visit 1) chose deep"
    assert by_role["in branch"].detail == "branch x of group fan"
    # every link comes before what it explains
    seqs = [c.event.event.seq for c in causes]
    assert all(s < seqs[0] for s in seqs[1:])


def test_an_event_outside_a_session_is_explained_by_its_step_and_run(
    ran: tuple[Path, str, list[little.events.LoggedEvent]],
) -> None:
    _, _, events = ran
    decision = next(x.event.seq for x in events if x.event.type == "DecisionRecorded")
    assert [c.role for c in explain(events, decision)] == ["event", "in step", "in run"]
    with pytest.raises(LookupError, match="no event at seq 999"):
        explain(events, 999)


def test_the_command_prints_the_chain_and_fails_in_one_line(
    ran: tuple[Path, str, list[little.events.LoggedEvent]],
) -> None:
    data_dir, run_id, events = ran
    seq = seq_of(events, ToolCallSucceeded, call_id="1:c1")
    out = little_cli("explain", run_id, str(seq), "--data-dir", str(data_dir))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("event ")
    assert "its response asked for look_up (1:c1)" in lines[2]
    as_json = little_cli("explain", run_id, str(seq), "--json", "--data-dir", str(data_dir))
    links = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert links[0]["seq"] == seq
    assert {"role", "seq", "type", "partition", "offset", "detail"} <= set(links[2])
    bad = little_cli("explain", run_id, "999", "--data-dir", str(data_dir))
    assert bad.returncode == 1
    assert bad.stderr.startswith(f"error: run {run_id}: no event at seq 999")
    none = little_cli("explain", "run_nope", "0", "--data-dir", str(data_dir))
    assert none.returncode == 1
    assert none.stderr.startswith("error: run run_nope has no events")


def judge(name: str) -> ScriptedModel:
    return ScriptedModel(
        (
            ModelResponse(
                tool_calls=(ToolCallRequest("c1", "look_up", {"q": name}),),
                finish_reason="tool_calls",
            ),
            ModelResponse(content=f"{name} says yes", finish_reason="stop"),
        ),
        provider="openai",
        name="gpt-4o-mini",
    )


async def vote(step: StepContext) -> list[str | None]:
    async with (
        step.session("a", model=judge("a"), tools=[look_up]) as a,
        step.session("b", model=judge("b"), tools=[look_up]) as b,
    ):
        return await step.panel([(a, "Yes?"), (b, "Yes?")])


@workflow("tests.explain.siblings")
async def siblings(ctx: WorkflowContext, topic: str) -> Any:
    """Branch y decides "deep" and runs another step; branch x runs its own "deep" step,
    which no decision chose. Then a panel of two legs (admitted together)."""

    async def x(bctx: WorkflowContext) -> Any:
        return await bctx.step("deep", research)

    async def y(bctx: WorkflowContext) -> Any:
        await bctx.decide("route", lambda step: "deep")
        return await bctx.step("other", lambda step: "done")

    await ctx.parallel("fan", {"x": x, "y": y})
    return await ctx.step("vote", vote)


def test_every_event_of_a_run_is_explained(
    ran: tuple[Path, str, list[little.events.LoggedEvent]],
) -> None:
    _, _, events = ran
    for item in events:
        if item.event.seq >= 0:
            assert explain(events, item.event.seq)[0].event is item


def test_links_stay_in_their_session_and_scope(tmp_path: Path) -> None:
    with little.local_world(tmp_path) as world:
        result = asyncio.run(run(world, siblings, "kafka"))
        assert result.status == "completed", result.error
        events = list(world.read_run(result.run_id))
    deep = seq_of(events, StepStarted, step_path="fan/x/deep")
    # the sibling branch's decision did not choose this step
    assert "decided by" not in [c.role for c in explain(events, deep)]
    # a panel admits both legs before either runs: each tool call is in its own leg's call
    leg_a = seq_of(events, ToolCallSucceeded, session_id="vote#a")
    (call,) = [c for c in explain(events, leg_a) if c.role == "in agent call"]
    assert call.event.event.session_id == "vote#a"
    assert call.detail == "agent call 1 (node vote/a#0)"
