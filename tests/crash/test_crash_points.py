"""Crash-point enumeration: the reference research workflow is SIGKILLed at every event it
appends and after every model or tool invocation, resumed in a new process, and must end
exactly as an uncrashed run ends, without running committed work again.

Per crash point: a fresh embedded world; child 1 runs with the crash hook and must die by
SIGKILL; the log as it stood at that death is folded; child 2 resumes without the hook and
completes. Then (a) the final state equals the uncrashed run's in everything that must not
depend on the crash, (b) no step whose StepCompleted was committed before the crash ran
again, (c) every model turn and tool call with a terminal event before the crash was invoked
exactly once, and only the in-flight one may have been invoked twice. The sub-run's events
are appended by the same process, so crash points inside the sub-run are enumerated too.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from little.replay import MaterializedRunState
from tests.crash.support import (
    RESEARCH_INPUT,
    Scenario,
    check_integrity,
    counts,
    diff,
    essence,
    output_of,
)

RUN_ID = "run_crashpoints"
CONCURRENT = {("tool", "2:c2"), ("tool", "2:c3")}
"""The reference run's tool calls of one model turn, run at once."""
SESSION = "investigate#agent"
WORKERS = 2


@dataclass(frozen=True)
class Baseline:
    events: int  # N: every event the process appends, the sub-run's and claims included
    calls: int  # model and tool invocations
    essence: dict[str, Any]
    output: Any
    run_ids: tuple[str, ...]
    step_keys: frozenset[str]  # what the example's steps log to steps.jsonl
    turns: frozenset[int]
    tool_calls: frozenset[str]


def step_key(state: MaterializedRunState, step_path: str) -> str:
    """How the example logs a step: its path in the run, ``workflow:path`` in a sub-run."""
    return step_path if state.parent_run_id is None else f"{state.workflow}:{step_path}"


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Baseline:
    sc = Scenario(tmp_path_factory.mktemp("baseline"))
    done = sc.start(RUN_ID, "research", RESEARCH_INPUT)
    assert done.returncode == 0, done.describe()
    states = sc.run_tree(RUN_ID)
    check_integrity(states)
    assert len(states) == 2, "the reference run has one sub-run"
    model, tools = sc.calls("model"), sc.calls("tools")
    steps = sc.calls("steps")
    assert all(n == 1 for n in counts(steps, "step").values())
    return Baseline(
        events=sum(len(sc.events(rid)) for rid in states),
        calls=len(model) + len(tools),
        essence=essence(states, RUN_ID),
        output=output_of(states[RUN_ID]),
        run_ids=tuple(states),
        step_keys=frozenset(e["step"] for e in steps),
        turns=frozenset(e["turn"] for e in model),
        tool_calls=frozenset(e["call_id"] for e in tools),
    )


@dataclass(frozen=True)
class AtCrash:
    """What the log held when child 1 died."""

    states: dict[str, MaterializedRunState]
    event_ids: dict[str, list[str]]
    committed_steps: frozenset[str]
    started_steps: frozenset[str]
    terminal_turns: frozenset[int]
    terminal_tools: frozenset[str]


def at_crash(sc: Scenario, base: Baseline) -> AtCrash:
    states = {rid: sc.fold(rid) for rid in base.run_ids}
    committed: set[str] = set()
    started: set[str] = set()
    for state in states.values():
        for step in state.steps:
            key = step_key(state, step.step_path)
            started.add(key)
            if step.status == "completed":
                committed.add(key)
    session = states[RUN_ID].session(SESSION)
    if session is None:
        turns: frozenset[int] = frozenset()
        tools: frozenset[str] = frozenset()
    elif session.compacted:  # its step committed: every call in it had its terminal event
        assert session.status == "completed"
        turns, tools = base.turns, base.tool_calls
    else:
        turns = frozenset(t.turn for t in session.turns if t.status != "called")
        tools = frozenset(c.call_id for c in session.tool_calls if c.status != "started")
    return AtCrash(
        states=states,
        event_ids={rid: [le.event.event_id for le in sc.events(rid)] for rid in base.run_ids},
        committed_steps=frozenset(committed & base.step_keys),
        started_steps=frozenset(started & base.step_keys),
        terminal_turns=turns,
        terminal_tools=tools,
    )


