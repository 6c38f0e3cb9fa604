"""One conformance suite for every EventLog backend (embedded sqlite, Kafka).

Each backend only supplies a spec in the ``backend`` fixture; every test runs on both.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from little.errors import ConfigurationError
from little.log import EventLog, OutgoingRecord, Position, ResetTo, partition_for
from tests.conformance.backends import create_kafka_topics, open_cursors, open_log

PARTITIONS = 3


@pytest.fixture(params=["embedded", "kafka"])
def backend(request: pytest.FixtureRequest, tmp_path: Path, unique: str) -> dict[str, Any]:
    if request.param == "embedded":
        return {
            "kind": "embedded",
            "path": str(tmp_path / "log.sqlite3"),
            "topic": f"t{unique}.runs",
            "partitions": PARTITIONS,
        }
    bootstrap = request.getfixturevalue("kafka_bootstrap_servers")
    spec = {
        "kind": "kafka",
        "bootstrap": bootstrap,
        "topic": f"t{unique}.runs",
        "index_topic": f"t{unique}.index",
        "partitions": PARTITIONS,
    }
    create_kafka_topics(bootstrap, spec["topic"], spec["index_topic"], PARTITIONS)
    return spec


@pytest.fixture
def log(backend: dict[str, Any]) -> Any:
    opened = open_log(backend)
    yield opened
    opened.close()


def rec(text: str, **headers: str) -> OutgoingRecord:
    return OutgoingRecord(text.encode(), tuple((k, v.encode()) for k, v in headers.items()))


def payloads(log: EventLog, run_id: str, after: Position | None = None) -> list[str]:
    return [r.payload.decode() for r in log.read_run(run_id, after=after)]


def same_partition_runs(n: int, partitions: int = PARTITIONS) -> list[str]:
    """``n`` run ids that Kafka's partitioner puts in partition 0."""
    found = [f"run-{i}" for i in range(10_000) if partition_for(f"run-{i}", partitions) == 0]
    return found[:n]


def test_append_returns_positions_in_the_runs_partition_in_order(log: EventLog) -> None:
    positions = log.append("run-a", [rec("a0"), rec("a1"), rec("a2")])
    assert [p.partition for p in positions] == [partition_for("run-a", PARTITIONS)] * 3
    assert [p.offset for p in positions] == [positions[0].offset + i for i in range(3)]
    assert payloads(log, "run-a") == ["a0", "a1", "a2"]


def test_per_run_order_survives_many_batches_and_headers_round_trip(log: EventLog) -> None:
    for batch in range(5):
        log.append("run-o", [rec(f"{batch}-{i}", little_seq=str(batch * 3 + i)) for i in range(3)])
    records = list(log.read_run("run-o"))
    assert [r.payload.decode() for r in records] == [f"{b}-{i}" for b in range(5) for i in range(3)]
    assert [r.header("little_seq") for r in records] == [str(i).encode() for i in range(15)]
    assert all(r.run_id == "run-o" for r in records)
    assert [r.offset for r in records] == sorted(r.offset for r in records)


def test_many_runs_interleaved_in_one_partition_read_back_apart(log: EventLog) -> None:
    runs = same_partition_runs(4)
    for i in range(6):
        for run in runs:
            log.append(run, [rec(f"{run}:{i}")])
    for run in runs:
        assert payloads(log, run) == [f"{run}:{i}" for i in range(6)]
    partition = log.read_partition(0, 0, limit=100, timeout=5)
    assert len(partition) == 24
    assert [r.offset for r in partition] == list(
        range(partition[0].offset, partition[0].offset + 24)
    )


def test_reading_from_a_cursor_returns_only_later_records(log: EventLog) -> None:
    positions = log.append("run-c", [rec(str(i)) for i in range(6)])
    assert payloads(log, "run-c", after=positions[2]) == ["3", "4", "5"]
    assert payloads(log, "run-c", after=positions[-1]) == []
    part = positions[0].partition
    tail = log.read_partition(part, positions[4].offset, limit=10, timeout=5)
    assert [r.payload for r in tail] == [b"4", b"5"]
    assert log.read_partition(part, positions[-1].offset + 1, limit=10, timeout=0.2) == []


def test_unknown_run_reads_empty(log: EventLog) -> None:
    assert payloads(log, "never-written") == []
    assert log.first_offset("never-written") is None


