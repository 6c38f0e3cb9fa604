"""Many concurrent runs in one process: recorded calls/s against the raw engine at N runs.

N runs start at once with ``asyncio.gather`` in one process; each is one step holding one
agent session of K single-turn exchanges (``await agent.run(...)``) with a model that takes
10 ms. A recorded call writes ``agent.call.admitted``, ``harness.model.called`` (acked before
the model runs), ``harness.model.responded`` and ``agent.call.settled`` (acked when the
exchange returns): two acked appends per call, shared with every other run's appends in
flight (librdkafka batches per partition; the embedded log group-commits).

The raw engine does the same shape with nothing of ours: N asyncio tasks, each K times
(wait 10 ms as the model does, produce one 200-byte record, await its own delivery report).
On Kafka one idempotent acks=all producer (linger.ms=0) polled by one thread that hands each
report to the loop (``call_soon_threadsafe``), the obvious asyncio use of the client. "Raw, our shape" does
what a recorded call writes with nothing of ours: per call two appends of two ~300-byte records
with seven headers each, each append's reports awaited (one before the model's 10 ms, one
after), which is the floor this client sets for a recorded call on this machine; also
the library's own asyncio producer (``confluent_kafka.aio.AIOProducer``, which refuses
headers, so it cannot carry our records; shown for the record). On the embedded world one
sqlite commit (WAL, synchronous=FULL) per record, each on a worker thread
(``asyncio.to_thread``), as an asyncio user would commit without blocking the loop; "raw,
our shape" commits two transactions of two such records per call the same way.

Printed per N: recorded calls/s, the ratio to raw, per-call p50/p99 (the exchange, model
included), event-loop lag p99 (a 1 ms ticker), and CPU time per call (the process's, all
threads). At high N a run's wall time is bounded by CPU, so the ratio is bounded by raw CPU
per record / our CPU per call: the "CPU bound" column. "CPU vs raw shape" is our CPU per call
over the raw shape's: what little adds to the records a recorded call must write.

    .venv/bin/python bench/concurrent_runs.py [--n 1,10,100,1000] [--k 20] [--rounds 3]
        [--worlds kafka,embedded] [--linger 0] [--aio]
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Producer

from bench._common import (
    CALL_HEADERS,
    CALL_RECORD,
    bootstrap,
    machine,
    settle_once,
    stamp,
    table,
)
from little import tune_gc
from little._world import World, kafka_world, local_world
from little.events import Usage
from little.harness import ModelResponse, ScriptedModel
from little.log import RUNS_TOPIC, partition_for
from little.runtime import StepContext, WorkflowContext, run, workflow

PAYLOAD = bytes(range(200))
SHAPE = (2, 2)
"""Records per acked append of a recorded call: before the model runs, and after."""
LATENCY = 0.010
CALL_TIMES: list[float] = []


@workflow("bench.concurrent", version="1")
async def exchanges(ctx: WorkflowContext, input: dict[str, Any]) -> int:
    return int(await ctx.step("agent", _session, int(input["k"])))


async def _session(step: StepContext, k: int) -> int:
    usage = Usage(input_tokens=10, output_tokens=5)
    script = [ModelResponse(content="ok", usage=usage, finish_reason="stop")] * k
    model = ScriptedModel(script, latency=LATENCY)
    done = 0
    async with step.session("agent", model=model) as agent:
        for i in range(k):
            start = time.perf_counter()
            await agent.run(f"question {i}", max_turns=1)
            CALL_TIMES.append(time.perf_counter() - start)
            done += 1
    return done


class Ticker:
    """How late a 1 ms timer fires: the event loop's lag (blocking work shows here)."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        while True:
            start = time.perf_counter()
            await asyncio.sleep(0.001)
            self.lags.append(time.perf_counter() - start - 0.001)

    def __enter__(self) -> Ticker:
        self._task = asyncio.ensure_future(self._tick())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


def p(samples: list[float], q: float) -> float:
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Measure:
    def __init__(self, calls: int, wall: float, cpu: float, times: list[float], lags: list[float]):
        self.calls = calls
        self.wall = wall
        self.cpu = cpu
        self.times = times
        self.lags = lags

    @property
    def rate(self) -> float:
        return self.calls / self.wall

    @property
    def cpu_per_call(self) -> float:
        return self.cpu / self.calls


async def ours(world: World, n: int, k: int) -> Measure:
    CALL_TIMES.clear()
    cpu, start = time.process_time(), time.perf_counter()
    with Ticker() as ticker:
        results = await asyncio.gather(*(run(world, exchanges, {"k": k}) for _ in range(n)))
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    if any(r.status != "completed" or r.output != k for r in results):
        raise RuntimeError(f"a run did not complete: {[r for r in results if r.output != k][:2]}")
    return Measure(n * k, wall, cpu, list(CALL_TIMES), ticker.lags)


