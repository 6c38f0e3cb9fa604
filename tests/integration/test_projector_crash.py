"""kill -9 the projector at random points of a 100,000-event load; restart it; repeat.

After every kill, before the restart: no snapshot a read_committed reader can see is ahead of
its partition's committed offset, and the store covers at least what is committed. At the
end, the stored state of every run equals a clean fold of the log.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from little.events import EventCodec, event_headers
from little.log import OutgoingRecord
from little.replay import decode_snapshot
from little_services.projection import SqliteProjectionStore, open_world
from tests.projection_runs import clean_fold, fresh_topics, read_committed, run_events, settings_of

pytestmark = pytest.mark.kafka

RUNS, EVENTS, ROUNDS = 1_000, 100, 10  # each run is appended in ROUNDS slices: runs interleave
PACE = 1.0  # seconds between two slices
KILLS = 4


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


PORTS: dict[int, int] = {}
"""The HTTP port of each started projector, by pid."""


def start(env: dict[str, str], logs: Path) -> subprocess.Popen[bytes]:
    port = free_port()
    full = {k: v for k, v in os.environ.items() if not k.startswith("LITTLE_")}
    full.update({**env, "LITTLE_HTTP_PORT": str(port)})
    with logs.open("ab") as out:  # JSON log lines of every instance, for the summary below
        proc = subprocess.Popen(
            [sys.executable, "-m", "little_services.projector"],
            env=full,
            stdout=subprocess.DEVNULL,
            stderr=out,
        )
    PORTS[proc.pid] = port
    return proc


def wait_serving(proc: subprocess.Popen[bytes]) -> None:
    """Until the projector answers HTTP: past start-up, with its SIGTERM handler installed
    (a SIGTERM during its imports would end it with the default action)."""
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, "the projector exited on its own"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{PORTS[proc.pid]}/healthz", timeout=1):
                return
        except OSError:
            assert time.monotonic() < deadline, "the projector never served HTTP"
            time.sleep(0.05)


def test_kill_9_at_random_points_then_the_store_equals_a_clean_fold(
    kafka_bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"seed {seed}")
    env = {
        **fresh_topics(kafka_bootstrap_servers, unique, partitions=6),
        "LITTLE_DATA_DIR": str(tmp_path / "data"),
        "LITTLE_PRODUCER_PROFILE": "throughput",
        "LITTLE_SNAPSHOT_EVERY": "30",
        "LITTLE_PROJECTOR_BATCH": "2000",
        # static membership: a restarted instance gets its partitions back at once
        "LITTLE_PROJECTOR_INSTANCE_ID": f"crash-{unique}",
        "LITTLE_PROJECTOR_SESSION_TIMEOUT_MS": "10000",
    }
    settings: Any = settings_of(env)
    group, topic = settings.projector_group, settings.runs_topic
    store_path = tmp_path / "data" / "projection.sqlite3"
    world = open_world(settings)
    codec = EventCodec()
    runs = {
        f"run-{i:04d}": [
            OutgoingRecord(codec.encode(e), tuple(event_headers(e)))
            for e in run_events(f"run-{i:04d}", EVENTS)
        ]
        for i in range(RUNS)
    }
    size = EVENTS // ROUNDS

    def append(run_id: str, r: int) -> None:
        world.log.append(run_id, runs[run_id][r * size : (r + 1) * size])

    def write() -> None:
        with ThreadPoolExecutor(16) as pool:
            for r in range(ROUNDS):
                list(pool.map(append, runs, [r] * len(runs)))
                time.sleep(PACE)  # keep the load going while the projector is killed

    logs = tmp_path / "projector.log"
    writer = threading.Thread(target=write)
    proc = start(env, logs)
    writer.start()
    kills = []
    try:
        for _ in range(KILLS):
            # wait for this instance to commit something, then kill it at a random point
            before = sum(world.cursors.committed(group).values())
            deadline = time.monotonic() + 90
            while sum(world.cursors.committed(group).values()) == before:
                assert proc.poll() is None, "the projector exited on its own"
                assert time.monotonic() < deadline, "no progress"
                if not writer.is_alive() and before == RUNS * EVENTS:
                    break  # all written and committed: this kill tests a clean restart
                time.sleep(0.05)
            time.sleep(rng.uniform(0.0, 1.5))
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            committed = world.cursors.committed(group)
            kills.append(sum(committed.values()))

            # atomicity: snapshots (read_committed) never ahead of their cursor. A transaction
            # the kill caught committing writes its markers to the snapshot partitions and to
            # the group's offsets one after the other, so its offsets may show a moment after
            # its snapshots: ahead-of-cursor counts only once the offsets had time to land.
            snaps = [
                decode_snapshot(msg.value())  # type: ignore[attr-defined]
                for msg in read_committed(
                    kafka_bootstrap_servers, settings.snapshots_topic, idle=1.0
                )
            ]
            settle = time.monotonic() + 5
            while any(s.position.offset >= committed[s.position.partition] for s in snaps):
                if time.monotonic() > settle:
                    break
                time.sleep(0.1)
                committed = world.cursors.committed(group)
            for snap in snaps:
                assert snap.position.offset < committed[snap.position.partition], snap.position
            # durability: offsets never ahead of the store
            with SqliteProjectionStore(store_path) as store:
                covered = store.cursors(topic)
                for p, offset in committed.items():
                    assert covered[p].covered >= offset, (p, covered[p], offset)
            proc = start(env, logs)
        writer.join(120)
        assert not writer.is_alive()
        ends = world.log.end_offsets()
        assert sum(ends.values()) == RUNS * EVENTS
        deadline = time.monotonic() + 120
        while world.cursors.committed(group) != ends:
            assert proc.poll() is None, "the projector exited on its own"
            assert time.monotonic() < deadline, "the projector did not catch up"
            time.sleep(0.2)
        wait_serving(proc)  # the last instance may be caught up by its predecessors' commits
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    text = logs.read_text()
    print(
        f"killed at {kills} of {RUNS * EVENTS} committed records; restarts that found a store "
        f"write ahead of its commit: {text.count('projection_resumed_after_uncommitted_write')}"
    )
    assert "projection_rewound" not in text  # a crash is never mistaken for a reset
    assert len(kills) == KILLS
    assert kills[0] < RUNS * EVENTS

    expected = clean_fold(world)
    assert len(expected) == RUNS
    with SqliteProjectionStore(store_path) as store:
        held = store.get_many(expected)
        assert {r: rec.state for r, rec in held.items()} == expected
        assert store.count_by_status() == {"completed": RUNS}
    snapshots: dict[str, Any] = {}
    for msg in read_committed(kafka_bootstrap_servers, settings.snapshots_topic, idle=1.0):
        snap = decode_snapshot(msg.value())  # type: ignore[attr-defined]
        snapshots[snap.run_id] = snap
    assert {r: s.state for r, s in snapshots.items()} == expected  # every run ends in one
    world.close()


def test_a_crash_inside_the_transaction_leaves_nothing_visible_and_nothing_doubled(
    kafka_bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    """SIGKILL after the store write, with the batch's snapshots, dead letter and offsets sent
    but not committed: a read_committed reader sees none of them, the restart aborts the
    zombie's transaction, skips what the store already holds and writes each exactly once."""
    env = {
        **fresh_topics(kafka_bootstrap_servers, unique, partitions=1),
        "LITTLE_DATA_DIR": str(tmp_path / "data"),
        "LITTLE_SNAPSHOT_EVERY": "1000",
        "LITTLE_PROJECTOR_INSTANCE_ID": f"crash-{unique}",
    }
    settings: Any = settings_of(env)
    world = open_world(settings)
    for i in range(20):
        world.append(run_events(f"r{i}", 25))
    world.log.append("poisoned", [OutgoingRecord(b"\x00\x00\x00\x00\x09nope")])
    logs = tmp_path / "projector.log"
    proc = start({**env, "LITTLE_PROJECTOR_CRASH_IN_TRANSACTION": "1"}, logs)
    assert proc.wait(60) == -signal.SIGKILL
    bootstrap, group = kafka_bootstrap_servers, settings.projector_group
    assert world.cursors.committed(group) == {}
    assert read_committed(bootstrap, settings.snapshots_topic, idle=1.0) == []
    assert read_committed(bootstrap, settings.dlq_topic, idle=1.0) == []
    with SqliteProjectionStore(tmp_path / "data" / "projection.sqlite3") as store:
        assert store.count_by_status() == {"completed": 20, "integrity_error": 1}  # stored first

    proc = start(env, logs)
    try:
        deadline = time.monotonic() + 60
        while world.cursors.committed(group) != world.log.end_offsets():
            assert proc.poll() is None
            assert time.monotonic() < deadline
            time.sleep(0.1)
        wait_serving(proc)  # the last instance may be caught up by its predecessors' commits
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "projection_resumed_after_uncommitted_write" in logs.read_text()
    letters = read_committed(bootstrap, settings.dlq_topic, idle=1.0)
    assert [m.key() for m in letters] == [b"poisoned"]  # type: ignore[attr-defined]
    expected = clean_fold(world, only={f"r{i}" for i in range(20)})
    with SqliteProjectionStore(tmp_path / "data" / "projection.sqlite3") as store:
        assert {r: rec.state for r, rec in store.get_many(expected).items()} == expected
    # the aborted transaction's snapshots are sent again (from the stored states), once each
    snaps = [
        decode_snapshot(m.value())  # type: ignore[attr-defined]
        for m in read_committed(bootstrap, settings.snapshots_topic, idle=1.0)
    ]
    assert sorted(s.run_id for s in snaps) == sorted(expected)
    assert {s.run_id: s.state for s in snaps} == expected
    world.close()
