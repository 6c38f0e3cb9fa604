"""Recorded compaction and configuration hashing on both worlds: a summarising conversation
paused between exchanges resumes reusing its recorded compaction, a replay of it serves every
call and summary, the chat export rebuilds every request, and a strict replay under other
budgets is refused naming the change (embedded, and on the broker)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

import little
from little.chat import model_exchanges
from little.events import RunStarted, SessionCompacted
from little.runtime import resume, run, send_signal
from tests.little.runtime import compaction_workflows as cw
from tests.worlds import world_of_param

PROMPTS = [f"p{i}" for i in range(6)]


@pytest.fixture(params=["embedded", pytest.param("kafka", marks=pytest.mark.kafka)])
def world(request: pytest.FixtureRequest, tmp_path: Path, unique: str) -> Iterator[little.World]:
    cw.REQUESTS.clear()
    cw.INVOCATIONS.clear()
    cw.POLICY["policy"] = cw.summarising()
    with world_of_param(request, tmp_path, f"compaction-{unique}.", data_dir="w") as w:
        yield w


def test_compaction_resumes_replays_and_exports_on_each_world(world: little.World) -> None:
    first = asyncio.run(
        run(world, cw.conversation, {"prompts": PROMPTS, "pause_after": 3}, max_agent_calls=20)
    )
    assert first.status == "waiting"
    asyncio.run(send_signal(world, first.run_id, "go"))
    done = asyncio.run(resume(world, first.run_id, cw.conversation))
    assert done.status == "completed"
    assert cw.INVOCATIONS == {"chat": 6, "summary": 3}  # nothing asked twice
    compacted = [
        e.exchange
        for x in world.read_run(first.run_id)
        if isinstance(e := x.event, SessionCompacted)
    ]
    assert compacted == [3, 4, 5]
    exchanges = model_exchanges(world.read_run(first.run_id), world.artifacts.get)
    sent = [list(r.messages) for _, r in cw.REQUESTS]
    assert [list(x.messages) for x in exchanges] == sent  # in the order they were answered

    inputs = {"prompts": PROMPTS, "pause_after": 3}
    replay = asyncio.run(
        run(world, cw.conversation, inputs, max_agent_calls=20, replay_from=first.run_id)
    )
    assert replay.status == "waiting"  # it waits where the source did: a fresh wait
    asyncio.run(send_signal(world, replay.run_id, "go"))
    replayed = asyncio.run(resume(world, replay.run_id, cw.conversation))
    assert replayed.output == done.output
    assert cw.INVOCATIONS == {"chat": 6, "summary": 3}  # every call and summary served

    strict = asyncio.run(
        run(
            world,
            cw.conversation,
            {"prompts": PROMPTS},
            max_agent_calls=30,
            replay_from=first.run_id,
            replay_mode="strict",
        )
    )
    (started,) = [e for x in world.read_run(strict.run_id) if isinstance(e := x.event, RunStarted)]
    assert started.replay_refused_reason == "configuration-changed"
    assert started.config_changes == ("budgets.max_agent_calls: 20 -> 30",)
