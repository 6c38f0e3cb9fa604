"""Recorded-call replay (seed 003): re-run a workflow against a recorded run and pay only for
what changed. Calls are served for the strict prefix whose ordinal and request match; the
first miss latches; refusals are recorded and the run executes fresh."""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import little
from little.events import AgentCallAdmitted, AgentCallSettled, ModelCalled, RunStarted
from little.replay import replay_run
from little.runtime import run
from little.runtime._source import replay_safe, unsafe_reads
from tests.little.runtime import replay_workflows as rw

_versions = itertools.count()


def fresh_version(**kwargs: Any) -> Any:
    return rw.version(f"t{next(_versions)}", **kwargs)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[little.World]:
    rw.MODELS.clear()
    rw.FAIL.clear()
    rw.WRITES.clear()
    with little.local_world(tmp_path) as w:
        yield w


def settled(world: little.World, run_id: str) -> list[AgentCallSettled]:
    return [e for x in world.read_run(run_id) if isinstance(e := x.event, AgentCallSettled)]


def calls_by_stage() -> dict[str, int]:
    return {stage: rw.invocations(stage) for stage in ("research", "outline", "write")}


def test_editing_the_last_stage_reruns_only_the_last_stage(world: little.World) -> None:
    first = asyncio.run(run(world, fresh_version(), "Kafka"))
    assert first.status == "completed"
    assert calls_by_stage() == {"research": 1, "outline": 1, "write": 1}
    admitted = [
        e for x in world.read_run(first.run_id) if isinstance(e := x.event, AgentCallAdmitted)
    ]
    assert [(e.ordinal, e.node_phase, e.node_label) for e in admitted] == [
        (0, "research", "research"),
        (1, "outline", "outline"),
        (2, "write", "write"),
    ]

    edited = fresh_version(write="Write a short post from: ")
    second = asyncio.run(run(world, edited, "Kafka", replay_from=first.run_id))
    assert second.status == "completed"
    # the two unchanged stages were answered from the record: no model was invoked for them
    assert calls_by_stage() == {"research": 1, "outline": 1, "write": 2}
    assert second.output[:2] == first.output[:2]
    assert second.output[2] != first.output[2]
    assert second.output[2].startswith("write: answer to [Write a short post from: ")
    marks = [
        (e.ordinal, e.replayed, e.miss_reason, e.source_run_id)
        for e in settled(world, second.run_id)
    ]
    assert marks == [
        (0, True, None, first.run_id),
        (1, True, None, first.run_id),
        (2, False, "key-mismatch", None),
    ]
    # a replayed settlement carries what the recorded call cost, to be counted as avoided
    replayed = [e for e in settled(world, second.run_id) if e.replayed]
    assert [(e.usage, e.model, e.model_calls) for e in replayed] == [
        (rw.USAGE, "gpt-4o-mini", 1)
    ] * 2

    state = replay_run(world, second.run_id).state
    assert state.replay_source_run_id == first.run_id
    assert state.replay_refused_reason is None
    # only the fresh stage was billed: one call's tokens; the two served ones are avoided
    assert (state.usage.calls, state.usage.input_tokens) == (1, 100)
    assert (state.avoided_usage.calls, state.avoided_usage.input_tokens) == (2, 200)
    first_state = replay_run(world, first.run_id).state
    assert state.avoided_usage.cost_usd is not None
    assert first_state.usage.cost_usd is not None
    assert state.usage.cost_usd is not None
    assert state.avoided_usage.cost_usd + state.usage.cost_usd == first_state.usage.cost_usd
    steps = {s.step_path: s for s in state.steps}
    assert (steps["research"].avoided_usage.calls, steps["research"].usage.calls) == (1, 0)
    assert (steps["write"].avoided_usage.calls, steps["write"].usage.calls) == (0, 1)
    # the log shows what the fresh call was sent: the replayed stages' conversation is absent
    # (each stage is its own session), and the prompt is the edited one
    called = [e for x in world.read_run(second.run_id) if isinstance(e := x.event, ModelCalled)]
    assert [e.session_id for e in called] == ["write#write"]


def test_a_miss_latches_later_calls_run_fresh_even_when_unchanged(world: little.World) -> None:
    first = asyncio.run(run(world, fresh_version(), "Kafka"))
    edited = fresh_version(outline="Outline in three points: ")
    second = asyncio.run(run(world, edited, "Kafka", replay_from=first.run_id))
    assert second.status == "completed"
    # research served; outline changed; write's own prompt template did not change, but it
    # reads outline's new answer, and even an identical request would not be served
    assert calls_by_stage() == {"research": 1, "outline": 2, "write": 2}
    assert [(e.replayed, e.miss_reason) for e in settled(world, second.run_id)] == [
        (True, None),
        (False, "key-mismatch"),
        (False, "diverged"),
    ]


