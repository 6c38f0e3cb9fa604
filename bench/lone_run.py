"""A lone run: its step overhead at N=1, and what it costs while it waits.

1. Step overhead at N=1. One workflow of S durable steps (each awaits 10 ms and returns ~200
   bytes that must be persisted: the peers' workload), alone in the process, on the embedded
   world and on Kafka. A step's overhead is the wall time of ``await ctx.step(...)`` minus the
   time inside the step's function (its 10 ms wait): the deferred StepStarted and the acked
   StepCompleted, the output's JSON, the bookkeeping. p50/p99 over every step of every round,
   the per-round p99 range, and the process CPU per step (all threads).
2. Idle. One run whose model takes ``--idle`` seconds (10 by default): the process CPU used
   while it waits (all threads: the loop, the delivery pump or committer, librdkafka's), as a
   share of one core.

3. Recovery (``--recovery R``, embedded world): a process running a workflow of durable
   steps SIGKILLs itself inside a step (``bench/_recovery_flow.py``); a fresh process
   (``python bench/_recovery_flow.py resume``: interpreter, ``import little``, the world
   opened, ``resume``) is started at once, and the time from the SIGKILL to that step running
   again is split into process start and imports, opening the world, and the resume up to
   the step. R rounds, after one not counted: the children may write bytecode
   (``PYTHONDONTWRITEBYTECODE`` is dropped for them), so the modules load from ``.pyc`` as an
   installed package's do, not compiled from source on every start.

4. The append's share (``--append-tail R``, Kafka): in one process, 10 ms apart, interleaved,
   the Kafka log's own ``submit`` of two ~300-byte records with seven headers each, awaited on
   the loop (what a step's acked write is, without the runtime); the raw client doing the same
   the obvious asyncio way (a thread polling the producer, ``call_soon_threadsafe`` to the
   loop); then the raw client blocking (``produce`` + ``flush``). R rounds of ``--steps`` each:
   whether the log layer adds to the tail, or the broker and client set it.

    .venv/bin/python bench/lone_run.py [--steps 20] [--rounds 5] [--idle 10]
        [--worlds embedded,kafka] [--recovery 0] [--append-tail 0]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import (
    CALL_HEADERS,
    CALL_RECORD,
    bootstrap,
    machine,
    percentiles,
    settle_once,
    stamp,
    table,
)
from bench.log_append import raw_producer
from little import tune_gc
from little._world import World, kafka_world, local_world
from little.events import Usage
from little.harness import ModelResponse, ScriptedModel
from little.log import RUNS_TOPIC, partition_for
from little.runtime import StepContext, WorkflowContext, run, workflow

STEP_WAIT = 0.010
OUTPUT = "x" * 200  # ~200 bytes that must be persisted
OVERHEADS: list[float] = []
IDLE_MODEL = {"seconds": 10.0}
IDLE_STARTED: list[asyncio.Event] = []  # set as the model call begins


async def _step(step: StepContext, i: int) -> str:
    await asyncio.sleep(STEP_WAIT)
    return f"{i}:{OUTPUT}"


@workflow("bench.lone_run", version="1")
async def steps(ctx: WorkflowContext, input: dict[str, Any]) -> int:
    inside: list[float] = []

    async def timed_step(step: StepContext, i: int) -> str:
        start = time.perf_counter()
        try:
            return await _step(step, i)
        finally:
            inside.append(time.perf_counter() - start)

    for i in range(int(input["steps"])):
        start = time.perf_counter()
        await ctx.step(f"s{i}", timed_step, i)
        OVERHEADS.append(time.perf_counter() - start - inside[-1])
    return int(input["steps"])


class _ClockedModel(ScriptedModel):
    async def complete(self, request: Any) -> Any:
        IDLE_STARTED[-1].set()
        return await super().complete(request)


async def _waiting(step: StepContext, _: int) -> str:
    usage = Usage(input_tokens=10, output_tokens=5)
    model = _ClockedModel(
        [ModelResponse(content="ok", usage=usage, finish_reason="stop")],
        latency=IDLE_MODEL["seconds"],
    )
    async with step.session("agent", model=model) as agent:
        return str(await agent.run("question", max_turns=1))


@workflow("bench.lone_run.idle", version="1")
async def idle(ctx: WorkflowContext, input: dict[str, Any]) -> str:
    return str(await ctx.step("agent", _waiting, 0))


def open_world(kind: str, bs: str | None, prefix: str, tmp: Path) -> World:
    if kind == "kafka":
        assert bs is not None
        return kafka_world(bs, topic_prefix=prefix, artifacts_dir=tmp / "k-artifacts")
    return local_world(tmp / "embedded")


async def measure_steps(world: World, n_steps: int) -> tuple[list[float], float]:
    OVERHEADS.clear()
    cpu = time.process_time()
    result = await run(world, steps, {"steps": n_steps})
    cpu = time.process_time() - cpu
    if result.status != "completed" or result.output != n_steps:
        raise RuntimeError(f"run did not complete: {result}")
    return list(OVERHEADS), cpu / n_steps


async def measure_idle(world: World, seconds: float) -> float:
    """Process CPU per wall second while one run's model call waits ``seconds``."""
    IDLE_MODEL["seconds"] = seconds
    IDLE_STARTED[:] = [asyncio.Event()]
    task = asyncio.ensure_future(run(world, idle, {}))
    await IDLE_STARTED[-1].wait()
    await asyncio.sleep(0.2)  # past the call's own appends
    wall0, cpu0 = time.perf_counter(), time.process_time()
    await asyncio.sleep(seconds - 0.5)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    result = await task
    if result.status != "completed":
        raise RuntimeError(f"idle run did not complete: {result}")
    return cpu / wall


