"""Budgets count only fresh work; loops replay per visit; outer loops resume or restart cycles."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import little
from little.examples import research
from little.harness import count_invocations
from little.replay import replay_run
from little.runtime import load_manifest, outer_loop, resume, run
from tests.little.runtime import loops
from tests.little.runtime import replay_workflows as rw
from tests.paths import REPO


@pytest.fixture
def calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "calls"
    monkeypatch.setenv(research.CALLS_DIR, str(d))
    monkeypatch.setenv(loops.LOG, str(tmp_path / "steps.jsonl"))
    return d


def child(code: str, data: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, str(data)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **env},
        timeout=120,
    )


def test_budget_counts_agent_calls_not_model_calls(tmp_path: Path, calls: Path) -> None:
    """``max_agent_calls`` counts ``agent.run`` exchanges: one exchange with a tool round trip
    (two model calls) fits a budget of 1; the second exchange is refused before its model
    call is made."""
    with little.local_world(tmp_path / "w") as world:
        result = asyncio.run(
            run(world, rw.two_exchanges("b1", "Say it shorter."), None, max_agent_calls=1)
        )
        assert result.status == "failed"
        assert "budget of 1 agent call(s) spent (1 made" in (result.error or "")
        state = replay_run(world, result.run_id).state
        assert rw.invocations("talk") == 2  # the first exchange's two turns; not the third
        assert state.usage.calls == 2
        assert [(c.ordinal, c.outcome, c.model_calls) for c in state.agent_calls] == [
            (0, "succeeded", 2),
            (1, "failed", 0),  # refused before its model call
        ]
        rw.MODELS.clear()
        enough = asyncio.run(
            run(world, rw.two_exchanges("b2", "Say it shorter."), None, max_agent_calls=2)
        )
        assert enough.status == "completed", enough.error
        assert rw.invocations("talk") == 3


def test_a_workflow_that_catches_the_budget_error_is_refused_every_later_fresh_call(
    tmp_path: Path,
) -> None:
    """``BudgetExceededError`` is raised before the model is asked; a workflow that catches
    it goes on, and every later fresh agent call is refused the same way (none is made)."""
    from little.runtime import BudgetExceededError, WorkflowContext, workflow

    refused: list[str] = []

    async def flow(ctx: WorkflowContext, topic: str) -> Any:
        answers = []
        for stage in ("research", "outline", "write"):
            try:
                answers.append(await ctx.step(stage, rw.ask, stage, f"{stage} {topic}"))
            except BudgetExceededError as exc:
                refused.append(f"{stage}: {exc}")
                answers.append(None)
        return answers

    rw.MODELS.clear()
    wf = workflow("tests.budget.caught", version="1")(flow)
    with little.local_world(tmp_path / "w") as world:
        result = asyncio.run(run(world, wf, "Kafka", max_agent_calls=1))
        state = replay_run(world, result.run_id).state
    assert result.status == "completed", result.error
    assert [r.split(":")[0] for r in refused] == ["outline", "write"]
    assert all("budget of 1 agent call(s) spent" in r for r in refused), refused
    assert result.output[1:] == [None, None]
    assert [rw.invocations(s) for s in ("research", "outline", "write")] == [1, 0, 0]
    assert state.usage.calls == 1


def test_a_call_resumed_in_flight_is_not_counted_again(tmp_path: Path, calls: Path) -> None:
    """1 agent call allowed, 1 needed (three model calls); a crash after turn 2 returns (not
    logged) resumes that same call, which must not count again."""
    data = tmp_path / "w"
    code = (
        "import asyncio, sys, little; from little.examples import research; from little.runtime import run\n"
        "w = little.local_world(sys.argv[1])\n"
        "asyncio.run(run(w, research.research, {'topic': 'Kafka'}, run_id='b2', max_agent_calls=1))\n"
    )
    first = child(code, data, {research.CALLS_DIR: str(calls), "LITTLE_CRASH_AFTER_CALL": "2"})
    assert first.returncode == -9, first.stderr
    with little.local_world(data) as world:
        result = asyncio.run(resume(world, "b2"))
        state = replay_run(world, "b2").state
    assert result.status == "completed", result.error
    assert state.usage.calls == 3  # billed once each
    assert state.avoided_usage.calls == 1  # turn 1, served from the log on resume
    assert count_invocations(calls / "model.jsonl") == {1: 1, 2: 2, 3: 1}


def test_loop_visits_replay_their_own_outputs(tmp_path: Path, calls: Path) -> None:
    data = tmp_path / "w"
    code = (
        "import asyncio, sys, little; from tests.little.runtime import loops; from little.runtime import run\n"
        "w = little.local_world(sys.argv[1])\n"
        "asyncio.run(run(w, loops.revise, {'rounds': 3}, run_id='loop'))\n"
    )
    # die right after the 2nd visit of review committed: event 11 of claim, start, then per visit
    # StepStarted, (DecisionRecorded for review,) StepCompleted
    first = child(
        code, data, {"LITTLE_CRASH_AFTER_EVENT": "11", loops.LOG: str(tmp_path / "steps.jsonl")}
    )
    assert first.returncode == -9, first.stderr
    with little.local_world(data) as world:
        before = replay_run(world, "loop").state
        assert before.step("draft").visits == 2  # type: ignore[union-attr]
        assert before.step("review").visits == 2  # type: ignore[union-attr]
        assert before.pending_decision_target == "draft"
        result = asyncio.run(resume(world, "loop"))
        after = replay_run(world, "loop").state
    assert result.output == ["draft v1", "draft v2", "draft v3"]
    assert after.step("draft").visits == 3  # type: ignore[union-attr]
    ran = [json.loads(line)["step"] for line in (tmp_path / "steps.jsonl").read_text().splitlines()]
    assert ran == ["draft-1", "review-1", "draft-2", "review-2", "draft-3", "review-3"]


def crash_a_loop_in_its_second_cycle(tmp_path: Path, loop_id: str, goal: str) -> Path:
    """SIGKILL a process running a 3-cycle loop inside cycle 2, after its plan step committed;
    returns the world's data directory (cycle 2 is left pending in the loop's manifest)."""
    data = tmp_path / "w"
    code = (
        "import asyncio, sys, little; from tests.little.runtime import loops; from little.runtime import outer_loop\n"
        "w = little.local_world(sys.argv[1])\n"
        f"asyncio.run(outer_loop(w, {loop_id!r}, loops.cycle, {{'goal': {goal!r}}}, cycles=3))\n"
    )
    # Loop stream: claim, start, reserve c1, [cycle 1 run ...], close c1, reserve c2, [cycle 2 ...]:
    # crash inside cycle 2 after its plan step committed.
    plain = child(code, tmp_path / "count", {loops.LOG: str(tmp_path / "count.jsonl")})
    assert plain.returncode == 0, plain.stderr
    with little.local_world(tmp_path / "count") as w:
        per_cycle = sum(1 for _ in w.read_run(f"outer~{loop_id}~cycle-1")) + 1  # + next's claim
    crash_at = 3 + per_cycle + 2 + 1 + 8  # into cycle 2, after its plan step completed
    first = child(
        code,
        data,
        {"LITTLE_CRASH_AFTER_EVENT": str(crash_at), loops.LOG: str(tmp_path / "steps.jsonl")},
    )
    assert first.returncode == -9, first.stderr
    return data


def test_outer_loop_resumes_its_pending_cycle_through_layer_a(tmp_path: Path, calls: Path) -> None:
    data = crash_a_loop_in_its_second_cycle(tmp_path, "L", "ship")
    with little.local_world(data) as world:
        crashed = load_manifest(world, "L")
        assert crashed.pending_cycle_run_id == "outer~L~cycle-2"
        final = asyncio.run(outer_loop(world, "L", loops.cycle, {"goal": "ship"}, cycles=3))
    assert [c.status for c in final.cycles] == ["completed", "completed", "completed"]
    assert [c.run_id for c in final.cycles][1] == "outer~L~cycle-2"
    ran = [json.loads(line)["step"] for line in (tmp_path / "steps.jsonl").read_text().splitlines()]
    assert ran.count("plan-2") == 1  # the pending cycle resumed: its plan was not redone
    assert ran.count("act-2") == 1


def test_outer_loop_context_drift_starts_a_fresh_cycle(tmp_path: Path, calls: Path) -> None:
    data = crash_a_loop_in_its_second_cycle(tmp_path, "D", "a")
    with little.local_world(data) as world:
        assert load_manifest(world, "D").pending_cycle_run_id == "outer~D~cycle-2"
        final = asyncio.run(outer_loop(world, "D", loops.cycle, {"goal": "b"}, cycles=2))
    assert [(c.number, c.status) for c in final.cycles] == [
        (1, "completed"),
        (2, "abandoned"),
        (3, "completed"),
    ]
    assert final.pending_cycle_run_id is None
    assert final.cycles[2].output["result"] == "did plan for cycle 3"


def test_recorded_values_replay_identically_after_a_crash(tmp_path: Path) -> None:
    data = tmp_path / "w"
    code = (
        "import asyncio, sys, json, little; from tests.little.runtime import loops; from little.runtime import run\n"
        "w = little.local_world(sys.argv[1])\n"
        "r = asyncio.run(run(w, loops.values, None, run_id='v'))\n"
        "print(json.dumps(r.output))\n"
    )
    # events: claim, RunStarted, 3 values, branch set, 2 branch values, StepStarted, 2 values,
    # StepCompleted (index 11): die right after it, before the last value is recorded
    first = child(code, data, {"LITTLE_CRASH_AFTER_EVENT": "11"})
    assert first.returncode == -9, first.stderr
    with little.local_world(data) as world:
        recorded = replay_run(world, "v").state.values
        assert len(recorded) == 7
        result = asyncio.run(resume(world, "v"))
        final = replay_run(world, "v").state.values
    now, rnd, uid, branches, in_step, late = result.output
    by_scope = {(v.step_path, v.ordinal): json.loads(v.value_json) for v in recorded}
    assert rnd == by_scope[(None, 1)]
    assert uid == by_scope[(None, 2)]
    assert branches == {"x": by_scope[("p/x/", 0)], "y": by_scope[("p/y/", 0)]}
    assert in_step == [by_scope[("s", 0)], by_scope[("s", 1)]]
    assert now == datetime.fromtimestamp(by_scope[(None, 0)] / 1_000_000, UTC).isoformat()
    assert len(final) == 8  # only the value after the crash point was new
    assert late == json.loads(final[-1].value_json)


def test_outer_loop_keeps_large_cycle_outputs_in_the_artifact_store(tmp_path: Path) -> None:
    from little.events import RunCompleted, StepCompleted
    from little.runtime import workflow
    from little.runtime._execution import LARGE_PAYLOAD

    @workflow("test.big_cycle", version="1")
    async def big_cycle(ctx: Any, cycle_input: dict[str, Any]) -> str:
        return "x" * LARGE_PAYLOAD + str(cycle_input["cycle"])

    with little.local_world(tmp_path / "w") as world:
        final = asyncio.run(outer_loop(world, "big", big_cycle, {"goal": "g"}, cycles=2))
        events = [logged.event for logged in world.read_run("outer~big")]
        reloaded = load_manifest(world, "big")
    assert [c.output for c in final.cycles] == [
        "x" * LARGE_PAYLOAD + "1",
        "x" * LARGE_PAYLOAD + "2",
    ]
    assert [c.output for c in reloaded.cycles] == [c.output for c in final.cycles]
    ends = [e for e in events if isinstance(e, StepCompleted | RunCompleted)]
    assert len(ends) == 3
    assert all(e.output_json is None and e.output_ref is not None for e in ends)


def test_a_finished_outer_loop_run_again_appends_nothing(tmp_path: Path, calls: Path) -> None:
    """Its RunCompleted is the loop's last record: running the loop again (same loop id, same
    or larger count) reads the manifest back and writes nothing, not even a claim."""
    from little.events import RunCompleted
    from little.runtime._outer_loop import loop_run_id

    with little.local_world(tmp_path / "w") as world:
        first = asyncio.run(outer_loop(world, "F", loops.cycle, {"goal": "ship"}, cycles=2))
        before = list(world.read_run(loop_run_id("F")))
        again = asyncio.run(outer_loop(world, "F", loops.cycle, {"goal": "ship"}, cycles=2))
        more = asyncio.run(outer_loop(world, "F", loops.cycle, {"goal": "ship"}, cycles=3))
        after = list(world.read_run(loop_run_id("F")))
        third = list(world.read_run("outer~F~cycle-3"))
    ends = [i for i, logged in enumerate(after) if isinstance(logged.event, RunCompleted)]
    assert len(ends) == 1
    assert [logged.event for logged in after[ends[0] + 1 :]] == []
    assert [logged.offset for logged in after] == [logged.offset for logged in before]
    assert again == first
    assert more == first
    ran = [json.loads(line)["step"] for line in (tmp_path / "steps.jsonl").read_text().splitlines()]
    assert ran.count("plan-1") == ran.count("plan-2") == 1
    assert "plan-3" not in ran
    assert third == []
