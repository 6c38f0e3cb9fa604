"""Poison and hostile input on every topic a service consumes, injected for real (issue 13).

The runs topic (the projector) and the commands topic (the resume coordinator) each get the
same list of records no little writer produces: random bytes, truncated Avro, a valid framing
with a garbage body, a valid record of another type, a record keyed with the wrong run id, one
for a run that does not exist, one of 1 MB, a duplicate, an out-of-order seq, a forged higher
epoch. Each is produced by a plain confluent-kafka producer (``partitioner=murmur2_random``,
which agrees with little's partitioning), as an operator's tool would. For each the service
keeps running (a good record sent after every bad one is processed), the record lands in the
dead-letter topic with a reason or is fenced or flagged by the fold, and ``little report`` on
an affected run says what it found in one line.

Commands carry no seq and no epoch: on the commands topic the out-of-order and forged-epoch
cases are an event (which has both) produced there, a valid record of another type.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message, Producer

import little
from little.commands import CancelRun, CommandPublisher, ResumeRun, StartRun, encode_command
from little.events import Event, RunCancelled, RunCompleted
from little.log import partition_for
from little_services.projection import (
    DLQ_MESSAGE,
    DLQ_OFFSET,
    DLQ_PARTITION,
    DLQ_REASON,
    DLQ_TOPIC_HEADER,
    DLQ_VALUE_OMITTED,
    ProjectionStore,
    SqliteProjectionStore,
    create_projector,
    open_world,
)
from tests.cli import little_cli
from tests.integration.coordinator_support import (
    CoordinatorProcess,
    RunsWatcher,
    make_topics,
    spawn_coordinator,
    wait_ready,
    wait_until,
)
from tests.projection_runs import fresh_topics, read_committed, run_events, settings_of

pytestmark = pytest.mark.kafka

PARTITIONS = 3
ONE_MB = 1_000_000
# Under the broker's default message.max.bytes (1,048,588), over librdkafka's default (1e6).
BIG_PRODUCER = {"message.max.bytes": 1_048_000}


def produce(
    bootstrap: str,
    topic: str,
    key: str | bytes,
    value: bytes,
    headers: list[tuple[str, bytes]] | None = None,
    partition: int | None = None,
) -> Message:
    """One record as an operator's tool produces it: keyed, murmur2 partitioning (or into
    ``partition``, as a tool with another partitioner would)."""
    delivered: list[tuple[KafkaError | None, Message]] = []
    producer = Producer(
        {"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", **BIG_PRODUCER}
    )
    producer.produce(
        topic,
        key=key if isinstance(key, bytes) else key.encode(),
        value=value,
        headers=headers or [],
        **({} if partition is None else {"partition": partition}),
        on_delivery=lambda err, msg: delivered.append((err, msg)),
    )
    assert producer.flush(30) == 0
    ((err, msg),) = delivered
    assert err is None, err
    return msg


def one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


# -- the runs topic: the projector -----------------------------------------------------------


@pytest.fixture
def env(kafka_bootstrap_servers: str, unique: str, tmp_path: Path) -> dict[str, str]:
    return {
        **fresh_topics(kafka_bootstrap_servers, unique, partitions=PARTITIONS),
        "LITTLE_DATA_DIR": str(tmp_path / "data"),
        "LITTLE_ARTIFACTS_DIR": str(tmp_path / "artifacts"),
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


def test_hostile_records_on_the_runs_topic_are_dead_lettered_or_fenced_and_the_projector_goes_on(
    env: dict[str, str], world: little.World, tmp_path: Path
) -> None:
    bootstrap, topic = env["LITTLE_KAFKA_BOOTSTRAP"], env["LITTLE_RUNS_TOPIC"]
    codec = little.EventCodec()
    rng = random.Random(13)
    header = little.events.default_catalog().latest("RunCancelled").single_object_header

    def started(run_id: str, n: int = 12) -> list[Event]:
        """A run half done: claimed, started, some steps; not ended."""
        events = run_events(run_id, n, complete=False)
        world.append(events)
        return events

    def next_of(events: list[Event], **fields: Any) -> Event:
        last = events[-1]
        return RunCancelled(
            run_id=last.run_id, seq=last.seq + 1, epoch=last.epoch, reason="hostile", **fields
        )

    def inject(run_id: str, value: bytes, key: str | None = None) -> Message:
        return produce(bootstrap, topic, key or run_id, value)

    expected: dict[str, str] = {}  # run id -> the dead letter's reason
    injected: dict[str, Message] = {}

    run = "bytes"
    started(run)
    injected[run] = inject(run, bytes([0x17]) + rng.randbytes(200))
    expected[run] = "not-avro-framing"

    run = "truncated"
    events = started(run)
    whole = codec.encode(next_of(events))
    injected[run] = inject(run, whole[: len(whole) // 2])
    expected[run] = "truncated-body"

    run = "garbage"
    started(run)
    injected[run] = inject(run, header + b"this is no Avro record at all, just words" * 3)
    expected[run] = "malformed-body"

    run = "command"  # a valid Avro single-object record, of a type that is no event
    started(run)
    injected[run] = inject(run, encode_command(ResumeRun(run_id=run)))
    expected[run] = "unknown-fingerprint"

    run = "wrong-key"  # a well-formed event of another run, keyed (and partitioned) as this one
    events = started(run)
    other = started("wrong-key-owner")
    injected[run] = inject(run, codec.encode(next_of(other)))
    expected[run] = "stream-integrity"

    run = "ghost"  # a run that does not exist: no claim, no start, only this
    injected[run] = inject(run, codec.encode(RunCompleted(run_id=run, seq=7, epoch=1)))
    expected[run] = "stream-integrity"

    run = "one-mb"
    started(run)
    injected[run] = inject(run, header + bytes([0x48]) + rng.randbytes(ONE_MB))
    expected[run] = "malformed-body"

    run = "out-of-order"  # the seq after next: a gap
    events = started(run)
    ahead = next_of(events).model_copy(update={"seq": events[-1].seq + 3})
    injected[run] = inject(run, codec.encode(ahead))
    expected[run] = "stream-integrity"

    run = "forged-epoch"  # an event of an epoch no claim accepted
    events = started(run)
    forged = next_of(events).model_copy(update={"epoch": events[-1].epoch + 1})
    injected[run] = inject(run, codec.encode(forged))
    expected[run] = "stream-integrity"

    copied = "duplicate"  # an accepted record produced again, the same bytes
    events = started(copied)
    record = list(world.log.read_run(copied))[5]
    injected[copied] = produce(bootstrap, topic, copied, record.payload, list(record.headers))

    # After every bad record, good ones: the rest of each run, and a whole run.
    good = "good-after"
    for run in ("bytes", "garbage", "command", "one-mb", "duplicate"):
        tail = run_events(run, 14, complete=False)[12:]  # the next two, seq 11 and 12
        world.append(tail)
    world.append(run_events(good, 30))

    with SqliteProjectionStore(tmp_path / "p.sqlite3") as store:
        totals = project(env, world, store)
        rows = store.get_many([*expected, copied, good])
        assert rows[good].status == "completed"  # the projector went on past every bad one
        for run, reason in expected.items():
            assert rows[run].status == "integrity_error", run
            assert rows[run].integrity.reason == reason, run  # type: ignore[union-attr]
        assert rows["bytes"].integrity.skipped == 2  # type: ignore[union-attr]
        assert rows[copied].status == "running"
        assert rows[copied].state.duplicate_events == 1
        assert rows[copied].state.last_seq == 12  # the copy skipped, the run went on
        assert totals.dead_letters == len(expected)

    letters = {m.key().decode(): m for m in read_committed(bootstrap, env["LITTLE_DLQ_TOPIC"])}  # type: ignore[attr-defined]
    assert set(letters) == set(expected)
    for run, reason in expected.items():
        letter: Any = letters[run]
        headers = dict(letter.headers())
        assert headers[DLQ_REASON] == reason.encode(), run
        assert headers[DLQ_TOPIC_HEADER] == topic.encode()
        assert headers[DLQ_PARTITION] == str(injected[run].partition()).encode()
        assert headers[DLQ_OFFSET] == str(injected[run].offset()).encode()
        assert headers[DLQ_MESSAGE], run
        if run == "one-mb":  # too large to send again with the headers: left out
            assert not letter.value()
            assert headers[DLQ_VALUE_OMITTED] == str(len(injected[run].value())).encode()  # type: ignore[arg-type]
        else:
            assert letter.value() == injected[run].value(), run

    # `little report` on an affected run: one line saying what it found, exit 1.
    cli_env = {
        "PATH": "/usr/bin:/bin",
        "LITTLE_KAFKA_BOOTSTRAP": bootstrap,
        "LITTLE_RUNS_TOPIC": topic,
        "LITTLE_RUNS_INDEX_TOPIC": env["LITTLE_RUNS_INDEX_TOPIC"],
        "LITTLE_SNAPSHOTS_TOPIC": env["LITTLE_SNAPSHOTS_TOPIC"],
        "LITTLE_ARTIFACTS_DIR": env["LITTLE_ARTIFACTS_DIR"],
    }
    says = {
        "bytes": "does not decode",
        "truncated": "truncated-body",
        "garbage": "malformed-body",
        "command": "unknown-fingerprint",
        "wrong-key": "event of run wrong-key-owner in the stream of run wrong-key",
        # no little writer began it, so no run-index entry: its readers see nothing (the
        # projector, which reads whole partitions, flags it)
        "ghost": "run ghost has no events",
        "one-mb": "malformed-body",
        "out-of-order": "seq gap",
        "forged-epoch": "ahead of the accepted claim",
    }
    for run, text in says.items():
        out = little_cli("report", run, env=cli_env)
        assert out.returncode == 1, (run, out.stdout, out.stderr)
        line = one_line(out.stderr)
        assert line.startswith("error: "), line
        assert text in line, (run, line)
        assert run in line, (run, line)
        if run != "ghost":
            assert f"offset {injected[run].offset()}" in line, (run, line)
    out = little_cli("report", copied, env=cli_env)
    assert out.returncode == 0, out.stderr
    assert "duplicate" in out.stdout.lower(), out.stdout


# -- the commands topic: the resume coordinator ----------------------------------------------


@pytest.fixture
def coordinator(
    kafka_bootstrap_servers: str, unique: str, tmp_path: Path
) -> Iterator[tuple[CoordinatorProcess, dict[str, str]]]:
    topics = make_topics(kafka_bootstrap_servers, unique, PARTITIONS)
    proc = spawn_coordinator(
        f"hostile-{unique}",
        bootstrap=kafka_bootstrap_servers,
        topics=topics,
        group=f"hostile-{unique}",
        workdir=tmp_path,
    )
    try:
        wait_ready([proc], PARTITIONS)
        yield proc, topics
    finally:
        proc.stop()


def test_hostile_records_on_the_commands_topic_are_dead_lettered_and_the_coordinator_goes_on(
    kafka_bootstrap_servers: str,
    coordinator: tuple[CoordinatorProcess, dict[str, str]],
    unique: str,
    tmp_path: Path,
) -> None:
    proc, topics = coordinator
    bootstrap, topic = kafka_bootstrap_servers, topics["commands"]
    rng = random.Random(31)
    codec = little.EventCodec()
    header = encode_command(ResumeRun(run_id="x"))[:10]
    run = f"hostile-{unique}"
    valid = encode_command(StartRun.of(run, "coordinator.chat", {"latency": 0.01}))
    event = RunCancelled(run_id=run, seq=4, epoch=9, reason="forged")  # seq and epoch: no command
    injected: dict[str, tuple[str, Message]] = {}  # case -> (reason, record)

    def inject(
        case: str, reason: str, value: bytes, key: str = run, partition: int | None = None
    ) -> None:
        injected[case] = (reason, produce(bootstrap, topic, key, value, partition=partition))

    inject("bytes", "not-avro-framing", bytes([0x17]) + rng.randbytes(200))
    inject("truncated", "truncated-body", valid[: len(valid) // 2])
    inject("garbage", "malformed-body", header + b"no Avro command body at all" * 3)
    inject("event", "unknown-fingerprint", codec.encode(event))  # also a forged seq and epoch
    wrong = next(
        f"{run}-w{i}"
        for i in range(1000)
        if partition_for(f"{run}-w{i}", PARTITIONS) == partition_for(run, PARTITIONS)
    )
    inject("wrong-key", "key-mismatch", valid, key=wrong)
    elsewhere = (partition_for(run, PARTITIONS) + 1) % PARTITIONS  # another partitioner's pick
    inject("misrouted", "misrouted", valid, partition=elsewhere)
    inject("one-mb", "malformed-body", header + bytes([0x48]) + rng.randbytes(ONE_MB))
    # A run that does not exist: refused (logged), nothing written for it.
    ghost = f"ghost-{unique}"
    with CommandPublisher(bootstrap, topic=topic) as publisher:
        publisher.send([ResumeRun(run_id=ghost), CancelRun(run_id=ghost, reason="hostile")])
        # A good command after the bad ones, sent twice (a duplicate): one run, completed once.
        start = StartRun.of(run, "coordinator.chat", {"latency": 0.01})
        publisher.send([start])
        publisher.send([start])

    watcher = RunsWatcher(bootstrap, topics["runs"])
    try:
        watcher.wait(lambda w: w.status(run) == "completed", 60, f"{run} to complete")
        wait_until(
            lambda: len(proc.log_events("command_dead_lettered")) >= len(injected),
            30,
            "every hostile record dead-lettered",
        )
        watcher.catch_up()
        state = watcher.state(run)
        assert (state.status, state.accepted_claims) == ("completed", 1)
        assert [type(e.event).__name__ for e in watcher.runs[run]].count("RunStarted") == 1
        assert ghost not in watcher.runs  # no run made out of a command for a run that is not
        assert any(e.get("run_id") == ghost for e in proc.log_events("run_unknown"))
    finally:
        watcher.close()
    assert proc.proc.poll() is None, proc.logs()[-3000:]

    letters = {
        (
            int(dict(m.headers())[DLQ_PARTITION]),  # type: ignore[attr-defined]
            int(dict(m.headers())[DLQ_OFFSET]),  # type: ignore[attr-defined]
        ): m
        for m in read_committed(bootstrap, topics["dlq"])
    }
    assert len(letters) == len(injected)
    for case, (reason, msg) in injected.items():
        letter: Any = letters[(msg.partition(), msg.offset())]  # type: ignore[index]
        headers = dict(letter.headers())
        assert headers[DLQ_REASON] == reason.encode(), case
        assert headers[DLQ_TOPIC_HEADER] == topic.encode()
        assert headers[DLQ_PARTITION] == str(msg.partition()).encode()
        assert letter.key() == msg.key()
        if case == "one-mb":
            assert not letter.value()  # left out beside the headers; the offset finds it
            assert int(headers["little.dlq.value_omitted"]) == len(msg.value())  # type: ignore[arg-type]
        else:
            assert letter.value() == msg.value(), case

    # `little report` on the run that does not exist: one line, exit 1.
    cli_env = {
        "PATH": "/usr/bin:/bin",
        "LITTLE_KAFKA_BOOTSTRAP": bootstrap,
        "LITTLE_RUNS_TOPIC": topics["runs"],
        "LITTLE_RUNS_INDEX_TOPIC": topics["index"],
        "LITTLE_SNAPSHOTS_TOPIC": topics["snapshots"],
        "LITTLE_ARTIFACTS_DIR": str(tmp_path / "data" / "artifacts"),
    }
    out = little_cli("report", ghost, env=cli_env)
    assert out.returncode == 1
    assert ghost in one_line(out.stderr)
    done = little_cli("report", run, env=cli_env)
    assert done.returncode == 0, done.stderr
