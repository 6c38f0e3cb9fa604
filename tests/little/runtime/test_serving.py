"""Where an answer comes from (``little.runtime._serving``), decided on the fold's own records:
the run's own log first, then the record the run replays, or a full replay's receipts; a golden
run raises where a recorded run would run a call fresh."""

from __future__ import annotations

import pytest

from little.events import ToolCallFailed, ToolCallStarted, ToolCallSucceeded
from little.replay import AgentCall, SessionState, ToolCall
from little.runtime._errors import SimulationDivergedError
from little.runtime._recorded import AgentCalls, RecordedCalls, Simulating
from little.runtime._serving import (
    FRESH,
    GOLDEN_RUN,
    OWN_LOG,
    RECEIPTS,
    RECORDED_RUN,
    Fresh,
    GoldenRun,
    OwnLog,
    Receipts,
    RecordedRun,
    Served,
    Serving,
    ToolAsk,
)

SESSION = "agent#researcher"
ARGS = '{"q":"x"}'


def ask(call_id: str, occurrence: int = 0) -> ToolAsk:
    return ToolAsk(1, call_id, "search", ARGS, f"run/agent/{call_id}", occurrence)


def own_log(*calls: ToolCall) -> OwnLog:
    state = SessionState(
        session_id=SESSION,
        step_path="agent",
        name="researcher",
        model="scripted:m",
        manifest_hash="m",
        manifest_json="{}",
        tool_calls=calls,
    )
    return OwnLog("run", AgentCalls(own={}), state, SESSION)


def tool_call(call_id: str, status: str, result: str | None = None) -> ToolCall:
    return ToolCall(
        call_id=call_id,
        tool="search",
        turn=1,
        status=status,  # type: ignore[arg-type]
        arguments_json=ARGS,
        idempotency_key=f"run/agent/{call_id}",
        result_json=result,
    )


RECEIPTS_OF_SOURCE = Receipts(
    {(SESSION, "search", ARGS): [('"first"', None, None), (None, None, "Timeout: slow")]},
    SESSION,
    "source",
)


def test_the_own_log_answers_first_and_a_call_in_flight_is_made_again_whoever_answers() -> None:
    own = own_log(tool_call("1:a", "succeeded", '"mine"'), tool_call("1:b", "started"))
    serving = Serving(own, None, RECEIPTS_OF_SOURCE)
    mine = serving.tool_call(ask("1:a"))
    assert isinstance(mine, Served)
    assert (mine.source, mine.text, mine.records) == (OWN_LOG, '"mine"', ())
    again = serving.tool_call(ask("1:b"))
    assert isinstance(again, Served)
    assert (again.source, again.text, again.again) == (RECEIPTS, '"first"', True)
    assert [(r.cls, r.ack) for r in again.records] == [
        (ToolCallStarted, True),
        (ToolCallSucceeded, False),
    ]
    assert again.records[1].fields["replayed_from_run_id"] == "source"
    # without receipts, the same calls: served from the log, made again, made fresh
    alone = Serving(own, None, None)
    assert isinstance(alone.tool_call(ask("1:a")), Served)
    assert alone.tool_call(ask("1:b")) == Fresh(again=True)
    assert alone.tool_call(ask("1:c")) is FRESH


def test_receipts_are_taken_by_occurrence_and_a_call_the_source_never_made_fails() -> None:
    serving = Serving(own_log(), None, RECEIPTS_OF_SOURCE)
    first, second, third = (serving.tool_call(ask(f"{n}:a", n)) for n in range(3))
    assert isinstance(first, Served)
    assert (first.text, first.error, first.replayed) == ('"first"', None, True)
    assert isinstance(second, Served)
    assert (second.error, second.replayed) == ("Timeout: slow", True)
    assert second.records[1].cls is ToolCallFailed
    assert isinstance(third, Served)
    assert third.error is not None
    assert third.error.startswith("ToolNotRecorded: search(")
    assert third.replayed is False
    assert third.records[1].fields["error_type"] == "ToolNotRecorded"


def recorded_calls(side_effecting: bool = False) -> AgentCalls:
    recorded = AgentCall(
        ordinal=0,
        request_key="k",
        node_phase="agent",
        node_label="researcher",
        node_occurrence=0,
        side_effecting=side_effecting,
        outcome="succeeded",
        result_json='{"answer":"a","messages":[]}',
    )
    return AgentCalls(own={}, source=RecordedCalls("source", {0: recorded}))


NODE = ("agent", "researcher", 0)


@pytest.mark.parametrize("side_effecting", [False, True])
def test_a_golden_run_raises_where_a_recorded_run_runs_the_call_fresh(
    side_effecting: bool,
) -> None:
    args = (SESSION, {}, "m", side_effecting)
    replay = RecordedRun("run", recorded_calls(), *args)
    served = replay.exchange(0, ("", 0), NODE, "k")
    if side_effecting:  # replay reuses answers, not effects
        assert served == Fresh("side-effecting-call")
    else:
        assert isinstance(served, Served)
        assert (served.source, served.source_run_id) == (RECORDED_RUN, "source")
    assert replay.exchange(0, ("", 0), NODE, "changed") == Fresh("key-mismatch")

    golden = GoldenRun(Simulating(), "run", recorded_calls(), *args)
    served = golden.exchange(0, ("", 0), NODE, "k")  # a simulation invokes nothing
    assert isinstance(served, Served)
    assert served.source == GOLDEN_RUN
    with pytest.raises(SimulationDivergedError) as raised:
        GoldenRun(Simulating(), "run", recorded_calls(), *args).exchange(
            0, ("", 0), NODE, "changed"
        )
    assert raised.value.miss_reason == "key-mismatch"
    assert str(raised.value) == ("agent call 0 (agent/researcher#0) would be invoked: key-mismatch")
