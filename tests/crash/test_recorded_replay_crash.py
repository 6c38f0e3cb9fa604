"""Recorded-call replay survives SIGKILL: a replaying run killed after any of its events, or
right after its one fresh model call returned, resumes in a new process to the outcome of an
uncrashed replay, and the stages served from the record never invoke their models."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from little.events import AgentCallSettled, SubRunReserved
from tests.crash.support import Scenario, child, each_crash_point, process_order

SOURCE = "run_replay_source"
REPLAY = "replay_in_mode"
INPUT = json.dumps("Kafka")
EDIT = json.dumps({"write": "Write a short post from: "})


def pipeline(scenario: Scenario, run_id: str, *args: str, **env: str | int) -> dict[str, object]:
    done = child(scenario.data_dir, run_id, "replay-pipeline", *args, env=scenario.env(**env))
    if env:
        assert done.killed, done.describe()
        return {}
    assert done.returncode == 0, done.describe()
    return done.result


def copy(base: Scenario, root: Path) -> Scenario:
    shutil.copytree(base.root, root)
    return Scenario(root)


def marks(scenario: Scenario) -> list[tuple[int, bool, str | None]]:
    return [
        (e.ordinal, e.replayed, e.miss_reason)
        for x in scenario.events(REPLAY)
        if isinstance(e := x.event, AgentCallSettled)
    ]


@pytest.mark.slow  # a crash matrix: make test runs it, make test-fast leaves it out
def test_a_replay_killed_anywhere_resumes_to_the_uncrashed_outcome(tmp_path: Path) -> None:
    base = Scenario(tmp_path / "base")
    assert pipeline(base, SOURCE, "1", "{}", INPUT)["status"] == "completed"

    reference = copy(base, tmp_path / "reference")
    expected = pipeline(reference, REPLAY, "2", EDIT, INPUT, SOURCE)
    assert expected["status"] == "completed"
    expected_marks = marks(reference)
    assert expected_marks == [(0, True, None), (1, True, None), (2, False, "key-mismatch")]
    # the result's envelope; a resumed execution's (the state it claimed, plus the agent calls
    # it landed) must equal it: ``resumed == expected`` below compares it too
    assert expected["replay"] == {
        "replayed": True,
        "recorded": True,
        "source_run_id": SOURCE,
        "refused_reason": None,
        "not_recorded_reason": None,
        "replayed_calls": 2,
        "fresh_calls": 1,
        "diverged_at_call": 2,
        "diverged_at_node": ["write", "write", 0],
        "miss_reason": "key-mismatch",
        "mode": "repairable",
        "model": None,
        "live_tools": None,
    }
    # every event the replaying process acked: its claim, and the run's own events
    appended = len(reference.events(REPLAY))

    crashes = [{"LITTLE_CRASH_AFTER_EVENT": k} for k in range(appended)]
    crashes.append({"LITTLE_CRASH_AFTER_CALL": 0})  # the fresh model call, before its record

    def crash_and_resume(numbered: tuple[int, dict[str, int]]) -> None:
        n, crash = numbered
        scenario = copy(base, tmp_path / f"crash-{n}")
        pipeline(scenario, REPLAY, "2", EDIT, INPUT, SOURCE, **crash)
        resumed = pipeline(scenario, REPLAY, "2", EDIT, INPUT, SOURCE)
        assert resumed == expected, crash
        assert marks(scenario) == expected_marks, crash
        # served stages never invoked a model: their one call each is the source run's
        assert len(scenario.calls("replay-research")) == 1, crash
        assert len(scenario.calls("replay-outline")) == 1, crash
        # the fresh stage: the source's call, plus the replay's, plus at most one re-run of
        # a call the kill left without its record
        assert 2 <= len(scenario.calls("replay-write")) <= 3, crash

    each_crash_point(enumerate(crashes), crash_and_resume)


PARENT_SOURCE = "parent_source"
PARENT_REPLAY = "parent_replay"
EDIT_RESEARCH = json.dumps({"research": "Find news about "})


def parent(scenario: Scenario, run_id: str, *args: str, **env: str | int) -> dict[str, object]:
    done = child(scenario.data_dir, run_id, "replay-parent", *args, env=scenario.env(**env))
    if env:
        assert done.killed, done.describe()
        return {}
    assert done.returncode == 0, done.describe()
    return done.result


def test_a_sub_run_the_replay_ran_fresh_runs_fresh_after_a_kill_before_it_started(
    tmp_path: Path,
) -> None:
    """The parent's first call is edited, so it misses and the sub-run after it (unchanged)
    runs fresh. Killed right after the sub-run's reservation, before its RunStarted, the
    resume must decide as the live run did: fresh, not a replay of the recorded sub-run."""
    base = Scenario(tmp_path / "base")
    assert parent(base, PARENT_SOURCE, "1", "{}", INPUT)["status"] == "completed"
    assert len(base.calls("replay-sketch")) == 1

    reference = copy(base, tmp_path / "reference")
    expected = parent(reference, PARENT_REPLAY, "2", EDIT_RESEARCH, INPUT, PARENT_SOURCE)
    assert expected["status"] == "completed"
    assert len(reference.calls("replay-sketch")) == 2  # the sub-run ran fresh
    order = process_order(reference, PARENT_REPLAY)
    (at,) = [i for i, (_, e) in enumerate(order) if isinstance(e, SubRunReserved)]

    crashed = copy(base, tmp_path / "crashed")
    parent(
        crashed,
        PARENT_REPLAY,
        "2",
        EDIT_RESEARCH,
        INPUT,
        PARENT_SOURCE,
        LITTLE_CRASH_AFTER_EVENT=at,
    )
    (sub,) = crashed.fold(PARENT_REPLAY).sub_runs
    assert crashed.fold(sub.sub_run_id).workflow is None  # reserved, never started
    resumed = parent(crashed, PARENT_REPLAY, "2", EDIT_RESEARCH, INPUT, PARENT_SOURCE)
    assert resumed == expected
    assert len(crashed.calls("replay-sketch")) == 2  # fresh, as in the uncrashed replay
    assert crashed.fold(sub.sub_run_id).replay_source_run_id is None
