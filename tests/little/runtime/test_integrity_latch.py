"""An integrity error finishes its execution whatever the workflow does with it (issue 26 item
1): the first one is latched on the execution, every later step, agent call, wait and recorded
value refuses with it, nothing more is recorded, no model is invoked, and the run ends by it
when the workflow returns, raises something else or waits. Each case: a run recorded up to a
durable wait, resumed by edited code whose first agent call differs from the one its log
settled (``SessionDivergedError``), which catches the error in another way.
(tests/crash/test_integrity_refusals.py does the same after a real SIGKILL, for every kind.)"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import little
from little.events import RunClaimed, SessionCompleted, StepCompleted, StepFailed
from little.harness import ModelResponse, ScriptedModel
from little.runtime import (
    Retry,
    SessionDivergedError,
    StepContext,
    WorkflowContext,
    _registry,
    resume,
    run,
    workflow,
)

_names = itertools.count()
MODELS: list[ScriptedModel] = []
PROMPT = "Find facts about Kafka"
EDITED = "Find three facts about Kafka"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[little.World]:
    MODELS.clear()
    with little.local_world(tmp_path / "w") as w:
        yield w


def invoked() -> int:
    return sum(m.invocations for m in MODELS)


async def ask(step: StepContext, prompt: str, name: str = "agent") -> str | None:
    model = ScriptedModel((ModelResponse(content=f"on [{prompt}]", finish_reason="stop"),))
    MODELS.append(model)
    async with step.session(name, model=model) as agent:
        return await agent.run(prompt)


async def ask_then_wait(step: StepContext, prompt: str) -> str | None:
    answer = await ask(step, prompt)
    await step.wait_for_signal("go")
    return answer


Flow = Callable[[WorkflowContext, Any], Any]


def deploy(name: str, fn: Flow) -> Any:
    """``fn`` as version 1 of ``name``, in place of the code registered before (a deploy)."""
    _registry._REGISTRY.pop(name, None)
    return workflow(name)(fn)


def recorded_then_resumed(world: little.World, recorded: Flow, edited: Flow) -> tuple[str, int]:
    """Run ``recorded`` until it waits, then resume it with ``edited`` (same name and
    version), which must be refused with ``SessionDivergedError``; returns the run id and
    how many events the resume added."""
    name = f"tests.integrity_latch.{next(_names)}"
    first = asyncio.run(run(world, deploy(name, recorded), "Kafka"))
    assert first.status == "waiting", first
    assert invoked() == 1
    before = len(list(world.read_run(first.run_id)))
    with pytest.raises(SessionDivergedError, match=f"run {first.run_id}: agent call 0"):
        asyncio.run(resume(world, first.run_id, deploy(name, edited)))
    _registry._REGISTRY.pop(name, None)
    return first.run_id, len(list(world.read_run(first.run_id))) - before


def added(world: little.World, run_id: str, count: int) -> list[type]:
    return [type(x.event) for x in list(world.read_run(run_id))[-count:]]


async def recorded(ctx: WorkflowContext, topic: Any) -> Any:
    return await ctx.step("ask", ask_then_wait, PROMPT)


def test_a_step_that_catches_it_by_type_and_returns_does_not_commit(world: little.World) -> None:
    async def swallowing(step: StepContext, prompt: str) -> str | None:
        try:
            return await ask(step, prompt)
        except SessionDivergedError:  # user code naming the error still catches it
            return "swallowed"

    async def edited(ctx: WorkflowContext, topic: Any) -> Any:
        return await ctx.step("ask", swallowing, EDITED)

    run_id, count = recorded_then_resumed(world, recorded, edited)
    assert added(world, run_id, count) == [RunClaimed]  # no StepCompleted, no RunCompleted
    assert invoked() == 1


def test_a_workflow_that_catches_everything_can_do_nothing_after_it(world: little.World) -> None:
    refusals: list[BaseException] = []

    def fresh(step: StepContext) -> Any:
        return ask(step, "Something else", "other")

    async def edited(ctx: WorkflowContext, topic: Any) -> Any:
        attempts: list[Callable[[], Any]] = [
            lambda: ctx.step("ask", ask_then_wait, EDITED),
            lambda: ctx.step("other", fresh),  # a fresh model call
            lambda: ctx.step("ask", ask_then_wait, PROMPT),  # the recorded request, unedited
            lambda: ctx.sleep(0),
            lambda: ctx.wait_for_signal("go"),
            lambda: asyncio.sleep(0, ctx.now()),
        ]
        for attempt in attempts:
            try:
                await attempt()
            except BaseException as exc:  # (a test of what cannot be swallowed)
                refusals.append(exc)
        return "went on"

    run_id, count = recorded_then_resumed(world, recorded, edited)
    assert added(world, run_id, count) == [RunClaimed]
    assert invoked() == 1
    assert len(refusals) == 6
    assert isinstance(refusals[0], SessionDivergedError)
    for again in refusals[1:]:  # the latched error, raised again as a copy of its own
        assert type(again) is type(refusals[0]), again
        assert str(again) == str(refusals[0])
        assert again.__cause__ is refusals[0]
        # its traceback is of its own raise only: raising one object again and again would
        # grow its traceback by every refusal before it
        frames = traceback.extract_tb(again.__traceback__)
        assert sum(f.name == "check" for f in frames) == 1, frames


def test_a_retried_step_records_no_failure_and_no_retry(world: little.World) -> None:
    attempts: list[int] = []

    async def failing_otherwise(step: StepContext, prompt: str) -> str | None:
        attempts.append(1)
        try:
            return await ask(step, prompt)
        except Exception as exc:
            raise ValueError("the agent failed") from exc

    async def edited(ctx: WorkflowContext, topic: Any) -> Any:
        return await ctx.step("ask", failing_otherwise, EDITED, retry=Retry(max_attempts=3))

    run_id, count = recorded_then_resumed(world, recorded, edited)
    events = added(world, run_id, count)
    assert StepFailed not in events
    assert events == [RunClaimed]
    assert attempts == [1]
    assert invoked() == 1


def test_a_branch_that_catches_it_ends_the_run_and_its_sibling_invokes_nothing(
    world: little.World,
) -> None:
    async def recorded_group(ctx: WorkflowContext, topic: Any) -> Any:
        async def a(bctx: WorkflowContext) -> Any:
            return await bctx.step("ask", ask_then_wait, PROMPT)

        async def b(bctx: WorkflowContext) -> Any:
            return await bctx.step("wait", lambda step: step.wait_for_signal("go-b"))

        return await ctx.parallel("fan", {"a": a, "b": b})

    caught = asyncio.Event()

    async def edited_group(ctx: WorkflowContext, topic: Any) -> Any:
        async def a(bctx: WorkflowContext) -> Any:
            try:
                return await bctx.step("ask", ask_then_wait, EDITED)
            except Exception:
                return "swallowed"
            finally:
                caught.set()

        async def after_a(step: StepContext) -> Any:
            await caught.wait()  # only once branch a caught the error
            return await ask(step, "B's own question", "b-agent")

        async def b(bctx: WorkflowContext) -> Any:
            return await bctx.step("wait", after_a)

        return await ctx.parallel("fan", {"a": a, "b": b})

    run_id, count = recorded_then_resumed(world, recorded_group, edited_group)
    assert added(world, run_id, count) == [RunClaimed]
    assert invoked() == 1  # branch b's model was never asked
    assert not [x for x in world.read_run(run_id) if isinstance(x.event, StepCompleted)]


def test_a_sibling_branchs_integrity_error_reaches_a_sub_run_already_running(
    world: little.World,
) -> None:
    """Branch a catches its SessionDivergedError while branch b is inside a sub-run: the
    sub-run's execution consults its parent's latch too, so its next model call is refused."""
    child = f"tests.integrity_latch.child{next(_names)}"

    async def child_recorded(ctx: WorkflowContext, topic: Any) -> Any:
        return await ctx.step("wait", lambda step: step.wait_for_signal("go-b"))

    caught = asyncio.Event()

    inside = asyncio.Event()

    async def after_a(step: StepContext) -> Any:
        inside.set()  # the sub-run is running
        await caught.wait()  # only once branch a caught the error
        return await ask(step, "B's own question", "b-agent")

    async def child_edited(ctx: WorkflowContext, topic: Any) -> Any:
        return await ctx.step("wait", after_a)

    async def recorded_group(ctx: WorkflowContext, topic: Any) -> Any:
        async def a(bctx: WorkflowContext) -> Any:
            return await bctx.step("ask", ask_then_wait, PROMPT)

        async def b(bctx: WorkflowContext) -> Any:
            return await bctx.start_workflow(child, topic)

        return await ctx.parallel("fan", {"a": a, "b": b})

    async def edited_group(ctx: WorkflowContext, topic: Any) -> Any:
        async def a(bctx: WorkflowContext) -> Any:
            await inside.wait()  # only once branch b is inside its sub-run
            try:
                return await bctx.step("ask", ask_then_wait, EDITED)
            except Exception:
                return "swallowed"
            finally:
                caught.set()

        async def b(bctx: WorkflowContext) -> Any:
            return await bctx.start_workflow(child, topic)

        return await ctx.parallel("fan", {"a": a, "b": b})

    deploy(child, child_recorded)
    try:
        name = f"tests.integrity_latch.{next(_names)}"
        first = asyncio.run(run(world, deploy(name, recorded_group), "Kafka"))
        assert first.status == "waiting", first
        assert invoked() == 1
        before = len(list(world.read_run(first.run_id)))
        deploy(child, child_edited)
        with pytest.raises(SessionDivergedError, match=f"run {first.run_id}: agent call 0"):
            asyncio.run(resume(world, first.run_id, deploy(name, edited_group)))
        _registry._REGISTRY.pop(name, None)
    finally:
        _registry._REGISTRY.pop(child, None)
    assert inside.is_set()
    assert caught.is_set()
    assert invoked() == 1  # the sub-run's model was never asked
    assert [type(x.event) for x in list(world.read_run(first.run_id))[before:]] == [RunClaimed]


def test_a_sub_runs_integrity_error_ends_its_parent_though_the_parent_catches_it(
    world: little.World,
) -> None:
    child = f"tests.integrity_latch.child{next(_names)}"

    async def child_recorded(ctx: WorkflowContext, topic: Any) -> Any:
        return await ctx.step("ask", ask_then_wait, PROMPT)

    async def child_edited(ctx: WorkflowContext, topic: Any) -> Any:
        return await ctx.step("ask", ask_then_wait, EDITED)

    async def parent(ctx: WorkflowContext, topic: Any) -> Any:
        try:
            return await ctx.start_workflow(child, topic)
        except Exception:
            return await ctx.step("fallback", lambda step: ask(step, "Fallback", "fallback"))

    name = f"tests.integrity_latch.{next(_names)}"
    deploy(child, child_recorded)
    first = asyncio.run(run(world, deploy(name, parent), "Kafka"))
    assert first.status == "waiting", first
    sub_run_id = first.run_id + "~start_workflow/" + child + ".1/sub1"
    before = len(list(world.read_run(first.run_id)))
    deploy(child, child_edited)
    with pytest.raises(SessionDivergedError, match=f"run {sub_run_id}: agent call 0"):
        asyncio.run(resume(world, first.run_id))
    for made in (name, child):
        _registry._REGISTRY.pop(made, None)
    assert [type(x.event) for x in list(world.read_run(first.run_id))[before:]] == [RunClaimed]
    assert invoked() == 1  # the fallback's model was never asked


def test_a_session_that_swallows_it_is_not_recorded_as_completed(world: little.World) -> None:
    async def ask_and_wait_inside(step: StepContext, prompt: str) -> str | None:
        model = ScriptedModel((ModelResponse(content="answer", finish_reason="stop"),))
        MODELS.append(model)
        async with step.session("agent", model=model) as agent:
            answer = await agent.run(prompt)
            await step.wait_for_signal("go")  # the session is still open when the run waits
        return answer

    async def recorded_open(ctx: WorkflowContext, topic: Any) -> Any:
        return await ctx.step("ask", ask_and_wait_inside, PROMPT)

    async def swallowing_inside(step: StepContext, prompt: str) -> str | None:
        model = ScriptedModel((ModelResponse(content="unused", finish_reason="stop"),))
        MODELS.append(model)
        async with step.session("agent", model=model) as agent:
            with contextlib.suppress(SessionDivergedError):  # the block ends normally
                await agent.run(prompt)
        return "swallowed"

    async def edited(ctx: WorkflowContext, topic: Any) -> Any:
        try:
            return await ctx.step("ask", swallowing_inside, EDITED)
        except SessionDivergedError:
            await ctx.flush()  # whatever is in hand lands: nothing made after the error
            raise

    run_id, count = recorded_then_resumed(world, recorded_open, edited)
    assert SessionCompleted not in added(world, run_id, count)
    assert invoked() == 1
