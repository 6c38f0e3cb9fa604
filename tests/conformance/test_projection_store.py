"""ProjectionStore conformance: every store (memory, sqlite, PostgreSQL) behaves the same.

The suite lives here once; each store only supplies a factory. PostgreSQL is a real server
(``tests/postgres_server.py``: initdb + postgres on 127.0.0.1), a fresh database per test.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from little.errors import ConfigurationError
from little.replay import (
    AgentCall,
    LogPosition,
    MaterializedRunState,
    ReplayEnvelope,
    materialize_run_state_from_events,
    replay_envelope,
)
from little_services.projection import (
    IntegrityMark,
    MemoryProjectionStore,
    PartitionCursor,
    PostgresProjectionStore,
    ProjectionSettings,
    ProjectionStore,
    ProjectionWrite,
    RunQuery,
    RunRecord,
    SqliteProjectionStore,
    open_store,
    open_store_at,
)
from tests.postgres_server import PostgresServer
from tests.projection_runs import run_events

T0 = datetime(2025, 6, 1, tzinfo=UTC)
TOPIC = "little.runs.v1"


@pytest.fixture(params=["sqlite", "postgresql"])
def durable(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], ProjectionStore]:
    """Opens a durable store on one location each call (a file, a database)."""
    if request.param == "sqlite":
        path = tmp_path / "projection.sqlite3"
        return lambda: SqliteProjectionStore(path)
    server: PostgresServer = request.getfixturevalue("postgres")
    url = server.new_database()
    return lambda: PostgresProjectionStore(url)


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ProjectionStore]:
    if request.param == "memory":
        s: ProjectionStore = MemoryProjectionStore()
    elif request.param == "sqlite":
        s = SqliteProjectionStore(tmp_path / "projection.sqlite3")
    else:
        s = PostgresProjectionStore(request.getfixturevalue("postgres").new_database())
    yield s
    s.close()


def record(
    run_id: str,
    *,
    minute: int = 0,
    partition: int = 0,
    first: int = 0,
    last: int = 9,
    status: str = "running",
    workflow: str = "research",
    mark: IntegrityMark | None = None,
    **state_fields: Any,
) -> RunRecord:
    state = MaterializedRunState(
        run_id=run_id,
        status=status,  # type: ignore[arg-type]
        workflow=workflow,
        **state_fields,
        last_seq=last,
        last_position=LogPosition(partition=partition, offset=last),
        last_event_id=f"e-{run_id}",
        events_applied=last + 1,
    )
    return RunRecord(
        state=state,
        partition=partition,
        first_offset=first,
        last_offset=last,
        updated_at=T0 + timedelta(minutes=minute),
        integrity=mark,
    )


def test_put_then_get_returns_equal_records(store: ProjectionStore) -> None:
    folded = materialize_run_state_from_events(run_events("real", 40))
    real = RunRecord(folded, 3, 100, 139, T0)
    mark = IntegrityMark(
        "malformed-body", "cannot decode", 0, 12, skipped=2, last_skipped_offset=30
    )
    broken = record("broken", mark=mark)
    store.put(ProjectionWrite(TOPIC, [real, broken], {3: PartitionCursor(140, 100)}))
    assert store.get("real") == real
    assert store.get("broken") == broken
    assert store.get("broken").status == "integrity_error"  # type: ignore[union-attr]
    assert store.get("missing") is None
    assert set(store.get_many(["real", "missing", "broken"])) == {"real", "broken"}
    assert store.cursors(TOPIC) == {3: PartitionCursor(140, 100)}
    assert store.cursors("other.topic") == {}


def test_put_replaces_a_run_and_a_cursor(store: ProjectionStore) -> None:
    store.put(ProjectionWrite(TOPIC, [record("a", last=5)], {0: PartitionCursor(6, 0)}))
    store.put(ProjectionWrite(TOPIC, [record("a", last=9)], {0: PartitionCursor(10, 6, 3)}))
    assert store.get("a").last_offset == 9  # type: ignore[union-attr]
    assert store.cursors(TOPIC) == {0: PartitionCursor(10, 6, 3)}


def test_a_run_never_moves_back_unless_it_is_stale(store: ProjectionStore) -> None:
    store.put(ProjectionWrite(TOPIC, [record("a", last=50)]))
    store.put(ProjectionWrite(TOPIC, [record("a", last=20)]))  # a zombie's late write
    assert store.get("a").last_offset == 50  # type: ignore[union-attr]
    store.reset_partition(TOPIC, 0, PartitionCursor(10, 10), stale_from=10)
    store.put(ProjectionWrite(TOPIC, [record("a", last=20)]))  # the refold after a reset
    refolded = store.get("a")
    assert refolded is not None
    assert refolded.last_offset == 20
    assert not refolded.stale


def test_a_cursor_only_moves_forward_unless_reset(store: ProjectionStore) -> None:
    store.put(ProjectionWrite(TOPIC, [], {0: PartitionCursor(50, 40), 1: PartitionCursor(7, 0)}))
    # a fenced zombie's late write of an older cursor changes nothing
    store.put(ProjectionWrite(TOPIC, [], {0: PartitionCursor(30, 20), 1: PartitionCursor(9, 7)}))
    assert store.cursors(TOPIC) == {0: PartitionCursor(50, 40), 1: PartitionCursor(9, 7)}
    store.put(ProjectionWrite(TOPIC, [], {0: PartitionCursor(50, 45, 2)}))  # same offset
    assert store.cursors(TOPIC)[0] == PartitionCursor(50, 45, 2)
    store.reset_partition(TOPIC, 0, PartitionCursor(10, 10, 10))  # a truncated log
    assert store.cursors(TOPIC)[0] == PartitionCursor(10, 10, 10)
    store.put(ProjectionWrite(TOPIC, [], {0: PartitionCursor(12, 10, 10)}))
    assert store.cursors(TOPIC)[0] == PartitionCursor(12, 10, 10)


def test_offsets_of_two_partitions_never_compare(store: ProjectionStore) -> None:
    # A row held in another partition than its run's (left by a projector that folded a
    # misrouted record) is replaced by the run's own partition's, whatever its offset.
    store.put(ProjectionWrite(TOPIC, [record("a", partition=2, last=500)]))
    store.put(ProjectionWrite(TOPIC, [record("a", partition=1, last=20)]))
    held = store.get("a")
    assert held is not None
    assert (held.partition, held.last_offset) == (1, 20)
    store.put(ProjectionWrite(TOPIC, [record("a", partition=1, last=10)]))  # still never back
    assert store.get("a").last_offset == 20  # type: ignore[union-attr]


def test_filters(store: ProjectionStore) -> None:
    store.put(
        ProjectionWrite(
            TOPIC,
            [
                record("r1", minute=1, status="completed"),
                record("r2", minute=2, status="running", workflow="other"),
                record("r3", minute=3, status="completed", workflow="other"),
                record("r4", minute=4, mark=IntegrityMark("stream-integrity", "gap", 0, 3)),
            ],
        )
    )

    def ids(**kw: object) -> list[str]:
        return [s.run_id for s in store.list_runs(RunQuery(**kw)).runs]  # type: ignore[arg-type]

    assert ids() == ["r4", "r3", "r2", "r1"]  # newest first
    assert ids(status="completed") == ["r3", "r1"]
    assert ids(status="integrity_error") == ["r4"]
    assert ids(workflow="other") == ["r3", "r2"]
    assert ids(updated_since=T0 + timedelta(minutes=2)) == ["r4", "r3", "r2"]
    assert ids(updated_before=T0 + timedelta(minutes=2)) == ["r1"]
    assert ids(status="completed", workflow="other") == ["r3"]
    assert store.count_by_status() == {"completed": 2, "running": 1, "integrity_error": 1}
    (summary,) = store.list_runs(RunQuery(status="integrity_error")).runs
    assert summary.integrity is not None
    assert summary.integrity.reason == "stream-integrity"


def test_pagination_visits_every_run_once(store: ProjectionStore) -> None:
    # Ties on updated_at are broken by run id, so pages never skip or repeat a run.
    store.put(ProjectionWrite(TOPIC, [record(f"r{i:02d}", minute=i // 3) for i in range(25)]))
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = store.list_runs(RunQuery(limit=4, cursor=cursor))
        seen += [s.run_id for s in page.runs]
        pages += 1
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert pages == 7
    assert sorted(seen) == [f"r{i:02d}" for i in range(25)]
    assert len(seen) == len(set(seen))
    assert store.list_runs(RunQuery(limit=25)).next_cursor is None


def test_bad_queries_are_configuration_errors(store: ProjectionStore) -> None:
    with pytest.raises(ConfigurationError):
        store.list_runs(RunQuery(cursor="not a cursor!"))
    with pytest.raises(ConfigurationError):
        RunQuery(limit=0)
    with pytest.raises(ConfigurationError):
        RunQuery(updated_since=datetime(2025, 1, 1))


def test_reset_partition_drops_and_marks_stale(store: ProjectionStore) -> None:
    store.put(
        ProjectionWrite(
            TOPIC,
            [
                record("before", first=0, last=40),  # ends before the reset point: untouched
                record("across", first=30, last=80),  # spans it: stale, refolded later
                record("after", first=60, last=90),  # starts after it: dropped
                record("elsewhere", partition=1, first=60, last=90),  # other partition
            ],
            {0: PartitionCursor(91, 91), 1: PartitionCursor(91, 91)},
        )
    )
    deleted, staled = store.reset_partition(
        TOPIC, 0, PartitionCursor(50, 50), delete_from=50, stale_from=50
    )
    assert (deleted, staled) == (1, 1)
    runs = store.get_many(["before", "across", "after", "elsewhere"])
    assert set(runs) == {"before", "across", "elsewhere"}
    assert not runs["before"].stale
    assert runs["across"].stale
    assert not runs["elsewhere"].stale
    assert store.cursors(TOPIC) == {0: PartitionCursor(50, 50), 1: PartitionCursor(91, 91)}
    assert [s.run_id for s in store.list_runs(RunQuery()).runs if s.stale] == ["across"]
    # all of a partition stale (the store fell behind the group)
    assert store.reset_partition(TOPIC, 1, PartitionCursor(200, 200, 200), stale_from=0) == (0, 1)


def test_clear_forgets_everything(store: ProjectionStore) -> None:
    store.put(ProjectionWrite(TOPIC, [record("a")], {0: PartitionCursor(10, 0)}))
    store.clear()
    assert store.get("a") is None
    assert store.cursors(TOPIC) == {}
    assert store.count_by_status() == {}


def test_a_durable_store_keeps_its_runs_across_reopen(
    durable: Callable[[], ProjectionStore],
) -> None:
    with durable() as s:
        s.put(ProjectionWrite(TOPIC, [record("a")], {0: PartitionCursor(10, 0)}))
    with durable() as s:
        assert s.get("a") == record("a")
        assert s.cursors(TOPIC) == {0: PartitionCursor(10, 0)}


def test_two_instances_on_one_store_serve_each_others_runs(
    durable: Callable[[], ProjectionStore],
) -> None:
    """Two projector instances of one group own disjoint partitions and write one store: the
    API of either lists every run, and a late write of the one that lost a partition (a
    zombie) never moves a run back."""
    with durable() as one, durable() as two:

        def write(store: ProjectionStore, partition: int) -> None:
            for batch in range(10):
                runs = [
                    record(f"p{partition}-{i}", partition=partition, first=0, last=batch)
                    for i in range(20)
                ]
                store.put(
                    ProjectionWrite(TOPIC, runs, {partition: PartitionCursor(batch + 1, batch)})
                )

        threads = [
            threading.Thread(target=write, args=(s, p)) for s, p in ((one, 0), (two, 1), (one, 2))
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for s in (one, two):
            assert len(s.list_runs(RunQuery(limit=1000)).runs) == 60
            assert s.cursors(TOPIC) == {p: PartitionCursor(10, 9) for p in range(3)}
        two.put(ProjectionWrite(TOPIC, [record("p0-0", partition=0, last=3)]))  # zombie
        assert one.get("p0-0").last_offset == 9  # type: ignore[union-attr]


def test_postgres_store_of_another_schema_version_is_refused(postgres: PostgresServer) -> None:
    import psycopg

    url = postgres.new_database()
    PostgresProjectionStore(url).close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE projection_meta SET value = '99' WHERE key = 'schema'")
    with pytest.raises(ConfigurationError, match="rebuild it"):
        PostgresProjectionStore(url)


def test_an_unreachable_database_is_named_without_its_password(postgres: PostgresServer) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens here once closed
    url = f"postgresql://little:s3cret@127.0.0.1:{port}/little"
    with pytest.raises(ConfigurationError) as info:
        PostgresProjectionStore(url, connect_timeout=5)
    assert f"127.0.0.1:{port}" in str(info.value)
    assert "s3cret" not in str(info.value)


def test_the_setting_picks_the_store(postgres: PostgresServer, tmp_path: Path) -> None:
    url = postgres.new_database()
    with open_store(ProjectionSettings(projection_store=url)) as s:
        assert isinstance(s, PostgresProjectionStore)
    assert ProjectionSettings(projection_store=url).store_description().count("***") == 1
    with open_store(ProjectionSettings(data_dir=tmp_path)) as s:
        assert isinstance(s, SqliteProjectionStore)
        assert s.path == tmp_path / "projection.sqlite3"
    with open_store_at(str(tmp_path / "x.sqlite3")) as s:
        assert isinstance(s, SqliteProjectionStore)


def test_sqlite_store_of_another_schema_version_is_refused(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "p.sqlite3"
    SqliteProjectionStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema'")
    with pytest.raises(ConfigurationError, match="rebuild it"):
        SqliteProjectionStore(path)


def test_a_parked_run_lists_as_parked_with_why(store: ProjectionStore) -> None:
    parked = record("p", parked_reason="workflow 'x' is not registered")
    failed = record("f", status="failed", first=10, last=19, error="ValueError: boom")
    store.put(ProjectionWrite(TOPIC, [parked, failed], {0: PartitionCursor(20, 0)}))
    page = store.list_runs(RunQuery(status="parked"))
    assert [(s.run_id, s.status, s.detail) for s in page.runs] == [
        ("p", "parked", "workflow 'x' is not registered")
    ]
    (f,) = store.list_runs(RunQuery(status="failed")).runs
    assert f.detail == "ValueError: boom"
    assert store.count_by_status() == {"parked": 1, "failed": 1}


def test_a_sqlite_store_of_schema_1_is_migrated_in_place(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "p.sqlite3"
    failed = record("f", status="failed", first=20, last=29, error="ValueError: boom")
    with SqliteProjectionStore(path) as s:
        s.put(ProjectionWrite(TOPIC, [record("a"), failed], {0: PartitionCursor(10, 0)}))
    with sqlite3.connect(path) as conn:  # what a version-1 file looks like
        conn.execute("ALTER TABLE runs DROP COLUMN detail")
        conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema'")
    with SqliteProjectionStore(path) as s:
        assert s.get("a") == record("a")
        details = {r.run_id: r.detail for r in s.list_runs(RunQuery()).runs}
        assert details == {"a": None, "f": "ValueError: boom"}  # filled from the states
        s.put(ProjectionWrite(TOPIC, [record("b", status="failed")], {0: PartitionCursor(11, 10)}))
        assert {r.run_id for r in s.list_runs(RunQuery()).runs} == {"a", "b", "f"}
    with sqlite3.connect(path) as conn:  # and on to schema 3 (the replay envelope)
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone() == ("3",)


def replayed_record(run_id: str, **kw: Any) -> RunRecord:
    """A replay of ``run-src`` that served call 0 and missed at call 1 (node write/write#0)."""
    calls = (
        AgentCall(
            ordinal=0,
            request_key="k0",
            node_phase="research",
            node_label="research",
            node_occurrence=0,
            outcome="succeeded",
            replayed=True,
            source_run_id="run-src",
        ),
        AgentCall(
            ordinal=1,
            request_key="k1",
            node_phase="write",
            node_label="write",
            node_occurrence=0,
            outcome="succeeded",
            miss_reason="key-mismatch",
        ),
    )
    return record(run_id, replay_source_run_id="run-src", agent_calls=calls, **kw)


def test_each_listed_run_carries_its_replay_envelope(store: ProjectionStore) -> None:
    replay = replayed_record("r", minute=1)
    plain = record("p")
    store.put(ProjectionWrite(TOPIC, [replay, plain], {0: PartitionCursor(10, 0)}))
    rows = {s.run_id: s for s in store.list_runs(RunQuery()).runs}
    assert rows["r"].replay == replay_envelope(replay.state)
    assert (rows["r"].replay.replayed_calls, rows["r"].replay.fresh_calls) == (1, 1)
    assert rows["r"].replay.diverged_at_node == ("write", "write", 0)
    assert rows["p"].replay == ReplayEnvelope()  # not a replay, no agent calls: not recorded
    assert rows["r"] == replay.summary()


def test_a_sqlite_store_of_schema_2_gets_the_replay_envelopes_of_its_rows(
    tmp_path: Path,
) -> None:
    import sqlite3

    path = tmp_path / "p.sqlite3"
    replay = replayed_record("r", first=10, last=19)
    with SqliteProjectionStore(path) as s:
        s.put(ProjectionWrite(TOPIC, [record("a"), replay], {0: PartitionCursor(20, 0)}))
    with sqlite3.connect(path) as conn:  # what a version-2 file looks like
        conn.execute("ALTER TABLE runs DROP COLUMN replay")
        conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema'")
    with SqliteProjectionStore(path) as s:
        rows = {r.run_id: r.replay for r in s.list_runs(RunQuery()).runs}
        assert rows == {"a": ReplayEnvelope(), "r": replay_envelope(replay.state)}
        assert rows["r"].replayed  # computed from the state the row holds
        assert s.get("r") == replay
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone() == ("3",)