async def raw_kafka(
    bs: str, topic: str, partitions: int, n: int, k: int, shape: bool = False
) -> Measure:
    producer = Producer(
        {"bootstrap.servers": bs, "enable.idempotence": True, "acks": "all", "linger.ms": 0}
    )
    producer.produce(topic, b"warm", b"warm", 0)
    producer.flush()
    loop = asyncio.get_running_loop()
    stop = threading.Event()

    def pump() -> None:
        while not stop.is_set():
            producer.poll(0.05)

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    times: list[float] = []

    async def task(i: int) -> None:
        key = f"raw-{uuid.uuid4().hex}"
        part = partition_for(key, partitions)

        async def append(records: int) -> None:
            done = loop.create_future()
            left = [records]

            def report(err: Any, msg: Any, done: asyncio.Future[Any] = done) -> None:
                left[0] -= 1
                if err is not None or left[0] == 0:
                    loop.call_soon_threadsafe(settle_once, done, err)

            for _ in range(records):
                if shape:
                    producer.produce(topic, CALL_RECORD, key, part, report, headers=CALL_HEADERS)
                else:
                    producer.produce(topic, PAYLOAD, key, part, report)
            err = await done
            if err is not None:
                raise RuntimeError(f"raw delivery failed: {err}")

        for _ in range(k):
            begin = time.perf_counter()
            if shape:
                await append(SHAPE[0])
            await asyncio.sleep(LATENCY)
            await append(SHAPE[1] if shape else 1)
            times.append(time.perf_counter() - begin)

    cpu, start = time.process_time(), time.perf_counter()
    with Ticker() as ticker:
        await asyncio.gather(*(task(i) for i in range(n)))
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    stop.set()
    thread.join()
    producer.flush()
    return Measure(n * k, wall, cpu, times, ticker.lags)


async def raw_aio(bs: str, topic: str, partitions: int, n: int, k: int) -> Measure:
    from confluent_kafka.aio import AIOProducer

    producer = AIOProducer(
        {"bootstrap.servers": bs, "enable.idempotence": True, "acks": "all", "linger.ms": 0},
        buffer_timeout=0.001,
    )
    times: list[float] = []

    async def task(i: int) -> None:
        key = f"aio-{uuid.uuid4().hex}"
        part = partition_for(key, partitions)
        for _ in range(k):
            begin = time.perf_counter()
            await asyncio.sleep(LATENCY)
            delivered = await producer.produce(topic, PAYLOAD, key, partition=part)
            await delivered
            times.append(time.perf_counter() - begin)

    cpu, start = time.process_time(), time.perf_counter()
    with Ticker() as ticker:
        await asyncio.gather(*(task(i) for i in range(n)))
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    await producer.close()
    return Measure(n * k, wall, cpu, times, ticker.lags)


async def raw_sqlite(path: Path, n: int, k: int, shape: bool = False) -> Measure:
    local = threading.local()

    def commit(key: str, records: int) -> None:
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(path, isolation_level=None, timeout=60)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA busy_timeout=60000")
            local.conn = conn
        conn.execute("BEGIN IMMEDIATE")
        for _ in range(records):
            conn.execute("INSERT INTO r VALUES (?, ?)", (key, CALL_RECORD if shape else PAYLOAD))
        conn.execute("COMMIT")

    setup = sqlite3.connect(path)
    setup.execute("PRAGMA journal_mode=WAL")
    setup.execute("CREATE TABLE IF NOT EXISTS r (k TEXT, v BLOB)")
    setup.close()
    times: list[float] = []

    async def task(i: int) -> None:
        for _ in range(k):
            begin = time.perf_counter()
            if shape:
                await asyncio.to_thread(commit, f"raw-{i}", SHAPE[0])
            await asyncio.sleep(LATENCY)
            await asyncio.to_thread(commit, f"raw-{i}", SHAPE[1] if shape else 1)
            times.append(time.perf_counter() - begin)

    cpu, start = time.process_time(), time.perf_counter()
    with Ticker() as ticker:
        await asyncio.gather(*(task(i) for i in range(n)))
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return Measure(n * k, wall, cpu, times, ticker.lags)


