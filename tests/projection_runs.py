"""Runs of a realistic shape and exact length, for projector tests and the rebuild benchmark.

``run_events(run_id, n)`` gives ``n`` events of one completed run: a claim, ``RunStarted``,
steps that each hold an agent session (a model turn that asks for a tool, the tool call, a
final turn) and ``RunCompleted``. Deterministic apart from event ids.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from little._canonical import canonical_json
from little.events import (
    Event,
    ModelCalled,
    ModelResponded,
    RunClaimed,
    RunCompleted,
    RunStarted,
    SessionCompleted,
    SessionStarted,
    StepCompleted,
    StepStarted,
    ToolCallStarted,
    ToolCallSucceeded,
    Usage,
    ValueRecorded,
)

PROVIDER, MODEL = "openai", "gpt-4o-mini"
BASE_TIME = datetime(2025, 6, 1, tzinfo=UTC)
STEP_EVENTS = 10  # events of one agent step


def run_events(
    run_id: str,
    n: int = 100,
    *,
    workflow: str = "research",
    complete: bool = True,
    base_time: datetime = BASE_TIME,
) -> list[Event]:
    """``n`` (>= 3) events of one run in log order; the last is ``RunCompleted`` if ``complete``."""
    if n < 3:
        raise ValueError("a run needs at least 3 events (claim, start, end)")
    out: list[Event] = []
    clock = [0]

    def at() -> datetime:
        clock[0] += 1
        return base_time + timedelta(milliseconds=100 * clock[0])

    def e(cls: type[Event], **fields: object) -> None:
        out.append(cls(run_id=run_id, seq=len(out) - 1, epoch=1, occurred_at=at(), **fields))

    out.append(RunClaimed(run_id=run_id, epoch=1, owner="w1", observed_seq=-1, occurred_at=at()))
    e(
        RunStarted,
        workflow=workflow,
        workflow_version="1",
        input_json=canonical_json({"topic": "Kafka", "run": run_id}),
    )
    body = n - 3 if complete else n - 2
    step = 0
    while body >= STEP_EVENTS:
        path = f"step{step:03d}"
        session = f"{path}#agent"
        usage = Usage(input_tokens=1000 + step, output_tokens=200)
        common = {"step_path": path}
        s = {"step_path": path, "session_id": session}
        e(StepStarted, step_id=path, **common)
        e(
            SessionStarted,
            session_name="agent",
            model=f"{PROVIDER}:{MODEL}",
            manifest_json=canonical_json({"model": MODEL}),
            manifest_hash="0" * 64,
            **s,
        )
        for turn in (1, 2):
            e(
                ModelCalled,
                turn=turn,
                provider=PROVIDER,
                model=MODEL,
                request_hash=f"{turn:064d}",
                appended_messages_json=canonical_json([{"role": "user", "content": "go"}]),
                message_count=turn,
                **s,
            )
            e(
                ModelResponded,
                turn=turn,
                provider=PROVIDER,
                model=MODEL,
                request_hash=f"{turn:064d}",
                response_json=canonical_json({"text": f"answer {step}.{turn}"}),
                usage=usage,
                **s,
            )
            if turn == 1:
                e(
                    ToolCallStarted,
                    call_id="c1",
                    tool="search",
                    turn=1,
                    arguments_json=canonical_json({"q": path}),
                    idempotency_key=f"{run_id}/{path}/1:c1",
                    **s,
                )
                e(ToolCallSucceeded, call_id="c1", tool="search", result_json='["x"]', **s)
        e(SessionCompleted, turns=2, output_json='"done"', usage=usage, **s)
        e(StepCompleted, step_id=path, output_json=canonical_json({"step": step}), **common)
        body -= STEP_EVENTS
        step += 1
    for i in range(body):
        e(ValueRecorded, kind="clock", ordinal=i, value_json=str(i))
    if complete:
        e(RunCompleted, output_json=canonical_json({"steps": step}))
    assert len(out) == n
    return out


def fresh_topics(bootstrap: str, tag: str, *, partitions: int = 6) -> dict[str, str]:
    """Create a fresh runs/index/snapshots/DLQ topic set; returns ``LITTLE_*`` settings."""
    from dataclasses import replace

    from little.log import (
        DLQ_TOPIC,
        RUN_INDEX_TOPIC,
        RUNS_TOPIC,
        SNAPSHOTS_TOPIC,
        load_topic_specs,
    )
    from little.log.kafka import apply_topics

    specs = load_topic_specs()
    names = {
        RUNS_TOPIC: f"t.{tag}.runs",
        RUN_INDEX_TOPIC: f"t.{tag}.index",
        SNAPSHOTS_TOPIC: f"t.{tag}.snapshots",
        DLQ_TOPIC: f"t.{tag}.dlq",
    }
    apply_topics(
        bootstrap,
        [replace(specs[k], name=v, partitions=partitions) for k, v in names.items()],
    )
    return {
        "LITTLE_KAFKA_BOOTSTRAP": bootstrap,
        "LITTLE_RUNS_TOPIC": names[RUNS_TOPIC],
        "LITTLE_RUNS_INDEX_TOPIC": names[RUN_INDEX_TOPIC],
        "LITTLE_SNAPSHOTS_TOPIC": names[SNAPSHOTS_TOPIC],
        "LITTLE_DLQ_TOPIC": names[DLQ_TOPIC],
        "LITTLE_PROJECTOR_GROUP": f"g.{tag}",
    }


def write_interleaved(world: object, runs: dict[str, list[Event]], chunk: int = 10) -> None:
    """Append the runs' events ``chunk`` at a time, round-robin, so runs interleave in the log."""
    append = world.append  # type: ignore[attr-defined]
    offsets = dict.fromkeys(runs, 0)
    while offsets:
        for run_id in list(offsets):
            start = offsets[run_id]
            append(runs[run_id][start : start + chunk])
            if start + chunk >= len(runs[run_id]):
                del offsets[run_id]
            else:
                offsets[run_id] = start + chunk


