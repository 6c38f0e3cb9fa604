"""Append throughput and write-ahead latency: raw confluent-kafka beside KafkaEventLog.

Same broker, same 100-byte payloads, same producer settings (idempotent, acks=all), fresh
topics. Batched: records appended in batches and waited for. One-event-acked: one record,
wait for its ack, repeat (the write-ahead path). Also the embedded sqlite log. Prints a
markdown table with ratios to the raw engine.

    .venv/bin/python bench/log_append.py [--events 50000] [--acked 2000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Producer

from bench._common import bootstrap, busy, machine, percentiles, stamp, table, timed
from little.log import EmbeddedEventLog, OutgoingRecord, load_topic_specs, partition_for
from little.log.kafka import PRODUCER_PROFILES, KafkaEventLog, apply_topics

PAYLOAD = bytes(range(100))
PARTITIONS = 6
RUNS = 64
BATCH = 1000


def make_topics(bs: str) -> tuple[str, str]:
    specs = load_topic_specs()
    tag = uuid.uuid4().hex[:8]
    runs = replace(specs["little.runs.v1"], name=f"bench.{tag}.runs", partitions=PARTITIONS)
    index = replace(specs["little.runs.index.v1"], name=f"bench.{tag}.index", partitions=PARTITIONS)
    apply_topics(bs, [runs, index])
    return runs.name, index.name


def raw_producer(bs: str, profile: str) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bs,
            "enable.idempotence": True,
            "acks": "all",
            **PRODUCER_PROFILES[profile],
        }
    )


def raw_batched(bs: str, topic: str, n: int) -> float:
    p = raw_producer(bs, "throughput")
    p.produce(topic, value=b"warm", key=b"warm", partition=0)
    p.flush()

    def go() -> None:
        for i in range(0, n, BATCH):
            run = f"run-{(i // BATCH) % RUNS}"
            part = partition_for(run, PARTITIONS)
            for _ in range(BATCH):
                while True:
                    try:
                        p.produce(topic, PAYLOAD, run, part)  # positional: the fast path
                        break
                    except BufferError:
                        p.poll(0.05)
            p.flush()

    return n / timed(go)


def ours_batched(log: object, n: int) -> float:
    assert hasattr(log, "append")
    batch = [OutgoingRecord(PAYLOAD)] * BATCH
    for r in range(RUNS):
        log.append(f"run-{r}", batch[:1])  # first append of each run writes its index entry

    def go() -> None:
        for i in range(0, n, BATCH):
            log.append(f"run-{(i // BATCH) % RUNS}", batch)

    return n / timed(go)


def raw_acked(
    bs: str,
    topic: str,
    n: int,
    *,
    payload: bytes = PAYLOAD,
    partitions: int = PARTITIONS,
    gap: float = 0.0,
    spin: bool = False,
) -> list[float]:
    """Produce one record and wait for its ack, n times: ``flush()``, or with ``spin`` a
    busy-poll for its delivery report (KafkaEventLog's latency wait); ``gap`` seconds of CPU
    work before each (as a session's appends follow its own work)."""
    p = raw_producer(bs, "latency")
    part = partition_for("run-acked", partitions)
    p.produce(topic, value=b"warm", key=b"run-acked", partition=part)
    p.flush()
    done: list[object] = []
    out = []
    for _ in range(n):
        if gap:
            busy(gap)
        done.clear()
        t = time.perf_counter()
        if spin:
            p.produce(topic, payload, "run-acked", part, lambda err, msg: done.append(err or msg))
            while not done:
                p.poll(0)
        else:
            p.produce(topic, payload, "run-acked", part)  # positional: the call's fast path
            p.flush()
        out.append(time.perf_counter() - t)
    return out


def ours_acked(log: object, n: int, payload: bytes = PAYLOAD) -> list[float]:
    assert hasattr(log, "append")
    rec = [OutgoingRecord(payload)]
    log.append("run-acked", rec)
    out = []
    for _ in range(n):
        t = time.perf_counter()
        log.append("run-acked", rec)
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=50_000)
    ap.add_argument("--acked", type=int, default=2_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    bs = bootstrap()

    raw_tp, ours_tp, raw_lat, ours_lat = [], [], [], []
    for _ in range(args.rounds):  # interleave so drift on a shared machine hits both alike
        topic, index = make_topics(bs)
        raw_tp.append(raw_batched(bs, topic, args.events))
        topic, index = make_topics(bs)
        log = KafkaEventLog(bs, topic=topic, index_topic=index, producer_profile="throughput")
        ours_tp.append(ours_batched(log, args.events))
        log.close()
        topic, index = make_topics(bs)
        raw_lat += raw_acked(bs, topic, args.acked // args.rounds)
        log = KafkaEventLog(bs, topic=topic, index_topic=index, producer_profile="latency")
        ours_lat += ours_acked(log, args.acked // args.rounds)
        log.close()

    emb_rows = []
    for sync in ("FULL", "NORMAL"):
        with tempfile.TemporaryDirectory() as d:
            elog = EmbeddedEventLog(
                Path(d) / "log.sqlite3", partitions=PARTITIONS, synchronous=sync
            )
            tp = ours_batched(elog, args.events)
            lat = ours_acked(elog, args.acked)
            elog.close()
        emb_rows.append((sync, tp, *percentiles(lat)))

    best_raw, best_ours = max(raw_tp), max(ours_tp)
    rp50, rp99 = percentiles(raw_lat)
    op50, op99 = percentiles(ours_lat)
    ms = lambda s: f"{s * 1000:.2f}"  # noqa: E731
    rows = [
        ["raw confluent-kafka Producer", f"{best_raw:,.0f}", "1.00x", ms(rp50), ms(rp99), "1.00x"],
        [
            "KafkaEventLog",
            f"{best_ours:,.0f}",
            f"{best_ours / best_raw:.2f}x",
            ms(op50),
            ms(op99),
            f"{op50 / rp50:.2f}x",
        ],
    ]
    for sync, tp, p50, p99 in emb_rows:
        rows.append(
            [
                f"EmbeddedEventLog (sqlite, synchronous={sync})",
                f"{tp:,.0f}",
                "n/a",
                ms(p50),
                ms(p99),
                "n/a",
            ]
        )
    print(
        table(
            f"Log append, {stamp()}, {machine()}, local Kafka 4.1.1 broker (1 node)",
            [
                "path",
                f"batched events/s (batches of {BATCH})",
                "vs raw",
                "acked append p50 ms",
                "p99 ms",
                "p50 vs raw",
            ],
            rows,
        )
    )
    print(
        f"\n{args.events:,} events x {args.rounds} rounds batched (best round); "
        f"{len(raw_lat):,} one-event acked appends each; payload 100 bytes."
    )


if __name__ == "__main__":
    main()
