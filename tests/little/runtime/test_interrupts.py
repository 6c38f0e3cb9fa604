"""Interrupts are not errors (issue 25 item 3): a suspension on a durable wait, a supervisor's
stop or cancel, and a parallel branch stopped by a failed sibling derive from ``RunInterrupt``
(a ``BaseException``), so a workflow's ``except Exception`` cannot swallow them and go on as if
the wait had ended or the stop had not been asked."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import little
from little.replay import fold_run
from little.runtime import (
    BranchStopped,
    ExecutionStopped,
    ExecutionSuspended,
    RunControl,
    StepContext,
    WorkflowContext,
    execute,
    resume,
    run,
    send_signal,
    workflow,
)
from tests.little.runtime.test_groups_drain import on_log

_names = itertools.count()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[little.World]:
    with little.local_world(tmp_path / "w") as w:
        yield w


def _name() -> str:
    return f"tests.interrupts.{next(_names)}"


def test_the_interrupts_are_not_exceptions() -> None:
    for interrupt in (ExecutionSuspended, ExecutionStopped, BranchStopped):
        assert issubclass(interrupt, BaseException)
        assert not issubclass(interrupt, Exception), interrupt


def test_except_exception_around_a_sleep_does_not_swallow_the_suspension(
    world: little.World,
) -> None:
    async def flow(ctx: WorkflowContext, _: Any) -> str:
        try:
            await ctx.sleep(3600)
        except Exception:
            return "fallback"
        return "slept"

    result = asyncio.run(run(world, workflow(_name())(flow), None, hold=0))
    assert result.status == "waiting"
    assert result.waiting_for == ("timer",)
    assert fold_run(world, result.run_id)[0].status == "waiting"


def test_except_exception_around_a_step_that_waits_for_a_signal_does_not_swallow_it(
    world: little.World,
) -> None:
    async def wait_go(step: StepContext) -> Any:
        return await step.wait_for_signal("go")

    async def flow(ctx: WorkflowContext, _: Any) -> Any:
        try:
            return await ctx.step("wait", wait_go)
        except Exception:
            return "fallback"

    wf = workflow(_name())(flow)
    first = asyncio.run(run(world, wf, None, hold=0))
    assert first.status == "waiting"
    assert first.waiting_for == ("signal:go",)
    state, _, _ = fold_run(world, first.run_id)
    (step,) = state.steps
    assert step.status != "failed"  # a suspended step is not a failed one
    asyncio.run(send_signal(world, first.run_id, "go", {"n": 1}))
    done = asyncio.run(resume(world, first.run_id, wf, hold=0))
    assert (done.status, done.output) == ("completed", {"n": 1})


@pytest.mark.parametrize("cancel", [True, False], ids=["cancel", "stop"])
def test_except_exception_around_a_step_does_not_swallow_a_stop(
    world: little.World, cancel: bool
) -> None:
    control = RunControl()
    handled: list[str] = []

    async def stops(step: StepContext) -> str:
        if cancel:
            control.cancel("cancelled by the test")
        else:
            control.stop("stopped by the test")
        return "step done"  # lands this step's record, then the execution stops

    async def flow(ctx: WorkflowContext, _: Any) -> str:
        try:
            await ctx.step("only", stops)
        except Exception:
            handled.append("caught")
            return "fallback"
        return "completed"

    run_id = f"interrupts-{'cancel' if cancel else 'stop'}"
    with pytest.raises(ExecutionStopped) as stopped:
        asyncio.run(execute(world, run_id, workflow(_name())(flow), None, control=control))
    assert stopped.value.cancelled is cancel
    assert handled == []  # the workflow's handler never ran
    state, _, _ = fold_run(world, run_id)
    assert state.status == ("cancelled" if cancel else "running")
    assert state.output_json is None


def test_except_exception_in_a_branch_does_not_swallow_its_stop(world: little.World) -> None:
    """Branch a fails; branch b's next step is stopped (``BranchStopped``) and b's ``except
    Exception`` never runs: the run fails with a's error."""
    handled: list[str] = []

    async def scenario() -> Any:
        draining = asyncio.Event()

        async def fail(step: StepContext) -> None:
            raise RuntimeError("branch a broke")

        async def hold(step: StepContext) -> None:
            await draining.wait()

        async def a(bctx: WorkflowContext) -> Any:
            return await bctx.step("fail", fail)

        async def b(bctx: WorkflowContext) -> Any:
            try:
                await bctx.step("hold", hold)
                await bctx.step("next", lambda s: "next")
            except Exception:
                handled.append("caught")
                return "fallback"
            return "b"

        async def flow(ctx: WorkflowContext, _: Any) -> Any:
            return await ctx.parallel("fan", {"a": a, "b": b})

        with on_log("parallel_group_draining", draining.set):
            return await run(world, workflow(_name())(flow), None)

    result = asyncio.run(scenario())
    assert result.status == "failed"
    assert "branch a broke" in (result.error or "")
    assert handled == []
    state, _, _ = fold_run(world, result.run_id)
    assert state.step("fan/b/next") is None  # stopped before it started
