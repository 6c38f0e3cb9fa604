"""A session whose exchange is served from a recorded run advances exactly as the recorded one
did: turn numbers, the request hash chain, and its turn count."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import little
from little.events import AgentCallSettled, ModelCalled, SessionCompleted
from little.replay import replay_run
from little.runtime import run
from tests.little.runtime import replay_workflows as rw


def test_a_served_exchange_advances_the_session_as_the_recorded_one_did(tmp_path: Path) -> None:
    rw.MODELS.pop("talk", None)  # counts this test's models only
    with little.local_world(tmp_path / "w") as world:
        source = asyncio.run(run(world, rw.two_exchanges("s1", "Say it shorter."), None))
        assert source.status == "completed"
        edited = rw.two_exchanges("s2", "Say it in five words.")
        replay = asyncio.run(run(world, edited, None, replay_from=source.run_id))
        assert replay.status == "completed"

        def events(run_id: str) -> list[object]:
            return [r.event for r in world.read_run(run_id)]

        src, rep = events(source.run_id), events(replay.run_id)
    settled = [(e.ordinal, e.replayed) for e in rep if isinstance(e, AgentCallSettled)]
    assert settled == [(0, True), (1, False)]  # the first exchange served, the edited one fresh
    src_calls = [e for e in src if isinstance(e, ModelCalled)]
    (fresh,) = [e for e in rep if isinstance(e, ModelCalled)]
    assert [e.turn for e in src_calls] == [1, 2, 3]
    assert fresh.turn == 3  # numbered after the served exchange's two turns, as recorded
    assert fresh.previous_request_hash == src_calls[1].request_hash  # the chain goes on
    (src_done,) = [e for e in src if isinstance(e, SessionCompleted)]
    (rep_done,) = [e for e in rep if isinstance(e, SessionCompleted)]
    assert (src_done.turns, rep_done.turns) == (3, 3)
    assert rw.invocations("talk") == 4  # 3 for the source run, 1 for the edited exchange


def test_a_recorded_answer_that_cannot_be_served_ends_the_replay_there(tmp_path: Path) -> None:
    """When serving a recorded call fails (its artifact is gone) and the workflow catches the
    error, no later call is served from the record, and the report names the failure."""
    from little.errors import ArtifactNotFoundError
    from little.report import report_data

    rw.MODELS.pop("long", None)
    with little.local_world(tmp_path / "w") as world:
        source = asyncio.run(run(world, rw.long_answers("l1"), None))
        assert source.status == "completed"
        first = next(
            r.event
            for r in world.read_run(source.run_id)
            if isinstance(r.event, AgentCallSettled) and r.event.ordinal == 0
        )
        assert first.result_ref is not None  # the answer sits in the artifact store
        world.artifacts.path_for(first.result_ref.sha256).unlink()
        with pytest.raises(ArtifactNotFoundError):
            world.artifacts.get(first.result_ref)

        replay = asyncio.run(run(world, rw.long_answers("l2"), None, replay_from=source.run_id))
        assert replay.status == "completed"
        assert replay.output[0] == "failed: ArtifactNotFoundError"
        assert replay.output[1] == "bbb"
        settled = [
            (e.ordinal, e.outcome, e.replayed, e.miss_reason)
            for e in (r.event for r in world.read_run(replay.run_id))
            if isinstance(e, AgentCallSettled)
        ]
        section = report_data(replay_run(world, replay.run_id))["replay"]
    assert settled == [
        (0, "failed", False, "recorded-result-unusable"),
        (1, "succeeded", False, "diverged"),  # would have been served: the latch holds
    ]
    assert (section["replayed_calls"], section["diverged_at_call"], section["miss_reason"]) == (
        0,
        0,
        "recorded-result-unusable",
    )
    assert rw.invocations("long") == 3  # the source's two calls, then the second one fresh
