"""Records a real broker can hold that no little writer produces, injected for real (issue 13).

* **Misrouted**: a well-formed event keyed with its run's id but produced into another
  partition, by a plain confluent-kafka producer with librdkafka's default partitioner
  (``consistent_random``: CRC32 of the key, where little and Java use murmur2).
* **Copied**: a record of a run produced again, the same bytes, by a plain producer with
  ``partitioner=murmur2_random`` (which agrees with little's partitioning): what a mirror or a
  re-produce leaves.

Every test uses fresh topics and its own consumer group.
"""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message, Producer

import little
from little.errors import RuntimeIntegrityError
from little.events import Event, RunCancelled, event_headers
from little.replay import materialize_run_state_from_events, replay_run
from little_services.projection import (
    DLQ_MESSAGE,
    DLQ_OFFSET,
    DLQ_PARTITION,
    DLQ_REASON,
    ProjectionStore,
    SqliteProjectionStore,
    create_projector,
    open_world,
)
from tests.projection_runs import fresh_topics, read_committed, run_events, settings_of

pytestmark = pytest.mark.kafka

PARTITIONS = 3


@pytest.fixture
def env(kafka_bootstrap_servers: str, unique: str, tmp_path: Path) -> dict[str, str]:
    return {
        **fresh_topics(kafka_bootstrap_servers, unique, partitions=PARTITIONS),
        "LITTLE_DATA_DIR": str(tmp_path / "data"),
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


def crc32_partition(run_id: str) -> int:
    """Where librdkafka's default partitioner (``consistent_random``) puts a keyed record."""
    return zlib.crc32(run_id.encode()) % PARTITIONS


def misroutable(world: little.World, prefix: str, *, avoid: int | None = None) -> str:
    """A run id that librdkafka's default partitioner sends elsewhere than little does (and
    not into partition ``avoid``)."""
    for i in range(1000):
        run_id = f"{prefix}-{i}"
        q = crc32_partition(run_id)
        if q not in (world.log.partition_for(run_id), avoid):
            return run_id
    raise AssertionError("no such run id in 1000 tries")


def produce_with_librdkafka_defaults(bootstrap: str, topic: str, event: Event) -> Message:
    """Produce one event as an operator's tool would: a plain producer keyed by the run id,
    no explicit partition, librdkafka's default partitioner."""
    codec = little.EventCodec()
    delivered: list[tuple[KafkaError | None, Message]] = []
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    producer.produce(
        topic,
        key=event.run_id.encode(),
        value=codec.encode(event),
        headers=list(event_headers(event)),
        on_delivery=lambda err, msg: delivered.append((err, msg)),
    )
    assert producer.flush(30) == 0
    ((err, msg),) = delivered
    assert err is None, err
    return msg


def test_a_misrouted_event_goes_to_the_dlq_and_changes_no_run(
    env: dict[str, str], world: little.World, tmp_path: Path
) -> None:
    bootstrap, topic = env["LITTLE_KAFKA_BOOTSTRAP"], env["LITTLE_RUNS_TOPIC"]
    # "late": its misrouted record lands above its last offset (it used to be folded in);
    # "early": at or below it (it used to be skipped as a duplicate). Both are complete runs.
    late = misroutable(world, "late")
    q_late = crc32_partition(late)
    early = misroutable(world, "early", avoid=q_late)
    filler = next(
        f"fill-{i}" for i in range(1000) if world.log.partition_for(f"fill-{i}") == q_late
    )
    runs = {
        late: run_events(late, 20),
        early: run_events(early, 40),
        filler: run_events(filler, 60),
    }
    ends = {run_id: world.append(events)[-1].offset for run_id, events in runs.items()}

    def cancel(run_id: str) -> Message:  # well-formed: the run's next seq, its epoch
        last = runs[run_id][-1]
        event = RunCancelled(run_id=run_id, seq=last.seq + 1, epoch=last.epoch, reason="tool")
        return produce_with_librdkafka_defaults(bootstrap, topic, event)

    misrouted = {late: cancel(late), early: cancel(early)}
    for run_id, msg in misrouted.items():
        assert msg.partition() != world.log.partition_for(run_id)  # misrouted for real
        # no reader of the run reads it: the run's stream is its own partition
        assert msg.value() not in [r.payload for r in world.log.read_run(run_id)]
    assert misrouted[late].offset() > ends[late]  # type: ignore[operator]
    assert misrouted[early].offset() <= ends[early]  # type: ignore[operator]

    with SqliteProjectionStore(tmp_path / "p.sqlite3") as store:
        totals = project(env, world, store)
        rows = store.get_many(runs)
        for run_id in runs:
            own = materialize_run_state_from_events(world.read_run(run_id), run_id=run_id)
            assert own.status == "completed"
            assert replay_run(world, run_id).state.status == "completed"
            assert rows[run_id].status == "completed", run_id
            assert rows[run_id].state == own, run_id
            assert rows[run_id].partition == world.log.partition_for(run_id), run_id
        assert totals.dead_letters == 2

    letters = {m.key(): m for m in read_committed(bootstrap, env["LITTLE_DLQ_TOPIC"])}  # type: ignore[attr-defined]
    assert set(letters) == {late.encode(), early.encode()}
    for run_id, msg in misrouted.items():
        letter: Any = letters[run_id.encode()]
        headers = dict(letter.headers())
        assert letter.value() == msg.value()
        assert headers[DLQ_REASON] == b"misrouted"
        assert headers[DLQ_PARTITION] == str(msg.partition()).encode()
        assert headers[DLQ_OFFSET] == str(msg.offset()).encode()
        text = headers[DLQ_MESSAGE].decode()
        assert f"belongs in partition {world.log.partition_for(run_id)} " in text
        assert "murmur2" in text


def test_a_reproduced_record_is_skipped_and_counted_and_another_event_at_its_seq_is_not(
    env: dict[str, str], world: little.World, tmp_path: Path
) -> None:
    bootstrap, topic = env["LITTLE_KAFKA_BOOTSTRAP"], env["LITTLE_RUNS_TOPIC"]
    copied, forged = "copied-run", "forged-run"
    for run_id in (copied, forged):
        world.append(run_events(run_id, 40))
    middle = list(world.log.read_run(copied))[12]  # an accepted event well before the end
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    delivered: list[Message] = []
    producer.produce(
        topic,
        key=middle.run_id.encode(),
        value=middle.payload,
        headers=list(middle.headers),
        on_delivery=lambda err, msg: delivered.append(msg) if err is None else None,
    )
    assert producer.flush(30) == 0
    (again,) = delivered
    assert again.partition() == world.log.partition_for(copied)  # murmur2_random agrees
    assert again.offset() > middle.offset  # type: ignore[operator]
    assert [r.payload for r in world.log.read_run(copied)].count(middle.payload) == 2
    # A new event (its own id) at an accepted seq: two events claim one place in the chain.
    accepted = world.decode(list(world.log.read_run(forged))[12]).event
    other = accepted.model_copy(update={"event_id": str(uuid.uuid4())})
    world.append([other])

    replayed = replay_run(world, copied).state
    assert (replayed.status, replayed.duplicate_events) == ("completed", 1)
    with pytest.raises(RuntimeIntegrityError, match="another event than the one accepted"):
        replay_run(world, forged)

    with SqliteProjectionStore(tmp_path / "p.sqlite3") as store:
        totals = project(env, world, store)
        rows = store.get_many([copied, forged])
        assert rows[copied].status == "completed"
        assert rows[copied].state == materialize_run_state_from_events(world.read_run(copied))
        assert rows[copied].state.duplicate_events == 1
        assert rows[forged].status == "integrity_error"
        assert rows[forged].integrity.reason == "stream-integrity"  # type: ignore[union-attr]
        assert other.event_id in rows[forged].integrity.message  # type: ignore[union-attr]
        assert totals.dead_letters == 1
    (letter,) = read_committed(bootstrap, env["LITTLE_DLQ_TOPIC"])
    assert letter.key() == forged.encode()  # type: ignore[attr-defined]