def row(
    name: str,
    n: int,
    m: Measure,
    raw: Measure | None,
    rounds: list[float],
    shape: Measure | None = None,
) -> list[str]:
    ratio = "1.00x" if raw is None else f"{m.rate / raw.rate:.2f}x"
    if rounds:
        ratio += f" ({min(rounds):.2f}-{max(rounds):.2f})"
    bound = "" if raw is None else f"{raw.cpu_per_call / m.cpu_per_call:.2f}x"
    return [
        name,
        str(n),
        f"{m.rate:,.0f}",
        ratio,
        f"{p(m.times, 0.5) * 1000:.1f}",
        f"{p(m.times, 0.99) * 1000:.1f}",
        f"{p(m.lags, 0.99) * 1000:.1f}",
        f"{m.cpu_per_call * 1e6:.0f}",
        bound,
        "" if shape is None else f"{m.cpu_per_call / shape.cpu_per_call:.2f}x",
    ]


def best(ms: list[Measure]) -> Measure:
    """The round with the median rate (shared machine: rounds and ranges are reported)."""
    return sorted(ms, key=lambda m: m.rate)[len(ms) // 2]


async def compare(
    name: str,
    world: World,
    ns: list[int],
    args: argparse.Namespace,
    raws: dict[str, Any],
    ours_name: str,
) -> list[list[str]]:
    """Per N, interleaved rounds of each raw path and ours; rows against the first raw path."""
    rows: list[list[str]] = []
    for n in ns:
        got: dict[str, list[Measure]] = {label: [] for label in [*raws, ours_name]}
        for _ in range(args.rounds):  # interleaved: drift hits all alike
            for label, measure in raws.items():
                got[label].append(await measure(n))
            got[ours_name].append(await ours(world, n, args.k))
            rates = ", ".join(
                f"{label} {m[-1].rate:,.0f}/s {m[-1].cpu_per_call * 1e6:.0f} us CPU/call"
                for label, m in got.items()
            )
            print(f"{name} n={n}: {rates}", file=sys.stderr)
        base_label = next(iter(raws))
        base = got[base_label]
        raw = best(base)
        shape = next((best(m) for label, m in got.items() if "our shape" in label), None)
        for label, measures in got.items():
            if label == base_label:
                rows.append(row(label, n, raw, None, []))
            else:
                ratios = [m.rate / r.rate for m, r in zip(measures, base, strict=True)]
                of_shape = shape if label == ours_name else None
                rows.append(row(label, n, best(measures), raw, ratios, of_shape))
    return rows


async def main_async(args: argparse.Namespace) -> None:
    tune_gc()
    ns = [int(x) for x in args.n.split(",")]
    worlds = args.worlds.split(",")
    rows: list[list[str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        if "kafka" in worlds:
            bs = bootstrap()
            prefix = f"bench.{uuid.uuid4().hex[:8]}."
            config = {"linger_ms": args.linger} if args.linger is not None else {}
            world = kafka_world(
                bs, topic_prefix=prefix, provision=True, artifacts_dir=f"{tmp}/a", **config
            )
            topic = prefix + RUNS_TOPIC
            await ours(world, 10, 2)  # warm: connections, metadata
            parts = world.log.partitions
            paths: dict[str, Any] = {
                "raw confluent-kafka, Kafka": lambda n: raw_kafka(bs, topic, parts, n, args.k),
                "raw, our shape, Kafka": lambda n: raw_kafka(
                    bs, topic, parts, n, args.k, shape=True
                ),
            }
            if args.aio:
                paths["AIOProducer (no headers)"] = lambda n: raw_aio(bs, topic, parts, n, args.k)
            rows += await compare("kafka", world, ns, args, paths, "little, Kafka")
            world.close()
        if "embedded" in worlds:
            world = local_world(f"{tmp}/embedded")
            await ours(world, 10, 2)
            dbs = iter(range(1_000_000))
            paths = {
                "raw sqlite commit per record, embedded": lambda n: raw_sqlite(
                    Path(tmp) / f"raw-{next(dbs)}.db", n, args.k
                ),
                "raw, our shape, embedded": lambda n: raw_sqlite(
                    Path(tmp) / f"raw-{next(dbs)}.db", n, args.k, shape=True
                ),
            }
            rows += await compare("embedded", world, ns, args, paths, "little, embedded")
            world.close()
    print(
        table(
            f"Concurrent runs ({stamp()}, {machine()}; K={args.k} single-turn exchanges per run, "
            f"{LATENCY * 1000:.0f} ms model, median of {args.rounds} interleaved rounds)",
            [
                "path",
                "N runs",
                "calls/s",
                "vs raw (rounds)",
                "call p50 ms",
                "call p99 ms",
                "loop lag p99 ms",
                "CPU us/call",
                "CPU bound",
                "CPU vs raw shape",
            ],
            rows,
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", default="1,10,100,1000")
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--worlds", default="kafka,embedded")
    ap.add_argument("--linger", type=float, default=None, help="linger.ms of our producer")
    ap.add_argument("--aio", action="store_true", help="also measure AIOProducer")
    asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    main()
