"""``ctx.patched`` (issue 11 item 4): branching on whether a run was recorded before a code
change. A run that reaches a patch for the first time records ``PatchMarked`` and takes the new
path; a run whose log shows it went past that point before the patch existed takes the old
path; the answer is per scope (the run, a parallel branch, a step's visit) and fixed for the
execution. These run in-process: an execution stopped at an event boundary stands for the old
deploy going away (tests/crash/test_code_changes.py does the same with SIGKILL)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import little
from little.events import PatchMarked, StepCompleted
from little.harness import ModelResponse, ScriptedModel
from little.replay import PatchMark, fold_run
from little.runtime import (
    ExecutionStopped,
    RunControl,
    StepContext,
    Workflow,
    WorkflowContext,
    execute,
    simulate,
)

NAME = "tests.patches.pipeline"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[little.World]:
    with little.local_world(tmp_path) as w:
        yield w


class Steps:
    """The pipeline's steps, recording which ran (and asking for a stop after one of them)."""

    def __init__(self, stop_after: str | None = None) -> None:
        self.ran: list[str] = []
        self.control = RunControl()
        self.stop_after = stop_after

    def _ran(self, name: str) -> None:
        self.ran.append(name)
        if name == self.stop_after:
            self.control.stop("the old deploy goes away")  # this step lands, then it stops

    def search(self, step: StepContext, topic: str) -> list[str]:
        self._ran("search")
        return [f"{topic} b", f"{topic} a"]

    def rank(self, step: StepContext, facts: list[str]) -> list[str]:
        self._ran("rank")
        return sorted(facts)

    def summarize(self, step: StepContext, facts: list[str]) -> str:
        self._ran("summarize")
        return " / ".join(facts)


Flow = Callable[[WorkflowContext, str], Any]


def old(s: Steps) -> Flow:
    async def fn(ctx: WorkflowContext, topic: str) -> str:
        facts = await ctx.step("search", s.search, topic)
        return str(await ctx.step("summarize", s.summarize, facts))

    return fn


def patched_first(s: Steps, answers: list[bool]) -> Flow:
    """The patch guards the whole pipeline (it asks before the first step)."""

    async def fn(ctx: WorkflowContext, topic: str) -> str:
        answers.append(ctx.patched("rank-facts"))
        facts = await ctx.step("search", s.search, topic)
        if answers[-1]:
            facts = await ctx.step("rank", s.rank, facts)
        answers.append(ctx.patched("rank-facts"))  # asked again: the same answer
        return str(await ctx.step("summarize", s.summarize, facts))

    return fn


def patched_later(s: Steps, answers: list[bool]) -> Flow:
    """The patch sits after the first step."""

    async def fn(ctx: WorkflowContext, topic: str) -> str:
        facts = await ctx.step("search", s.search, topic)
        answers.append(ctx.patched("rank-facts"))
        if answers[-1]:
            facts = await ctx.step("rank", s.rank, facts)
        return str(await ctx.step("summarize", s.summarize, facts))

    return fn


def deprecated(s: Steps) -> Flow:
    """Phase 2: only the new path is left."""

    async def fn(ctx: WorkflowContext, topic: str) -> str:
        ctx.deprecate_patch("rank-facts")
        facts = await ctx.step("search", s.search, topic)
        facts = await ctx.step("rank", s.rank, facts)
        return str(await ctx.step("summarize", s.summarize, facts))

    return fn


def start(world: little.World, run_id: str, fn: Flow, s: Steps) -> None:
    """Execute ``fn`` until the stop ``s`` asks for (the run stays in flight)."""
    with pytest.raises(ExecutionStopped):
        asyncio.run(execute(world, run_id, Workflow(NAME, "1", fn), "kafka", control=s.control))


def finish(world: little.World, run_id: str, fn: Flow) -> Any:
    result = asyncio.run(execute(world, run_id, Workflow(NAME, "1", fn), "kafka"))
    assert result.status == "completed", result.error
    return result.output


def marks(world: little.World, run_id: str) -> list[PatchMarked]:
    return [e for x in world.read_run(run_id) if isinstance(e := x.event, PatchMarked)]


def committed(world: little.World, run_id: str) -> list[str]:
    return [e.step_id for x in world.read_run(run_id) if isinstance(e := x.event, StepCompleted)]


