"""A compaction survives SIGKILL: a conversation whose history is summarised (each summary a
recorded agent call) killed after any of its events, or right after any model call returned,
resumes in a new process to the uncrashed outcome, with the same compactions, a chat export
that rebuilds the same requests, and no summary or answer whose record landed asked again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from little import local_world
from little.chat import model_exchanges
from little.events import SessionCompacted
from tests.crash.support import Scenario, child, each_crash_point

RUN = "run_compaction"
INPUT = json.dumps({"prompts": [f"p{i}" for i in range(6)]})


def conversation(scenario: Scenario, **env: str | int) -> dict[str, Any]:
    done = child(scenario.data_dir, RUN, "compaction", "summary", INPUT, env=scenario.env(**env))
    if env:
        assert done.killed, done.describe()
        return {}
    assert done.returncode == 0, done.describe()
    return done.result


def compactions(scenario: Scenario) -> list[tuple[int, int, str]]:
    return [
        (e.exchange, e.replaced_messages, e.history_hash)
        for x in scenario.events(RUN)
        if isinstance(e := x.event, SessionCompacted)
    ]


def requests(scenario: Scenario) -> list[tuple[str, int, Any, str]]:
    with local_world(scenario.data_dir) as world:
        exchanges = model_exchanges(world.read_run(RUN), world.artifacts.get)
    return [(x.session_id, x.turn, list(x.messages), x.request_hash) for x in exchanges]


@pytest.mark.slow  # a crash matrix: make test runs it, make test-fast leaves it out
def test_a_compacting_conversation_killed_anywhere_resumes_to_the_uncrashed_outcome(
    tmp_path: Path,
) -> None:
    reference = Scenario(tmp_path / "reference")
    expected = conversation(reference)
    assert expected["status"] == "completed"
    expected_compactions = compactions(reference)
    assert [c[0] for c in expected_compactions] == [3, 4, 5]
    expected_requests = requests(reference)
    assert len(expected_requests) == 9  # six answers and three summaries
    assert len(reference.calls("compaction-summary")) == 3
    appended = len(reference.events(RUN))

    crashes: list[dict[str, int]] = [{"LITTLE_CRASH_AFTER_EVENT": k} for k in range(appended)]
    crashes += [{"LITTLE_CRASH_AFTER_CALL": n} for n in range(9)]

    def crash_and_resume(numbered: tuple[int, dict[str, int]]) -> None:
        n, crash = numbered
        scenario = Scenario(tmp_path / f"crash-{n}")
        conversation(scenario, **crash)
        resumed = conversation(scenario)
        assert resumed == expected, crash
        assert compactions(scenario) == expected_compactions, crash
        assert requests(scenario) == expected_requests, crash
        # a call whose record landed is never asked again: at most the one the kill left
        # without its record runs twice
        summaries = len(scenario.calls("compaction-summary"))
        answers = len(scenario.calls("compaction-chat"))
        assert 9 <= summaries + answers <= 10, (crash, summaries, answers)

    each_crash_point(enumerate(crashes), crash_and_resume)