def crash_and_resume(
    root: Path, base: Baseline, env: dict[str, int], kafka: str | None = None
) -> dict[str, Any]:
    """One crash point, checked end to end; returns what the crash left for the summary."""
    sc = Scenario(root, kafka=kafka)
    first = sc.start(RUN_ID, "research", RESEARCH_INPUT, **env)
    assert first.killed, f"child 1 was not SIGKILLed: {first.describe()}"
    crash = at_crash(sc, base)

    if crash.states[RUN_ID].workflow is None:
        # Only the claim landed: the log holds no workflow or input to resume. resume() says
        # so, how to start it, and appends nothing; submitting the run again (same id) starts
        # it under a newer claim.
        refused = sc.resume(RUN_ID)
        assert refused.returncode == 1, refused.describe()
        assert "has no RunStarted in its log" in refused.stderr
        assert f"run_id={RUN_ID!r}" in refused.stderr
        assert [le.event.event_id for le in sc.events(RUN_ID)] == crash.event_ids[RUN_ID]
        second = sc.start(RUN_ID, "research", RESEARCH_INPUT)
    else:
        second = sc.resume(RUN_ID)
    assert second.returncode == 0, second.describe()
    assert second.result == {"status": "completed", "output": base.output, "error": None}

    final = sc.run_tree(RUN_ID)
    assert set(final) == set(base.run_ids)
    check_integrity(final)
    for rid, ids in crash.event_ids.items():  # the resume appended; it rewrote nothing
        assert [le.event.event_id for le in sc.events(rid)][: len(ids)] == ids, rid

    # (a) the same outcome as the uncrashed run
    differences = diff(essence(final, RUN_ID), base.essence)
    assert not differences, "final state differs from the uncrashed run:\n" + "\n".join(differences)

    # (b) committed steps never ran again; the others ran once, or twice if in flight
    pids = {first.pid, second.pid}
    steps = sc.calls("steps")
    for key in base.step_keys:
        ran = [e["pid"] for e in steps if e["step"] == key]
        assert set(ran) <= pids
        if key in crash.committed_steps:
            assert ran == [first.pid], f"committed step {key} ran again: {ran}"
        elif key in crash.started_steps:
            assert ran.count(second.pid) == 1, f"step {key}: {ran}"
            assert len(ran) <= 2, f"step {key}: {ran}"
        elif key.startswith("background/"):
            # A parallel branch's step runs while its sibling's appends are awaited, so it
            # may have run (its StepStarted and StepCompleted in flight) when the kill came;
            # or not have run yet. Either way the resume runs it once.
            assert ran.count(second.pid) == 1, f"step {key}: {ran}"
            assert len(ran) <= 2, f"step {key}: {ran}"
        else:
            assert ran == [second.pid], f"step {key} (not started at the crash): {ran}"

    # (c) calls with a terminal event were invoked once; the in-flight one at most twice
    model, tools = sc.calls("model"), sc.calls("tools")
    invoked: dict[Any, list[int]] = {}
    for e in model:
        invoked.setdefault(("turn", e["turn"]), []).append(e["pid"])
    for e in tools:
        invoked.setdefault(("tool", e["call_id"]), []).append(e["pid"])
        assert e["key"] == f"{RUN_ID}/investigate/{e['call_id']}", e
    expected = {("turn", t) for t in base.turns} | {("tool", c) for c in base.tool_calls}
    assert set(invoked) == expected
    terminal = {("turn", t) for t in crash.terminal_turns} | {
        ("tool", c) for c in crash.terminal_tools
    }
    for call, by in invoked.items():
        if call in terminal:
            assert by == [first.pid], f"{call} had its terminal event, yet was invoked {by}"
        else:
            assert by.count(second.pid) == 1, f"{call} invoked {by}"
            assert len(by) <= 2, f"{call} invoked {by}"
    twice = sorted(call for call, by in invoked.items() if len(by) == 2)
    # Turn 2's tool calls (c2, c3) run concurrently: at a crash one may still be running
    # while its sibling's record is acked or its sibling returns (it had no terminal event:
    # checked above), and runs again.
    concurrent = [c for c in twice if c in CONCURRENT]
    if "LITTLE_CRASH_AFTER_EVENT" in env:
        # write-ahead: a crash right after an ack never loses an invocation's result, but a
        # concurrent sibling's still running at that ack
        assert len(concurrent) == len(twice) <= 1, f"re-invoked after an event crash: {twice}"
    else:
        # the n-th invocation returned and died before its terminal event: it runs twice,
        # and a concurrent sibling still running then
        alone = [c for c in twice if c not in CONCURRENT]
        assert len(alone) + min(len(concurrent), 1) == 1, f"after a call crash: {twice}"
        assert len(twice) <= 2, f"after a call crash, invoked twice: {twice}"
    return {
        "committed_steps": len(crash.committed_steps),
        "twice": twice,
        "claim_only": crash.states[RUN_ID].workflow is None,
    }


