"""Cross-scope durability (seed 000): an orchestrator's agent session dispatches sub-runs with
the ``run_workflow`` tool, and crashes between and inside sub-runs are resumed from both logs.

"30 of 50": the model asks, in one turn, for 50 ``run_workflow`` calls (``square`` of 1..50);
the process dies once 30 results are recorded in the orchestrator. The resume serves those 30
from the orchestrator's log (their workflow code does not run again), dispatches the rest with
the sub-run ids reserved for them, and every sub-run completes exactly once by its own log.

"Completed but not recorded": the process dies right after a sub-run's RunCompleted is acked,
before the orchestrator records the tool call's result. The resume does not execute the sub-run
again: it reads the output from the sub-run's log and writes the missing
``harness.tool_call.succeeded`` to the orchestrator's log.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from little.events import (
    RunClaimed,
    RunCompleted,
    RunStarted,
    SubRunReserved,
    ToolCallStarted,
    ToolCallSucceeded,
)
from tests.crash.support import Scenario, check_integrity, output_of, process_order
from tests.crash.workflows import KILL_AT_SQUARE

ORCHESTRATOR = "run_orchestrator"


def call_id(i: int) -> str:
    return f"1:c{i}"  # tool call c<i> of turn 1


def orchestrator_events(sc: Scenario) -> list[Any]:
    return [le.event for le in sc.events(ORCHESTRATOR)]


def of_type(events: list[Any], cls: type) -> list[Any]:
    return [e for e in events if isinstance(e, cls)]


def reservations(events: list[Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for e in of_type(events, SubRunReserved):
        assert e.call_id not in out, f"{e.call_id} reserved twice"
        out[e.call_id] = e.sub_run_id
    return out


def square_runs(sc: Scenario) -> dict[str, list[int]]:
    """Per sub-run id, the pids that ran its ``compute`` step (the workflow's own code)."""
    out: dict[str, list[int]] = {}
    for e in sc.calls("steps"):
        if e["step"] == "square:compute":
            out.setdefault(e["run_id"], []).append(e["pid"])
    return out


def crash_index_after_30th_result(tmp_path: Path) -> int:
    """LITTLE_CRASH_AFTER_EVENT for "right after the 30th harness.tool_call.succeeded is
    acked", from an uncrashed run of the same workflow."""
    sc = Scenario(tmp_path / "uncrashed")
    done = sc.start(ORCHESTRATOR, "fan_out", {"n": 50})
    assert done.returncode == 0, done.describe()
    assert done.result["output"] == f"sum={sum(i * i for i in range(1, 51))}"
    succeeded = 0
    for index, (run_id, event) in enumerate(process_order(sc, ORCHESTRATOR)):
        if run_id == ORCHESTRATOR and isinstance(event, ToolCallSucceeded):
            succeeded += 1
            if succeeded == 30:
                return index
    raise AssertionError("fewer than 30 results")


@pytest.mark.parametrize("crash", ["after-30th-result", "as-31st-sub-run-starts"])
def test_30_of_50_sub_runs(tmp_path: Path, crash: str) -> None:
    sc = Scenario(tmp_path / "crash")
    hook: dict[str, int] = (
        {"LITTLE_CRASH_AFTER_EVENT": crash_index_after_30th_result(tmp_path)}
        if crash == "after-30th-result"
        else {KILL_AT_SQUARE: 31}  # square(31) SIGKILLs its process as its workflow code starts
    )
    first = sc.start(ORCHESTRATOR, "fan_out", {"n": 50}, **hook)
    assert first.killed, first.describe()

    # -- the logs as the process died ------------------------------------------------------
    before = orchestrator_events(sc)
    assert len(of_type(before, ToolCallSucceeded)) == 30
    done_before = {e.call_id for e in of_type(before, ToolCallSucceeded)}
    assert done_before == {call_id(i) for i in range(1, 31)}
    reserved_before = reservations(before)
    started_before = [e.call_id for e in of_type(before, ToolCallStarted)]
    if crash == "after-30th-result":
        # A call's result rides to the log with the next write-ahead record (one ack per
        # call), so the 30th result landed in the same batch as the 31st call's started.
        assert started_before == [call_id(i) for i in range(1, 32)]
        assert isinstance(before[-1], ToolCallStarted)
        assert isinstance(before[-2], ToolCallSucceeded)
    else:
        # the 31st call is in flight: started, its sub-run reserved, claimed and started
        assert started_before == [call_id(i) for i in range(1, 32)]
        assert isinstance(before[-1], SubRunReserved)
        assert before[-1].call_id == call_id(31)
        sub31 = [le.event for le in sc.events(reserved_before[call_id(31)])]
        assert [type(e) for e in sub31] == [RunClaimed, RunStarted]
    sub_events_before = {sid: len(sc.events(sid)) for sid in reserved_before.values()}

    # -- resume in a new process -----------------------------------------------------------
    second = sc.resume(ORCHESTRATOR)
    assert second.returncode == 0, second.describe()
    assert second.result["output"] == f"sum={sum(i * i for i in range(1, 51))}"

    after = orchestrator_events(sc)
    succeeded = of_type(after, ToolCallSucceeded)
    assert len(succeeded) == 50
    assert sorted(e.call_id for e in succeeded) == sorted(call_id(i) for i in range(1, 51))
    # the 30 recorded results fast-forwarded: no call of those started again
    started = [e.call_id for e in of_type(after, ToolCallStarted)]
    for cid in done_before:
        assert started.count(cid) == 1, cid
    # every call has exactly one reservation; those made before the crash were kept
    reserved = reservations(after)
    assert set(reserved) == {call_id(i) for i in range(1, 51)}
    assert {cid: reserved[cid] for cid in reserved_before} == reserved_before

    ran = square_runs(sc)
    assert set(ran) == set(reserved.values())
    states = {ORCHESTRATOR: sc.fold(ORCHESTRATOR)}
    results = {e.call_id: json.loads(e.result_json) for e in succeeded}
    for i in range(1, 51):
        cid = call_id(i)
        sub_id = reserved[cid]
        sub = sc.fold(sub_id)
        states[sub_id] = sub
        events = [le.event for le in sc.events(sub_id)]
        # completed exactly once, by its own log, as the sub-run of that very tool call
        assert len(of_type(events, RunCompleted)) == 1, sub_id
        (started_event,) = of_type(events, RunStarted)
        assert (started_event.parent_run_id, started_event.parent_call_id) == (ORCHESTRATOR, cid)
        assert sub.status == "completed"
        assert output_of(sub) == i * i == results[cid]
        if i <= 30:
            # done before the crash: its workflow code ran once, in the first process, and
            # nothing was appended to its log since
            assert ran[sub_id] == [first.pid], (cid, ran[sub_id])
            assert len(events) == sub_events_before[sub_id]
        else:
            assert ran[sub_id] == [second.pid], (cid, ran[sub_id])
            # the in-flight sub-run resumed from its own log under a second claim
            claims = len(of_type(events, RunClaimed))
            assert claims == (2 if cid in reserved_before else 1), (cid, claims)

    check_integrity(states)
    turns = [(e["pid"], e["turn"]) for e in sc.calls("model")]
    assert turns == [(first.pid, 1), (second.pid, 2)]


def test_sub_run_completed_but_not_recorded(tmp_path: Path) -> None:
    # where to crash: right after sub-run 2's RunCompleted is acked (from an uncrashed run)
    uncrashed = Scenario(tmp_path / "uncrashed")
    done = uncrashed.start(ORCHESTRATOR, "fan_out", {"n": 3})
    assert done.returncode == 0, done.describe()
    assert done.result["output"] == "sum=14"
    sub2 = reservations(orchestrator_events(uncrashed))[call_id(2)]
    (k,) = [
        index
        for index, (run_id, event) in enumerate(process_order(uncrashed, ORCHESTRATOR))
        if run_id == sub2 and isinstance(event, RunCompleted)
    ]

    sc = Scenario(tmp_path / "crash")
    first = sc.start(ORCHESTRATOR, "fan_out", {"n": 3}, LITTLE_CRASH_AFTER_EVENT=k)
    assert first.killed, first.describe()

    # the sub-run's log says completed; the orchestrator's has the call started, no result
    before = orchestrator_events(sc)
    sub_before = [le.event for le in sc.events(sub2)]
    assert isinstance(sub_before[-1], RunCompleted)
    assert sc.fold(sub2).status == "completed"
    assert [e.call_id for e in of_type(before, ToolCallStarted)] == [call_id(1), call_id(2)]
    assert [e.call_id for e in of_type(before, ToolCallSucceeded)] == [call_id(1)]
    assert square_runs(sc) == {
        reservations(before)[call_id(1)]: [first.pid],
        sub2: [first.pid],
    }

    second = sc.resume(ORCHESTRATOR)
    assert second.returncode == 0, second.describe()
    assert second.result["output"] == "sum=14"

    # the sub-run was not executed again: its code did not run, its log is unchanged
    assert [le.event for le in sc.events(sub2)] == sub_before
    ran = square_runs(sc)
    assert ran[sub2] == [first.pid]
    assert ran[reservations(orchestrator_events(sc))[call_id(3)]] == [second.pid]

    # the missing result was written to the orchestrator's log, read from the sub-run's log
    after = orchestrator_events(sc)
    assert after[: len(before)] == before
    new = after[len(before) :]
    started = [e for e in of_type(after, ToolCallStarted) if e.call_id == call_id(2)]
    assert [e.epoch for e in started] == [1, 2]
    assert started[0].idempotency_key == started[1].idempotency_key
    assert started[0].arguments_json == started[1].arguments_json
    (recorded,) = [e for e in of_type(after, ToolCallSucceeded) if e.call_id == call_id(2)]
    assert recorded in new
    assert recorded.epoch == 2
    assert recorded.result_json == sc.fold(sub2).output_json == "4"
    assert list(reservations(after)) == [call_id(1), call_id(2), call_id(3)]

    states = {rid: sc.fold(rid) for rid in [ORCHESTRATOR, *reservations(after).values()]}
    check_integrity(states)
    assert states[ORCHESTRATOR].status == "completed"
    assert [(e["pid"], e["turn"]) for e in sc.calls("model")] == [(first.pid, 1), (second.pid, 2)]