def test_a_new_run_records_the_patch_and_takes_the_new_path(world: little.World) -> None:
    s, answers = Steps(), []
    assert finish(world, "run-new", patched_first(s, answers)) == "kafka a / kafka b"
    assert answers == [True, True]
    assert s.ran == ["search", "rank", "summarize"]
    (mark,) = marks(world, "run-new")
    assert (mark.patch_id, mark.scope, mark.step_path, mark.visit) == ("rank-facts", "", None, None)
    assert fold_run(world, "run-new")[0].patches == (PatchMark(patch_id="rank-facts"),)
    replayed = little.replay_run(world, "run-new")  # the pure fold reads it back
    assert replayed.state.patches == (PatchMark(patch_id="rank-facts"),)
    assert replayed.completed_step_paths == ("search", "rank", "summarize")


def test_a_run_recorded_before_the_patch_keeps_the_old_path(world: little.World) -> None:
    s = Steps(stop_after="search")
    start(world, "run-old2", old(s), s)
    assert committed(world, "run-old2") == ["search"]

    resumed, answers = Steps(), []
    output = finish(world, "run-old2", patched_first(resumed, answers))
    # it went past the patch point (search is recorded) without the patch: the old path
    assert answers == [False, False]
    assert output == "kafka b / kafka a"  # unranked
    assert resumed.ran == ["summarize"]  # search was served from the log
    assert committed(world, "run-old2") == ["search", "summarize"]
    assert marks(world, "run-old2") == []
    # and a run started now, on the same code, takes the new path
    assert finish(world, "run-new", patched_first(Steps(), [])) == "kafka a / kafka b"


def test_a_run_that_had_not_reached_the_patch_takes_the_new_path(world: little.World) -> None:
    s = Steps(stop_after="search")
    start(world, "run-old", old(s), s)
    resumed, answers = Steps(), []
    # the patch comes after search, where the run stopped: nothing it recorded lies beyond
    assert finish(world, "run-old", patched_later(resumed, answers)) == "kafka a / kafka b"
    assert answers == [True]
    assert resumed.ran == ["rank", "summarize"]
    assert [m.patch_id for m in marks(world, "run-old")] == ["rank-facts"]


def test_a_run_that_took_the_new_path_keeps_it_on_every_resume(world: little.World) -> None:
    s, answers = Steps(stop_after="rank"), []
    start(world, "run", patched_first(s, answers), s)
    assert answers == [True]
    resumed, again = Steps(), []
    # search and rank are recorded ahead of the patch point, but so is the patch: new path
    assert finish(world, "run", patched_first(resumed, again)) == "kafka a / kafka b"
    assert again == [True, True]
    assert resumed.ran == ["summarize"]
    assert len(marks(world, "run")) == 1  # recorded once


def test_deprecate_patch_fails_a_run_on_the_old_path_and_records_a_new_one(
    world: little.World,
) -> None:
    s = Steps(stop_after="search")
    start(world, "run-old", old(s), s)
    result = asyncio.run(execute(world, "run-old", Workflow(NAME, "1", deprecated(Steps()))))
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.startswith(
        "PatchDeprecatedError: run run-old passed patch 'rank-facts' (in the run) before the "
        "patch existed, so it took the old path there, and this code has only the new one"
    )
    assert fold_run(world, "run-old")[0].status == "failed"

    assert finish(world, "run-new", deprecated(Steps())) == "kafka a / kafka b"
    assert [m.patch_id for m in marks(world, "run-new")] == ["rank-facts"]
    # code rolled back to the patched() version answers True for the run deprecate marked
    s2, answers = Steps(stop_after="rank"), []
    start(world, "run-dep", deprecated(s2), s2)
    finish(world, "run-dep", patched_first(Steps(), answers))
    assert answers == [True, True]


def test_each_parallel_branch_answers_for_itself(world: little.World) -> None:
    """Branch a went past the patch point before the stop, branch b had not reached it."""
    control = RunControl()
    answers: dict[str, bool] = {}

    def work(step: StepContext, name: str) -> str:
        return name

    def make(patched: bool) -> Flow:
        async def a(ctx: WorkflowContext) -> str:
            if patched:
                answers["a"] = ctx.patched("x")
            return str(await ctx.step("a1", work, "a1"))

        async def b(ctx: WorkflowContext) -> str:
            out = str(await ctx.step("b1", work, "b1"))
            if patched:
                answers["b"] = ctx.patched("x")
            return out

        async def fn(ctx: WorkflowContext, topic: str) -> dict[str, Any]:
            both = await ctx.parallel("g", {"a": a, "b": b})

            def after(step: StepContext) -> str:
                control.stop("deploy")
                return "after"

            return {**both, "after": await ctx.step("after", after)}

        return fn

    with pytest.raises(ExecutionStopped):
        asyncio.run(
            execute(world, "run-p", Workflow(NAME, "1", make(False)), None, control=control)
        )
    result = asyncio.run(execute(world, "run-p", Workflow(NAME, "1", make(True))))
    assert result.status == "completed", result.error
    # both branches recorded their step: a asked before it (old path), b after it (new)
    assert answers == {"a": False, "b": True}
    assert [(m.scope, m.patch_id) for m in marks(world, "run-p")] == [("g/b/", "x")]


