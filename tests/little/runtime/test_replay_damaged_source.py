"""A damaged source log (issue 16 item 3, seed 003 "Damaged logs never compact ordinals"):
the replay uses the proven prefix of the record and runs fresh from the first unproven
position, saying why; it never crashes, and it never closes a gap up."""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import little
from little.events import AgentCallAdmitted, AgentCallSettled, Event, EventCodec, ValueRecorded
from little.replay import replay_run
from little.runtime import run
from tests.little.runtime import replay_workflows as rw

_versions = itertools.count()
CODEC = EventCodec()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[little.World]:
    rw.MODELS.clear()
    rw.FAIL.clear()
    with little.local_world(tmp_path) as w:
        yield w


def rewrite(
    tmp_path: Path, run_id: str, pick: Callable[[Event], bool], payload: Callable[[Event], bytes]
) -> int:
    """Rewrite the source run's records that ``pick`` selects in the embedded log's file, as
    a damaged disk or a foreign writer would leave them; returns how many."""
    with sqlite3.connect(tmp_path / "log.sqlite3") as db:
        rows = db.execute(
            'SELECT topic, partition, "offset", payload FROM records WHERE run_id = ?',
            (run_id,),
        ).fetchall()
        changed = 0
        for topic, partition, offset, data in rows:
            event = CODEC.decode(data)
            if pick(event):
                db.execute(
                    'UPDATE records SET payload = ? WHERE topic = ? AND partition = ? AND "offset" = ?',
                    (payload(event), topic, partition, offset),
                )
                changed += 1
    return changed


def of_ordinal(ordinal: int) -> Callable[[Event], bool]:
    def pick(e: Event) -> bool:
        return isinstance(e, AgentCallAdmitted | AgentCallSettled) and e.ordinal == ordinal

    return pick


def renumbered(ordinal: int) -> Callable[[Event], bytes]:
    return lambda e: CODEC.encode(e.model_copy(update={"ordinal": ordinal}))


def marks(world: little.World, run_id: str) -> list[tuple[bool, str | None]]:
    return [
        (e.replayed, e.miss_reason)
        for x in world.read_run(run_id)
        if isinstance(e := x.event, AgentCallSettled)
    ]


def invoked() -> dict[str, int]:
    return {stage: rw.invocations(stage) for stage in ("research", "outline", "write")}


def replay(world: little.World, source: str) -> little.runtime.RunResult:
    result = asyncio.run(run(world, rw.version(f"r{next(_versions)}"), "Kafka", replay_from=source))
    assert result.status == "completed"
    return result


def source_run(world: little.World) -> str:
    first = asyncio.run(run(world, rw.version(f"s{next(_versions)}"), "Kafka"))
    assert first.status == "completed"
    return first.run_id


def test_an_undecodable_source_record_ends_the_proven_prefix_there(
    world: little.World, tmp_path: Path
) -> None:
    source = source_run(world)
    # the write stage's admission no longer decodes: the reader stops before it
    assert (
        rewrite(
            tmp_path,
            source,
            lambda e: isinstance(e, AgentCallAdmitted) and e.ordinal == 2,
            lambda e: b"\xc3\x01not avro at all",
        )
        == 1
    )
    second = replay(world, source)  # before: RecordDecodeError, a run holding only its claim
    assert marks(world, second.run_id) == [
        (True, None),
        (True, None),
        (False, "recorded-log-unreadable"),
    ]
    assert invoked() == {"research": 1, "outline": 1, "write": 2}


def test_a_broken_source_stream_ends_the_proven_prefix_before_the_break(
    world: little.World, tmp_path: Path
) -> None:
    source = source_run(world)
    # a seq gap in front of outline's settlement: nothing from there on is proven
    rewrite(
        tmp_path,
        source,
        lambda e: isinstance(e, AgentCallSettled) and e.ordinal == 1,
        lambda e: CODEC.encode(e.model_copy(update={"seq": e.seq + 5})),
    )
    second = replay(world, source)
    # outline's admission is proven but not its answer, which lay past the break: it runs
    # again, saying why, and so does write
    assert marks(world, second.run_id) == [
        (True, None),
        (False, "recorded-log-unreadable"),
        (False, "diverged"),
    ]
    assert invoked() == {"research": 1, "outline": 2, "write": 2}


def test_a_duplicated_recorded_ordinal_is_never_overwritten(
    world: little.World, tmp_path: Path
) -> None:
    source = source_run(world)
    # the write stage's records now claim outline's ordinal
    assert rewrite(tmp_path, source, of_ordinal(2), renumbered(1)) == 2
    folded = replay_run(world, source).state
    # the fold keeps the first record of ordinal 1 and names the first defect and where it is
    assert [c.node_phase for c in folded.agent_calls] == ["research", "outline"]
    assert folded.agent_calls_defect is not None
    assert folded.agent_calls_defect.startswith("agent call 1 admitted twice (seq ")
    assert " offset " in folded.agent_calls_defect
    assert folded.agent_calls_defect_ordinal == 1
    second = replay(world, source)
    assert marks(world, second.run_id) == [
        (True, None),
        (False, "recorded-sequence-invalid"),
        (False, "diverged"),
    ]
    assert invoked() == {"research": 1, "outline": 2, "write": 2}


def test_a_missing_recorded_ordinal_is_never_closed_up(world: little.World, tmp_path: Path) -> None:
    source = source_run(world)
    # outline's records are renumbered out of the sequence: ordinal 1 is missing. Closed up,
    # write's record would stand in outline's place
    assert rewrite(tmp_path, source, of_ordinal(1), renumbered(7)) == 2
    second = replay(world, source)
    assert marks(world, second.run_id) == [
        (True, None),
        (False, "recorded-sequence-invalid"),
        (False, "diverged"),
    ]


def test_a_missing_recorded_value_position_is_produced_fresh(
    world: little.World, tmp_path: Path
) -> None:
    first = asyncio.run(run(world, rw.dated(f"v{next(_versions)}"), "Kafka"))
    # the outline step's uuid moves to ordinal 1 of its scope: ordinal 0 is missing
    assert (
        rewrite(
            tmp_path,
            first.run_id,
            lambda e: isinstance(e, ValueRecorded) and e.kind == "uuid",
            renumbered(1),
        )
        == 1
    )
    second = asyncio.run(
        run(world, rw.dated(f"v{next(_versions)}"), "Kafka", replay_from=first.run_id)
    )
    assert second.status == "completed"
    uuids = [
        e
        for x in world.read_run(second.run_id)
        if isinstance(e := x.event, ValueRecorded) and e.kind == "uuid"
    ]
    assert [e.source_run_id for e in uuids] == [None]
    # the fresh uuid latched the replay where it was asked for, before outline's call
    assert marks(world, second.run_id) == [
        (True, None),
        (False, "recorded-value-missing"),
        (False, "diverged"),
    ]
