"""A decision recorded before a crash is not decided again (seed 000, "Visit Counter
Reconstruction": the recorded target is used without re-running the decision)."""

from __future__ import annotations

from pathlib import Path

from tests.crash.support import Scenario, output_of

RUN_ID = "run_decides"


def test_a_decision_recorded_before_a_crash_is_not_decided_again(tmp_path: Path) -> None:
    base = Scenario(tmp_path / "base")
    done = base.start(RUN_ID, "decides", None)
    assert done.returncode == 0, done.describe()
    assert done.result["output"] == "went left"
    types = [e.event.type for e in base.events(RUN_ID)]
    k = types.index("DecisionRecorded")
    assert types[k + 1] == "StepCompleted"  # the crash point falls between the two

    sc = Scenario(tmp_path / "crash")
    crashed = sc.start(RUN_ID, "decides", None, LITTLE_CRASH_AFTER_EVENT=k)
    assert crashed.killed, crashed.describe()
    assert [e.event.type for e in sc.events(RUN_ID)][-1] == "DecisionRecorded"
    resumed = sc.resume(RUN_ID)
    assert resumed.returncode == 0, resumed.describe()
    assert resumed.result["output"] == "went left"  # not "went right": the log's answer
    assert [c["step"] for c in sc.calls("steps")] == ["route", "left"]  # decided once
    state = sc.fold(RUN_ID)
    assert output_of(state) == "went left"
    assert state.step("route") is not None
    assert state.step("route").decision_target == "left"  # type: ignore[union-attr]
