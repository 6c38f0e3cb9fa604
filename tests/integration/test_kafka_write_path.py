"""The Kafka write path under real faults: a full librdkafka queue, a record the producer
refuses. Each run's records stay in submit order and no later record of a run lands after
an earlier one failed (the fold would reject the gap)."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from typing import Any

import pytest

from little.errors import AppendOutcomeUnknownError, LogError
from little.log import OutgoingRecord, Position
from little.log.kafka import KafkaEventLog
from little.log.kafka.client import produce_and_wait
from tests.conformance.backends import create_kafka_topics

pytestmark = pytest.mark.kafka


@pytest.fixture
def topics(kafka_bootstrap_servers: str, unique: str) -> dict[str, str]:
    spec = {"bootstrap": kafka_bootstrap_servers, "topic": f"w{unique}.runs"}
    spec["index_topic"] = f"w{unique}.index"
    create_kafka_topics(kafka_bootstrap_servers, spec["topic"], spec["index_topic"], 3)
    return spec


def open_log(spec: dict[str, str], **config: Any) -> KafkaEventLog:
    return KafkaEventLog(
        spec["bootstrap"], topic=spec["topic"], index_topic=spec["index_topic"], config=config
    )


def test_a_full_producer_queue_parks_appends_in_order(topics: dict[str, str]) -> None:
    # room for 4 messages: most produces hit BufferError and wait for the pump to retry them
    log = open_log(topics, **{"queue.buffering.max.messages": 4})
    runs = [f"q{i}" for i in range(20)]

    async def main() -> list[list[Position]]:
        pending = [
            log.submit(r, [OutgoingRecord(f"{r}:{i}".encode())]) for i in range(5) for r in runs
        ]
        return await asyncio.gather(*pending)

    try:
        results = asyncio.run(main())
        assert len(results) == 100
        for run in runs:
            got = [r.payload.decode() for r in log.read_run(run)]
            assert got == [f"{run}:{i}" for i in range(5)]
        assert log.in_flight() == (0, 0.0)
    finally:
        log.close()


def test_after_a_refused_record_a_run_gets_no_later_record(topics: dict[str, str]) -> None:
    log = open_log(topics, **{"message.max.bytes": 20_000})
    huge = OutgoingRecord(b"x" * 50_000)  # the producer refuses it (message size too large)

    async def main() -> list[list[Position] | BaseException]:
        pending = [
            log.submit("r", [OutgoingRecord(b"first")]),
            log.submit("r", [huge]),
            log.submit("r", [OutgoingRecord(b"later")]),
            log.submit("other", [OutgoingRecord(b"fine")]),
        ]
        return await asyncio.gather(*pending, return_exceptions=True)

    try:
        first, refused, later, other = asyncio.run(main())
        assert not isinstance(first, BaseException)
        assert isinstance(refused, LogError)
        assert isinstance(later, LogError)
        assert "an earlier append of the run failed" in str(later)
        assert not isinstance(other, BaseException)
        assert [r.payload for r in log.read_run("r")] == [b"first"]
        assert [r.payload for r in log.read_run("other")] == [b"fine"]
    finally:
        log.close()


def test_an_append_after_a_failed_one_of_its_writer_is_refused(topics: dict[str, str]) -> None:
    """``submit(..., after=)``: once the writer's previous append failed, the next is refused
    unsent, even with nothing of the run in flight any more."""
    log = open_log(topics, **{"message.max.bytes": 20_000})

    async def main() -> tuple[BaseException | None, BaseException | None]:
        failed = log.submit("a", [OutgoingRecord(b"x" * 50_000)])
        try:
            await failed
        except LogError as exc:
            first: BaseException | None = exc
        else:
            first = None
        try:
            await log.submit("a", [OutgoingRecord(b"next")], after=failed)
        except LogError as exc:
            return first, exc
        return first, None

    try:
        first, refused = asyncio.run(main())
        assert isinstance(first, LogError)
        assert isinstance(refused, LogError)
        assert "an earlier append of the run failed" in str(refused)
        assert list(log.read_run("a")) == []
    finally:
        log.close()


def test_produce_and_wait_says_which_run_the_producer_refused(topics: dict[str, str]) -> None:
    """The blocking path of snapshots and commands: a record the producer refuses unsent is a
    ``LogError`` naming the run; after records of the same call were sent, an unknown outcome."""
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": topics["bootstrap"], "message.max.bytes": 20_000, "acks": "all"}
    )
    huge = (b"x" * 50_000, ())
    with pytest.raises(LogError, match=r"run r0 .*refused \(50000 bytes\)") as refused:
        produce_and_wait(producer, topics["topic"], 0, "r0", [huge], 10)
    assert not isinstance(refused.value, AppendOutcomeUnknownError)
    with pytest.raises(AppendOutcomeUnknownError, match="first 1 of 2 records may have landed"):
        produce_and_wait(producer, topics["topic"], 0, "r1", [(b"small", ()), huge], 10)
    log = open_log(topics)
    try:
        stored = log.read_partition(0, 0, limit=10, timeout=5)
        assert [(r.run_id, r.payload) for r in stored] == [("r1", b"small")]
    finally:
        log.close()


class _Report:
    """What a delivery callback reads of a delivered record: its offset."""

    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset


def test_settling_from_many_threads_at_once_settles_every_append_once(
    topics: dict[str, str],
) -> None:
    """Delivery reports are settled by whichever thread polls the producer: the pump, or a
    blocking append's own thread (``_poll_here``). Here completed appends come
    in bursts, through the delivery callback librdkafka calls, while several threads settle
    at once from both sides: every append settles once, with its own offset, and no settling
    thread fails. (Two threads once both saw the last completed append and the slower popped
    an empty deque: its writer stopped with "pop from an empty deque" and the rest of that
    thread's batch was never settled, so those waiters hung.)"""
    from little.log import PendingAppend
    from little.log.kafka._log import _Append

    log = open_log(topics)
    bursts, burst, settlers = 400, 25, 3
    failures: list[BaseException] = []
    stop = threading.Event()

    def settle(step: Any) -> None:
        while not stop.is_set():
            try:
                step()
            except Exception as exc:
                failures.append(exc)
                return

    def completed_appends(first: int) -> list[tuple[_Append, int]]:
        made = []
        for offset in range(first, first + burst):
            run = f"settle-{offset % 7}"
            pending = PendingAppend(None)
            log._flight.add(pending)
            made.append(
                (_Append(log, run, log.partition_for(run), [OutgoingRecord(b"x")], pending), offset)
            )
            with log._lock:
                log._busy[run] = log._busy.get(run, 0) + 1
        return made

    steps = [log._settle_completed] * settlers + [log._poll_here] * settlers
    threads = [threading.Thread(target=settle, args=(step,)) for step in steps]
    settled: list[tuple[PendingAppend, int]] = []
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads trade the GIL as often as the interpreter lets them
    try:
        for t in threads:
            t.start()
        for b in range(bursts):
            appends = completed_appends(b * burst)
            for append, offset in appends:
                append.report(None, _Report(offset))  # as librdkafka calls it, in a poll
            # wait until the burst is settled or a settling thread failed (its batch is lost)
            while not failures and not all(a.pending.settled for a, _ in appends):
                time.sleep(0)  # a spin: lets the settling threads run
            settled += [(a.pending, offset) for a, offset in appends]
            if failures:
                break
    finally:
        stop.set()
        for t in threads:
            t.join()
        sys.setswitchinterval(switch)
    try:
        assert failures == []
        assert len(settled) == bursts * burst
        for pending, offset in settled:
            assert [p.offset for p in pending.wait(0)] == [offset]
        assert log.in_flight() == (0, 0.0)
        assert log._busy == {}
    finally:
        log.close()


def test_a_lone_writers_appends_settle_by_their_reports_not_a_polls_timeout(
    topics: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One writer alone, appending and awaiting one append at a time (a lone run), with a
    blocking append from another thread now and then: the pump is woken by each append and
    settles it by the delivery reports that end its poll, whichever of its polls served them.
    With the pump's poll and idle timeouts at 40 s, an append whose reports were served and
    left unsettled (once: by the idle check's poll, until the next poll timed out) or that no
    poll was woken for would wait 40 s, and ``wait_for`` fails it first."""
    from little.log.kafka import _log

    monkeypatch.setattr(_log, "PUMP_WAIT_SECONDS", 40.0)
    monkeypatch.setattr(_log, "PUMP_IDLE_SECONDS", 40.0)
    log = open_log(topics)

    async def main() -> list[list[Position]]:
        got = []
        for i in range(200):
            pending = log.submit("lone", [OutgoingRecord(f"a{i}".encode())])
            got.append(await asyncio.wait_for(asyncio.shield(pending), 25))
            if i % 10 == 5:  # a blocking append's thread serves (and holds the pump) meanwhile
                await asyncio.to_thread(log.append, "other", [OutgoingRecord(b"b")])
            await asyncio.sleep(0.002 * (i % 3))  # idle between appends, as a run's steps are
        return got

    try:
        positions = asyncio.run(main())
        assert [p[0].offset for p in positions] == sorted(p[0].offset for p in positions)
        assert [r.payload for r in log.read_run("lone")] == [f"a{i}".encode() for i in range(200)]
        assert log.in_flight() == (0, 0.0)
    finally:
        log.close()