def test_first_offset_index_skips_earlier_runs_of_the_partition(log: EventLog) -> None:
    early, late = same_partition_runs(2)
    for i in range(50):
        log.append(early, [rec(f"e{i}")])
    first = log.append(late, [rec("l0")])[0]
    log.append(early, [rec("e-after")])
    log.append(late, [rec("l1")])
    lower_bound = log.first_offset(late)
    assert lower_bound is not None
    assert first.offset >= 50
    assert lower_bound == first.offset  # not 0: reading the late run skips the early one
    assert payloads(log, late) == ["l0", "l1"]


def test_end_offsets_are_the_next_offsets(log: EventLog) -> None:
    before = log.end_offsets()
    assert set(before) == set(range(PARTITIONS))
    pos = log.append("run-e", [rec("x"), rec("y")])
    after = log.end_offsets()
    assert after[pos[0].partition] == pos[-1].offset + 1
    assert {p: o for p, o in after.items() if p != pos[0].partition} == {
        p: o for p, o in before.items() if p != pos[0].partition
    }


_CHILD = """
import json, os, sys
from tests.conformance.backends import open_log
from little.log import OutgoingRecord
spec = json.loads(sys.argv[1])
log = open_log(spec)
positions = log.append(sys.argv[2], [OutgoingRecord(f"p{i}".encode()) for i in range(int(sys.argv[3]))])
print(json.dumps([[p.partition, p.offset] for p in positions]), flush=True)
os._exit(0)  # no close, no flush: an acked append must already be durable
"""


def test_acked_appends_survive_the_writing_process_dying(backend: dict[str, Any]) -> None:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(backend), "run-d", "5"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
        check=True,
    )
    positions = json.loads(out.stdout.strip().splitlines()[-1])
    reopened = open_log(backend)
    try:
        records = list(reopened.read_run("run-d"))
        assert [r.payload for r in records] == [f"p{i}".encode() for i in range(5)]
        assert [[r.partition, r.offset] for r in records] == positions
    finally:
        reopened.close()


def test_concurrent_appenders_on_different_runs(backend: dict[str, Any]) -> None:
    logs = [open_log(backend) for _ in range(3)]
    runs = [*same_partition_runs(3), "run-x", "run-y", "run-z"]
    errors: list[BaseException] = []

    def writer(log: EventLog, run: str) -> None:
        try:
            for i in range(20):
                log.append(run, [rec(f"{run}:{i}:a"), rec(f"{run}:{i}:b")])
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=writer, args=(logs[i % 3], run)) for i, run in enumerate(runs)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    reader = logs[0]
    for run in runs:
        assert payloads(reader, run) == [f"{run}:{i}:{s}" for i in range(20) for s in "ab"]
    partition0 = reader.read_partition(0, 0, limit=1000, timeout=5)
    offsets = [r.offset for r in partition0]
    assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))  # dense, no duplicates
    for log in logs:
        log.close()


