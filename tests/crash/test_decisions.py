"""A decision recorded before a crash is not decided again (seed 000, "Visit Counter
Reconstruction": the recorded target is used without re-running the decision)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli import little_cli
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


def test_a_validation_decision_is_not_made_again_on_resume_and_a_replay_reports_it(
    tmp_path: Path,
) -> None:
    """Issue 26 item 12 (seed 004: replay reproduces "validation decisions (recorded
    pass/reject)"): a validator is a decision step; its verdict is DecisionRecorded and its
    StepCompleted memoizes it. A resume after a SIGKILL past the verdict does not run the
    validator again, and a replay from the log reports the recorded verdict, running nothing."""
    base = Scenario(tmp_path / "base")
    done = base.start("run_validated", "validated", "kafka")
    assert done.returncode == 0, done.describe()
    assert done.result["output"] == "publish: a post about kafka"
    logged = [e.event for e in base.events("run_validated")]
    k = next(
        i
        for i, e in enumerate(logged)
        if e.type == "StepCompleted" and getattr(e, "step_path", None) == "validate"
    )

    sc = Scenario(tmp_path / "crash")
    crashed = sc.start("run_validated", "validated", "kafka", LITTLE_CRASH_AFTER_EVENT=k)
    assert crashed.killed, crashed.describe()
    assert [c["step"] for c in sc.calls("steps")] == ["draft", "validate"]
    resumed = sc.resume("run_validated")
    assert resumed.returncode == 0, resumed.describe()
    assert resumed.result["output"] == "publish: a post about kafka"
    assert [c["step"] for c in sc.calls("steps")] == ["draft", "validate", "publish"]

    # the replay from the log (inference-skipping): the verdict as recorded, nothing runs
    cli = little_cli("replay", "run_validated", "--data-dir", str(sc.data_dir), "--json")
    assert cli.returncode == 0, cli.stderr
    steps = {s["step_path"]: s for s in json.loads(cli.stdout)["steps"]}
    assert steps["validate"]["decision"] == {"visit": 1, "target": "publish"}
    assert steps["draft"]["decision"] is None
    text = little_cli("replay", "run_validated", "--data-dir", str(sc.data_dir))
    assert text.returncode == 0, text.stderr
    assert "decision validate (visit 1) chose publish" in text.stdout.splitlines()
    assert [c["step"] for c in sc.calls("steps")] == ["draft", "validate", "publish"]
