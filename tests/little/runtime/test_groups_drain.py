"""Groups drain (seed 003): when a branch of ``ctx.parallel`` fails, its siblings stop at a
recorded boundary before the run ends. A sibling's call that was in flight settles and is
logged before ``RunFailed``; nothing new starts; nothing is left in flight. A stop or a fenced
writer does not wait for that: it cancels the siblings at once."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

import little
from little.events import AgentCallSettled
from little.harness import ModelRequest, ModelResponse, ScriptedModel
from little.replay import replay_run
from little.runtime import (
    BranchStopped,
    ExecutionStopped,
    RunControl,
    StepContext,
    WorkflowContext,
    execute,
    run,
    workflow,
)

_names = itertools.count()


class Boom(Exception):
    pass


class Gate:
    """A model call the test holds open: ``entered`` once invoked, answers on ``release``."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()


class GatedModel(ScriptedModel):
    def __init__(self, gate: Gate, answer: str) -> None:
        super().__init__(
            (ModelResponse(content=answer, finish_reason="stop"),), provider="t", name="gated"
        )
        self.gate = gate

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.gate.entered.set()
        await self.gate.release.wait()
        return await super().complete(request)


@contextlib.contextmanager
def on_log(event: str, callback: Callable[[], None]) -> Iterator[None]:
    """Call ``callback`` when little logs ``event`` (through structlog if the process
    configured it, else through the standard library, as ``little.logging_setup`` does)."""
    if structlog.is_configured():

        def notify(_: Any, __: str, event_dict: Any) -> Any:
            if event_dict.get("event") == event:
                callback()
            return event_dict

        with structlog.testing.capture_logs(processors=[notify]):
            yield
        return

    class Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().split(" ", 1)[0] == event:
                callback()

    handler = Handler()
    logger = logging.getLogger("little.runtime")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[little.World]:
    with little.local_world(tmp_path / "w") as w:
        yield w


def _types(world: little.World, run_id: str) -> list[tuple[str, str | None, Any]]:
    out = []
    for logged in world.read_run(run_id):
        e = logged.event
        out.append((type(e).__name__, getattr(e, "step_path", None), e))
    return out


def _drain_workflow(gate: Gate, later: ScriptedModel) -> Any:
    """Branch a fails once branch b's model call is in flight; b's call, then b's next step
    (which would call ``later``)."""

    async def fail(step: StepContext) -> None:
        await gate.entered.wait()
        raise Boom("branch a broke")

    async def ask(step: StepContext, model: ScriptedModel, prompt: str) -> str | None:
        async with step.session("agent", model=model) as agent:
            return await agent.run(prompt)

    async def a(bctx: WorkflowContext) -> Any:
        return await bctx.step("fail", fail)

    async def b(bctx: WorkflowContext) -> Any:
        first = await bctx.step("ask", ask, GatedModel(gate, "b's answer"), "question")
        return await bctx.step("then", ask, later, f"more on {first}")

    async def flow(ctx: WorkflowContext, _: Any) -> Any:
        return await ctx.parallel("fan", {"a": a, "b": b})

    return workflow(f"tests.drain.{next(_names)}")(flow)


async def _release_when_draining_or_done(gate: Gate, task: asyncio.Task[Any]) -> None:
    """Release b's call once the group reports it is draining, or once the run ended without
    draining (the bug: then b's answer can only land after RunFailed)."""
    await gate.entered.wait()
    draining = asyncio.Event()
    with on_log("parallel_group_draining", draining.set):
        waiter = asyncio.ensure_future(draining.wait())
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
    gate.release.set()


def test_a_failed_branch_drains_its_sibling_before_run_failed(world: little.World) -> None:
    later = ScriptedModel((ModelResponse(content="never", finish_reason="stop"),))

    async def scenario() -> Any:
        gate = Gate()
        wf = _drain_workflow(gate, later)
        task = asyncio.ensure_future(run(world, wf, None))
        await _release_when_draining_or_done(gate, task)
        return await task

    result = asyncio.run(scenario())
    assert result.status == "failed"
    assert "Boom" in (result.error or "")
    assert "branch a broke" in (result.error or "")

    events = _types(world, result.run_id)
    names = [(t, p) for t, p, _ in events]
    failed_at = names.index(("RunFailed", None))
    assert failed_at == len(names) - 1, "RunFailed is the run's last event"
    # b's in-flight call settled and was logged before the run ended, and b's step completed
    responded = names.index(("ModelResponded", "fan/b/ask"))
    settled = names.index(("AgentCallSettled", "fan/b/ask"))
    completed = names.index(("StepCompleted", "fan/b/ask"))
    assert responded < settled < completed < failed_at
    (settlement,) = [e for t, _, e in events if isinstance(e, AgentCallSettled)]
    assert settlement.outcome == "succeeded"
    # ... and b started no new work: its next step never started, its model was never called
    assert ("StepStarted", "fan/b/then") not in names
    assert later.invocations == 0
    assert [p for t, p, _ in events if t == "ModelCalled"] == ["fan/b/ask"]
    # nothing is left in flight in the folded run
    state = replay_run(world, result.run_id).state
    assert state.status == "failed"
    assert [c.outcome for c in state.agent_calls] == ["succeeded"]
    assert [(s.status, s.turn_count) for s in state.sessions] == [("completed", 1)]
    steps = {s.step_path: s.status for s in state.steps}
    assert steps == {"fan/a/fail": "failed", "fan/b/ask": "completed"}


