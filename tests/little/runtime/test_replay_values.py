"""Recorded values are positions of the replay's prefix (seed 003, issue 16 item 1): in a run
replaying a recorded one, ``ctx.now()``, ``ctx.random()`` and ``ctx.uuid4()`` return the
source run's values by place, so a workflow that puts the date in a prompt (as the README
advises) is served; a value the record lacks is produced fresh and ends reuse (the latch)."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import little
from little.events import AgentCallSettled, ValueRecorded
from little.replay import MaterializedRunState, replay_run
from little.runtime import run
from little.runtime._recorded import AgentCalls, RecordedCalls
from tests.little.runtime import replay_workflows as rw

_versions = itertools.count()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[little.World]:
    rw.MODELS.clear()
    with little.local_world(tmp_path) as w:
        yield w


def marks(world: little.World, run_id: str) -> list[tuple[bool, str | None]]:
    return [
        (e.replayed, e.miss_reason)
        for x in world.read_run(run_id)
        if isinstance(e := x.event, AgentCallSettled)
    ]


def values(world: little.World, run_id: str) -> list[ValueRecorded]:
    return [e for x in world.read_run(run_id) if isinstance(e := x.event, ValueRecorded)]


def invoked() -> dict[str, int]:
    return {stage: rw.invocations(stage) for stage in ("research", "outline", "write")}


def dated(**kwargs: bool) -> little.runtime.Workflow:  # type: ignore[type-arg]
    return rw.dated(f"d{next(_versions)}", **kwargs)


def test_a_prompt_with_the_run_date_and_a_uuid_is_served_from_the_record(
    world: little.World,
) -> None:
    first = asyncio.run(run(world, dated(), "Kafka"))
    assert first.status == "completed"
    assert invoked() == {"research": 1, "outline": 1, "write": 1}

    second = asyncio.run(run(world, dated(), "Kafka", replay_from=first.run_id))
    assert second.status == "completed"
    # before: the clock was read fresh, call 0 missed with key-mismatch, nothing was reused
    assert marks(world, second.run_id) == [(True, None)] * 3
    assert invoked() == {"research": 1, "outline": 1, "write": 1}
    assert second.output == first.output
    recorded = [(v.step_path, v.kind, v.ordinal, v.value_json) for v in values(world, first.run_id)]
    served = values(world, second.run_id)
    assert [(v.step_path, v.kind, v.ordinal, v.value_json) for v in served] == recorded
    assert [v.kind for v in served] == ["clock", "uuid"]
    assert {v.source_run_id for v in served} == {first.run_id}
    # the fold keeps where each came from; the source's own values were produced there
    state = replay_run(world, second.run_id).state
    assert {v.source_run_id for v in state.values} == {first.run_id}
    assert {v.source_run_id for v in replay_run(world, first.run_id).state.values} == {None}


def test_a_value_the_record_lacks_is_produced_fresh_and_ends_reuse(world: little.World) -> None:
    first = asyncio.run(run(world, dated(), "Kafka"))
    second = asyncio.run(run(world, dated(extra_random=True), "Kafka", replay_from=first.run_id))
    assert second.status == "completed"
    # write's request is unchanged (it does not use the random), but it comes after a value
    # produced fresh: a later recorded answer may depend on a world that no longer exists
    assert marks(world, second.run_id) == [
        (True, None),
        (True, None),
        (False, "recorded-value-missing"),
    ]
    assert invoked() == {"research": 1, "outline": 1, "write": 2}
    (extra,) = [v for v in values(world, second.run_id) if v.kind == "random"]
    assert extra.source_run_id is None


def test_a_value_of_another_kind_at_a_recorded_place_is_fresh_and_latches_from_there(
    world: little.World,
) -> None:
    first = asyncio.run(run(world, dated(), "Kafka"))
    second = asyncio.run(run(world, dated(random_first=True), "Kafka", replay_from=first.run_id))
    assert second.status == "completed"
    assert marks(world, second.run_id) == [
        (False, "recorded-value-missing"),
        (False, "diverged"),
        (False, "diverged"),
    ]
    assert invoked() == {"research": 2, "outline": 2, "write": 2}
    # every value of the run came after the first fresh one: none was taken from the record
    assert {v.source_run_id for v in values(world, second.run_id)} == {None}


def test_a_resumed_replay_rebuilds_the_latch_of_a_value_produced_fresh(
    world: little.World,
) -> None:
    """The latch of a fresh value must survive a crash: the resumed execution folds its own
    log, where the value says it was not served, and stands where it was asked for."""
    first = asyncio.run(run(world, dated(), "Kafka"))
    second = asyncio.run(run(world, dated(extra_random=True), "Kafka", replay_from=first.run_id))
    state = replay_run(world, second.run_id).state
    (extra,) = [v for v in state.values if v.kind == "random"]
    assert (extra.step_path, extra.admitted_calls) == (None, 2)  # after research and outline
    # as a resume after a crash just before write was admitted would see the run:
    before_write = state.model_copy(
        update={"agent_calls": tuple(c for c in state.agent_calls if c.ordinal < 2)}
    )
    source = RecordedCalls.of(replay_run(world, first.run_id).state)
    calls = AgentCalls.of(before_write, source)
    recorded_write = next(c for c in source.calls.values() if c.ordinal == 2)
    node = (recorded_write.node_phase, recorded_write.node_label, recorded_write.node_occurrence)
    assert calls.decide(2, ("", 2), recorded_write.request_key, node, False) == (
        None,
        "recorded-value-missing",
    )
    # without that value, the same call would be served
    clean = before_write.model_copy(
        update={"values": tuple(v for v in before_write.values if v.kind != "random")}
    )
    served, miss = AgentCalls.of(clean, source).decide(
        2, ("", 2), recorded_write.request_key, node, False
    )
    assert (served is recorded_write, miss) == (True, None)


def test_a_value_in_a_branch_latches_what_the_record_admitted_after_it() -> None:
    """A fresh value ends reuse by the recorded run's admission order, in every branch: a
    sibling's call the recorded run admitted before the value's place is still served, one it
    admitted after is not, whichever order the replay's branches admit in."""
    from little.replay import AgentCall, ParallelGroup, RecordedValue

    def call(ordinal: int, scope: str) -> AgentCall:
        return AgentCall(
            ordinal=ordinal,
            request_key=f"k{ordinal}",
            node_phase=f"{scope}s{ordinal}",
            node_label="s",
            node_occurrence=0,
            scope=scope,
            outcome="succeeded",
            result_json=json.dumps("ok"),
        )

    # recorded: b's first call, then a's, then b's second, then a's second
    recorded = {0: call(0, "g/b/"), 1: call(1, "g/a/"), 2: call(2, "g/b/"), 3: call(3, "g/a/")}
    source = RecordedCalls("run-src", recorded)
    # the replay admitted a's first call first (ordinal 0, served), then read a random in
    # branch a that the record lacks: it stands after recorded call 1
    served_a1 = recorded[1].model_copy(update={"ordinal": 0, "replayed": True})
    own = MaterializedRunState(
        run_id="run-r",
        parallel_groups=(ParallelGroup(group_path="g", branches=("a", "b"), branch_set_hash="h"),),
        agent_calls=(served_a1,),
        values=(
            RecordedValue(
                kind="random", ordinal=0, value_json="0.5", step_path="g/a/s1", admitted_calls=1
            ),
        ),
    )

    def decide(ordinal: int, recorded_ordinal: int, index: int) -> str | None:
        """As the resumed replay decides it, that call next (each is asked alone)."""
        c = recorded[recorded_ordinal]
        return AgentCalls.of(own, source).decide(
            ordinal, (c.scope, index), c.request_key, (c.node_phase, "s", 0), False
        )[1]

    assert decide(1, 0, 0) is None  # branch b's first call: recorded before it, served
    assert decide(2, 2, 1) == "recorded-value-missing"  # branch b's second: recorded after
    assert decide(3, 3, 1) == "recorded-value-missing"  # branch a, after its fresh value