def test_a_parallel_group_recorded_ahead_is_recorded_work_of_its_scope(
    world: little.World,
) -> None:
    """The run's scope recorded nothing but a parallel group (its branches' steps are theirs):
    a patch asked before the group still finds the run went past it."""
    control = RunControl()

    def work(step: StepContext, name: str) -> str:
        control.stop("deploy")
        return name

    def make(patched: bool, answers: list[bool]) -> Flow:
        async def a(ctx: WorkflowContext) -> str:
            return str(await ctx.step("a1", work, "a1"))

        async def fn(ctx: WorkflowContext, topic: str) -> Any:
            if patched:
                answers.append(ctx.patched("x"))
            return await ctx.parallel("g", {"a": a})

        return fn

    with pytest.raises(ExecutionStopped):
        asyncio.run(
            execute(world, "run-g", Workflow(NAME, "1", make(False, [])), None, control=control)
        )
    answers: list[bool] = []
    result = asyncio.run(execute(world, "run-g", Workflow(NAME, "1", make(True, answers))))
    assert (result.status, result.output, answers) == ("completed", {"a": "a1"}, [False])


def test_a_recorded_value_ahead_is_recorded_work_of_its_scope(world: little.World) -> None:
    control = RunControl()

    def make(patched: bool, answers: list[bool]) -> Flow:
        async def fn(ctx: WorkflowContext, topic: str) -> float:
            if patched:
                answers.append(ctx.patched("x"))
            value = ctx.random()
            control.stop("deploy")
            await ctx.flush()  # the value lands; the old execution stops here
            return value

        return fn

    with pytest.raises(ExecutionStopped):
        asyncio.run(
            execute(world, "run-v", Workflow(NAME, "1", make(False, [])), None, control=control)
        )
    recorded = fold_run(world, "run-v")[0].values[0]
    answers: list[bool] = []
    result = asyncio.run(execute(world, "run-v", Workflow(NAME, "1", make(True, answers))))
    assert (result.status, answers) == ("completed", [False])
    assert str(result.output) == recorded.value_json  # the recorded value, the old path


def test_a_step_in_progress_keeps_the_path_its_recorded_calls_took(world: little.World) -> None:
    """Inside a step, the recorded work is its sessions (and values, sub-runs, artifacts):
    a step stopped after its first session's call takes the old path on resume."""
    control = RunControl()
    answers: list[bool] = []

    def make(patched: bool) -> Flow:
        async def write(step: StepContext, topic: str) -> str:
            new = step.patched("two-drafts") if patched else False
            answers.append(new)
            model = ScriptedModel([ModelResponse(content=f"draft on {topic}")] * 2)
            async with step.session("draft", model=model) as draft:
                text = str(await draft.run(f"Draft {topic}"))
            await step.flush()  # the draft is recorded (and a stop requested before, taken)
            if new:
                async with step.session("second", model=model) as second:
                    text += " + " + str(await second.run(f"Draft {topic} again"))
            return text

        async def fn(ctx: WorkflowContext, topic: str) -> str:
            return str(await ctx.step("write", write, topic))

        return fn

    async def stopping(step: StepContext, topic: str) -> str:
        model = ScriptedModel([ModelResponse(content=f"draft on {topic}")])
        async with step.session("draft", model=model) as draft:
            text = str(await draft.run(f"Draft {topic}"))
        control.stop("deploy")
        await step.flush()
        return text

    async def old_flow(ctx: WorkflowContext, topic: str) -> str:
        return str(await ctx.step("write", stopping, topic))

    with pytest.raises(ExecutionStopped):
        asyncio.run(
            execute(world, "run-s", Workflow(NAME, "1", old_flow), "kafka", control=control)
        )
    assert committed(world, "run-s") == []  # in progress, with its draft recorded
    result = asyncio.run(execute(world, "run-s", Workflow(NAME, "1", make(True))))
    assert (result.status, result.output, answers) == ("completed", "draft on kafka", [False])
    assert marks(world, "run-s") == []

    answers.clear()
    fresh = asyncio.run(execute(world, "run-s2", Workflow(NAME, "1", make(True)), "kafka"))
    assert fresh.output == "draft on kafka + draft on kafka"
    assert answers == [True]
    (mark,) = marks(world, "run-s2")
    assert (mark.scope, mark.step_path, mark.visit) == ("", "write", 1)