def test_an_unchanged_rerun_is_served_entirely(world: little.World) -> None:
    v = fresh_version()
    first = asyncio.run(run(world, v, "Kafka"))
    second = asyncio.run(run(world, v, "Kafka", replay_from=first.run_id))
    assert second.output == first.output
    assert calls_by_stage() == {"research": 1, "outline": 1, "write": 1}
    assert all(e.replayed for e in settled(world, second.run_id))
    unchanged = replay_run(world, second.run_id).state
    assert (unchanged.usage.calls, unchanged.avoided_usage.calls) == (0, 3)


def test_a_different_input_changes_the_first_request(world: little.World) -> None:
    v = fresh_version()
    first = asyncio.run(run(world, v, "Kafka"))
    second = asyncio.run(run(world, v, "Redpanda", replay_from=first.run_id))
    assert calls_by_stage() == {"research": 2, "outline": 2, "write": 2}
    assert [e.miss_reason for e in settled(world, second.run_id)] == [
        "key-mismatch",
        "diverged",
        "diverged",
    ]


def test_a_recorded_failure_is_run_again_not_served(world: little.World) -> None:
    v = fresh_version()
    rw.FAIL.add("write")
    first = asyncio.run(run(world, v, "Kafka"))
    assert first.status == "failed"
    assert [e.outcome for e in settled(world, first.run_id)] == ["succeeded", "succeeded", "failed"]

    rw.FAIL.clear()  # the model is back: resume the pipeline to fix the stage that failed
    second = asyncio.run(run(world, v, "Kafka", replay_from=first.run_id))
    assert second.status == "completed"
    assert calls_by_stage() == {"research": 1, "outline": 1, "write": 2}
    assert [(e.replayed, e.miss_reason) for e in settled(world, second.run_id)] == [
        (True, None),
        (True, None),
        (False, "recorded-failure"),
    ]


def test_a_side_effecting_call_is_never_served_and_latches(world: little.World) -> None:
    v = fresh_version(writes="outline")
    first = asyncio.run(run(world, v, "Kafka"))
    assert first.status == "completed"
    assert len(rw.WRITES) == 1
    second = asyncio.run(run(world, v, "Kafka", replay_from=first.run_id))
    assert second.output == first.output
    assert len(rw.WRITES) == 2  # replay reuses answers, not effects: the tool ran again
    assert [(e.replayed, e.miss_reason) for e in settled(world, second.run_id)] == [
        (True, None),
        (False, "side-effecting-call"),
        (False, "diverged"),
    ]
    # outline's session takes two model turns (the tool call, then its answer) in each run
    assert calls_by_stage() == {"research": 1, "outline": 4, "write": 2}


def test_a_source_run_of_another_workflow_is_refused_as_target_changed_and_runs_fresh(
    world: little.World,
) -> None:
    @little.runtime.workflow("tests.replay.other", version="1")
    async def other(ctx: little.runtime.WorkflowContext, input: Any) -> str:
        return "other"

    source = asyncio.run(run(world, other, None))
    result = asyncio.run(run(world, fresh_version(), "Kafka", replay_from=source.run_id))
    assert result.status == "completed"
    assert calls_by_stage() == {"research": 1, "outline": 1, "write": 1}
    started = next(e for x in world.read_run(result.run_id) if isinstance(e := x.event, RunStarted))
    assert (started.replay_source_run_id, started.replay_refused_reason) == (
        source.run_id,
        "target-changed",
    )
    assert [e.replayed for e in settled(world, result.run_id)] == [False, False, False]
    assert [e.miss_reason for e in settled(world, result.run_id)] == [None, None, None]


def test_a_source_run_that_does_not_exist_is_refused_as_unusable(world: little.World) -> None:
    v = fresh_version()
    missing = asyncio.run(run(world, v, "Kafka", replay_from="run_that_never_was"))
    assert replay_run(world, missing.run_id).state.replay_refused_reason == "source-run-unusable"