def test_a_retried_step_keeps_one_record_of_its_call_and_replays_served(
    world: little.World,
) -> None:
    """Attempt 2 of a retried step settles the call attempt 1 settled, and reads attempt 1's
    recorded clock: the record stays one proven sequence, and an unchanged replay is served."""
    first_id = "run_retried_source"
    rw.FAIL_ONCE.add(first_id)
    first = asyncio.run(run(world, rw.retried(f"r{next(_versions)}"), "Kafka", run_id=first_id))
    assert first.status == "completed"
    assert rw.invocations("research") == 2  # both attempts asked
    state = replay_run(world, first.run_id).state
    assert state.agent_calls_defect is None
    assert [v.step_path for v in state.values] == ["research"]  # one clock read, kept
    second_id = "run_retried_replay"
    rw.FAIL_ONCE.add(second_id)
    second = asyncio.run(
        run(
            world,
            rw.retried(f"r{next(_versions)}"),
            "Kafka",
            run_id=second_id,
            replay_from=first_id,
        )
    )
    assert second.status == "completed"
    assert {e for e in marks(world, second.run_id)} == {(True, None)}
    assert (rw.invocations("research"), rw.invocations("write")) == (2, 1)


def test_a_revisited_step_has_values_of_its_own_and_replays_served(world: little.World) -> None:
    first = asyncio.run(run(world, rw.looped(f"l{next(_versions)}"), "Kafka"))
    assert first.status == "completed"
    scopes = [(v.step_path, v.ordinal) for v in values(world, first.run_id)]
    assert scopes == [("draft", 0), ("draft@2", 0)]
    second = asyncio.run(
        run(world, rw.looped(f"l{next(_versions)}"), "Kafka", replay_from=first.run_id)
    )
    # before: both visits' clocks sat at ("draft", 0), unproven, and nothing was served
    assert marks(world, second.run_id) == [(True, None), (True, None)]
    assert rw.invocations("draft") == 2
