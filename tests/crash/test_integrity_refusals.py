"""An integrity refusal ends the run even when the workflow catches it (issue 26 items 1 and
11): a run SIGKILLed mid-way and resumed in a new process by code whose log can no longer
stand in for it (an edited prompt or system prompt of a call in flight, a changed branch set,
a tampered artifact) is refused, although its workflow catches every ``Exception`` and answers
``"fallback"`` after asking one more model: nothing but the resume's claim is written, no model
is invoked, and the run stays as the kill left it, so its own code resumes it to the end. A
panel mixing recorded and fresh legs, caught the same way, fails the run naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from little.events import ModelCalled, RunClaimed, RunFailed
from tests.crash.runner import open_world
from tests.crash.support import Child, Scenario, child

RUN = "run_integrity"
INPUT = json.dumps("Kafka")
SESSIONS = ("first", "angle-a", "angle-b", "angle-c", "second", "fallback")
ONCE = {"first": 1, "angle-a": 1, "angle-b": 1, "angle-c": 0, "second": 1, "fallback": 0}
"""Each call of the unedited run invoked once."""


def guarded(scenario: Scenario, edits: str = "{}", **crash: int) -> Child:
    return child(
        scenario.data_dir, RUN, "integrity", "guarded", "1", edits, INPUT, env=scenario.env(**crash)
    )


def invoked(scenario: Scenario) -> dict[str, int]:
    """Real model invocations so far, by session."""
    return {s: len(scenario.calls(f"integrity-{s}")) for s in SESSIONS}


def assert_refused_then_resumable(scenario: Scenario, edits: str, error: str) -> dict[str, int]:
    """The resume by ``edits`` is refused with ``error`` though the workflow catches it: it
    writes its claim only and invokes nothing; the run's own code then resumes it to the end.
    Returns the model invocations by then."""
    before = len(scenario.events(RUN))
    calls = invoked(scenario)
    refused = guarded(scenario, edits)
    assert refused.returncode == 1, refused.describe()
    assert error in refused.stderr, refused.describe()
    assert '"fallback"' not in refused.stdout, refused.describe()
    assert [type(x.event) for x in scenario.events(RUN)[before:]] == [RunClaimed]
    assert invoked(scenario) == calls  # the fallback's model included: nothing ran
    assert scenario.fold(RUN).status == "running"  # left as the kill left it

    resumed = guarded(scenario)
    assert resumed.returncode == 0, resumed.describe()
    assert resumed.result["status"] == "completed", resumed.describe()
    assert resumed.result["output"] != "fallback"
    return invoked(scenario)


def test_a_caught_session_divergence_still_refuses_the_resume(tmp_path: Path) -> None:
    scenario = Scenario(tmp_path)
    # killed right after second's model call returned: the log holds its admission and call
    killed = guarded(scenario, LITTLE_CRASH_AFTER_CALL=3)
    assert killed.killed, killed.describe()
    calls = assert_refused_then_resumable(
        scenario,
        json.dumps({"second": "Write a short post from: "}),
        f"SessionDivergedError: run {RUN}: agent call 3 (second#second)",
    )
    # second's call in flight at the kill runs again once, with its recorded request
    assert calls == {**ONCE, "second": 2}


def test_a_caught_capability_drift_still_refuses_the_resume(tmp_path: Path) -> None:
    scenario = Scenario(tmp_path)
    killed = guarded(scenario, LITTLE_CRASH_AFTER_CALL=3)
    assert killed.killed, killed.describe()
    calls = assert_refused_then_resumable(
        scenario,
        json.dumps({"system": "Be thorough."}),
        f"CapabilityDriftError: run {RUN}: harness session second#second (step second)",
    )
    assert calls == {**ONCE, "second": 2}


def test_a_changed_branch_set_is_found_on_a_resume_after_sigkill(tmp_path: Path) -> None:
    scenario = Scenario(tmp_path)
    # killed right after the first branch's model call returned, mid-group
    killed = guarded(scenario, LITTLE_CRASH_AFTER_CALL=1)
    assert killed.killed, killed.describe()
    calls = assert_refused_then_resumable(
        scenario,
        json.dumps({"branches": "a,b,c"}),
        f"ParallelBranchMismatchError: run {RUN}: parallel group fan recorded branches "
        "['a', 'b'] but resolves to ['a', 'b', 'c'] now",
    )
    # a branch call in flight at the kill (or two) runs again; no third branch ever ran
    assert {k: v for k, v in calls.items() if not k.startswith("angle-")} == {
        "first": 1,
        "second": 1,
        "fallback": 0,
    }
    assert (calls["angle-c"], 1 <= calls["angle-a"] <= 2, 1 <= calls["angle-b"] <= 2) == (
        0,
        True,
        True,
    )


def test_a_tampered_artifact_is_found_on_a_resume_after_sigkill(tmp_path: Path) -> None:
    scenario = Scenario(tmp_path)
    killed = guarded(scenario, LITTLE_CRASH_AFTER_CALL=3)
    assert killed.killed, killed.describe()
    notes = scenario.fold(RUN).step("notes")
    assert notes is not None
    assert notes.output_ref is not None  # kept as an artifact
    with open_world(str(scenario.data_dir)) as world:
        blob = Path(world.artifacts.where(notes.output_ref.sha256))
    original = blob.read_bytes()
    blob.write_bytes(original.replace(b"nnnn", b"mmmm", 1))  # same size, other bytes

    before = len(scenario.events(RUN))
    calls = invoked(scenario)
    refused = guarded(scenario)  # the run's own code: only the artifact changed
    assert refused.returncode == 1, refused.describe()
    assert f"ArtifactMismatchError: run {RUN}: step notes" in refused.stderr, refused.describe()
    assert [type(x.event) for x in scenario.events(RUN)[before:]] == [RunClaimed]
    assert invoked(scenario) == calls

    blob.write_bytes(original)  # the artifact restored, the run resumes to its end
    resumed = guarded(scenario)
    assert resumed.returncode == 0, resumed.describe()
    assert resumed.result["status"] == "completed", resumed.describe()
    assert invoked(scenario)["second"] == 2


def test_a_caught_mixed_panel_still_fails_the_run(tmp_path: Path) -> None:
    scenario = Scenario(tmp_path)

    def panel(run_id: str, version: str, edits: str, *source: str, **crash: int) -> Child:
        return child(
            scenario.data_dir,
            run_id,
            "integrity",
            "panel",
            version,
            edits,
            INPUT,
            *source,
            env=scenario.env(**crash),
        )

    recorded = panel("run_panel_source", "1", "{}")
    assert recorded.result["status"] == "completed", recorded.describe()
    edited = json.dumps({"judge1": "Judge harshly: "})
    # the replay killed right after its RunStarted landed
    killed = panel(RUN, "2", edited, "run_panel_source", LITTLE_CRASH_AFTER_EVENT=1)
    assert killed.killed, killed.describe()
    calls = invoked(scenario)
    done = panel(RUN, "2", edited, "run_panel_source")
    assert done.returncode == 0, done.describe()
    assert done.result["status"] == "failed", done.describe()
    assert (done.result["error"] or "").startswith("PanelMixedError: run run_integrity: step judge")
    events = [x.event for x in scenario.events(RUN)]
    assert isinstance(events[-1], RunFailed)
    assert events[-1].error_type == "PanelMixedError"
    assert [e for e in events if isinstance(e, ModelCalled)] == []
    assert invoked(scenario) == calls  # the fallback's model included: nothing ran


@pytest.mark.kafka
def test_a_caught_session_divergence_still_refuses_the_resume_on_kafka(
    tmp_path: Path, kafka_bootstrap_servers: str, unique: str
) -> None:
    scenario = Scenario(tmp_path, kafka=f"{kafka_bootstrap_servers}|i{unique}.")
    killed = guarded(scenario, LITTLE_CRASH_AFTER_CALL=3)
    assert killed.killed, killed.describe()
    calls = assert_refused_then_resumable(
        scenario,
        json.dumps({"second": "Write a short post from: "}),
        f"SessionDivergedError: run {RUN}: agent call 3 (second#second)",
    )
    assert calls == {**ONCE, "second": 2}
