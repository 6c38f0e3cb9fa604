"""Projection rebuild by offset reset, beside a raw consumer and a decode-only consumer.

Fresh topics on the local broker; ``--events`` records across ``--events / 100`` runs of 100
events (a claim, a start, agent steps with model and tool calls, the end), written the way
concurrent runs land: ``--concurrent`` runs active at a time, appended 10 events at a turn.
Then, on the same topic:

* raw confluent-kafka consumer, no decoding (the engine's limit);
* decode-only: the same consumer plus ``EventCodec.decode`` of every record;
* ``little_services.projection.rebuild``: reset the group to the earliest offsets, clear the
  store, refold until caught up (fold, durable store writes, per-partition transactions with
  snapshots and offsets), as ``little projections rebuild`` does: once in-process
  (``workers=1``) and once per ``--workers`` count with that many worker processes, each a
  projector in the group, all writing the one store; for each store of ``--stores``: the
  sqlite file, and a PostgreSQL database (a server started for the run, as the tests do:
  initdb + postgres on 127.0.0.1, with fsync on; ``LITTLE_TEST_POSTGRES_URL`` for your own).
  Two worker processes on PostgreSQL is two projector processes writing one database.

Raw and decode-only stay one process: they are what one consumer can do. Prints a markdown
table with ratios.

    .venv/bin/python bench/projection_rebuild.py [--events 1000000] [--concurrent 500]
        [--rounds 2] [--workers 1,2] [--stores sqlite,postgresql]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, Producer, TopicPartition

from bench._common import bootstrap, machine, stamp, table
from little.events import EventCodec, event_headers
from little.log import (
    ResetTo,
    partition_for,
)
from little_services.projection import (
    MemoryProjectionStore,
    PostgresProjectionStore,
    ProjectionStore,
    SqliteProjectionStore,
    open_world,
    rebuild,
    tune_gc,
)
from tests.postgres_server import PostgresServer, postgres_server
from tests.projection_runs import fresh_topics, run_events, settings_of

PARTITIONS = 12
EVENTS_PER_RUN = 100
CHUNK = 10  # events a run appends at its turn
TEMPLATE_ID = "run-0000000"  # every run id has this length: runs are made by byte substitution


def write(bs: str, topic: str, runs: int, concurrent: int) -> float:
    """Write ``runs`` runs, ``concurrent`` at a time, CHUNK events per turn; returns seconds."""
    codec = EventCodec()
    template = [
        (codec.encode(e), event_headers(e)) for e in run_events(TEMPLATE_ID, EVENTS_PER_RUN)
    ]
    old = TEMPLATE_ID.encode()
    producer = Producer(
        {
            "bootstrap.servers": bs,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 20,
            "batch.num.messages": 10000,
            "compression.type": "lz4",
        }
    )
    began = time.perf_counter()
    next_run = 0
    active: dict[str, int] = {}
    while next_run < runs or active:
        while len(active) < concurrent and next_run < runs:
            active[f"run-{next_run:07d}"] = 0
            next_run += 1
        for run_id in list(active):
            new = run_id.encode()
            part = partition_for(run_id, PARTITIONS)
            start = active[run_id]
            for payload, headers in template[start : start + CHUNK]:
                hs = [(k, v.replace(old, new)) for k, v in headers]
                while True:
                    try:
                        producer.produce(
                            topic, payload.replace(old, new), run_id, partition=part, headers=hs
                        )
                        break
                    except BufferError:
                        producer.poll(0.05)
            if start + CHUNK >= EVENTS_PER_RUN:
                del active[run_id]
            else:
                active[run_id] = start + CHUNK
        producer.poll(0)
    producer.flush(120)
    return time.perf_counter() - began


def consume_all(bs: str, topic: str, total: int, *, decode: bool) -> float:
    """Events/s of a plain consumer reading the topic from the start (optionally decoding)."""
    codec = EventCodec()
    consumer = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"bench-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen = 0
    began = time.perf_counter()
    while seen < total:
        for msg in consumer.consume(5000, timeout=1.0):
            if msg.error() is None:
                if decode:
                    codec.decode(msg.value())
                seen += 1
    seconds = time.perf_counter() - began
    consumer.close()
    return total / seconds


def rebuild_rate(
    bs: str,
    env: dict[str, str],
    total: int,
    store: ProjectionStore,
    batch: int,
    workers: int = 1,
) -> tuple[float, int]:
    group = f"bench-{uuid.uuid4().hex[:8]}"  # a fresh group per rebuild
    settings: Any = settings_of(
        {**env, "LITTLE_PROJECTOR_GROUP": group, "LITTLE_PROJECTOR_BATCH": str(batch)}
    )
    with open_world(settings) as world:
        result = rebuild(
            world,
            store,
            settings.projection_config(),
            ResetTo(earliest=True),
            bootstrap_servers=bs,
            workers=workers,
            settings=settings,
        )
    assert result.workers == workers, result
    assert result.totals.consumed == total, result.totals
    assert result.totals.folded == total
    assert result.totals.dead_letters == 0
    return total / result.seconds, result.totals.snapshots


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--concurrent", type=int, default=500, help="runs active at a time")
    ap.add_argument("--batch", type=int, default=5000, help="records per projector batch")
    ap.add_argument("--rounds", type=int, default=2, help="best of this many, interleaved")
    ap.add_argument("--memory-store", action="store_true", help="also rebuild into memory")
    ap.add_argument(
        "--workers",
        default="1,2",
        help="rebuild worker process counts to measure, comma-separated (1 = in-process)",
    )
    ap.add_argument(
        "--stores", default="sqlite,postgresql", help="projection stores to rebuild into"
    )
    args = ap.parse_args()
    counts_of_workers = [int(w) for w in args.workers.split(",")]
    stores = args.stores.split(",")
    for name in stores:
        if name not in ("sqlite", "postgresql"):
            ap.error(f"--stores: unknown store {name!r} (sqlite, postgresql)")
    with contextlib.ExitStack() as stack:
        pg = stack.enter_context(postgres_server(fsync=True)) if "postgresql" in stores else None
        measure(args, counts_of_workers, stores, pg)


@contextlib.contextmanager
def open_bench_store(name: str, pg: PostgresServer | None) -> Any:
    if name == "sqlite":
        with (
            tempfile.TemporaryDirectory() as d,
            SqliteProjectionStore(Path(d) / "projection.sqlite3") as store,
        ):
            yield store
        return
    assert pg is not None
    with PostgresProjectionStore(pg.new_database()) as store:
        yield store


def measure(
    args: argparse.Namespace, counts_of_workers: list[int], stores: list[str], pg: Any
) -> None:
    bs = bootstrap()
    tune_gc()  # as the service and `little projections rebuild` do; for every path measured
    runs = args.events // EVENTS_PER_RUN
    total = runs * EVENTS_PER_RUN
    env = fresh_topics(bs, f"bench-{uuid.uuid4().hex[:8]}", partitions=PARTITIONS)
    topic = env["LITTLE_RUNS_TOPIC"]
    wrote = write(bs, topic, runs, args.concurrent)
    print(f"wrote {total:,} events of {runs:,} runs in {wrote:.1f}s", file=sys.stderr)

    raws: list[float] = []
    decodes: list[float] = []
    paths = [(name, w) for name in stores for w in counts_of_workers]
    rebuilds: dict[tuple[str, int], list[float]] = {p: [] for p in paths}
    snapshots = 0
    for r in range(args.rounds):  # interleaved, so drift on a shared machine hits all alike
        raws.append(consume_all(bs, topic, total, decode=False))
        decodes.append(consume_all(bs, topic, total, decode=True))
        line = f"round {r + 1}: raw {raws[-1]:,.0f}/s, decode-only {decodes[-1]:,.0f}/s"
        for name, workers in paths:
            with open_bench_store(name, pg) as store:
                rate, snapshots = rebuild_rate(bs, env, total, store, args.batch, workers)
                counts = store.count_by_status()
            assert counts == {"completed": runs}, counts
            rebuilds[(name, workers)].append(rate)
            line += f", {name} x{workers} {rate:,.0f}/s ({rate / decodes[-1]:.2f}x decode-only)"
        print(line, file=sys.stderr)
    raw, decoded = max(raws), max(decodes)
    rows = [
        ["raw confluent-kafka consumer (no decoding)", f"{raw:,.0f}", "1.00x", "-"],
        [
            "decode-only consumer (EventCodec.decode)",
            f"{decoded:,.0f}",
            f"{decoded / raw:.2f}x",
            "1.00x",
        ],
    ]
    for name, workers in paths:
        ours = max(rebuilds[(name, workers)])
        how = "in-process" if workers == 1 else f"{workers} worker processes"
        rows.append(
            [
                f"projector rebuild, {how} ({name} store, transactions, snapshots)",
                f"{ours:,.0f}",
                f"{ours / raw:.3f}x",
                f"{ours / decoded:.2f}x",
            ]
        )
    if args.memory_store:
        mem, _ = rebuild_rate(bs, env, total, MemoryProjectionStore(), args.batch)
        rows.append(
            [
                "projector rebuild (memory store)",
                f"{mem:,.0f}",
                f"{mem / raw:.3f}x",
                f"{mem / decoded:.2f}x",
            ]
        )
    print(
        table(
            f"Projection rebuild, {stamp()}, {machine()}, local Kafka 4.1.1 broker (1 node)",
            ["path", "events/s", "vs raw consume", "vs decode-only"],
            rows,
        )
    )
    print(
        f"\n{total:,} events, {runs:,} runs x {EVENTS_PER_RUN} events, {PARTITIONS} partitions, "
        f"{args.concurrent} runs interleaved at a time ({CHUNK} events a turn); projector "
        f"batch {args.batch}, a snapshot every 100 events per run and at its end "
        f"({snapshots:,} written). Best of {args.rounds} interleaved rounds; rebuild vs "
        "decode-only within each round: "
        + "; ".join(
            f"{n} x{w} "
            + ", ".join(f"{o / d:.2f}x" for o, d in zip(rebuilds[(n, w)], decodes, strict=True))
            for n, w in paths
        )
        + ". Rebuild time includes the group reset, joining the group, one transactional "
        "producer per partition, and the store's fsyncs; with workers also spawning the "
        "processes (each imports little and opens its own clients and store connection) and "
        "stopping them. The workers are separate processes (one Python interpreter folds on "
        "one core) sharing the partitions through the consumer group and writing one sqlite "
        "file or one PostgreSQL database (a local server, fsync on, on the same 2 cores); raw and decode-only are one process (the limit of one consumer), so a rebuild "
        "with workers is several processes measured against one. This machine has "
        f"{os.cpu_count()} cores and the broker runs on it, competing with every path "
        "measured. The garbage collector is tuned (`tune_gc`) for every path, as the "
        "projector service does (and each worker)."
    )


if __name__ == "__main__":
    main()