def test_a_workflow_reading_the_clock_is_refused_replay(
    world: little.World, tmp_path: Path
) -> None:
    module_file = tmp_path / "clocked_flow.py"
    module_file.write_text(
        "import time\n"
        "from little.runtime import workflow\n"
        "from tests.little.runtime.replay_workflows import ask\n"
        "@workflow('tests.replay.clocked', version='1')\n"
        "async def clocked(ctx, topic):\n"
        "    stamp = time.time()  # a direct clock read: answers may depend on it\n"
        "    return await ctx.step('research', ask, 'research', f'{topic} at {stamp > 0}')\n"
    )
    spec = importlib.util.spec_from_file_location("clocked_flow", module_file)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["clocked_flow"] = module
    try:
        spec.loader.exec_module(module)
        assert replay_safe(module.clocked.fn) == (False, ("6: time.time",))
        first = asyncio.run(run(world, module.clocked, "Kafka"))
        second = asyncio.run(run(world, module.clocked, "Kafka", replay_from=first.run_id))
    finally:
        del sys.modules["clocked_flow"]
    assert (first.status, second.status) == ("completed", "completed")
    assert rw.invocations("research") == 2  # nothing served
    state = replay_run(world, second.run_id).state
    assert state.replay_refused_reason == "replay-unsafe-script"
    # its calls are still recorded (a resume needs them), and none was served
    assert [(e.replayed, e.miss_reason) for e in settled(world, second.run_id)] == [(False, None)]


def test_the_scan_flags_direct_clock_and_randomness_reads_only() -> None:
    flagged = unsafe_reads(
        "import random\n"
        "import secrets as s\n"
        "from time import perf_counter\n"
        "from uuid import uuid4\n"
        "from os import urandom\n"
        "import datetime, time, uuid, os\n"
        "a = time.time()\n"
        "b = datetime.datetime.now()\n"
        "c = datetime.date.today()\n"
        "d = uuid.uuid4()\n"
        "e = os.urandom(8)\n"
        "f = time.monotonic_ns()\n"
    )
    assert [line.split(": ", 1)[0] for line in flagged] == [
        str(n) for n in (1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12)
    ]
    assert (
        unsafe_reads(
            "import time, json\n"
            "async def flow(ctx, input):\n"
            "    await ctx.step('x', fn)\n"
            "    when = ctx.now(); r = ctx.random(); u = ctx.uuid4()\n"
            "    time.sleep(0)\n"
            "    return json.dumps(input)\n"
        )
        == []
    )


def test_the_pipeline_module_is_replay_safe() -> None:
    assert replay_safe(rw.pipeline) == (True, ())


def test_the_scan_follows_aliases_and_bindings() -> None:
    for source, expected in [
        ("import time as t\nt.time()", ["2: time.time"]),
        ("from datetime import datetime as dt\ndt.now()", ["2: datetime.now"]),
        ("from datetime import date as D\nD.today()", ["2: date.today"]),
        ("import uuid as u\nu.uuid4()", ["2: uuid.uuid4"]),
        ("import time\nclock = time\n", ["2: binds time"]),
        ("import time\ntime.localtime()", ["2: time.localtime"]),
        ("import asyncio\nasyncio.get_running_loop().time()", ["2: loop.time"]),
        ("from datetime import datetime\ndatetime.fromisoformat('2026-01-01')", []),
        ("import os\nos.path.join(os.environ['HOME'], 'x')", []),
    ]:
        assert unsafe_reads(source) == expected, source


def test_the_latch_is_rebuilt_from_a_miss_left_in_flight_by_a_crash() -> None:
    """A replaying run killed while a call that missed was in flight: on resume, a later call
    of the same scope must not be served."""
    from little.replay import AgentCall
    from little.replay._state import MaterializedRunState
    from little.runtime._recorded import AgentCalls, RecordedCalls

    def call(ordinal: int, key: str, **settled: Any) -> AgentCall:
        return AgentCall(
            ordinal=ordinal,
            request_key=key,
            node_phase=f"step{ordinal}",
            node_label="s",
            node_occurrence=0,
            **settled,
        )

    source = RecordedCalls(
        "run-src",
        {
            0: call(0, "k0", outcome="succeeded", result_json="{}"),
            1: call(1, "k1", outcome="succeeded", result_json="{}"),
        },
    )
    own = MaterializedRunState(run_id="run-r", agent_calls=(call(0, "changed"), call(1, "k1")))
    calls = AgentCalls.of(own, source)
    assert calls.misses == [(0, "", 0)]  # admitted with a key the source lacks, in flight
    assert calls.decide(1, ("", 1), "k1", ("step1", "s", 0), False) == (None, "diverged")
    # without the miss in flight, the same call is served
    served_first = call(0, "k0", outcome="succeeded", result_json="{}", replayed=True)
    clean = MaterializedRunState(run_id="run-r", agent_calls=(served_first, call(1, "k1")))
    served, miss = AgentCalls.of(clean, source).decide(1, ("", 1), "k1", ("step1", "s", 0), False)
    assert (served is not None, miss) == (True, None)


