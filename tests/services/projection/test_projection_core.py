"""The projection core and the port driver on the embedded world (no broker).

Each test compares the projection with a clean fold of the log: the store must hold exactly
what folding every run from scratch gives, whatever happened to offsets and stores between.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

import little
from little.events import Event, EventCodec, RunCancelled, event_headers
from little.log import DLQ_TOPIC, EmbeddedEventLog, OutgoingRecord, ResetTo
from little.replay import (
    MaterializedRunState,
    decode_snapshot,
    materialize_run_state_from_events,
    replay_run,
)
from little_services.projection import (
    DLQ_OFFSET,
    DLQ_PARTITION,
    DLQ_REASON,
    DLQ_TOPIC_HEADER,
    ProjectionConfig,
    ProjectionCore,
    ProjectionStore,
    ProjectorTotals,
    RunQuery,
    SqliteProjectionStore,
    create_projector,
    rebuild,
    replay_from_state,
)
from tests.projection_runs import clean_fold, run_events, write_interleaved
from tests.sample_runs import first_writer, second_writer

PARTITIONS = 4


@pytest.fixture
def world(tmp_path: Path) -> Iterator[little.World]:
    with little.local_world(tmp_path / "w", partitions=PARTITIONS, synchronous="NORMAL") as w:
        yield w


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteProjectionStore]:
    with SqliteProjectionStore(tmp_path / "projection.sqlite3", synchronous="NORMAL") as s:
        yield s


def config(**kw: object) -> ProjectionConfig:
    return ProjectionConfig(**{"batch_size": 37, "snapshot_every": 25, **kw})  # type: ignore[arg-type]


def project(
    world: little.World, store: ProjectionStore, cfg: ProjectionConfig | None = None
) -> ProjectorTotals:
    with create_projector(world, store, cfg or config()) as projector:
        return projector.run(until_caught_up=True)


def write_sample(world: little.World, runs: int = 12) -> dict[str, list[Event]]:
    streams = {f"run-{i:02d}": run_events(f"run-{i:02d}", 60 + i) for i in range(runs)}
    streams["open-run"] = run_events("open-run", 33, complete=False)
    write_interleaved(world, streams, chunk=7)
    world.append(first_writer("resumed"))
    world.append([little.events.RunClaimed(run_id="resumed", epoch=2, owner="w2", observed_seq=9)])
    world.append(second_writer("resumed", 9))
    return streams


def states(store: ProjectionStore, run_ids: object) -> dict[str, MaterializedRunState]:
    return {r: rec.state for r, rec in store.get_many(run_ids).items()}  # type: ignore[arg-type]


def assert_equals_clean_fold(world: little.World, store: ProjectionStore) -> None:
    expected = clean_fold(world)
    assert states(store, expected) == expected
    assert store.count_by_status().get("integrity_error", 0) == 0


def test_projection_equals_a_clean_fold_and_commits_its_cursors(
    world: little.World, store: ProjectionStore
) -> None:
    write_sample(world)
    totals = project(world, store)
    assert_equals_clean_fold(world, store)
    ends = world.log.end_offsets()
    assert world.cursors.committed("little-projector") == ends
    assert {p: (c.covered, c.previous) for p, c in store.cursors(world.log.topic).items()} == {
        p: (e, e) for p, e in ends.items()
    }
    assert totals.consumed == totals.folded == sum(ends.values())
    assert totals.duplicates == totals.dead_letters == 0
    resumed = store.get("resumed")
    assert resumed is not None
    assert resumed.state.status == "completed"
    assert resumed.state.avoided_usage.calls == 1


def test_snapshots_every_n_events_and_at_run_end(
    world: little.World, store: ProjectionStore
) -> None:
    streams = write_sample(world)
    totals = project(world, store)
    assert totals.snapshots > len(streams)  # several per run, not only at the end
    for run_id in streams:
        snap = decode_snapshot(world.snapshots.get(run_id) or b"")
        stored = store.get(run_id)
        assert stored is not None
        if stored.state.terminal:
            assert snap.state == stored.state
        else:  # the newest multiple of snapshot_every
            assert snap.state.events_applied // 25 == stored.state.events_applied // 25
        replayed = replay_run(world, run_id)
        assert replayed.from_snapshot == snap.position
        assert replayed.state == stored.state


def test_applying_a_batch_twice_changes_nothing(
    world: little.World, store: ProjectionStore
) -> None:
    write_sample(world, runs=3)
    core = ProjectionCore(world, store, config(batch_size=10_000))
    start = core.open_partition(1, None)
    records = world.log.read_partition(1, start, limit=10_000)
    first = core.fold(1, records)
    core.persist([first])
    assert first.folded == len(records)
    assert first.records
    before = states(store, first.records)
    core.seek(1, start)
    again = core.fold(1, records)
    assert again.records == {}
    assert again.dead_letters == []
    # a seek means the commit failed: snapshots of the stored states are sent again, unchanged
    assert {r: decode_snapshot(b).state for r, b in again.snapshots} == {
        r: before[r] for r, _ in again.snapshots
    }
    assert again.duplicates == len(records)
    assert again.folded == 0
    core.persist([again])
    assert states(store, first.records) == before


def test_a_crash_between_store_write_and_commit_resumes_by_offset(
    world: little.World, store: ProjectionStore
) -> None:
    write_sample(world)
    core = ProjectionCore(world, store, config())
    done = 0
    for p in range(PARTITIONS):  # store written, cursor never committed: the process "died"
        core.open_partition(p, None)
        batch = core.fold(p, world.log.read_partition(p, 0, limit=50))
        core.persist([batch])
        done += batch.consumed
    assert world.cursors.committed("little-projector") == {}
    totals = project(world, store)
    assert totals.duplicates == done  # re-delivered, recognised by offset, not refolded
    assert totals.refolded_runs == 0
    assert_equals_clean_fold(world, store)


def _garbage(world: little.World, run_id: str, payload: bytes) -> None:
    world.log.append(run_id, [OutgoingRecord(payload, (("little.type", b"StepStarted"),))])


def test_poison_records_go_to_the_dlq_and_mark_their_run(
    world: little.World, store: ProjectionStore, tmp_path: Path
) -> None:
    good = run_events("good", 80)
    bad = run_events("undecodable", 80)
    gap = run_events("gap", 80)
    world.append(bad[:40])
    _garbage(world, "undecodable", b"\xc3\x01not avro at all")
    world.append(bad[40:])
    world.append(gap[:30])
    world.append(gap[31:])  # seq 29 is missing
    world.append(good)
    _garbage(world, "", b"no key")
    totals = project(world, store)

    undecodable = store.get("undecodable")
    assert undecodable is not None
    assert undecodable.status == "integrity_error"
    assert undecodable.integrity is not None
    assert undecodable.integrity.reason == "unknown-fingerprint"
    assert undecodable.integrity.offset == 40 + world.log.first_offset("undecodable")  # type: ignore[operator]
    assert undecodable.integrity.skipped == 40
    logged = [world.decode(r) for r in list(world.log.read_run("undecodable"))[:40]]
    assert undecodable.state == materialize_run_state_from_events(logged)

    broken = store.get("gap")
    assert broken is not None
    assert broken.integrity is not None
    assert broken.integrity.reason == "stream-integrity"
    assert "seq gap: expected seq 29, found 30" in broken.integrity.message
    assert broken.integrity.skipped == 48
    assert broken.state.last_seq == 28

    assert store.get("good").state == replay_run(world, "good").state  # type: ignore[union-attr]
    assert totals.dead_letters == 3
    assert totals.skipped == 40 + 48
    assert [s.run_id for s in store.list_runs(RunQuery(status="integrity_error")).runs] == [
        "gap",
        "undecodable",
    ]

    dlq = EmbeddedEventLog(tmp_path / "w" / "log.sqlite3", topic=DLQ_TOPIC, partitions=PARTITIONS)
    letters = [r for p in range(PARTITIONS) for r in dlq.read_partition(p, 0)]
    dlq.close()
    by_run = {r.run_id: r for r in letters}
    assert set(by_run) == {"undecodable", "gap", ""}
    letter = by_run["undecodable"]
    assert letter.payload == b"\xc3\x01not avro at all"
    assert letter.header(DLQ_REASON) == b"unknown-fingerprint"
    assert letter.header(DLQ_TOPIC_HEADER) == world.log.topic.encode()
    assert letter.header(DLQ_PARTITION) == str(world.log.partition_for("undecodable")).encode()
    assert letter.header(DLQ_OFFSET) == str(undecodable.integrity.offset).encode()
    assert letter.header("little.type") == b"StepStarted"  # the record's own headers stay
    assert by_run["gap"].header(DLQ_REASON) == b"stream-integrity"
    assert by_run[""].header(DLQ_REASON) == b"no-run-id"

    # Later records of a marked run are counted, not folded, and never crash the projector.
    world.append([bad[-1].model_copy(update={"seq": 200})])
    project(world, store)
    assert store.get("undecodable").integrity.skipped == 41  # type: ignore[union-attr]


def _tamper(store: SqliteProjectionStore) -> None:
    conn = sqlite3.connect(store.path)
    with conn:
        conn.execute(
            "UPDATE runs SET state = json_set(state, '$.events_applied', -1, '$.owner', 'bogus')"
        )
    conn.close()


def test_a_reset_to_earliest_without_clearing_refolds_everything(
    world: little.World, store: SqliteProjectionStore
) -> None:
    # What kafka-consumer-groups --reset-offsets --to-earliest does: only the offsets move.
    write_sample(world)
    project(world, store)
    _tamper(store)
    world.cursors.reset("little-projector", ResetTo(earliest=True))
    totals = project(world, store)
    assert totals.duplicates == 0
    assert totals.folded == sum(world.log.end_offsets().values())
    assert_equals_clean_fold(world, store)


def test_a_partial_reset_refolds_only_what_it_uncovered(
    world: little.World, store: SqliteProjectionStore
) -> None:
    for i in range(8):  # short runs that end early in their partition
        world.append(run_events(f"early-{i}", 20))
    write_sample(world)
    project(world, store)
    _tamper(store)
    ends = world.log.end_offsets()
    mid = {p: e // 2 for p, e in ends.items()}
    world.cursors.reset("little-projector", ResetTo(offsets=mid))
    totals = project(world, store)
    expected = clean_fold(world)
    got = {r: store.get(r) for r in expected}
    refolded = {r for r, rec in got.items() if rec and rec.last_offset >= mid[rec.partition]}
    untouched = set(expected) - refolded
    assert refolded
    assert untouched
    assert {r: got[r].state for r in refolded} == {r: expected[r] for r in refolded}  # type: ignore[union-attr]
    assert all(got[r].state.owner == "bogus" for r in untouched)  # type: ignore[union-attr]
    assert totals.refolded_runs > 0  # runs that started before the reset point


def test_a_group_that_starts_late_folds_its_runs_from_their_start(
    world: little.World, store: ProjectionStore
) -> None:
    write_sample(world)
    ends = world.log.end_offsets()
    mid = {p: e // 2 for p, e in ends.items()}
    world.cursors.commit("little-projector", mid)  # a group whose first offsets are late
    totals = project(world, store)
    expected = clean_fold(world)
    held = store.get_many(expected)
    for run_id, state in expected.items():
        p = world.log.partition_for(run_id)
        assert state.last_position is not None
        if state.last_position.offset >= mid[p]:
            assert held[run_id].state == state, run_id  # folded from its start
        else:
            assert run_id not in held  # ended before the group's start: not projected
    assert totals.refolded_runs > 0


def test_a_store_behind_its_group_refolds_its_runs(
    world: little.World, store: SqliteProjectionStore, tmp_path: Path
) -> None:
    streams = {f"r{i}": run_events(f"r{i}", 90) for i in range(8)}
    write_interleaved(world, {r: e[:30] for r, e in streams.items()}, chunk=5)
    project(world, store)
    backup = tmp_path / "backup.sqlite3"
    src, dst = sqlite3.connect(store.path), sqlite3.connect(backup)
    src.backup(dst)
    src.close()
    dst.close()
    write_interleaved(world, {r: e[30:60] for r, e in streams.items()}, chunk=5)
    project(world, store)
    store.close()
    shutil.copy(backup, store.path)  # restored from an old backup: behind the group's offsets
    for suffix in ("-wal", "-shm"):
        Path(f"{store.path}{suffix}").unlink(missing_ok=True)
    write_interleaved(world, {r: e[60:] for r, e in streams.items() if r != "r0"}, chunk=5)
    with SqliteProjectionStore(store.path) as restored:
        project(world, restored)
        expected = clean_fold(world)
        held = restored.get_many(expected)
        for run_id in expected:
            if run_id == "r0":  # no record since the restore: still stale, and says so
                assert held[run_id].stale
                assert held[run_id].state.events_applied < expected[run_id].events_applied
            else:
                assert held[run_id].state == expected[run_id], run_id
                assert not held[run_id].stale


def test_replay_from_state_is_the_plan_replay_run_gives(
    world: little.World, store: ProjectionStore
) -> None:
    world.append(first_writer("crashed"))
    project(world, store)
    stored = store.get("crashed")
    assert stored is not None
    from_state = replay_from_state(stored.state)
    from_log = replay_run(world, "crashed", use_snapshot=False)
    assert from_state.steps == from_log.steps
    assert from_state.pending_step_paths == from_log.pending_step_paths == ("research",)
    assert from_state.completed_step_paths == ("plan",)
    assert from_state.from_snapshot == stored.state.last_position


def test_rebuild_to_earliest_clears_the_store_and_refolds(
    world: little.World, store: SqliteProjectionStore
) -> None:
    write_sample(world)
    project(world, store)
    _tamper(store)
    result = rebuild(world, store, config(), ResetTo(earliest=True))
    assert result.reset_to == dict.fromkeys(range(PARTITIONS), 0)
    assert result.totals.consumed == sum(world.log.end_offsets().values())
    assert_equals_clean_fold(world, store)


def test_a_record_of_another_run_in_a_runs_stream_is_an_integrity_error(
    world: little.World, store: ProjectionStore
) -> None:
    # The key says "keyed" but the envelope names another run: never folded into either.
    codec = EventCodec()
    stray = run_events("other", 3)[1]
    world.append(run_events("keyed", 5)[:3])
    world.log.append("keyed", [OutgoingRecord(codec.encode(stray), tuple(event_headers(stray)))])
    project(world, store)
    keyed = store.get("keyed")
    assert keyed is not None
    assert keyed.integrity is not None
    assert "event of run other in the stream of run keyed" in keyed.integrity.message
    assert store.get("other") is None


def _insert_at(world: little.World, partition: int, event: Event) -> int:
    """Append one well-formed record of ``event`` to ``partition`` of the embedded log as a
    foreign writer of the file would, whatever partition its run belongs in; its offset."""
    path = Path(world.description.removeprefix("embedded:")) / "log.sqlite3"
    conn = sqlite3.connect(path)
    with conn:
        (offset,) = conn.execute(
            'SELECT COALESCE(MAX("offset") + 1, 0) FROM records WHERE topic = ? AND partition = ?',
            (world.log.topic, partition),
        ).fetchone()
        headers = json.dumps([[k, v.hex()] for k, v in event_headers(event)])
        conn.execute(
            "INSERT INTO records VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                world.log.topic,
                partition,
                offset,
                event.run_id,
                0,
                headers,
                EventCodec().encode(event),
            ),
        )
    conn.close()
    return int(offset)


def test_a_record_outside_its_runs_partition_is_dead_lettered_and_changes_no_run(
    world: little.World, store: ProjectionStore, tmp_path: Path
) -> None:
    events = run_events("routed", 30)
    last = world.append(events)[-1].offset
    own = world.log.partition_for("routed")
    other = (own + 1) % PARTITIONS
    filler = next(f"fill-{i}" for i in range(100) if world.log.partition_for(f"fill-{i}") == other)
    world.append(run_events(filler, 40))
    # well-formed: the run's next seq at its epoch, above its last offset (folded in, before)
    late = RunCancelled(run_id="routed", seq=events[-1].seq + 1, epoch=1, reason="elsewhere")
    offset = _insert_at(world, other, late)
    assert offset > last
    totals = project(world, store)

    row = store.get("routed")
    assert row is not None
    assert (row.status, row.partition, row.integrity) == ("completed", own, None)
    assert row.state == materialize_run_state_from_events(world.read_run("routed"))
    assert totals.dead_letters == 1
    dlq = EmbeddedEventLog(tmp_path / "w" / "log.sqlite3", topic=DLQ_TOPIC, partitions=PARTITIONS)
    (letter,) = [r for p in range(PARTITIONS) for r in dlq.read_partition(p, 0)]
    dlq.close()
    assert letter.run_id == "routed"
    assert letter.header(DLQ_REASON) == b"misrouted"
    assert (letter.header(DLQ_PARTITION), letter.header(DLQ_OFFSET)) == (
        str(other).encode(),
        str(offset).encode(),
    )


def test_a_row_stored_in_another_partition_is_refolded_from_the_runs_start(
    world: little.World, store: SqliteProjectionStore
) -> None:
    # What a projector that folded misrouted records left: the row of a run in another
    # partition, at an offset of that partition.
    events = run_events("moved", 40)
    world.append(events[:25])
    project(world, store)
    own = world.log.partition_for("moved")
    conn = sqlite3.connect(store.path)
    with conn:
        conn.execute(
            "UPDATE runs SET partition = ?, last_offset = 1000000, "
            "state = json_set(state, '$.status', 'cancelled') WHERE run_id = 'moved'",
            ((own + 1) % PARTITIONS,),
        )
    conn.close()
    world.append(events[25:])
    totals = project(world, store)
    row = store.get("moved")
    assert row is not None
    assert (row.status, row.partition) == ("completed", own)
    assert row.state == materialize_run_state_from_events(world.read_run("moved"))
    assert totals.refolded_runs == 1