def enumerate_points(
    tmp_path: Path, base: Baseline, variable: str, points: int
) -> list[dict[str, Any]]:
    """Every crash point 0..points-1 (two at a time), and one past the end, which must not
    crash: that proves ``points`` is every point there is."""

    def beyond_the_end() -> dict[str, Any]:
        sc = Scenario(tmp_path / "beyond")
        done = sc.start(RUN_ID, "research", RESEARCH_INPUT, **{variable: points})
        assert done.returncode == 0, done.describe()
        assert done.result["output"] == base.output
        return {}

    jobs: list[tuple[str, Callable[[], dict[str, Any]]]] = [("beyond", beyond_the_end)]
    for n in range(points):
        point = partial(crash_and_resume, tmp_path / f"p{n}", base, {variable: n})
        jobs.append((f"{variable}={n}", point))
    failures: list[str] = []
    summaries: list[dict[str, Any]] = []
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        futures = [(name, pool.submit(job)) for name, job in jobs]
        for name, future in futures:
            try:
                summaries.append({"point": name, **future.result()})
            except Exception:
                failures.append(f"{name}:\n{traceback.format_exc()}")
    assert not failures, f"{len(failures)} of {len(jobs)} crash points failed:\n" + "\n".join(
        failures
    )
    return summaries[1:]


def test_every_event_is_a_crash_point(tmp_path: Path, baseline: Baseline) -> None:
    # 31 events of the run (claim included) and 5 of its sub-run, all by one process
    assert baseline.events >= 30
    summaries = enumerate_points(tmp_path, baseline, "LITTLE_CRASH_AFTER_EVENT", baseline.events)
    assert len(summaries) == baseline.events
    assert sum(s["claim_only"] for s in summaries) == 1  # k = 0
    committed = [s["committed_steps"] for s in summaries]
    # Later crashes leave at least as much committed, up to the order of the two branches of
    # the research workflow's parallel group: each execution interleaves their events with
    # the others' as the acks come back, so one execution's k-th event may be another's
    # (k+1)-th, and a branch's step may be committed one point earlier in one than the other.
    behind = [max(committed[: i + 1]) - c for i, c in enumerate(committed)]
    assert max(behind) <= 1, f"a later crash left less committed: {committed}"
    assert committed[0] == 0
    assert committed[-1] == len(baseline.step_keys)


def test_every_invocation_is_a_crash_point(tmp_path: Path, baseline: Baseline) -> None:
    assert baseline.calls == 6  # three model turns, three tool calls
    summaries = enumerate_points(tmp_path, baseline, "LITTLE_CRASH_AFTER_CALL", baseline.calls)
    twice = [s["twice"] for s in summaries]
    assert twice[:3] == [[("turn", 1)], [("tool", "1:c1")], [("turn", 2)]]
    # turn 2's tool calls run at once and return in either order: the 4th and the 5th
    # invocation to return are one of them each (with the other too, if it was still running)
    for calls in twice[3:5]:
        assert calls, twice
        assert set(calls) <= CONCURRENT, twice
    assert twice[5] == [("turn", 3)]


@pytest.mark.kafka
def test_a_spread_of_crash_points_on_kafka(
    baseline: Baseline, kafka_bootstrap_servers: str, tmp_path: Path, unique: str
) -> None:
    """The same checks on a real broker, at event crash points spread over the run (inside the
    sub-run too) and at a model and a tool invocation; fresh topics per point."""
    n = baseline.events
    points: list[dict[str, int]] = [
        {"LITTLE_CRASH_AFTER_EVENT": k}
        for k in sorted({1, n // 5, 2 * n // 5, 3 * n // 5, 4 * n // 5, n - 2})
    ]
    points += [{"LITTLE_CRASH_AFTER_CALL": 0}, {"LITTLE_CRASH_AFTER_CALL": baseline.calls - 2}]
    for i, env in enumerate(points):
        crash_and_resume(
            tmp_path / f"p{i}", baseline, env, kafka=f"{kafka_bootstrap_servers}|t{unique}p{i}."
        )
