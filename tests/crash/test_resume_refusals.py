"""A resume refuses other code than the run's own (issue 16 item 12): a process killed with
SIGKILL mid-run, resumed in a new process that lacks the version of its workflow it started
on (``WorkflowVersionError``, refused before the claim: nothing is recorded) or by edited code
under the same version whose request differs from the one its log recorded
(``SessionDivergedError``, which records nothing but its claim). Neither calls a model;
resumed with its own code, the run completes."""

from __future__ import annotations

import json
from pathlib import Path

from little.events import RunClaimed
from tests.crash.support import Child, Scenario, child

RUN = "run_refusals"
INPUT = json.dumps("Kafka")
EDIT = json.dumps({"write": "Write a short post from: "})


def pipeline(scenario: Scenario, version: str, edits: str, **crash: int) -> Child:
    return child(
        scenario.data_dir, RUN, "replay-pipeline", version, edits, INPUT, env=scenario.env(**crash)
    )


def assert_refused(
    scenario: Scenario, version: str, edits: str, error: str, recorded: list[type]
) -> None:
    before = len(scenario.events(RUN))
    calls = {s: len(scenario.calls(f"replay-{s}")) for s in ("research", "outline", "write")}
    done = pipeline(scenario, version, edits)
    assert done.returncode == 1, done.describe()
    assert error in done.stderr, done.describe()
    # nothing but what ``recorded`` says reached the log, and no model was invoked
    assert [type(x.event) for x in scenario.events(RUN)[before:]] == recorded
    assert {s: len(scenario.calls(f"replay-{s}")) for s in calls} == calls


def test_another_version_of_the_workflow_cannot_resume_a_run(tmp_path: Path) -> None:
    scenario = Scenario(tmp_path)
    killed = pipeline(scenario, "1", "{}", LITTLE_CRASH_AFTER_CALL=1)  # after outline's call
    assert killed.killed, killed.describe()
    assert_refused(
        scenario,
        "2",
        "{}",
        f"WorkflowVersionError: run {RUN} was started by workflow tests.replay.pipeline v1, "
        "not tests.replay.pipeline v2, and v1 is not registered in this process (registered "
        "versions: 2)",
        [],  # refused before claiming: the log is left as the kill left it
    )
    resumed = pipeline(scenario, "1", "{}")
    assert resumed.returncode == 0, resumed.describe()
    assert resumed.result["status"] == "completed"


def test_edited_code_under_the_same_version_cannot_resume_a_call_in_flight(
    tmp_path: Path,
) -> None:
    scenario = Scenario(tmp_path)
    # killed after write's model call returned, before its record: the log holds write's
    # admission with the request the unedited code built
    killed = pipeline(scenario, "1", "{}", LITTLE_CRASH_AFTER_CALL=2)
    assert killed.killed, killed.describe()
    assert_refused(
        scenario, "1", EDIT, "SessionDivergedError: run run_refusals: agent call 2", [RunClaimed]
    )
    resumed = pipeline(scenario, "1", "{}")
    assert resumed.returncode == 0, resumed.describe()
    assert resumed.result["status"] == "completed"
    # the call the kill left without its record was invoked again, once
    assert len(scenario.calls("replay-write")) == 2
