"""The run inspector's timeline and chart from hand-written events (the pages themselves are
tested in Chromium over real crashed runs, tests/ui): a tool call in flight at a crash, a
zombie writer's late event, a replayed result, unpriced usage."""

from __future__ import annotations

from typing import Any

from little.events import (
    Event,
    LoggedEvent,
    RunClaimed,
    RunCompleted,
    RunStarted,
    SessionStarted,
    StepCompleted,
    StepStarted,
    ToolCallStarted,
    ToolCallSucceeded,
)
from little.replay import MaterializedRunState, StepState, UsageTotals
from little_services.projector._inspector import (
    AGAIN,
    CUT_OFF,
    FRESH,
    REPLAYED,
    SERVED,
    STEP_SERVED,
    chart,
    timeline,
)

RUN = "run-t"
IN_STEP: dict[str, Any] = {"step_path": "s", "session_id": "s#a"}


def tool_started(seq: int, epoch: int, call_id: str) -> ToolCallStarted:
    return ToolCallStarted(
        run_id=RUN,
        seq=seq,
        epoch=epoch,
        **IN_STEP,
        call_id=call_id,
        tool="search",
        turn=1,
        arguments_json='{"q": "kafka"}',
        idempotency_key=f"k-{call_id}",
    )


def tool_done(seq: int, epoch: int, call_id: str, **kw: Any) -> ToolCallSucceeded:
    return ToolCallSucceeded(
        run_id=RUN, seq=seq, epoch=epoch, **IN_STEP, call_id=call_id, tool="search", **kw
    )


def logged(events: list[Event]) -> list[LoggedEvent]:
    return [LoggedEvent(e, 0, offset) for offset, e in enumerate(events)]


def stream() -> list[LoggedEvent]:
    return logged(
        [
            RunClaimed(run_id=RUN, seq=-1, epoch=1, owner="a", observed_seq=-1),
            RunStarted(run_id=RUN, seq=0, epoch=1, workflow="w", workflow_version="1"),
            StepStarted(run_id=RUN, seq=1, epoch=1, step_path="first", step_id="first"),
            StepCompleted(run_id=RUN, seq=2, epoch=1, step_path="first", step_id="first"),
            StepStarted(run_id=RUN, seq=3, epoch=1, step_path="s", step_id="s"),
            SessionStarted(
                run_id=RUN,
                seq=4,
                epoch=1,
                **IN_STEP,
                session_name="a",
                model="openai:gpt-4o-mini",
                manifest_json="{}",
                manifest_hash="0" * 64,
            ),
            tool_started(5, 1, "1:c1"),
            tool_done(6, 1, "1:c1", result_json='["r"]'),
            tool_started(7, 1, "1:c2"),  # in flight when writer a stops
            RunClaimed(run_id=RUN, seq=-1, epoch=2, owner="b", observed_seq=7),
            tool_done(8, 1, "1:c2", result_json='"late"'),  # writer a, fenced
            StepStarted(run_id=RUN, seq=8, epoch=2, step_path="s", step_id="s", attempt=2),
            tool_started(9, 2, "1:c2"),
            tool_done(10, 2, "1:c2", result_json='"again"'),
            tool_started(11, 2, "1:c3"),
            tool_done(12, 2, "1:c3", result_json='"recorded"', replayed_from_run_id="run-src"),
            StepCompleted(run_id=RUN, seq=13, epoch=2, step_path="s", step_id="s", attempt=2),
            RunCompleted(run_id=RUN, seq=14, epoch=2),
        ]
    )


def rows(key: str) -> list[tuple[str, str | None, str | None, int]]:
    return [
        (r.status, r.origin, r.fate, r.execution) for r in timeline(stream()).rows if r.key == key
    ]


def test_a_tool_call_in_flight_at_a_crash_is_cut_off_and_invoked_again() -> None:
    # the fenced writer's late result is no part of the history: the first start stays cut off
    assert rows("tool s#a 1:c2") == [
        ("cut off", FRESH, CUT_OFF, 1),
        ("succeeded", AGAIN, None, 2),
    ]
    assert rows("step s#1") == [("cut off", None, CUT_OFF, 1), ("completed", None, None, 2)]


def test_what_a_resume_found_finished_is_served_and_a_replay_is_marked() -> None:
    assert rows("tool s#a 1:c1") == [("succeeded", FRESH, SERVED, 1)]
    assert rows("step first#1") == [("completed", None, STEP_SERVED, 1)]
    assert rows("tool s#a 1:c3") == [("succeeded", REPLAYED, None, 2)]
    (replayed,) = [r for r in timeline(stream()).rows if r.key == "tool s#a 1:c3"]
    assert replayed.link == "run-src"
    t = timeline(stream())
    assert t.executions == 2
    assert [r.name for r in t.rows if r.kind == "claim"] == [
        "execution 1 claimed the run",
        "execution 2 claimed the run",
    ]


def test_the_chart_scales_to_the_largest_amount_and_falls_back_to_tokens() -> None:
    def usage(tokens: int) -> UsageTotals:
        return UsageTotals(calls=1, input_tokens=tokens, unpriced_calls=1)

    state = MaterializedRunState(
        run_id=RUN,
        steps=(
            StepState(step_path="a", step_id="a", status="completed", usage=usage(100)),
            StepState(step_path="idle", step_id="idle", status="completed"),
            StepState(
                step_path="b",
                step_id="b",
                status="completed",
                usage=usage(50),
                avoided_usage=usage(25),
            ),
        ),
    )
    bars = chart(state, width=200)
    assert [(b.step_path, b.billed_width, b.avoided_width) for b in bars] == [
        ("a", 200.0, 0.0),
        ("b", 100.0, 50.0),
    ]
    assert bars[0].billed == "unpriced (1 call)"