def test_a_sibling_stopped_between_turns_settles_its_call_as_failed(
    world: little.World,
) -> None:
    """b's agent call is a tool loop: its model asks for a tool while a fails. The tool is new
    work, so it is not run; the agent call settles failed (not left in flight)."""
    from little.harness import ToolCallRequest, ToolContext, tool

    used: list[str] = []

    @tool(description="Look it up.")
    def look_up(args: dict[str, Any], ctx: ToolContext) -> str:
        used.append(str(args))
        return "found"

    async def scenario() -> Any:
        gate = Gate()

        model = GatedModel(gate, "")
        model.script = (
            ModelResponse(
                tool_calls=(ToolCallRequest("c1", "look_up", {"q": "x"}),),
                finish_reason="tool_calls",
            ),
            ModelResponse(content="done", finish_reason="stop"),
        )

        async def fail(step: StepContext) -> None:
            await gate.entered.wait()
            raise Boom("branch a broke")

        async def ask(step: StepContext) -> str | None:
            async with step.session("agent", model=model, tools=[look_up]) as agent:
                return await agent.run("look it up")

        async def a(bctx: WorkflowContext) -> Any:
            return await bctx.step("fail", fail)

        async def b(bctx: WorkflowContext) -> Any:
            return await bctx.step("ask", ask)

        async def flow(ctx: WorkflowContext, _: Any) -> Any:
            return await ctx.parallel("fan", {"a": a, "b": b})

        wf = workflow(f"tests.drain.{next(_names)}")(flow)
        task = asyncio.ensure_future(run(world, wf, None))
        await _release_when_draining_or_done(gate, task)
        return await task, model

    result, model = asyncio.run(scenario())
    assert result.status == "failed"
    assert "branch a broke" in (result.error or "")
    assert used == []
    assert model.invocations == 1
    names = [(t, p) for t, p, _ in _types(world, result.run_id)]
    assert ("ToolCallStarted", "fan/b/ask") not in names
    assert names.index(("ModelResponded", "fan/b/ask")) < names.index(("RunFailed", None))
    state = replay_run(world, result.run_id).state
    assert [c.outcome for c in state.agent_calls] == ["failed"]
    # the stopped step is not a failed step: it neither failed nor will be retried
    assert {s.step_path: s.status for s in state.steps}["fan/b/ask"] != "failed"


def test_nested_groups_stop_with_the_enclosing_one(world: little.World) -> None:
    """A branch holding a group of its own: when a sibling of the outer group fails, the inner
    group's branches stop too (after their in-flight call), and the run fails with the real
    failure, not with a stop."""
    later = ScriptedModel((ModelResponse(content="never", finish_reason="stop"),))

    async def scenario() -> Any:
        gate = Gate()

        async def fail(step: StepContext) -> None:
            await gate.entered.wait()
            raise Boom("outer a broke")

        async def ask(step: StepContext, model: ScriptedModel) -> str | None:
            async with step.session("agent", model=model) as agent:
                return await agent.run("q")

        async def inner(bctx: WorkflowContext) -> Any:
            await bctx.step("ask", ask, GatedModel(gate, "inner answer"))
            return await bctx.step("then", ask, later)

        async def b(bctx: WorkflowContext) -> Any:
            return await bctx.parallel("inner", {"x": inner})

        async def a(bctx: WorkflowContext) -> Any:
            return await bctx.step("fail", fail)

        async def flow(ctx: WorkflowContext, _: Any) -> Any:
            return await ctx.parallel("fan", {"a": a, "b": b})

        wf = workflow(f"tests.drain.{next(_names)}")(flow)
        task = asyncio.ensure_future(run(world, wf, None))
        await _release_when_draining_or_done(gate, task)
        return await task

    result = asyncio.run(scenario())
    assert result.status == "failed"
    assert "outer a broke" in (result.error or "")
    assert "BranchStopped" not in (result.error or "")
    names = [(t, p) for t, p, _ in _types(world, result.run_id)]
    assert names.index(("AgentCallSettled", "fan/b/inner/x/ask")) < names.index(("RunFailed", None))
    assert ("StepStarted", "fan/b/inner/x/then") not in names
    assert later.invocations == 0


