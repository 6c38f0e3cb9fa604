"""The EventLog conformance suite (with the CursorStore of the log's topic)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, ClassVar

import pytest

from little.errors import ConfigurationError
from little.log import CursorStore, EventLog, OutgoingRecord, Position, ResetTo, partition_for
from little.testing._child import BackendSpec, missing_hook, run_child, suite_name


def _rec(text: str, **headers: str) -> OutgoingRecord:
    return OutgoingRecord(text.encode(), tuple((k, v.encode()) for k, v in headers.items()))


def _payloads(log: EventLog, run_id: str, after: Position | None = None) -> list[str]:
    return [r.payload.decode() for r in log.read_run(run_id, after=after)]


def _same_partition_runs(n: int, partitions: int) -> list[str]:
    """``n`` run ids that Kafka's partitioner puts in partition 0."""
    found = [f"run-{i}" for i in range(10_000) if partition_for(f"run-{i}", partitions) == 0]
    return found[:n]


def _wait_past(ms: int) -> None:
    """Wait until the wall clock has passed millisecond ``ms`` (record timestamps are ms)."""
    while time.time_ns() // 1_000_000 <= ms:
        time.sleep(0.001)


async def _await(pending: Any) -> Any:
    return await pending


class EventLogConformance:
    """What every ``EventLog`` backend (and the ``CursorStore`` of its topic) does.

    A subclass supplies the ``backend_spec`` fixture (fresh storage for one test, as JSON, with
    ``partitions`` partitions), ``open_log`` (an ``EventLog`` on that storage: called several
    times per test, in this process and in child processes, which must all see one log) and
    ``open_cursors``. Child processes import the subclass by ``module:qualname``.
    """

    partitions: ClassVar[int] = 3
    """How many partitions the log of ``backend_spec`` has."""

    @pytest.fixture
    def backend_spec(self) -> BackendSpec:
        """Fresh, empty storage for one test (override: a fixture, it may use others)."""
        raise missing_hook(self, "the backend_spec fixture")

    def open_log(self, spec: BackendSpec) -> EventLog:
        """An ``EventLog`` on the storage ``spec`` names (the caller closes it)."""
        raise missing_hook(self, "open_log")

    def open_cursors(self, spec: BackendSpec, log: EventLog) -> CursorStore:
        """The ``CursorStore`` of ``log``'s topic (the caller closes it, if it has ``close``)."""
        raise missing_hook(self, "open_cursors")

    @pytest.fixture
    def log(self, backend_spec: BackendSpec) -> Iterator[EventLog]:
        opened = self.open_log(backend_spec)
        yield opened
        opened.close()

    def same_partition_runs(self, n: int) -> list[str]:
        """``n`` run ids in partition 0 of the log."""
        return _same_partition_runs(n, self.partitions)

    # -- appends and reads -----------------------------------------------------------------

    def test_append_returns_positions_in_the_runs_partition_in_order(self, log: EventLog) -> None:
        positions = log.append("run-a", [_rec("a0"), _rec("a1"), _rec("a2")])
        assert [p.partition for p in positions] == [partition_for("run-a", self.partitions)] * 3
        assert [p.offset for p in positions] == [positions[0].offset + i for i in range(3)]
        assert _payloads(log, "run-a") == ["a0", "a1", "a2"]

    def test_per_run_order_survives_many_batches_and_headers_round_trip(
        self, log: EventLog
    ) -> None:
        for batch in range(5):
            log.append(
                "run-o", [_rec(f"{batch}-{i}", little_seq=str(batch * 3 + i)) for i in range(3)]
            )
        records = list(log.read_run("run-o"))
        assert [r.payload.decode() for r in records] == [
            f"{b}-{i}" for b in range(5) for i in range(3)
        ]
        assert [r.header("little_seq") for r in records] == [str(i).encode() for i in range(15)]
        assert all(r.run_id == "run-o" for r in records)
        assert [r.offset for r in records] == sorted(r.offset for r in records)

    def test_many_runs_interleaved_in_one_partition_read_back_apart(self, log: EventLog) -> None:
        runs = self.same_partition_runs(4)
        for i in range(6):
            for run in runs:
                log.append(run, [_rec(f"{run}:{i}")])
        for run in runs:
            assert _payloads(log, run) == [f"{run}:{i}" for i in range(6)]
        partition = log.read_partition(0, 0, limit=100, timeout=5)
        assert len(partition) == 24
        assert [r.offset for r in partition] == list(
            range(partition[0].offset, partition[0].offset + 24)
        )

    def test_reading_from_a_cursor_returns_only_later_records(self, log: EventLog) -> None:
        positions = log.append("run-c", [_rec(str(i)) for i in range(6)])
        assert _payloads(log, "run-c", after=positions[2]) == ["3", "4", "5"]
        assert _payloads(log, "run-c", after=positions[-1]) == []
        part = positions[0].partition
        tail = log.read_partition(part, positions[4].offset, limit=10, timeout=5)
        assert [r.payload for r in tail] == [b"4", b"5"]
        assert log.read_partition(part, positions[-1].offset + 1, limit=10, timeout=0.2) == []

    def test_unknown_run_reads_empty(self, log: EventLog) -> None:
        assert _payloads(log, "never-written") == []
        assert log.first_offset("never-written") is None

    def test_first_offset_index_skips_earlier_runs_of_the_partition(self, log: EventLog) -> None:
        early, late = self.same_partition_runs(2)
        for i in range(50):
            log.append(early, [_rec(f"e{i}")])
        first = log.append(late, [_rec("l0")])[0]
        log.append(early, [_rec("e-after")])
        log.append(late, [_rec("l1")])
        lower_bound = log.first_offset(late)
        assert lower_bound is not None
        assert first.offset >= 50
        assert lower_bound == first.offset  # not 0: reading the late run skips the early one
        assert _payloads(log, late) == ["l0", "l1"]

    def test_end_offsets_are_the_next_offsets(self, log: EventLog) -> None:
        before = log.end_offsets()
        assert set(before) == set(range(self.partitions))
        pos = log.append("run-e", [_rec("x"), _rec("y")])
        after = log.end_offsets()
        assert after[pos[0].partition] == pos[-1].offset + 1
        assert {p: o for p, o in after.items() if p != pos[0].partition} == {
            p: o for p, o in before.items() if p != pos[0].partition
        }

    def test_partition_out_of_range_is_a_clear_error(self, log: EventLog) -> None:
        with pytest.raises(Exception, match="does not exist"):
            log.read_partition(self.partitions, 0)

    # -- durability and several writers ----------------------------------------------------

    def test_acked_appends_survive_the_writing_process_dying(
        self, backend_spec: BackendSpec
    ) -> None:
        line = run_child(suite_name(self), "append", backend_spec, "run-d", "5")
        positions = json.loads(line)
        reopened = self.open_log(backend_spec)
        try:
            records = list(reopened.read_run("run-d"))
            assert [r.payload for r in records] == [f"p{i}".encode() for i in range(5)]
            assert [[r.partition, r.offset] for r in records] == positions
        finally:
            reopened.close()

    def test_concurrent_appenders_on_different_runs(self, backend_spec: BackendSpec) -> None:
        logs = [self.open_log(backend_spec) for _ in range(3)]
        runs = [*self.same_partition_runs(3), "run-x", "run-y", "run-z"]
        errors: list[BaseException] = []

        def writer(log: EventLog, run: str) -> None:
            try:
                for i in range(20):
                    log.append(run, [_rec(f"{run}:{i}:a"), _rec(f"{run}:{i}:b")])
            except BaseException as exc:
                errors.append(exc)

        threads = [
            threading.Thread(target=writer, args=(logs[i % 3], run)) for i, run in enumerate(runs)
        ]
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert errors == []
            reader = logs[0]
            for run in runs:
                assert _payloads(reader, run) == [f"{run}:{i}:{s}" for i in range(20) for s in "ab"]
            partition0 = reader.read_partition(0, 0, limit=1000, timeout=5)
            offsets = [r.offset for r in partition0]
            assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))  # dense, no dupes
        finally:
            for log in logs:
                log.close()

    def test_concurrent_first_writers_of_one_run_do_not_hide_each_other(
        self, backend_spec: BackendSpec
    ) -> None:
        """Two writers' first appends to the same new run race; a fresh reader sees both."""
        noise = self.same_partition_runs(2)[1]
        writers = [self.open_log(backend_spec) for _ in range(2)]
        try:
            writers[0].append(noise, [_rec("noise")])
            barrier = threading.Barrier(2)

            def first_write(log: EventLog, tag: str) -> None:
                barrier.wait()
                for i in range(3):
                    log.append(noise, [_rec(f"{tag}{i}")])

            threads = [
                threading.Thread(target=first_write, args=(w, t))
                for w, t in zip(writers, "AB", strict=True)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            fresh = self.open_log(backend_spec)
            try:
                got = _payloads(fresh, noise)
                assert sorted(got) == sorted(["noise", "A0", "A1", "A2", "B0", "B1", "B2"])
            finally:
                fresh.close()
        finally:
            for w in writers:
                w.close()

    # -- consumer-group cursors ------------------------------------------------------------

    def test_group_cursors_commit_and_reset(self, backend_spec: BackendSpec, log: EventLog) -> None:
        cursors = self.open_cursors(backend_spec, log)
        try:
            run = self.same_partition_runs(1)[0]
            log.append(run, [_rec(str(i)) for i in range(4)])
            assert cursors.committed("g1") == {}
            cursors.commit("g1", {0: 2})
            assert cursors.committed("g1") == {0: 2}
            assert cursors.committed("g2") == {}

            assert cursors.reset("g1", ResetTo(latest=True)) == log.end_offsets()
            assert cursors.committed("g1")[0] == log.end_offsets()[0]

            everything = dict.fromkeys(range(self.partitions), 0)
            assert cursors.reset("g1", ResetTo(earliest=True)) == everything
            assert cursors.committed("g1") == everything

            cursors.reset("g1", ResetTo(offsets={0: 3}))
            assert cursors.committed("g1")[0] == 3

            # record timestamps are milliseconds: the four records are strictly before
            # ``middle``, the late one strictly after
            _wait_past(max(r.timestamp_ms for r in log.read_run(run)))
            middle = datetime.now(UTC)
            _wait_past(int(middle.timestamp() * 1000))
            later = log.append(run, [_rec("late")])[0]
            by_time = cursors.reset("g1", ResetTo(timestamp=middle))
            assert by_time[0] == later.offset
            assert by_time[1] == log.end_offsets()[1]  # nothing after that time: the end
        finally:
            close = getattr(cursors, "close", None)
            if close:
                close()

    # -- awaitable appends (submit): many runs, several submits of one run in flight ---------

    def test_concurrent_awaited_appends_of_many_runs_keep_each_runs_order(
        self, log: EventLog
    ) -> None:
        runs = [f"run-{i}" for i in range(120)]

        async def writer(run: str) -> list[Position]:
            positions: list[Position] = []
            for i in range(8):
                positions += await log.submit(run, [_rec(f"{run}:{i}", little_seq=str(i))])
            return positions

        async def main() -> list[list[Position]]:
            return await asyncio.gather(*(writer(r) for r in runs))

        results = asyncio.run(main())
        for run, positions in zip(runs, results, strict=True):
            records = list(log.read_run(run))
            assert [r.payload.decode() for r in records] == [f"{run}:{i}" for i in range(8)]
            assert [r.position for r in records] == positions
            assert {p.partition for p in positions} == {partition_for(run, self.partitions)}
        for partition in range(self.partitions):
            stored = log.read_partition(partition, 0, limit=10_000, timeout=5)
            offsets = [r.offset for r in stored]
            assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))  # dense, no dupes
        assert log.in_flight() == (0, 0.0)

    def test_submits_of_one_run_in_flight_together_land_in_submit_order(
        self, log: EventLog
    ) -> None:
        async def main() -> list[list[Position]]:
            # taken and submitted with no await in between, as a run's parallel branches do
            pending = [log.submit("run-p", [_rec(f"p{i}a"), _rec(f"p{i}b")]) for i in range(30)]
            return await asyncio.gather(*pending)

        results = asyncio.run(main())
        expected = [f"p{i}{s}" for i in range(30) for s in "ab"]
        assert _payloads(log, "run-p") == expected
        flat = [p.offset for positions in results for p in positions]
        assert flat == sorted(flat)
        assert len(set(flat)) == len(flat)

    def test_an_append_whose_awaiter_is_cancelled_still_lands(self, log: EventLog) -> None:
        async def main() -> list[Position]:
            busy = asyncio.get_running_loop().call_later(0, lambda: None)  # the loop is not idle
            pending = log.submit("run-k", [_rec("kept")])
            task = asyncio.ensure_future(_await(pending))
            await asyncio.sleep(0)  # the task now awaits the append
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            busy.cancel()
            positions: list[Position] = await pending  # its outcome stands for other awaiters
            await log.submit("run-k", [_rec("after")])
            return positions

        positions = asyncio.run(main())
        assert _payloads(log, "run-k") == ["kept", "after"]
        assert [r.position for r in log.read_run("run-k")][:1] == positions

    def test_one_awaiters_cancellation_reaches_no_other_awaiter_nor_the_callbacks(
        self, log: EventLog
    ) -> None:
        async def main() -> tuple[list[Position], list[bool]]:
            pending = log.submit("run-c", [_rec("shared")])
            first = asyncio.ensure_future(_await(pending))
            second = asyncio.ensure_future(_await(pending))
            await asyncio.sleep(0)  # both await the append now
            first.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await first
            # as a writer does for an awaiter cancelled mid-append: account for it once settled
            seen: list[bool] = []
            called = asyncio.Event()

            def account(p: Any) -> None:
                seen.append(p.settled)
                called.set()

            pending.add_done_callback(account)
            positions: list[Position] = await second  # not cancelled by the first's cancel
            await asyncio.wait_for(called.wait(), 30)  # on the loop, once the outcome is in
            return positions, seen

        positions, seen = asyncio.run(main())
        assert [r.position for r in log.read_run("run-c")] == positions
        assert seen == [True]  # once, and only when the append was settled

    def test_submit_needs_an_event_loop_and_append_works_on_one(self, log: EventLog) -> None:
        with pytest.raises(ConfigurationError, match="running event loop"):
            log.submit("run-s", [_rec("x")])

        async def tooling_on_a_loop() -> list[Position]:
            return log.append("run-s", [_rec("blocking")])  # blocks this thread, never deadlocks

        (position,) = asyncio.run(tooling_on_a_loop())
        assert [r.position for r in log.read_run("run-s")] == [position]