def test_a_patch_id_must_be_a_non_empty_string(world: little.World) -> None:
    async def fn(ctx: WorkflowContext, topic: str) -> bool:
        return ctx.patched("")

    result = asyncio.run(execute(world, "run-bad", Workflow(NAME, "1", fn), None))
    assert result.status == "failed"
    assert result.error == (
        "ConfigurationError: run run-bad: a patch id must be a non-empty string, not ''"
    )


# -- replays follow the run they replay ------------------------------------------------------


def asking(patched: bool, answers: list[bool]) -> Flow:
    """A step asking a model, then (the change) a step ranking its answer, then a summary."""

    async def ask(step: StepContext, topic: str) -> str:
        model = ScriptedModel([ModelResponse(content=f"b, a about {topic}")])
        async with step.session("ask", model=model) as agent:
            return str(await agent.run(f"Facts on {topic}"))

    def rank(step: StepContext, facts: str) -> str:
        return ", ".join(sorted(facts.split(", ")))

    def summarize(step: StepContext, facts: str) -> str:
        return f"summary: {facts}"

    async def fn(ctx: WorkflowContext, topic: str) -> str:
        new = ctx.patched("rank") if patched else False
        answers.append(new)
        facts = await ctx.step("ask", ask, topic)
        if new:
            facts = await ctx.step("rank", rank, facts)
        return str(await ctx.step("summarize", summarize, facts))

    return fn


def test_new_code_with_a_patch_simulates_identically_against_a_golden_run_of_the_old(
    world: little.World,
) -> None:
    golden = asyncio.run(
        execute(world, "golden-old", Workflow(NAME, "1", asking(False, [])), "kafka")
    )
    assert golden.output == "summary: b, a about kafka"
    answers: list[bool] = []
    sim = asyncio.run(simulate(world, Workflow(NAME, "1", asking(True, answers)), "golden-old"))
    assert sim.identical, sim.lines()
    assert answers == [False]  # followed the golden run: it went past the patch without it

    # a golden run recorded on the patched code is followed the other way
    new = asyncio.run(execute(world, "golden-new", Workflow(NAME, "1", asking(True, [])), "kafka"))
    assert new.output == "summary: a about kafka, b"
    answers.clear()
    sim = asyncio.run(simulate(world, Workflow(NAME, "1", asking(True, answers)), "golden-new"))
    assert sim.identical, sim.lines()
    assert answers == [True]

    # a replay (a new run, replay_from) takes the recorded run's path, so its call is served
    answers.clear()
    replay = asyncio.run(
        execute(
            world,
            "replay",
            Workflow(NAME, "1", asking(True, answers)),
            "kafka",
            replay_from="golden-old",
        )
    )
    assert (replay.output, answers) == ("summary: b, a about kafka", [False])
    assert replay.replay is not None
    assert replay.replay.replayed_calls == 1


def test_a_durable_wait_ahead_is_recorded_work_of_its_scope(world: little.World) -> None:
    """Old code suspended on a signal; the deploy adds a patch before the wait: the waiting
    run went past the patch point without it and keeps the old path when the signal wakes it."""
    from little.runtime import send_signal

    def make(patched: bool, answers: list[bool]) -> Flow:
        async def fn(ctx: WorkflowContext, topic: str) -> Any:
            if patched:
                answers.append(ctx.patched("ask-first"))
            return await ctx.wait_for_signal("go")

        return fn

    waiting = asyncio.run(execute(world, "run-w", Workflow(NAME, "1", make(False, [])), None))
    assert waiting.status == "waiting"
    asyncio.run(send_signal(world, "run-w", "go", "went"))
    answers: list[bool] = []
    done = asyncio.run(execute(world, "run-w", Workflow(NAME, "1", make(True, answers))))
    assert (done.status, done.output, answers) == ("completed", "went", [False])
    fresh: list[bool] = []
    new = asyncio.run(execute(world, "run-w2", Workflow(NAME, "1", make(True, fresh)), None))
    assert (new.status, fresh) == ("waiting", [True])
