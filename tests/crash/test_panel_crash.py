"""A panel survives SIGKILL: a run killed after any of its events (or right after any model
call returned, before its record), mid-panel included, resumes in a new process to the
uncrashed outcome; a leg whose call settled before the kill is never invoked again; a replay
that serves the panel stays served across the kill."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from little.events import AgentCallSettled
from tests.crash.support import Scenario, child, each_crash_point

SOURCE = "run_panel_source"
REPLAY = "run_panel_replay"
INPUT = json.dumps("Kafka")
LEGS = ("judge0", "judge1", "judge2")


def panel(scenario: Scenario, run_id: str, *args: str, **env: str | int) -> dict[str, object]:
    done = child(scenario.data_dir, run_id, "panel", *args, env=scenario.env(**env))
    if env:
        assert done.killed, done.describe()
        return {}
    assert done.returncode == 0, done.describe()
    return done.result


def copy(base: Scenario, root: Path) -> Scenario:
    shutil.copytree(base.root, root)
    return Scenario(root)


def settled(scenario: Scenario, run_id: str) -> dict[int, tuple[str | None, bool]]:
    """Each ordinal's last settlement: (outcome, replayed)."""
    return {
        e.ordinal: (e.outcome, e.replayed)
        for x in scenario.events(run_id)
        if isinstance(e := x.event, AgentCallSettled)
    }


@pytest.mark.slow  # a crash matrix: make test runs it, make test-fast leaves it out
def test_a_fresh_panel_killed_anywhere_resumes_to_the_uncrashed_outcome(tmp_path: Path) -> None:
    reference = Scenario(tmp_path / "reference")
    expected = panel(reference, SOURCE, "1", "{}", INPUT)
    assert expected["status"] == "completed", expected
    appended = len(reference.events(SOURCE))

    crashes = [{"LITTLE_CRASH_AFTER_EVENT": k} for k in range(appended)]
    crashes += [{"LITTLE_CRASH_AFTER_CALL": n} for n in range(4)]  # research, then each leg

    def crash_and_resume(numbered: tuple[int, dict[str, int]]) -> bool:
        """Whether the kill fell between the panel's first and last settlement."""
        n, crash = numbered
        scenario = Scenario(tmp_path / f"crash-{n}")
        panel(scenario, SOURCE, "1", "{}", INPUT, **crash)
        landed = settled(scenario, SOURCE)
        resumed = panel(scenario, SOURCE, "1", "{}", INPUT)
        assert resumed == expected, crash
        assert settled(scenario, SOURCE) == {o: ("succeeded", False) for o in range(4)}, crash
        for ordinal, leg in enumerate(LEGS, start=1):
            calls = len(scenario.calls(f"panel-{leg}"))
            # a leg settled before the kill is served from the log; one in flight runs again
            assert calls == (1 if ordinal in landed else calls), crash
            assert 1 <= calls <= 2, (crash, leg, calls)
        return 1 in landed and len(landed) < 4

    mid_panel = sum(each_crash_point(enumerate(crashes), crash_and_resume))
    assert mid_panel > 0, "no crash point fell between the panel's first and last settlement"


@pytest.mark.slow  # a crash matrix: make test runs it, make test-fast leaves it out
def test_a_served_panel_killed_anywhere_stays_served(tmp_path: Path) -> None:
    base = Scenario(tmp_path / "base")
    assert panel(base, SOURCE, "1", "{}", INPUT)["status"] == "completed"
    reference = copy(base, tmp_path / "reference")
    expected = panel(reference, REPLAY, "2", "{}", INPUT, SOURCE)
    assert expected["status"] == "completed", expected
    assert settled(reference, REPLAY) == {o: ("succeeded", True) for o in range(4)}
    appended = len(reference.events(REPLAY))

    def crash_and_resume(k: int) -> None:
        scenario = copy(base, tmp_path / f"crash-{k}")
        panel(scenario, REPLAY, "2", "{}", INPUT, SOURCE, LITTLE_CRASH_AFTER_EVENT=k)
        resumed = panel(scenario, REPLAY, "2", "{}", INPUT, SOURCE)
        assert resumed == expected, k
        assert settled(scenario, REPLAY) == {o: ("succeeded", True) for o in range(4)}, k
        # no model of the replay was ever invoked: each one call is the source run's
        for name in ("research", *LEGS):
            assert len(scenario.calls(f"panel-{name}")) == 1, (k, name)

    each_crash_point(range(appended), crash_and_resume)
