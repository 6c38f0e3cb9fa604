"""Seed 000's two crash scenarios, literally, with real processes and real SIGKILLs.

Model-call boundary: ``harness.model.called(turn 3)`` is committed and the process dies before
``harness.model.responded(turn 3)``. The resume serves turns 1 and 2 from the log, invokes the
model again for turn 3 with the same request, and invokes no earlier tool call again.

Tool-call boundary: ``harness.tool_call.started(c)`` is committed and the process dies before
its terminal event. The resume invokes the tool again with the same arguments and the same
idempotency key, and invokes no earlier model or tool call again.

Each is run at both edges of the gap: right after the write-ahead event is acked (the call
never ran) and right after the call returned (it ran; its result was lost).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from little.events import (
    ModelCalled,
    ModelResponded,
    SubRunReserved,
    ToolCallStarted,
    ToolCallSucceeded,
)
from tests.crash.support import RESEARCH_INPUT, Scenario, check_integrity, output_of

RUN_ID = "run_seed"
SESSION = "investigate#agent"


def append_index(sc: Scenario, wanted: type, **fields: Any) -> int:
    """The 0-based append index of an event of the run, as the crash hook counts it (the run's
    claim included; valid only before the sub-run's first event)."""
    for index, logged in enumerate(sc.events(RUN_ID)):
        event = logged.event
        assert not isinstance(event, SubRunReserved)
        if isinstance(event, wanted) and all(getattr(event, k) == v for k, v in fields.items()):
            return index
    raise AssertionError(f"no {wanted.__name__} {fields}")


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    sc = Scenario(tmp_path_factory.mktemp("seed-baseline"))
    done = sc.start(RUN_ID, "research", RESEARCH_INPUT)
    assert done.returncode == 0, done.describe()
    order = [("turn", e["turn"]) for e in sc.calls("model")]
    return {
        "output": output_of(sc.fold(RUN_ID)),
        "turn3_called": append_index(sc, ModelCalled, turn=3),
        "c3_started": append_index(sc, ToolCallStarted, call_id="2:c3"),
        "model_calls": order,
    }


def invocations(sc: Scenario, kind: str, key: str) -> dict[Any, list[int]]:
    out: dict[Any, list[int]] = {}
    for e in sc.calls(kind):
        out.setdefault(e[key], []).append(e["pid"])
    return out


@pytest.mark.parametrize("edge", ["called-acked", "model-returned"])
def test_crash_at_the_model_call_boundary(
    tmp_path: Path, baseline: dict[str, Any], edge: str
) -> None:
    sc = Scenario(tmp_path)
    crash = (
        {"LITTLE_CRASH_AFTER_EVENT": baseline["turn3_called"]}
        if edge == "called-acked"
        else {"LITTLE_CRASH_AFTER_CALL": 5}  # model t1, c1, t2, c2, c3, then t3 (0-based 5)
    )
    first = sc.start(RUN_ID, "research", RESEARCH_INPUT, **crash)
    assert first.killed, first.describe()

    # as of the crash: turn 3 called without a response, everything before it settled
    session = sc.fold(RUN_ID).session(SESSION)
    assert session is not None
    assert {t.turn: t.status for t in session.turns} == {
        1: "responded",
        2: "responded",
        3: "called",
    }
    assert {c.call_id: c.status for c in session.tool_calls} == dict.fromkeys(
        ("1:c1", "2:c2", "2:c3"), "succeeded"
    )
    assert sc.events(RUN_ID)[-1].event.type == "harness.model.called"

    second = sc.resume(RUN_ID)
    assert second.returncode == 0, second.describe()
    assert second.result["output"] == baseline["output"]

    # turns 1 and 2 from the log; turn 3 invoked again (or, if it never ran, for the first time)
    turns = invocations(sc, "model", "turn")
    assert turns[1] == [first.pid]
    assert turns[2] == [first.pid]
    assert turns[3] == ([second.pid] if edge == "called-acked" else [first.pid, second.pid])
    # no tool call of turns 1-2 invoked again
    assert invocations(sc, "tools", "call_id") == {
        key: [first.pid] for key in ("1:c1", "2:c2", "2:c3")
    }

    # the re-invocation's ModelCalled carries the same request hash as the one before the crash
    events = [le.event for le in sc.events(RUN_ID)]
    called = [e for e in events if isinstance(e, ModelCalled)]
    assert [(e.turn, e.epoch) for e in called] == [(1, 1), (2, 1), (3, 1), (3, 2)]
    assert called[2].request_hash == called[3].request_hash
    assert called[2].previous_request_hash == called[3].previous_request_hash
    assert called[2].appended_messages_json == called[3].appended_messages_json
    responded = [e for e in events if isinstance(e, ModelResponded)]
    assert [(e.turn, e.epoch) for e in responded] == [(1, 1), (2, 1), (3, 2)]
    assert responded[2].request_hash == called[2].request_hash

    state = sc.fold(RUN_ID)
    check_integrity({RUN_ID: state})
    assert state.status == "completed"
    assert state.usage.calls == 3  # one response per turn in the log
    assert state.avoided_usage.calls == 2  # turns 1 and 2 were served from the log


def test_a_re_invoked_turn_may_answer_differently(tmp_path: Path) -> None:
    """Only the re-invoked turn diverges: a model whose turn-3 reply names the process that
    produced it. The lost reply's tool call never happens; the new reply's runs fresh."""
    sc = Scenario(tmp_path)
    # invocations: t1, c1, t2, c2, t3 (0-based 4): die after turn 3 returned, before its event
    first = sc.start("run_diverge", "diverge", None, LITTLE_CRASH_AFTER_CALL=4)
    assert first.killed, first.describe()
    second = sc.resume("run_diverge")
    assert second.returncode == 0, second.describe()
    assert second.result["output"] == f"final: answered by {second.pid}"

    turns = invocations(sc, "model", "turn")
    assert turns == {1: [first.pid], 2: [first.pid], 3: [first.pid, second.pid], 4: [second.pid]}
    echoes = [(e["pid"], e["call_id"], e["args"]["text"]) for e in sc.calls("tools")]
    assert echoes == [
        (first.pid, "1:c1", "turn 1"),
        (first.pid, "2:c2", "turn 2"),
        (second.pid, "3:c3", f"answered by {second.pid}"),
    ]
    state = sc.fold("run_diverge")
    check_integrity({"run_diverge": state})
    called = [le.event for le in sc.events("run_diverge") if isinstance(le.event, ModelCalled)]
    assert [(e.turn, e.epoch) for e in called] == [(1, 1), (2, 1), (3, 1), (3, 2), (4, 2)]
    assert called[2].request_hash == called[3].request_hash


TOOLS = {"2:c2": "search", "2:c3": "fetch"}
"""Turn 2's two tool calls, which run concurrently."""


@pytest.mark.parametrize("edge", ["started-acked", "tool-returned"])
def test_crash_at_the_tool_call_boundary(
    tmp_path: Path, baseline: dict[str, Any], edge: str
) -> None:
    """Turn 2 asks for two tool calls (c2, c3), run concurrently. ``started-acked``: killed
    right after the append that counts as c3's write-ahead record is acked (c2, its sibling,
    in flight too; either may have run, or ended). ``tool-returned``: killed as the second of the two returns, the first's result
    recorded. The call whose result was lost is invoked again with the same arguments and
    idempotency key; nothing with a terminal event is."""
    sc = Scenario(tmp_path)
    crash = (
        {"LITTLE_CRASH_AFTER_EVENT": baseline["c3_started"]}
        if edge == "started-acked"
        else {"LITTLE_CRASH_AFTER_CALL": 4}  # model t1, c1, t2, then c2 and c3 (0-based 4)
    )
    first = sc.start(RUN_ID, "research", RESEARCH_INPUT, **crash)
    assert first.killed, first.describe()

    session = sc.fold(RUN_ID).session(SESSION)
    assert session is not None
    status = {c.call_id: c.status for c in session.tool_calls}
    assert status.pop("1:c1") == "succeeded"
    lost = sorted(c for c, s in status.items() if s == "started")
    if edge == "started-acked":
        # c2's and c3's records are acked together or one after the other, and each call
        # runs as its own ack wakes it: at the kill both are in flight, or the one woken
        # first has ended and its result is recorded too
        assert lost, status
        assert set(status.values()) <= {"started", "succeeded"}, status
    else:
        assert len(lost) == 1, status  # the first to return was recorded, the second lost
        assert sorted(status.values()) == ["started", "succeeded"]
    assert {t.turn: t.status for t in session.turns} == {1: "responded", 2: "responded"}

    second = sc.resume(RUN_ID)
    assert second.returncode == 0, second.describe()
    assert second.result["output"] == baseline["output"]

    # a lost call is invoked again with the same idempotency key; nothing recorded before it is
    ran = invocations(sc, "tools", "call_id")
    assert ran["1:c1"] == [first.pid]
    for call_id in TOOLS:
        if call_id not in lost:
            assert ran[call_id] == [first.pid]  # recorded: never again
        elif edge == "tool-returned":
            assert ran[call_id] == [first.pid, second.pid]
        else:
            # both in flight at the kill: either may have run before it (the two records'
            # acks wake their calls in either order), and runs once more
            assert ran[call_id] in ([second.pid], [first.pid, second.pid]), ran
        key = f"{RUN_ID}/investigate/{call_id}"
        keys = {e["key"] for e in sc.calls("tools") if e["call_id"] == call_id}
        assert keys == {key}
    turns = invocations(sc, "model", "turn")
    assert turns == {1: [first.pid], 2: [first.pid], 3: [second.pid]}

    # ... and with the same arguments, recorded write-ahead both times
    events = [le.event for le in sc.events(RUN_ID)]
    for call_id in lost:
        key = f"{RUN_ID}/investigate/{call_id}"
        started = [e for e in events if isinstance(e, ToolCallStarted) and e.call_id == call_id]
        assert [e.epoch for e in started] == [1, 2]
        assert started[0].arguments_json == started[1].arguments_json
        assert started[0].idempotency_key == started[1].idempotency_key == key
        assert started[0].tool == started[1].tool == TOOLS[call_id]
        succeeded = [e for e in events if isinstance(e, ToolCallSucceeded) and e.call_id == call_id]
        assert [e.epoch for e in succeeded] == [2]

    state = sc.fold(RUN_ID)
    check_integrity({RUN_ID: state})
    assert state.status == "completed"
