"""Several versions of one workflow (issue 11 item 4): a deploy keeps the version in-flight
runs started on registered beside the new one; a run is resumed with its own version, a new
run takes the newest one registered without ``resume_only``, and a run whose version is gone
is refused before anything is written, naming what it needs and what is registered."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import little
from little.errors import ConfigurationError
from little.events import RunStarted
from little.runtime import (
    RunControl,
    StepContext,
    UnknownWorkflowError,
    Workflow,
    WorkflowContext,
    WorkflowVersionError,
    _registry,  # test clean-up only
    execute,
    lookup,
    register,
    registered,
    resume,
    run,
    versions,
    workflow,
)

_names = itertools.count()


@pytest.fixture
def name() -> Iterator[str]:
    """A workflow name of this test alone, unregistered (every version) afterwards."""
    made = f"tests.versions.flow{next(_names)}"
    try:
        yield made
    finally:
        _registry._REGISTRY.pop(made, None)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[little.World]:
    with little.local_world(tmp_path) as w:
        yield w


def flow(tag: str, control: RunControl | None = None) -> Any:
    """Two steps; the output says which code ran them. With ``control``, the execution stops
    once the first step is recorded (the run stays in flight, as after a deploy's restart)."""

    async def first(step: StepContext, topic: str) -> str:
        if control is not None:
            control.stop("deploying")  # the step lands, then the execution stops
        return f"{tag}:first({topic})"

    async def second(step: StepContext, before: str) -> str:
        return f"{tag}:second({before})"

    async def fn(ctx: WorkflowContext, topic: str) -> str:
        return str(await ctx.step("second", second, await ctx.step("first", first, topic)))

    return fn


# -- the registry ---------------------------------------------------------------------------


def test_several_versions_of_a_name_are_registered_and_the_newest_starts_new_runs(
    name: str,
) -> None:
    v1 = workflow(name, version="1")(flow("v1"))
    v2 = workflow(name, version="2")(flow("v2"))
    assert list(versions(name).items()) == [("1", v1), ("2", v2)]
    assert registered()[name] is v2
    assert lookup(name) is v2
    assert lookup(name, "1") is v1
    assert lookup(name, "2") is v2
    assert register(v1) is v1  # the same workflow again changes nothing
    assert lookup(name) is v2
    with pytest.raises(TypeError):
        versions(name)["3"] = v1  # type: ignore[index]


def test_a_resume_only_version_never_starts_a_new_run_whatever_the_order(name: str) -> None:
    v2 = workflow(name, version="2")(flow("v2"))
    v1 = workflow(name, version="1", resume_only=True)(flow("v1"))  # registered after v2
    assert lookup(name) is v2
    assert registered()[name] is v2
    assert lookup(name, "1") is v1
    assert list(versions(name)) == ["2", "1"]


def test_a_name_with_only_resume_only_versions_refuses_a_new_run(name: str) -> None:
    workflow(name, version="1", resume_only=True)(flow("v1"))
    assert name not in registered()
    with pytest.raises(WorkflowVersionError, match=f"workflow {name} has only resume_only"):
        lookup(name)
    assert lookup(name, "1").version == "1"


def test_bad_registrations_and_lookups_say_what_and_where(name: str) -> None:
    workflow(name, version="1")(flow("v1"))
    with pytest.raises(ConfigurationError, match=f"workflow {name} v1 is registered twice"):
        workflow(name, version="1")(flow("other"))
    with pytest.raises(WorkflowVersionError) as raised:
        lookup(name, "7", run_id="run-x")
    err = raised.value
    assert (err.workflow, err.version, err.registered, err.run_id) == (name, "7", ("1",), "run-x")
    assert str(err) == (
        f"run run-x was started by workflow {name} v7, which is not registered in this "
        f"process (registered versions: 1); keep that version registered "
        f"(@workflow({name!r}, version='7', resume_only=True)) until its runs end"
    )
    with pytest.raises(UnknownWorkflowError, match=f"workflow '{name}x' is not registered"):
        lookup(f"{name}x", "1")
    same = Workflow(name, "1", lookup(name, "1").fn, resume_only=True)
    with pytest.raises(ConfigurationError, match="registered both resume_only and not"):
        register(same)


# -- resuming with the version the run started on ------------------------------------------


def started_on_v1(world: little.World, name: str, run_id: str) -> None:
    """A run of ``name`` v1 whose execution stopped after its first step (in flight)."""
    control = RunControl()
    v1 = workflow(name, version="1")(flow("v1", control))
    with pytest.raises(little.runtime.ExecutionStopped):
        asyncio.run(execute(world, run_id, v1, "kafka", control=control))
    assert lookup(name) is v1


def test_a_run_is_resumed_with_its_own_version_and_a_new_run_takes_the_new_one(
    world: little.World, name: str
) -> None:
    started_on_v1(world, name, "run-old")
    # the deploy: v1 kept for the runs it started, v2 for new ones
    _registry._REGISTRY[name] = {}
    workflow(name, version="1", resume_only=True)(flow("v1"))
    v2 = workflow(name, version="2")(flow("v2"))

    resumed = asyncio.run(resume(world, "run-old"))
    assert (resumed.status, resumed.output) == ("completed", "v1:second(v1:first(kafka))")
    # given the newest version (as a coordinator or `run` with the id gives it), still v1
    again = asyncio.run(run(world, v2, "kafka", run_id="run-old"))
    assert again.output == resumed.output

    fresh = asyncio.run(run(world, lookup(name), "kafka", run_id="run-new"))
    assert fresh.output == "v2:second(v2:first(kafka))"
    started = [e.event for e in world.read_run("run-new") if isinstance(e.event, RunStarted)]
    assert [(s.workflow, s.workflow_version) for s in started] == [(name, "2")]


def test_a_run_whose_version_is_gone_is_refused_before_anything_is_written(
    world: little.World, name: str
) -> None:
    started_on_v1(world, name, "run-gone")
    _registry._REGISTRY[name] = {}
    v2 = workflow(name, version="2")(flow("v2"))
    before = len(list(world.read_run("run-gone")))

    with pytest.raises(WorkflowVersionError) as raised:
        asyncio.run(resume(world, "run-gone"))
    assert str(raised.value).startswith(
        f"run run-gone was started by workflow {name} v1, which is not registered in this "
        "process (registered versions: 2)"
    )
    with pytest.raises(WorkflowVersionError, match=f"not {name} v2, and v1 is not registered"):
        asyncio.run(run(world, v2, "kafka", run_id="run-gone"))
    other = Workflow(f"{name}.other", "1", flow("other"))
    with pytest.raises(WorkflowVersionError, match=f"not {name}.other v1: resuming it with"):
        asyncio.run(execute(world, "run-gone", other))
    assert len(list(world.read_run("run-gone"))) == before  # not even a claim

    # registering v1 again (a rollback of the deploy) lets the run finish on its own code
    workflow(name, version="1", resume_only=True)(flow("v1"))
    assert asyncio.run(resume(world, "run-gone")).output == "v1:second(v1:first(kafka))"


def test_a_cancel_needs_no_code(world: little.World, name: str) -> None:
    started_on_v1(world, name, "run-cancel")
    _registry._REGISTRY.pop(name)
    control = RunControl()
    control.cancel("no longer wanted")
    with pytest.raises(little.runtime.ExecutionStopped):
        asyncio.run(execute(world, "run-cancel", None, control=control))
    assert little.replay.fold_run(world, "run-cancel")[0].status == "cancelled"
