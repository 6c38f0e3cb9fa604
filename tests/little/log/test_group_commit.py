"""The embedded log's group commit: concurrent appends share transactions, stay ordered, and a
failing append fails only its own waiter.

Real sqlite files, real child processes; the fault is a real sqlite error (a trigger that
aborts inserts of one run)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from little.errors import LogError
from little.log import EmbeddedEventLog, OutgoingRecord, Position
from tests.paths import REPO


def rec(text: str) -> OutgoingRecord:
    return OutgoingRecord(text.encode())


def test_concurrent_appends_share_transactions(tmp_path: Path) -> None:
    log = EmbeddedEventLog(tmp_path / "log.sqlite3")
    runs = [f"r{i}" for i in range(100)]

    async def main() -> list[list[Position]]:
        return await asyncio.gather(
            *(log.submit(run, [rec(f"{run}:{i}")]) for i in range(2) for run in runs)
        )

    try:
        results = asyncio.run(main())
        commits = log.commits
        assert commits < len(results)  # 200 appends, fewer fsynced transactions
        for run in runs:
            assert [r.payload.decode() for r in log.read_run(run)] == [f"{run}:0", f"{run}:1"]
        assert all(len(p) == 1 for p in results)
    finally:
        log.close()


def test_a_failing_append_fails_only_its_waiter(tmp_path: Path) -> None:
    log = EmbeddedEventLog(tmp_path / "log.sqlite3")
    log.append("warm", [rec("x")])  # the table exists; now make one run's inserts fail
    conn = log._db.conn
    conn.execute(
        "CREATE TRIGGER poison BEFORE INSERT ON records WHEN NEW.run_id = 'poison' "
        "BEGIN SELECT RAISE(ABORT, 'injected fault'); END"
    )

    async def main() -> list[list[Position] | BaseException]:
        pending = [log.submit(f"ok{i}", [rec("a")]) for i in range(20)]
        pending.insert(10, log.submit("poison", [rec("bad")]))
        return await asyncio.gather(*pending, return_exceptions=True)

    try:
        results = asyncio.run(main())
        failures = [r for r in results if isinstance(r, BaseException)]
        assert len(failures) == 1
        assert isinstance(failures[0], LogError)
        assert "poison" in str(failures[0])
        assert "injected fault" in str(failures[0])
        assert all(list(log.read_run(f"ok{i}")) for i in range(20))
        assert list(log.read_run("poison")) == []
        assert log.in_flight() == (0, 0.0)
    finally:
        log.close()


_WRITER = """
import asyncio, sys
from little.log import EmbeddedEventLog, OutgoingRecord
log = EmbeddedEventLog(sys.argv[1])
tag = sys.argv[2]
async def run(r):
    for i in range(10):
        await log.submit(r, [OutgoingRecord(f"{r}:{i}".encode())])
async def main():
    await asyncio.gather(*(run(f"{tag}-{j}") for j in range(40)))
asyncio.run(main())
log.close()
"""


@pytest.mark.timeout(120)
def test_processes_group_committing_to_one_file_stay_dense_and_ordered(tmp_path: Path) -> None:
    path = tmp_path / "log.sqlite3"
    EmbeddedEventLog(path).close()
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(path), tag], cwd=REPO) for tag in "ABC"
    ]
    assert [p.wait(timeout=100) for p in procs] == [0, 0, 0]
    log = EmbeddedEventLog(path)
    try:
        for tag in "ABC":
            for j in range(40):
                run = f"{tag}-{j}"
                got = [r.payload.decode() for r in log.read_run(run)]
                assert got == [f"{run}:{i}" for i in range(10)]
        total = 0
        for partition in range(log.partitions):
            offsets = [r.offset for r in log.read_partition(partition, 0, limit=100_000)]
            assert offsets == list(range(len(offsets)))
            total += len(offsets)
        assert total == 3 * 40 * 10
    finally:
        log.close()


def test_after_a_failed_append_a_run_gets_no_later_record(tmp_path: Path) -> None:
    """A run's second append, in flight with its first when that one fails, is not committed
    either: the log never holds a later record of a run without the earlier one."""
    log = EmbeddedEventLog(tmp_path / "log.sqlite3")
    log.append("warm", [rec("x")])
    log._db.conn.execute(
        "CREATE TRIGGER poison BEFORE INSERT ON records WHEN NEW.payload = X'626164' "
        "BEGIN SELECT RAISE(ABORT, 'injected fault'); END"
    )
    before = log.commits

    async def main() -> list[list[Position] | BaseException]:
        pending = [log.submit(f"ok{i}", [rec("a")]) for i in range(5)]
        pending += [log.submit("r", [rec("bad")]), log.submit("r", [rec("good")])]
        pending += [log.submit(f"ok{i}", [rec("b")]) for i in range(5)]
        return await asyncio.gather(*pending, return_exceptions=True)

    try:
        results = asyncio.run(main())
        bad, good = results[5], results[6]
        assert isinstance(bad, LogError)
        assert "injected fault" in str(bad)
        assert isinstance(good, LogError)
        assert "an earlier append of the run failed" in str(good)
        assert list(log.read_run("r")) == []
        for i in range(5):
            assert [x.payload for x in log.read_run(f"ok{i}")] == [b"a", b"b"]
        assert log.commits > before  # committed, the others, around the failure
    finally:
        log.close()


def test_an_append_after_a_failed_one_of_its_writer_is_refused(tmp_path: Path) -> None:
    log = EmbeddedEventLog(tmp_path / "log.sqlite3")
    log.append("warm", [rec("x")])
    log._db.conn.execute(
        "CREATE TRIGGER poison BEFORE INSERT ON records WHEN NEW.payload = X'626164' "
        "BEGIN SELECT RAISE(ABORT, 'injected fault'); END"
    )

    async def main() -> BaseException | None:
        failed = log.submit("r", [rec("bad")])
        with pytest.raises(LogError):
            await failed
        try:
            await log.submit("r", [rec("good")], after=failed)
        except LogError as exc:
            return exc
        return None

    try:
        refused = asyncio.run(main())
        assert isinstance(refused, LogError)
        assert "an earlier append of the run failed" in str(refused)
        assert list(log.read_run("r")) == []
    finally:
        log.close()
