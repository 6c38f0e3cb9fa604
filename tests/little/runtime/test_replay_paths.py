"""The miss and refusal paths of recorded-call replay, each through a real edited workflow
(issue 16 item 12): what a user who edits a pipeline and replays it against its record sees."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

import little
from little.events import AgentCallSettled, RunStarted
from little.replay import replay_run
from little.runtime import run
from little.runtime._recorded import AgentCalls, RecordedCalls
from little.runtime._runner import _sub_runs_fresh
from tests.little.runtime import replay_workflows as rw

_versions = itertools.count()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[little.World]:
    rw.MODELS.clear()
    rw.FAIL.clear()
    with little.local_world(tmp_path) as w:
        yield w


def v() -> str:
    return f"p{next(_versions)}"


def marks(world: little.World, run_id: str) -> list[tuple[str | None, bool, str | None]]:
    return [
        (e.step_path, e.replayed, e.miss_reason)
        for x in world.read_run(run_id)
        if isinstance(e := x.event, AgentCallSettled)
    ]


def invoked(*stages: str) -> dict[str, int]:
    return {stage: rw.invocations(stage) for stage in stages}


def source(world: little.World) -> str:
    first = asyncio.run(run(world, rw.version(v()), "Kafka"))
    assert first.status == "completed"
    return first.run_id


def test_a_renamed_step_misses_with_node_mismatch_and_latches(world: little.World) -> None:
    recorded = source(world)
    # the outline step is renamed "plan"; its prompt and model are the same
    result = asyncio.run(
        run(world, rw.reshaped(v(), outline_step="plan"), "Kafka", replay_from=recorded)
    )
    assert result.status == "completed"
    assert marks(world, result.run_id) == [
        ("research", True, None),
        ("plan", False, "node-mismatch"),
        ("write", False, "diverged"),
    ]
    assert invoked("research", "outline", "write") == {"research": 1, "outline": 2, "write": 2}


def test_a_stage_added_at_the_end_misses_with_no_record(world: little.World) -> None:
    recorded = source(world)
    result = asyncio.run(run(world, rw.reshaped(v(), review=True), "Kafka", replay_from=recorded))
    assert result.status == "completed"
    assert marks(world, result.run_id) == [
        ("research", True, None),
        ("outline", True, None),
        ("write", True, None),
        ("review", False, "no-record"),
    ]
    assert invoked("research", "outline", "write", "review") == {
        "research": 1,
        "outline": 1,
        "write": 1,
        "review": 1,
    }


def test_a_source_run_that_made_no_agent_call_is_refused_with_no_recorded_calls(
    world: little.World,
) -> None:
    empty = asyncio.run(run(world, rw.callless(v()), "Kafka"))
    assert empty.status == "completed"
    result = asyncio.run(run(world, rw.version(v()), "Kafka", replay_from=empty.run_id))
    assert result.status == "completed"
    started = next(e for x in world.read_run(result.run_id) if isinstance(e := x.event, RunStarted))
    assert (started.replay_source_run_id, started.replay_refused_reason) == (
        empty.run_id,
        "no-recorded-calls",
    )
    # refused: every call ran fresh, and none names a miss (nothing was offered)
    assert marks(world, result.run_id) == [
        ("research", False, None),
        ("outline", False, None),
        ("write", False, None),
    ]


def test_a_recorded_failure_latches_a_later_call_whose_request_is_unchanged(
    world: little.World,
) -> None:
    rw.FAIL.add("outline")
    first = asyncio.run(run(world, rw.tolerant(v()), "Kafka"))
    assert first.status == "completed"  # the workflow caught outline's failure
    assert first.output[1] == "no outline"
    rw.FAIL.clear()  # the model is back
    second = asyncio.run(run(world, rw.tolerant(v()), "Kafka", replay_from=first.run_id))
    assert second.status == "completed"
    # write's request is byte-identical to the recorded one (it reads research only), but it
    # was recorded after an outline call that now ran again: it is not served
    assert marks(world, second.run_id) == [
        ("research", True, None),
        ("outline", False, "recorded-failure"),
        ("write", False, "diverged"),
    ]
    assert invoked("research", "outline", "write") == {"research": 1, "outline": 2, "write": 2}


def test_a_changed_sub_run_latches_the_calls_after_it(world: little.World) -> None:
    """A replaying run's sub-run whose own call changed diverges inside itself (it replays the
    recorded sub-run up to there): the parent's later calls came after work that happened
    again, so they are not served even when unchanged. An unchanged one latches nothing
    (tests/integration/test_replay_sub_runs.py)."""
    first = asyncio.run(run(world, rw.parent(v()), "Kafka"))
    assert first.status == "completed"
    second = asyncio.run(
        run(world, rw.parent(v(), sketch="Draw "), "Kafka", replay_from=first.run_id)
    )
    assert second.status == "completed"
    assert marks(world, second.run_id) == [
        ("research", True, None),
        ("write", False, "sub-run-fresh"),
    ]
    assert invoked("research", "sketch", "write") == {"research": 1, "sketch": 2, "write": 2}
    (sub,) = replay_run(world, second.run_id).state.sub_runs
    assert marks(world, sub.sub_run_id) == [("sketch", False, "key-mismatch")]

    # a resume rebuilds that latch from the logs: the sub-run did fresh work, and it stands
    # where it was reserved; had it replayed whole, nothing would be latched
    unchanged = asyncio.run(run(world, rw.parent(v()), "Kafka", replay_from=first.run_id))
    source = RecordedCalls.of(replay_run(world, first.run_id).state)
    write = source.calls[1]
    node = (write.node_phase, write.node_label, write.node_occurrence)
    for run_id, expected in ((second.run_id, "sub-run-fresh"), (unchanged.run_id, None)):
        state = replay_run(world, run_id).state
        (sub,) = state.sub_runs
        assert sub.admitted_calls == 1
        before_write = state.model_copy(
            update={"agent_calls": tuple(c for c in state.agent_calls if c.ordinal < 1)}
        )
        fresh = _sub_runs_fresh(world, before_write, source)
        assert fresh == {sub.sub_run_id: expected is not None}
        calls = AgentCalls.of(before_write, source, fresh)
        assert calls.decide(1, ("", 1), write.request_key, node, False)[1] == expected
