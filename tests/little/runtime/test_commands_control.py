"""RunControl, what CancelRun and revocations use: a stop lands at the next event boundary.

On the embedded world, in process: a model that asks for a stop while it is being called
stands in for a command arriving mid-call. The answer in flight is recorded, then nothing new
starts; a cancel records RunCancelled; sub-runs stop with their parent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import little
from little.events import Event, ModelCalled, ModelResponded, RunCancelled, RunStarted, StepStarted
from little.harness import ModelRequest, ModelResponse, ScriptedModel, ToolCallRequest
from little.replay import Snapshot, fold_run, materialize_run_state_from_events
from little.runtime import (
    ExecutionStopped,
    RunControl,
    StepContext,
    Workflow,
    WorkflowContext,
    execute,
    workflow,
)

SCRIPT = (
    ModelResponse(tool_calls=(ToolCallRequest("c1", "nothing", {}),)),
    ModelResponse(tool_calls=(ToolCallRequest("c2", "nothing", {}),)),
    ModelResponse(content="done"),
)


class Interrupting(ScriptedModel):
    """A ScriptedModel that calls ``on_turn(turn)`` while it is answering that turn."""

    def __init__(self, on_turn: Callable[[int], None]) -> None:
        super().__init__(SCRIPT)
        self.on_turn = on_turn
        self.turns: list[int] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        turn = sum(1 for m in request.messages if m.get("role") == "assistant") + 1
        self.turns.append(turn)
        self.on_turn(turn)
        await asyncio.sleep(0)
        return await super().complete(request)


def chat_workflow(name: str, model: Interrupting) -> Workflow:
    @workflow(name)
    async def chat(ctx: WorkflowContext, input: Any) -> Any:
        async def converse(step: StepContext) -> str | None:
            async with step.session("agent", model=model) as agent:
                return await agent.run("hi")

        return await ctx.step("converse", converse)

    return chat


@pytest.fixture
def world(tmp_path: Path) -> Any:
    with little.local_world(tmp_path / "w") as w:
        yield w


def events(world: Any, run_id: str) -> list[Event]:
    return [e.event for e in world.read_run(run_id)]


def test_a_stop_records_the_call_in_flight_then_appends_nothing(world: Any) -> None:
    control = RunControl()
    model = Interrupting(lambda turn: control.stop("revoked") if turn == 2 else None)
    wf = chat_workflow("stop_mid_call", model)
    with pytest.raises(ExecutionStopped) as stopped:
        asyncio.run(execute(world, "r1", wf, None, control=control))
    assert not stopped.value.cancelled
    assert stopped.value.reason == "revoked"
    log = events(world, "r1")
    assert isinstance(log[-1], ModelResponded)  # turn 2's answer landed, then it stopped
    assert log[-1].turn == 2
    assert fold_run(world, "r1")[0].status == "running"

    # The next owner serves both answers from the log and invokes only turn 3.
    model.turns.clear()
    model.on_turn = lambda turn: None
    result = asyncio.run(execute(world, "r1", wf))
    assert result.status == "completed"
    assert model.turns == [3]


def test_a_cancel_records_run_cancelled_after_the_call_in_flight(world: Any) -> None:
    control = RunControl()
    model = Interrupting(lambda turn: control.cancel("user asked") if turn == 1 else None)
    wf = chat_workflow("cancel_mid_call", model)
    with pytest.raises(ExecutionStopped) as stopped:
        asyncio.run(execute(world, "r2", wf, None, control=control))
    assert stopped.value.cancelled
    log = events(world, "r2")
    assert [type(e) for e in log[-2:]] == [ModelResponded, RunCancelled]
    assert sum(isinstance(e, ModelCalled) for e in log) == 1
    state = fold_run(world, "r2")[0]
    assert state.status == "cancelled"
    assert state.error == "cancelled: user asked"
    assert asyncio.run(execute(world, "r2", wf)).status == "cancelled"  # terminal: no claim
    assert sum(isinstance(e, little.events.RunClaimed) for e in events(world, "r2")) == 1


def test_a_cancel_requested_before_the_claim_cancels_without_running(world: Any) -> None:
    control = RunControl()
    control.cancel("never mind")
    model = Interrupting(lambda turn: None)
    with pytest.raises(ExecutionStopped):
        asyncio.run(execute(world, "r3", chat_workflow("cancel_early", model), control=control))
    assert [e.type for e in events(world, "r3")] == ["RunClaimed", "RunCancelled"]
    assert model.turns == []


def test_a_workflow_cannot_swallow_a_stop(world: Any) -> None:
    control = RunControl()

    @workflow("stubborn")
    async def stubborn(ctx: WorkflowContext, input: Any) -> Any:
        def first(step: StepContext) -> int:
            control.stop("go away")
            return 1

        with contextlib.suppress(Exception):  # catching everything does not get it past
            await ctx.step("first", first)
        await ctx.step("second", lambda step: 2)
        return "finished anyway"

    with pytest.raises(ExecutionStopped):
        asyncio.run(execute(world, "r4", stubborn, control=control))
    log = events(world, "r4")
    assert not any(isinstance(e, StepStarted) and e.step_path == "second" for e in log)
    assert log[-1].type == "StepCompleted"  # the one event that was being made when asked


def test_a_cancel_stops_sub_runs_and_their_parent(world: Any) -> None:
    control = RunControl()
    model = Interrupting(lambda turn: control.cancel("stop all") if turn == 1 else None)
    chat_workflow("child_chat", model)

    @workflow("parent")
    async def parent(ctx: WorkflowContext, input: Any) -> Any:
        return await ctx.start_workflow("child_chat", None)

    with pytest.raises(ExecutionStopped):
        asyncio.run(execute(world, "p1", parent, control=control))
    parent_state = fold_run(world, "p1")[0]
    (sub,) = parent_state.sub_runs
    assert fold_run(world, sub.sub_run_id)[0].status == "cancelled"
    assert parent_state.status == "cancelled"


def test_on_running_gets_a_state_a_snapshot_can_be_taken_of(world: Any) -> None:
    seen: list[Any] = []
    model = Interrupting(lambda turn: None)
    wf = chat_workflow("observed", model)
    result = asyncio.run(execute(world, "r5", wf, {"x": 1}, on_running=seen.append))
    assert result.status == "completed"
    (state,) = seen
    assert state.status == "running"
    log = list(world.read_run("r5"))
    started = next(e for e in log if isinstance(e.event, RunStarted))
    assert state.last_event_id == started.event.event_id
    assert (state.last_position.partition, state.last_position.offset) == (
        started.partition,
        started.offset,
    )
    snapshot = Snapshot.of(state)
    rest = [e for e in log if e.offset > started.offset]
    assert (
        materialize_run_state_from_events(rest, start=snapshot.state)
        == fold_run(world, "r5", use_snapshot=False)[0]
    )
