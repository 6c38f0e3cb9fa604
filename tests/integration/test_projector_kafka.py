"""The projector on a real broker: transactions, dead letters, fencing, SIGTERM, and a rebuild
by Kafka's own ``kafka-consumer-groups --reset-offsets`` giving what our rebuild gives.

Every test uses fresh topics and its own consumer group.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

import little
from little.log import OutgoingRecord, ResetTo
from little.log.kafka import KafkaCursorStore
from little.replay import decode_snapshot, replay_run
from little_services.projection import (
    DLQ_MESSAGE,
    DLQ_OFFSET,
    DLQ_PARTITION,
    DLQ_REASON,
    DLQ_TOPIC_HEADER,
    ProjectionStore,
    ProjectorFencedError,
    ProjectorListener,
    RebuildWorkerError,
    RunQuery,
    SqliteProjectionStore,
    create_projector,
    open_world,
    rebuild,
)
from little_services.projection._kafka import transactional_id
from tests.cli import little_cli
from tests.kafka_broker import KAFKA_SH
from tests.projection_runs import (
    clean_fold,
    fresh_topics,
    read_committed,
    run_events,
    settings_of,
    write_interleaved,
)

pytestmark = pytest.mark.kafka


@pytest.fixture
def env(kafka_bootstrap_servers: str, unique: str, tmp_path: Path) -> dict[str, str]:
    return {
        **fresh_topics(kafka_bootstrap_servers, unique, partitions=3),
        "LITTLE_DATA_DIR": str(tmp_path / "data"),
        "LITTLE_PRODUCER_PROFILE": "throughput",
    }


@pytest.fixture
def world(env: dict[str, str]) -> Iterator[little.World]:
    with open_world(settings_of(env)) as w:  # type: ignore[arg-type]
        yield w


def project(env: dict[str, str], world: little.World, store: ProjectionStore) -> Any:
    settings: Any = settings_of(env)
    with create_projector(
        world, store, settings.projection_config(), bootstrap_servers=settings.kafka_bootstrap
    ) as projector:
        return projector.run(until_caught_up=True)


def held_states(store: ProjectionStore, runs: object) -> dict[str, Any]:
    return {r: rec.state for r, rec in store.get_many(runs).items()}  # type: ignore[arg-type]


def test_poison_records_go_to_the_dlq_in_the_transaction_and_the_projector_carries_on(
    env: dict[str, str], world: little.World, tmp_path: Path
) -> None:
    good = {f"good-{i}": run_events(f"good-{i}", 40) for i in range(10)}
    write_interleaved(world, good, chunk=8)
    bad = run_events("bad", 30)
    world.append(bad[:10])
    world.log.append("bad", [OutgoingRecord(b"\xc3\x01\x00\x01\x02\x03\x04\x05\x06\x07garbage")])
    world.append(bad[10:])
    gap = run_events("gap", 30)
    world.append(gap[:12] + gap[13:])
    world.log.append("", [OutgoingRecord(b"keyless")])
    with SqliteProjectionStore(tmp_path / "p.sqlite3") as store:
        totals = project(env, world, store)
        assert totals.dead_letters == 3
        assert held_states(store, good) == clean_fold(world, only=good)
        marked = store.get_many(["bad", "gap"])
        assert marked["bad"].status == marked["gap"].status == "integrity_error"
        assert marked["bad"].integrity.reason == "unknown-fingerprint"  # type: ignore[union-attr]
        assert marked["bad"].integrity.skipped == 20  # type: ignore[union-attr]
        assert marked["gap"].integrity.reason == "stream-integrity"  # type: ignore[union-attr]

    letters = {
        m.key(): m for m in read_committed(env["LITTLE_KAFKA_BOOTSTRAP"], env["LITTLE_DLQ_TOPIC"])
    }  # type: ignore[attr-defined]
    assert set(letters) == {b"bad", b"gap", b""}  # the records' own keys
    letter: Any = letters[b"bad"]
    headers = dict(letter.headers())
    assert letter.value().endswith(b"garbage")
    assert headers[DLQ_REASON] == b"unknown-fingerprint"
    assert b"does not decode" in headers[DLQ_MESSAGE]
    assert headers[DLQ_TOPIC_HEADER] == env["LITTLE_RUNS_TOPIC"].encode()
    assert headers[DLQ_PARTITION] == str(world.log.partition_for("bad")).encode()
    assert int(headers[DLQ_OFFSET]) == marked["bad"].integrity.offset  # type: ignore[union-attr]
    assert dict(letters[b"gap"].headers())[DLQ_REASON] == b"stream-integrity"  # type: ignore[attr-defined]


def test_snapshots_never_reference_offsets_beyond_the_committed_offset(
    env: dict[str, str], world: little.World, tmp_path: Path
) -> None:
    runs = {f"r{i}": run_events(f"r{i}", 60 + i) for i in range(30)}
    write_interleaved(world, runs, chunk=9)
    env = {**env, "LITTLE_SNAPSHOT_EVERY": "10", "LITTLE_PROJECTOR_BATCH": "150"}
    with SqliteProjectionStore(tmp_path / "p.sqlite3") as store:
        totals = project(env, world, store)
        assert totals.batches > 10
        assert totals.snapshots > 100
        committed = world.cursors.committed(env["LITTLE_PROJECTOR_GROUP"])
        assert committed == world.log.end_offsets()
        snaps = [
            decode_snapshot(m.value())  # type: ignore[attr-defined]
            for m in read_committed(env["LITTLE_KAFKA_BOOTSTRAP"], env["LITTLE_SNAPSHOTS_TOPIC"])
        ]
        assert len(snaps) == totals.snapshots
        for snap in snaps:
            assert snap.position.offset < committed[snap.position.partition]
        newest = {s.run_id: s for s in snaps}
        for run_id, snap in newest.items():
            assert snap.state == store.get(run_id).state  # type: ignore[union-attr]
        replayed = replay_run(world, "r7")  # replay starts from the projector's snapshot
        assert replayed.from_snapshot == newest["r7"].position
        assert replayed.events_folded == 0


def test_a_zombie_projector_is_fenced_by_its_partitions_transactional_id(
    env: dict[str, str], world: little.World, tmp_path: Path
) -> None:
    settings: Any = settings_of(env)
    config = settings.projection_config()
    world.append(run_events("first", 20))
    store = SqliteProjectionStore(tmp_path / "p.sqlite3")
    zombie = create_projector(world, store, config, bootstrap_servers=settings.kafka_bootstrap)
    stop = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            zombie.run(stop)
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not zombie.status().caught_up:
            assert time.monotonic() < deadline
            assert not failure
            time.sleep(0.05)
        p = world.log.partition_for("second")
        usurper = Producer(
            {
                "bootstrap.servers": settings.kafka_bootstrap,
                "transactional.id": transactional_id(config, p),
            }
        )
        usurper.init_transactions(30)  # what the instance that took partition p over does
        world.append(run_events("second", 20))
        thread.join(60)
        assert not thread.is_alive()
        assert len(failure) == 1
        assert isinstance(failure[0], ProjectorFencedError)
        assert "another projector owns it now" in str(failure[0])
        assert store.get("second") is not None  # stored, but its offset never committed:
        assert world.cursors.committed(config.group).get(p, 0) < world.log.end_offsets()[p]
    finally:
        stop.set()
        thread.join(30)
        zombie.close()
        store.close()


# -- the projector as a process ---------------------------------------------------------------


def start(env: dict[str, str], port: int, **extra: str) -> subprocess.Popen[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("LITTLE_")}
    full.update({**env, "LITTLE_HTTP_PORT": str(port), **extra})
    return subprocess.Popen(
        [sys.executable, "-m", "little_services.projector"],
        env=full,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_committed_to_end(
    world: little.World, group: str, proc: subprocess.Popen[str], timeout: float = 90
) -> None:
    ends = world.log.end_offsets()
    deadline = time.monotonic() + timeout
    while world.cursors.committed(group) != ends:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() < deadline, (world.cursors.committed(group), ends)
        time.sleep(0.2)


def stop_with_sigterm(proc: subprocess.Popen[str]) -> list[dict[str, Any]]:
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return [json.loads(line) for line in err.splitlines() if line.startswith("{")]


def test_sigterm_finishes_the_batch_commits_and_exits_0(
    env: dict[str, str], world: little.World
) -> None:
    runs = {f"r{i}": run_events(f"r{i}", 100) for i in range(300)}
    write_interleaved(world, runs, chunk=50)
    group = env["LITTLE_PROJECTOR_GROUP"]
    proc = start(env, free_port(), LITTLE_PROJECTOR_BATCH="300")
    try:
        deadline = time.monotonic() + 60
        while sum(world.cursors.committed(group).values()) == 0:
            assert proc.poll() is None
            assert time.monotonic() < deadline
            time.sleep(0.05)
        logs = stop_with_sigterm(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert [e["event"] for e in logs][-1] == "projector_stopped"
    stopped = logs[-1]
    committed = world.cursors.committed(group)
    assert sum(committed.values()) == stopped["consumed"]  # every folded batch was committed
    with SqliteProjectionStore(Path(env["LITTLE_DATA_DIR"]) / "projection.sqlite3") as store:
        cursors = store.cursors(env["LITTLE_RUNS_TOPIC"])
        assert {p: (c.covered, c.previous) for p, c in cursors.items()} == {
            p: (committed.get(p, 0), committed.get(p, 0)) for p in cursors
        }
    # the group is empty after a clean stop: offsets can be reset at once
    KafkaCursorStore(env["LITTLE_KAFKA_BOOTSTRAP"], topic=env["LITTLE_RUNS_TOPIC"]).commit(
        group, committed
    )


def kafka_consumer_groups(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(KAFKA_SH),
            "tool",
            "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_kafka_consumer_groups_reset_to_earliest_gives_what_our_rebuild_gives(
    env: dict[str, str], world: little.World, tmp_path: Path
) -> None:
    runs = {f"r{i:02d}": run_events(f"r{i:02d}", 30 + i) for i in range(40)}
    write_interleaved(world, runs, chunk=6)
    world.append(run_events("open", 17, complete=False))
    group, topic, bootstrap = (
        env["LITTLE_PROJECTOR_GROUP"],
        env["LITTLE_RUNS_TOPIC"],
        env["LITTLE_KAFKA_BOOTSTRAP"],
    )
    expected = clean_fold(world)
    store_path = Path(env["LITTLE_DATA_DIR"]) / "projection.sqlite3"

    proc = start(env, free_port())
    try:
        wait_committed_to_end(world, group, proc)
        stop_with_sigterm(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    with SqliteProjectionStore(store_path) as store:
        assert held_states(store, expected) == expected
    conn = sqlite3.connect(store_path)  # damage every state: only a real refold repairs them
    with conn:
        conn.execute("UPDATE runs SET state = json_set(state, '$.owner', 'tampered')")
    conn.close()

    reset = kafka_consumer_groups(
        "--bootstrap-server", bootstrap, "--group", group, "--topic", topic,
        "--reset-offsets", "--to-earliest", "--execute",
    )  # fmt: skip
    assert reset.returncode == 0, reset.stdout + reset.stderr
    assert world.cursors.committed(group) == dict.fromkeys(range(3), 0)

    proc = start(env, free_port())
    try:
        wait_committed_to_end(world, group, proc)
        logs = stop_with_sigterm(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert sum(1 for e in logs if e["event"] == "projection_rewound") == 3
    assert logs[-1]["folded"] == sum(world.log.end_offsets().values())
    with SqliteProjectionStore(store_path) as store:
        by_tool = held_states(store, expected)
    assert by_tool == expected

    ours_path = tmp_path / "ours.sqlite3"
    cli = little_cli(
        "projections", "rebuild", "--to-earliest", "--bootstrap-servers", bootstrap,
        "--store", str(ours_path),
        env={**{k: v for k, v in os.environ.items() if not k.startswith("LITTLE_")}, **env},
        timeout=180,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    text = " ".join(cli.stdout.split())
    assert "projection rebuilt from the earliest offsets" in text
    # by default one worker process per core (3 partitions here), in-process on one core
    assert ("by 2 worker processes" if (os.cpu_count() or 1) >= 2 else "by this process") in text
    with SqliteProjectionStore(ours_path) as ours:
        assert held_states(ours, expected) == by_tool == expected
    assert world.cursors.committed(group) == world.log.end_offsets()


# -- rebuild with worker processes --------------------------------------------------------------


def rebuild_into(
    env: dict[str, str], world: little.World, path: Path, workers: int, **extra: Any
) -> tuple[Any, dict[str, Any]]:
    settings: Any = settings_of(env)
    with SqliteProjectionStore(path) as store:
        result = rebuild(
            world,
            store,
            settings.projection_config(),
            ResetTo(earliest=True),
            bootstrap_servers=settings.kafka_bootstrap,
            workers=workers,
            settings=settings,
            **extra,
        )
        runs = {r.run_id for r in store.list_runs(RunQuery(limit=1000)).runs}
        return result, held_states(store, runs)


class Progress(ProjectorListener):
    def __init__(self) -> None:
        self.seen: list[tuple[int, int]] = []
        self.caught_up_calls = 0

    def progress(self, done: int, lag: Any) -> None:
        self.seen.append((done, sum(lag.values())))

    def caught_up(self) -> None:
        self.caught_up_calls += 1


def test_a_rebuild_with_two_worker_processes_equals_a_clean_fold_and_one_process(
    env: dict[str, str], world: little.World, tmp_path: Path
) -> None:
    runs = {f"r{i:02d}": run_events(f"r{i:02d}", 40 + i) for i in range(60)}
    write_interleaved(world, runs, chunk=7)
    world.append(run_events("open", 23, complete=False))
    expected = clean_fold(world)
    total = sum(world.log.end_offsets().values())
    env = {**env, "LITTLE_PROJECTOR_BATCH": "200"}  # several batches, so both workers commit

    listener = Progress()
    two, by_two = rebuild_into(env, world, tmp_path / "two.sqlite3", 2, listener=listener)
    assert two.workers == 2
    assert (two.totals.consumed, two.totals.folded, two.totals.dead_letters) == (total, total, 0)
    assert len(two.per_worker) == 2
    # No share is asserted per worker: on this broker the first join completes with one
    # member, which may fold all of so small a log before the rebalance gives the other one
    # its partitions. Between them they consumed every record once.
    assert sum(t.consumed for t in two.per_worker) == total
    assert by_two == expected
    assert world.cursors.committed(env["LITTLE_PROJECTOR_GROUP"]) == world.log.end_offsets()
    assert listener.seen[-1] == (total, 0)  # the parent's progress, from committed offsets
    assert listener.caught_up_calls == 1

    one, by_one = rebuild_into(env, world, tmp_path / "one.sqlite3", 1)
    assert one.workers == 1
    assert one.totals.consumed == total
    assert by_one == by_two == expected


def test_a_failing_rebuild_worker_is_a_clear_error_and_stops_the_others(
    env: dict[str, str], world: little.World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = {f"r{i:02d}": run_events(f"r{i:02d}", 40) for i in range(30)}
    write_interleaved(world, runs, chunk=8)
    # Workers are fresh processes: they read the fault injection at import, this one does not.
    # Each SIGKILLs itself inside its second transaction.
    monkeypatch.setenv("LITTLE_PROJECTOR_CRASH_IN_TRANSACTION", "2")
    env = {**env, "LITTLE_PROJECTOR_BATCH": "50"}
    with pytest.raises(RebuildWorkerError) as failed:
        rebuild_into(env, world, tmp_path / "p.sqlite3", 2)
    assert re.fullmatch(
        r"rebuild worker [01] of 2 exited \(killed by SIGKILL\) without a result; "
        r"the others were stopped",
        str(failed.value),
    ), str(failed.value)
    assert multiprocessing.active_children() == []

    # An exception in a worker comes back as its type and message (here: a missing topic).
    monkeypatch.delenv("LITTLE_PROJECTOR_CRASH_IN_TRANSACTION")
    env = {**env, "LITTLE_DLQ_TOPIC": "t.no-such-dlq", "LITTLE_PROJECTOR_GROUP": "g.other"}
    with pytest.raises(
        RebuildWorkerError,
        match=r"rebuild worker [01] of 2 failed: ConfigurationError: topic t.no-such-dlq does not exist",
    ):
        rebuild_into(env, world, tmp_path / "q.sqlite3", 2)
    assert multiprocessing.active_children() == []
