"""Panels (``step.panel``, seed 003): several agent calls at once. In a replay a panel is served
entirely from the record or runs entirely fresh; a mix ends the run. A served panel costs the
budget nothing; a fresh one reserves a call per leg before any leg runs."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import little
from little.errors import ConfigurationError
from little.events import AgentCallAdmitted, AgentCallSettled, ModelCalled
from little.harness import ModelResponse, ScriptedModel
from little.replay import replay_run
from little.runtime import StepContext, WorkflowContext, run, workflow
from little.runtime._source import replay_safe
from tests.little.runtime import panel_workflows as pw

_versions = itertools.count()
MIXED = "panel resume cannot mix recorded and fresh agent calls"


def flow(**kwargs: Any) -> Any:
    return pw.panel_flow("tests.panel", f"p{next(_versions)}", **kwargs)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[little.World]:
    pw.MODELS.clear()
    with little.local_world(tmp_path) as w:
        yield w


def counts() -> dict[str, int]:
    return {name: pw.invocations(name) for name in ("research", *pw.LEGS)}


def settled(world: little.World, run_id: str) -> list[tuple[int, str | None, bool, str | None]]:
    """Settlements by ordinal (legs settle in the order they finish)."""
    return sorted(
        (e.ordinal, e.outcome, e.replayed, e.miss_reason)
        for x in world.read_run(run_id)
        if isinstance(e := x.event, AgentCallSettled)
    )


def admitted(world: little.World, run_id: str) -> list[tuple[int, str | None, str]]:
    return [
        (e.ordinal, e.node_label, e.scope)
        for x in world.read_run(run_id)
        if isinstance(e := x.event, AgentCallAdmitted)
    ]


def test_the_panel_module_is_replay_safe() -> None:
    assert replay_safe(pw.panel_flow) == (True, ())


def test_a_panel_runs_its_legs_at_once_admitted_in_list_order(world: little.World) -> None:
    first = asyncio.run(run(world, flow(), "Kafka"))
    assert first.status == "completed", first.error
    answers = first.output  # the panel's answers, in leg order
    assert [a.split(":")[0] for a in answers] == list(pw.LEGS)
    assert admitted(world, first.run_id) == [
        (0, "research", ""),
        (1, "judge0", ""),
        (2, "judge1", ""),
        (3, "judge2", ""),
    ]
    assert counts() == {"research": 1, "judge0": 1, "judge1": 1, "judge2": 1}


def test_a_panel_served_entirely_from_the_record(world: little.World) -> None:
    first = asyncio.run(run(world, flow(), "Kafka"))
    second = asyncio.run(run(world, flow(), "Kafka", replay_from=first.run_id))
    assert second.status == "completed", second.error
    assert second.output == first.output
    assert counts() == {"research": 1, "judge0": 1, "judge1": 1, "judge2": 1}
    assert settled(world, second.run_id) == [
        (0, "succeeded", True, None),
        (1, "succeeded", True, None),
        (2, "succeeded", True, None),
        (3, "succeeded", True, None),
    ]


def test_a_panel_after_the_divergence_point_runs_every_leg_fresh(world: little.World) -> None:
    first = asyncio.run(run(world, flow(), "Kafka"))
    edited = flow(research="Find three facts about ")
    second = asyncio.run(run(world, edited, "Kafka", replay_from=first.run_id))
    assert second.status == "completed", second.error
    assert counts() == {"research": 2, "judge0": 2, "judge1": 2, "judge2": 2}
    assert settled(world, second.run_id) == [
        (0, "succeeded", False, "key-mismatch"),
        (1, "succeeded", False, "diverged"),
        (2, "succeeded", False, "diverged"),
        (3, "succeeded", False, "diverged"),
    ]


def test_a_panel_whose_first_leg_changed_is_the_divergence_point(world: little.World) -> None:
    """The legs are decided in list order: when the first leg misses, the latch makes the
    others fresh too, so the panel is all fresh (no mix)."""
    first = asyncio.run(run(world, flow(), "Kafka"))
    second = asyncio.run(
        run(world, flow(judge0="Judge harshly: "), "Kafka", replay_from=first.run_id)
    )
    assert second.status == "completed", second.error
    assert counts() == {"research": 1, "judge0": 2, "judge1": 2, "judge2": 2}
    assert [m for *_, m in settled(world, second.run_id)] == [
        None,
        "key-mismatch",
        "diverged",
        "diverged",
    ]


def test_a_mixed_panel_before_the_divergence_point_ends_the_run(world: little.World) -> None:
    first = asyncio.run(run(world, flow(), "Kafka"))
    second = asyncio.run(
        run(world, flow(judge1="Judge harshly: "), "Kafka", replay_from=first.run_id)
    )
    assert second.status == "failed"
    assert MIXED in (second.error or "")
    assert "PanelMixedError" in (second.error or "")
    assert "0 recorded, 1 fresh (key-mismatch), 2 fresh (diverged)" in (second.error or "")
    # no leg ran: neither the recorded legs were served nor the fresh ones invoked
    assert counts() == {"research": 1, "judge0": 1, "judge1": 1, "judge2": 1}
    called = [e for x in world.read_run(second.run_id) if isinstance(e := x.event, ModelCalled)]
    assert called == []
    # nothing is left in flight: every leg's admission is settled, failed, with its reason
    assert settled(world, second.run_id) == [
        (0, "succeeded", True, None),
        (1, "failed", False, "panel-mixed"),
        (2, "failed", False, "key-mismatch"),
        (3, "failed", False, "diverged"),
    ]
    state = replay_run(world, second.run_id).state
    assert state.status == "failed"
    assert all(c.outcome is not None for c in state.agent_calls)
    assert second.replay is not None
    assert (second.replay.diverged_at_call, second.replay.miss_reason) == (1, "panel-mixed")
    # the error is terminal: it is not retried as a step failure
    judge = state.step("judge")
    assert judge is not None
    assert judge.attempts == 1


def test_a_replayed_panel_is_not_charged_against_the_budget(world: little.World) -> None:
    first = asyncio.run(run(world, flow(), "Kafka"))
    second = asyncio.run(run(world, flow(), "Kafka", replay_from=first.run_id, max_agent_calls=1))
    assert second.status == "completed", second.error
    assert counts() == {"research": 1, "judge0": 1, "judge1": 1, "judge2": 1}
    assert replay_run(world, second.run_id).state.usage.calls == 0


def test_a_fresh_panel_reserves_every_leg_before_any_runs(world: little.World) -> None:
    result = asyncio.run(run(world, flow(with_research=False), "Kafka", max_agent_calls=2))
    assert result.status == "failed"
    assert "BudgetExceededError" in (result.error or "")
    assert "3 fresh leg(s)" in (result.error or "")
    assert "has 2 left" in (result.error or "")
    assert counts() == {"research": 0, "judge0": 0, "judge1": 0, "judge2": 0}
    assert [e for x in world.read_run(result.run_id) if isinstance(e := x.event, ModelCalled)] == []
    assert [o for _, o, *_ in settled(world, result.run_id)] == ["failed"] * 3


def test_a_fresh_panel_that_fits_the_budget_runs(world: little.World) -> None:
    result = asyncio.run(run(world, flow(with_research=False), "Kafka", max_agent_calls=3))
    assert result.status == "completed", result.error
    assert counts() == {"research": 0, "judge0": 1, "judge1": 1, "judge2": 1}


def test_a_panel_after_the_divergence_meets_the_cap_with_what_was_spent(
    world: little.World,
) -> None:
    """A replay whose research call diverged: that fresh call is spent, so three fresh legs
    do not fit a budget of three."""
    first = asyncio.run(run(world, flow(), "Kafka"))
    edited = flow(research="Find three facts about ")
    second = asyncio.run(run(world, edited, "Kafka", replay_from=first.run_id, max_agent_calls=3))
    assert second.status == "failed"
    assert "has 2 left" in (second.error or "")
    assert counts() == {"research": 2, "judge0": 1, "judge1": 1, "judge2": 1}


def test_a_reservation_holds_against_calls_outside_the_panel(world: little.World) -> None:
    """While a fresh panel's legs hold their reservation, a call of a parallel sibling does
    not take it: the sibling meets the cap, the panel's legs all run."""
    gate = asyncio.Event()

    class Waiting(ScriptedModel):
        async def complete(self, request: Any) -> ModelResponse:
            await gate.wait()
            return await super().complete(request)

    def reply(text: str) -> tuple[ModelResponse, ...]:
        return (ModelResponse(content=text, finish_reason="stop"),)

    async def panel(step: StepContext) -> list[str | None]:
        async with contextlib.AsyncExitStack() as stack:
            legs = [
                (await stack.enter_async_context(step.session(n, model=Waiting(reply(n)))), "q")
                for n in ("l0", "l1")
            ]
            return await step.panel(legs)

    async def sibling(step: StepContext) -> str | None:
        gate.set()  # the panel's legs are admitted and reserved before this step starts
        async with step.session("s", model=ScriptedModel(reply("s"))) as agent:
            return await agent.run("q")

    async def wf(ctx: WorkflowContext, _: Any) -> Any:
        async def a(b: WorkflowContext) -> Any:
            return await b.step("panel", panel)

        async def b(b: WorkflowContext) -> Any:
            return await b.step("sibling", sibling)

        return await ctx.parallel("fan", {"a": a, "b": b})

    result = asyncio.run(
        run(world, workflow(f"tests.panel.reserve{next(_versions)}")(wf), None, max_agent_calls=2)
    )
    assert result.status == "failed"
    assert "budget of 2 agent call(s) spent (0 made, 2 reserved by panels" in (result.error or "")
    state = replay_run(world, result.run_id).state
    assert state.usage.calls == 2  # both legs ran (the group drained them)
    by_label = {c.node_label: c.outcome for c in state.agent_calls}
    assert by_label == {"l0": "succeeded", "l1": "succeeded", "s": "failed"}


@pytest.mark.parametrize(
    ("legs", "message"),
    [
        ("empty", "a panel needs a non-empty list of legs"),
        ("pair", "panel leg 0 is 'q', not a (session, prompt) pair"),
        ("shared", "panel legs 0 and 1 share session 'a'"),
    ],
)
def test_bad_legs_are_refused_naming_the_leg(world: little.World, legs: str, message: str) -> None:
    async def step_fn(step: StepContext) -> Any:
        a = step.session("a", model=ScriptedModel(()))
        given: Any = {"empty": [], "pair": ["q"], "shared": [(a, "x"), (a, "y")]}[legs]
        return await step.panel(given)

    async def wf(ctx: WorkflowContext, _: Any) -> Any:
        return await ctx.step("p", step_fn)

    result = asyncio.run(run(world, workflow(f"tests.panel.bad{next(_versions)}")(wf), None))
    assert result.status == "failed"
    assert "ConfigurationError" in (result.error or "")
    assert message in (result.error or ""), result.error
    assert "step p" in (result.error or "")
    assert issubclass(ConfigurationError, ValueError)