def test_a_sub_run_started_in_a_sibling_ends_before_the_parent_fails(
    world: little.World,
) -> None:
    """A sub-run is a run of its own: the draining group waits for it to end (its outcome is
    in its own log) and records the step that started it, then the parent fails."""

    async def scenario() -> Any:
        gate = Gate()

        async def child_ask(step: StepContext) -> str | None:
            async with step.session("agent", model=GatedModel(gate, "child answer")) as agent:
                return await agent.run("child question")

        async def child(ctx: WorkflowContext, _: Any) -> Any:
            return await ctx.step("ask", child_ask)

        child_wf = workflow(f"tests.drain.child.{next(_names)}")(child)

        async def fail(step: StepContext) -> None:
            await gate.entered.wait()
            raise Boom("parent branch broke")

        async def a(bctx: WorkflowContext) -> Any:
            return await bctx.step("fail", fail)

        async def b(bctx: WorkflowContext) -> Any:
            return await bctx.start_workflow(child_wf.name, None, key="kid")

        async def flow(ctx: WorkflowContext, _: Any) -> Any:
            return await ctx.parallel("fan", {"a": a, "b": b})

        wf = workflow(f"tests.drain.{next(_names)}")(flow)
        task = asyncio.ensure_future(run(world, wf, None))
        await _release_when_draining_or_done(gate, task)
        return await task

    result = asyncio.run(scenario())
    assert result.status == "failed"
    assert "parent branch broke" in (result.error or "")
    state = replay_run(world, result.run_id).state
    (sub,) = state.sub_runs
    child_state = replay_run(world, sub.sub_run_id).state
    assert child_state.status == "completed"
    assert [c.outcome for c in child_state.agent_calls] == ["succeeded"]
    names = [(t, p) for t, p, _ in _types(world, result.run_id)]
    assert names.index(("StepCompleted", "fan/b/start_workflow/kid")) < names.index(
        ("RunFailed", None)
    )


def test_a_stop_does_not_wait_for_a_siblings_call(world: little.World) -> None:
    """A stop requested by the supervisor ends the execution at the next event boundary: a
    sibling's call that is still in flight is cancelled (a resume invokes it again), not
    waited for. The test never releases b's call: the execution must end without it."""

    async def scenario() -> tuple[Any, Gate]:
        gate = Gate()
        control = RunControl()

        async def stopper(step: StepContext) -> None:
            await gate.entered.wait()
            control.stop("rebalanced")
            await step.flush()

        async def ask(step: StepContext) -> str | None:
            async with step.session("agent", model=GatedModel(gate, "late")) as agent:
                return await agent.run("q")

        async def a(bctx: WorkflowContext) -> Any:
            return await bctx.step("stop", stopper)

        async def b(bctx: WorkflowContext) -> Any:
            return await bctx.step("ask", ask)

        async def flow(ctx: WorkflowContext, _: Any) -> Any:
            return await ctx.parallel("fan", {"a": a, "b": b})

        wf = workflow(f"tests.drain.{next(_names)}")(flow)
        with pytest.raises(ExecutionStopped):
            await execute(world, "stop-run", wf, None, control=control)
        return control, gate

    _, gate = asyncio.run(scenario())
    assert not gate.release.is_set()
    state = replay_run(world, "stop-run").state
    assert state.status == "running"  # left for its next owner, b's call in flight
    assert [c.outcome for c in state.agent_calls] == [None]


def test_a_branch_that_catches_the_stop_still_starts_nothing(world: little.World) -> None:
    """``BranchStopped`` is raised at every boundary: a branch that catches it and tries new
    work is stopped again; the run fails with the sibling's error."""
    tries: list[str] = []

    async def scenario() -> Any:
        gate = Gate()

        async def fail(step: StepContext) -> None:
            await gate.entered.wait()
            raise Boom("a broke")

        async def ask(step: StepContext) -> str | None:
            async with step.session("agent", model=GatedModel(gate, "b")) as agent:
                return await agent.run("q")

        async def a(bctx: WorkflowContext) -> Any:
            return await bctx.step("fail", fail)

        async def b(bctx: WorkflowContext) -> Any:
            await bctx.step("ask", ask)
            for attempt in ("again", "once more"):
                try:
                    await bctx.step(attempt.replace(" ", "-"), lambda s: None)
                except BranchStopped:
                    tries.append(attempt)
            return "b"

        async def flow(ctx: WorkflowContext, _: Any) -> Any:
            return await ctx.parallel("fan", {"a": a, "b": b})

        wf = workflow(f"tests.drain.{next(_names)}")(flow)
        task = asyncio.ensure_future(run(world, wf, None))
        await _release_when_draining_or_done(gate, task)
        return await task

    result = asyncio.run(scenario())
    assert result.status == "failed"
    assert "a broke" in (result.error or "")
    assert tries == ["again", "once more"]
    names = [(t, p) for t, p, _ in _types(world, result.run_id)]
    assert not any(p is not None and p.startswith(("fan/b/again", "fan/b/once")) for _, p in names)