def raw_floor(kind: str, bs: str | None, prefix: str, tmp: Path, n: int) -> list[float]:
    """The engine alone, spaced as the steps are (10 ms apart): one 200-byte record made
    durable and acknowledged, n times (sqlite: one WAL commit with synchronous=FULL; Kafka:
    an idempotent acks=all produce and flush)."""
    out = []
    payload = OUTPUT.encode()
    if kind == "kafka":
        assert bs is not None
        producer = raw_producer(bs, "latency")
        topic = prefix + RUNS_TOPIC
        part = partition_for("raw-floor", 12)
        producer.produce(topic, b"warm", "raw-floor", part)
        producer.flush()
        for _ in range(n):
            time.sleep(STEP_WAIT)
            start = time.perf_counter()
            producer.produce(topic, payload, "raw-floor", part)
            producer.flush()
            out.append(time.perf_counter() - start)
        return out
    conn = sqlite3.connect(tmp / "raw.sqlite3", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE IF NOT EXISTS r (k TEXT, v BLOB)")
    for _ in range(n):
        time.sleep(STEP_WAIT)
        start = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO r VALUES (?, ?)", ("raw", payload))
        conn.execute("COMMIT")
        out.append(time.perf_counter() - start)
    conn.close()
    return out


def recovery(tmp: Path, rounds: int) -> list[dict[str, float]]:
    """Per round: seconds from the SIGKILL to the resumed step, and its parts."""
    flow = Path(__file__).with_name("_recovery_flow.py")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out = []
    for r in range(-1, rounds):  # round -1 warms: bytecode written, files in the page cache
        data, run_id, marks = tmp / f"recovery-{r}", f"run_{uuid.uuid4().hex}", tmp / f"m{r}"
        crash = subprocess.run(
            [sys.executable, str(flow), "crash", str(data), run_id, str(marks)],
            capture_output=True,
            text=True,
            env=env,
        )
        if crash.returncode != -9:
            raise RuntimeError(f"crash child exited {crash.returncode}: {crash.stderr[-2000:]}")
        resumed = subprocess.run(
            [sys.executable, str(flow), "resume", str(data), run_id, str(marks)],
            capture_output=True,
            text=True,
            env=env,
        )
        if resumed.returncode != 0:
            raise RuntimeError(f"resume child failed: {resumed.stderr[-2000:]}")
        m = dict(
            (name, float(value))
            for name, value in (line.split() for line in marks.read_text().splitlines())
        )
        if r < 0:
            continue
        out.append(
            {
                "total": m["step"] - m["killed"],
                "start": m["started"] - m["killed"],
                "imports": m["imported"] - m["started"],
                "open": m["opened"] - m["imported"],
                "resume": m["step"] - m["opened"],
                "cpu": m["step_cpu"],
                "cpu_imports": m["imported_cpu"],
            }
        )
    return out


async def append_tail(bs: str, prefix: str, rounds: int, n: int) -> dict[str, list[float]]:
    """Acked append latency of two records: the log's ``submit``, the raw client polled by a
    thread (these two interleaved one by one), then the raw client blocking; 10 ms apart."""
    from little.log import RUN_INDEX_TOPIC, OutgoingRecord
    from little.log.kafka import KafkaEventLog

    topic = prefix + RUNS_TOPIC
    log = KafkaEventLog(bs, topic=topic, index_topic=prefix + RUN_INDEX_TOPIC)
    producer = raw_producer(bs, "latency")
    loop = asyncio.get_running_loop()
    stop = threading.Event()

    def pump() -> None:
        while not stop.is_set():
            producer.poll(0.05)

    records = [OutgoingRecord(CALL_RECORD, tuple(CALL_HEADERS))] * 2
    headers = CALL_HEADERS
    ours_key, raw_key = f"tail-{uuid.uuid4().hex}", f"raw-{uuid.uuid4().hex}"
    raw_part = partition_for(raw_key, log.partitions)
    out: dict[str, list[float]] = {"log": [], "polled": [], "blocking": []}

    async def polled() -> float:
        done = loop.create_future()
        left = [2]

        def report(err: Any, msg: Any) -> None:
            left[0] -= 1
            if err is not None or left[0] == 0:
                loop.call_soon_threadsafe(settle_once, done, err)

        start = time.perf_counter()
        for _ in range(2):
            producer.produce(topic, CALL_RECORD, raw_key, raw_part, report, headers=headers)
        if await done is not None:
            raise RuntimeError("raw delivery failed")
        return time.perf_counter() - start

    def blocking() -> float:
        start = time.perf_counter()
        for _ in range(2):
            producer.produce(topic, CALL_RECORD, raw_key, raw_part, headers=headers)
        producer.flush()
        return time.perf_counter() - start

    try:
        await log.submit(ours_key, records)  # warm: its index entry, connections
        producer.produce(topic, b"warm", raw_key, raw_part)
        producer.flush()
        thread = threading.Thread(target=pump, daemon=True)
        thread.start()
        for _ in range(rounds * n):
            await asyncio.sleep(STEP_WAIT)
            start = time.perf_counter()
            await log.submit(ours_key, records)
            out["log"].append(time.perf_counter() - start)
            await asyncio.sleep(STEP_WAIT)
            out["polled"].append(await polled())
        stop.set()
        thread.join()
        for _ in range(rounds * n):
            await asyncio.sleep(STEP_WAIT)
            out["blocking"].append(blocking())
    finally:
        stop.set()
        log.close()
    return out


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


async def main_async(args: argparse.Namespace) -> None:
    tune_gc()
    worlds = [w for w in args.worlds.split(",") if w]
    bs = bootstrap() if "kafka" in worlds else None
    rows = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        prefix = ""
        if bs is not None:
            prefix = f"bench.{uuid.uuid4().hex[:8]}."
            kafka_world(bs, topic_prefix=prefix, provision=True, artifacts_dir=tmp).close()
        for kind in worlds:
            world = open_world(kind, bs, prefix, tmp)
            await measure_steps(world, 5)  # warm: connections, topics, imports
            samples: list[float] = []
            round_p99: list[float] = []
            cpus: list[float] = []
            raw: list[float] = []
            for _ in range(args.rounds):  # interleaved with the engine's own, alike in drift
                over, cpu = await measure_steps(world, args.steps)
                raw += raw_floor(kind, bs, prefix, tmp, args.steps)
                samples += over
                round_p99.append(max(over) if len(over) < 100 else percentiles(over)[1])
                cpus.append(cpu)
            p50, p99 = percentiles(samples)
            r50, r99 = percentiles(raw)
            rows.append(
                [
                    kind,
                    f"{args.rounds} x {args.steps}",
                    ms(p50),
                    ms(p99),
                    f"{ms(r50)} / {ms(r99)}",
                    f"{ms(min(round_p99))}-{ms(max(round_p99))}",
                    f"{statistics.median(cpus) * 1e6:.0f} ({min(cpus) * 1e6:.0f}-"
                    f"{max(cpus) * 1e6:.0f})",
                    "**yes**" if p99 <= 0.010 else "**no**",
                ]
            )
            if args.idle > 0:
                share = await measure_idle(world, args.idle)
                rows[-1].append(f"{share:.2%}" + (" **yes**" if share < 0.01 else " **no**"))
            else:
                rows[-1].append("")
            world.close()
    if args.recovery:
        with tempfile.TemporaryDirectory() as d:
            rounds = recovery(Path(d), args.recovery)
        parts = ["total", "start", "imports", "open", "resume", "cpu", "cpu_imports"]
        med = {k: statistics.median(r[k] for r in rounds) for k in parts}
        print(
            table(
                f"Recovery after SIGKILL, embedded world, {stamp()}, {machine()}",
                ["from SIGKILL to the step running again", "median ms", "range ms"],
                [
                    [
                        {
                            "total": "**total** (target <= 600 ms)",
                            "start": "process start (the SIGKILLed one reaped, interpreter up)",
                            "imports": "imports (little, the workflow's module)",
                            "open": "open the world",
                            "resume": "resume: claim, fold, replay to the step",
                            "cpu": "the resume process's CPU time up to the step",
                            "cpu_imports": "... of which up to the imports' end",
                        }[k],
                        f"{med[k] * 1000:.0f}",
                        f"{min(r[k] for r in rounds) * 1000:.0f}-"
                        f"{max(r[k] for r in rounds) * 1000:.0f}",
                    ]
                    for k in parts
                ],
            )
        )
        print()
    if args.append_tail:
        assert bs is not None, "--append-tail needs the kafka world"
        tails = await append_tail(bs, prefix, args.append_tail, args.steps)
        names = {
            "log": "the Kafka log's submit, awaited",
            "polled": "raw client, a polling thread, call_soon_threadsafe",
            "blocking": "raw client, produce + flush (blocking; after the others)",
        }
        tail_rows = []
        for key, samples in tails.items():
            p50, p99 = percentiles(samples)
            tail_rows.append([names[key], str(len(samples)), ms(p50), ms(p99), ms(max(samples))])
        print(
            table(
                f"An acked append of two records alone, Kafka, {stamp()}, {machine()}",
                ["path", "appends", "p50 ms", "p99 ms", "max ms"],
                tail_rows,
            )
        )
        print()
    if not rows:
        return
    print(
        table(
            f"A lone run, {stamp()}, {machine()}",
            [
                "world",
                "rounds x steps",
                "step overhead p50 ms",
                "p99 ms",
                "raw engine round trip p50 / p99 ms",
                "per-round worst/p99 ms",
                "CPU per step us (median, range)",
                "p99 <= 10 ms",
                f"idle: CPU while a {args.idle:.0f} s model call waits (< 1%)",
            ],
            rows,
        )
    )
    print(
        f"\nOne workflow alone in the process, {args.steps} steps each awaiting "
        f"{STEP_WAIT * 1000:.0f} ms and returning ~200 bytes; step overhead = wall of "
        "`await ctx.step` minus the time inside the step. Per-round column: each round's "
        "worst step (p99 with 100+ steps). CPU per step: the process's (all threads) over the "
        "run, divided by its steps. Idle: process CPU over the model call's wait, divided by "
        "the wall time. Raw engine: one 200-byte record committed (sqlite WAL, synchronous=FULL) or "
        "produced and flushed (idempotent, acks=all, linger.ms=0), 10 ms apart, as many as the "
        "steps, interleaved with the rounds: the floor a step's acked write stands on."
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--idle", type=float, default=10.0)
    ap.add_argument("--worlds", default="embedded,kafka")
    ap.add_argument("--recovery", type=int, default=0, help="rounds of SIGKILL and resume")
    ap.add_argument(
        "--append-tail", type=int, default=0, help="rounds of the append-alone comparison"
    )
    asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    main()