def test_concurrent_first_writers_of_one_run_do_not_hide_each_other(
    backend: dict[str, Any],
) -> None:
    """Two processes' first appends to the same new run race; a fresh reader sees both."""
    noise = same_partition_runs(2)[1]
    writers = [open_log(backend) for _ in range(2)]
    writers[0].append(noise, [rec("noise")])
    barrier = threading.Barrier(2)

    def first_write(log: EventLog, tag: str) -> None:
        barrier.wait()
        for i in range(3):
            log.append(noise, [rec(f"{tag}{i}")])

    threads = [
        threading.Thread(target=first_write, args=(w, t))
        for w, t in zip(writers, "AB", strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    fresh = open_log(backend)
    try:
        got = payloads(fresh, noise)
        assert sorted(got) == sorted(["noise", "A0", "A1", "A2", "B0", "B1", "B2"])
    finally:
        fresh.close()
        for w in writers:
            w.close()


def test_group_cursors_commit_and_reset(backend: dict[str, Any], log: EventLog) -> None:
    cursors = open_cursors(backend, log)
    run = same_partition_runs(1)[0]
    log.append(run, [rec(str(i)) for i in range(4)])
    assert cursors.committed("g1") == {}
    cursors.commit("g1", {0: 2})
    assert cursors.committed("g1") == {0: 2}
    assert cursors.committed("g2") == {}

    assert cursors.reset("g1", ResetTo(latest=True)) == log.end_offsets()
    assert cursors.committed("g1")[0] == log.end_offsets()[0]

    assert cursors.reset("g1", ResetTo(earliest=True)) == dict.fromkeys(range(PARTITIONS), 0)
    assert cursors.committed("g1") == dict.fromkeys(range(PARTITIONS), 0)

    cursors.reset("g1", ResetTo(offsets={0: 3}))
    assert cursors.committed("g1")[0] == 3

    time.sleep(0.05)
    middle = datetime.now(UTC)
    time.sleep(0.05)
    later = log.append(run, [rec("late")])[0]
    by_time = cursors.reset("g1", ResetTo(timestamp=middle))
    assert by_time[0] == later.offset
    assert by_time[1] == log.end_offsets()[1]  # nothing after that time: the end
    close = getattr(cursors, "close", None)
    if close:
        close()


def test_reset_needs_exactly_one_target() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        ResetTo(earliest=True, latest=True)
    with pytest.raises(ValueError, match="timezone"):
        ResetTo(timestamp=datetime(2026, 1, 1))


def test_partition_out_of_range_is_a_clear_error(log: EventLog) -> None:
    with pytest.raises(Exception, match="does not exist"):
        log.read_partition(PARTITIONS, 0)


# -- awaitable appends (submit): many runs, several submits of one run in flight ---------------


def test_concurrent_awaited_appends_of_many_runs_keep_each_runs_order(log: EventLog) -> None:
    runs = [f"run-{i}" for i in range(120)]

    async def writer(run: str) -> list[Position]:
        positions: list[Position] = []
        for i in range(8):
            positions += await log.submit(run, [rec(f"{run}:{i}", little_seq=str(i))])
        return positions

    async def main() -> list[list[Position]]:
        return await asyncio.gather(*(writer(r) for r in runs))

    results = asyncio.run(main())
    for run, positions in zip(runs, results, strict=True):
        records = list(log.read_run(run))
        assert [r.payload.decode() for r in records] == [f"{run}:{i}" for i in range(8)]
        assert [r.position for r in records] == positions
        assert {p.partition for p in positions} == {partition_for(run, PARTITIONS)}
    for partition in range(PARTITIONS):
        stored = log.read_partition(partition, 0, limit=10_000, timeout=5)
        offsets = [r.offset for r in stored]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))  # dense, no dupes
    assert log.in_flight() == (0, 0.0)


def test_submits_of_one_run_in_flight_together_land_in_submit_order(log: EventLog) -> None:
    async def main() -> list[list[Position]]:
        # taken and submitted with no await in between, as a run's parallel branches do
        pending = [log.submit("run-p", [rec(f"p{i}a"), rec(f"p{i}b")]) for i in range(30)]
        return await asyncio.gather(*pending)

    results = asyncio.run(main())
    expected = [f"p{i}{s}" for i in range(30) for s in "ab"]
    assert payloads(log, "run-p") == expected
    flat = [p.offset for positions in results for p in positions]
    assert flat == sorted(flat)
    assert len(set(flat)) == len(flat)


def test_an_append_whose_awaiter_is_cancelled_still_lands(log: EventLog) -> None:
    async def main() -> list[Position]:
        busy = asyncio.get_running_loop().call_later(0, lambda: None)  # the loop is not idle
        pending = log.submit("run-k", [rec("kept")])
        task = asyncio.ensure_future(_await(pending))
        await asyncio.sleep(0)  # the task now awaits the append
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        busy.cancel()
        positions: list[Position] = await pending  # its outcome stands for other awaiters
        await log.submit("run-k", [rec("after")])
        return positions

    positions = asyncio.run(main())
    assert payloads(log, "run-k") == ["kept", "after"]
    assert [r.position for r in log.read_run("run-k")][:1] == positions


async def _await(pending: Any) -> Any:
    return await pending


def test_submit_needs_an_event_loop_and_append_works_on_one(log: EventLog) -> None:
    with pytest.raises(ConfigurationError, match="running event loop"):
        log.submit("run-s", [rec("x")])

    async def tooling_on_a_loop() -> list[Position]:
        return log.append("run-s", [rec("blocking")])  # blocks this thread, never deadlocks

    (position,) = asyncio.run(tooling_on_a_loop())
    assert [r.position for r in log.read_run("run-s")] == [position]