def clean_fold(world: object, only: object = None) -> dict[str, object]:
    """Every run's state (or those in ``only``) folded from scratch, reading each partition of
    the log once. A run's stream is its own partition: a record of it found in another one
    (misrouted) is not part of it."""
    from collections import defaultdict

    from little.events import LoggedEvent
    from little.replay import materialize_run_state_from_events

    log = world.log  # type: ignore[attr-defined]
    by_run: dict[str, list[LoggedEvent]] = defaultdict(list)
    for p in range(log.partitions):
        offset = 0
        while True:
            page = log.read_partition(p, offset, limit=20_000)
            if not page:
                break
            for rec in page:
                if only is not None and rec.run_id not in only:  # type: ignore[operator]
                    continue
                if log.partition_for(rec.run_id) == p:
                    by_run[rec.run_id].append(world.decode(rec))  # type: ignore[attr-defined]
            offset = page[-1].offset + 1
    return {r: materialize_run_state_from_events(evs, run_id=r) for r, evs in by_run.items()}


def settings_of(env: dict[str, str]) -> object:
    """ProjectionSettings from ``LITTLE_*`` names (what the service would read)."""
    from little_services.projection import ProjectionSettings

    fields = {
        k.removeprefix("LITTLE_").lower(): v for k, v in env.items() if k.startswith("LITTLE_")
    }
    return ProjectionSettings(**fields)


def read_committed(bootstrap: str, topic: str, *, idle: float = 1.5) -> list[object]:
    """Every record of ``topic`` a read_committed consumer sees now (stops after ``idle`` s)."""
    import time
    import uuid

    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 50,
        }
    )
    meta = consumer.list_topics(topic, timeout=10).topics[topic]
    consumer.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
    out: list[object] = []
    last = time.monotonic()
    while time.monotonic() - last < idle:
        for msg in consumer.consume(1000, timeout=0.2):
            if msg.error() is None:
                out.append(msg)
                last = time.monotonic()
    consumer.close()
    return out