def test_parallel_branches_are_served_by_place_whatever_the_order(world: little.World) -> None:
    v = f"f{next(_versions)}"
    first = asyncio.run(run(world, rw.fanned(v), "Kafka"))
    assert first.status == "completed"
    admitted = [
        e for x in world.read_run(first.run_id) if isinstance(e := x.event, AgentCallAdmitted)
    ]
    # the slow branch's second call came last among the branches' calls
    assert [(e.node_label, e.scope) for e in admitted] == [
        ("a1", "fan/a/"),
        ("b1", "fan/b/"),
        ("b2", "fan/b/"),
        ("a2", "fan/a/"),
        ("merge", ""),
    ]
    same = asyncio.run(
        run(world, rw.fanned(f"f{next(_versions)}"), "Kafka", replay_from=first.run_id)
    )
    assert same.output == first.output
    assert all(e.replayed for e in settled(world, same.run_id))
    assert {s: rw.invocations(s) for s in ("a1", "a2", "b1", "b2", "merge")} == dict.fromkeys(
        ("a1", "a2", "b1", "b2", "merge"), 1
    )

    # edit branch b's angle: b1 misses at recorded ordinal 1, so every call the recorded run
    # admitted after it runs fresh, in every branch: b2 (2), a2 (3, branch a's own prompt is
    # unchanged) and the merge (4); a1 (0) came before the miss and is still served
    edited = asyncio.run(
        run(
            world,
            rw.fanned(f"f{next(_versions)}", b="Contrarian angle on "),
            "Kafka",
            replay_from=first.run_id,
        )
    )
    assert edited.status == "completed"
    marks = {
        (e.node_label): (s.replayed, s.miss_reason)
        for x in world.read_run(edited.run_id)
        if isinstance(e := x.event, AgentCallAdmitted)
        for y in world.read_run(edited.run_id)
        if isinstance(s := y.event, AgentCallSettled) and s.ordinal == e.ordinal
    }
    assert marks == {
        "a1": (True, None),
        "a2": (False, "diverged"),
        "b1": (False, "key-mismatch"),
        "b2": (False, "diverged"),
        "merge": (False, "diverged"),
    }
    assert {s: rw.invocations(s) for s in ("a1", "a2", "b1", "b2", "merge")} == {
        "a1": 1,
        "a2": 2,
        "b1": 2,
        "b2": 2,
        "merge": 2,
    }


def test_a_miss_in_one_branch_makes_a_siblings_later_call_fresh(world: little.World) -> None:
    """Strict prefix by the recorded run's admission order: once b1 misses (recorded ordinal
    1), a2 (recorded ordinal 2, in the sibling branch) runs fresh although its own request is
    unchanged, since the recorded a2 answered after a b1 answer that no longer exists; a1
    (recorded ordinal 0) is still served."""
    first = asyncio.run(run(world, rw.handoff(f"h{next(_versions)}"), "Kafka"))
    assert first.status == "completed"
    admitted = [
        (e.ordinal, e.node_phase)
        for x in world.read_run(first.run_id)
        if isinstance(e := x.event, AgentCallAdmitted)
    ]
    assert admitted == [(0, "turns/a/first"), (1, "turns/b/first"), (2, "turns/a/second")]
    edited = asyncio.run(
        run(
            world,
            rw.handoff(f"h{next(_versions)}", b1="Contrarian angle on "),
            "Kafka",
            replay_from=first.run_id,
        )
    )
    assert edited.status == "completed"
    assert [(e.step_path, e.replayed, e.miss_reason) for e in settled(world, edited.run_id)] == [
        ("turns/a/first", True, None),
        ("turns/b/first", False, "key-mismatch"),
        ("turns/a/second", False, "diverged"),
    ]
    assert {s: rw.invocations(s) for s in ("a1", "b1", "a2")} == {"a1": 1, "b1": 2, "a2": 2}
    assert edited.output["a"] == first.output["a"]  # a2 ran again, answering alike (scripted)
    assert edited.replay is not None
    assert (edited.replay.replayed_calls, edited.replay.fresh_calls) == (1, 2)


def test_two_sessions_of_one_name_in_a_step_are_refused(world: little.World) -> None:
    from little.errors import ConfigurationError
    from little.runtime import StepContext, WorkflowContext, workflow

    async def twice(step: StepContext, _: None) -> None:
        model = rw.ScriptedModel(())
        async with step.session("same", model=model) as first:
            await first.run("one")
        step.session("same", model=model)

    async def flow(ctx: WorkflowContext, _: None) -> Any:
        return await ctx.step("twice", twice, None)

    wf = workflow("tests.replay.twice", version=f"t{next(_versions)}")(flow)
    result = asyncio.run(run(world, wf, None))
    assert result.status == "failed"
    assert "opens a second session named 'same'" in str(result.error)
    assert ConfigurationError.__name__ in str(result.error)
