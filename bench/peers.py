"""little beside the peers: N durable workflows of 20 steps each on every system, same run.

The workload (issue 29, target 8): N workflows started at once with ``asyncio.gather`` in one
process; each runs 20 durable steps in sequence, and a step awaits 10 ms and returns a
200-character string that the system must persist before the workflow goes on. Systems:

- little, embedded world (sqlite log, synchronous=FULL) and Kafka world (the broker the
  benches read: LITTLE_BENCH_KAFKA_BOOTSTRAP or LITTLE_TEST_KAFKA_BOOTSTRAP, else the local
  one): a ``@workflow`` whose steps are ``ctx.step(...)``;
- DBOS (``dbos``, sqlite system database): a ``@DBOS.workflow()`` calling a ``@DBOS.step()``
  20 times;
- LangGraph (``langgraph`` with ``langgraph-checkpoint-sqlite``'s AsyncSqliteSaver): a graph
  of 20 nodes in a chain, each writing its string to the state's one channel, invoked with
  ``durability="sync"`` (each step's checkpoint written before the next step runs).

At N=1 a measurement runs 10 workflows one after another (``--repeat``): one workflow alone
at a time, and 190 gaps instead of 19 for the percentiles. Each measurement (system, N, round)
runs in a fresh child process with a fresh database (little
on Kafka: fresh topics, deleted afterwards), after a warm-up of 2 workflows in that process, so
no system's background threads or caches bill another; every child calls ``little.tune_gc()``
(the same collector settings for all). Rounds are interleaved (each round runs every system
once per N, in a rotating order), so drift on a shared machine hits all alike.

Printed per system and N: steps/s (N x 20 steps over the wall time from the first start to the
last workflow's end), its ratio to the fastest peer in the same round, the process CPU per step
(all threads of the process: user + system; the broker's CPU is not in it), and the step
overhead p50/p99: the time between the end of one step's body and the start of the next one's
(19 gaps per workflow), which holds the persistence of the step's result and the hand-off to
the next step, and no part of the 10 ms the step itself spends. Median round by rate; ranges
over the rounds in brackets. Restate (its server ships in an npm package) and Temporal (the dev
server needs a Go build) are not in it.

    make bench-peers                  # installs the `bench` dependency group, then runs this
    .venv/bin/python bench/peers.py [--n 1,100,1000] [--rounds 3] [--steps 20]
        [--systems little-embedded,little-kafka,dbos,langgraph]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypedDict

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import bootstrap, machine, stamp, table

SYSTEMS = ["little-embedded", "little-kafka", "dbos", "langgraph"]
LITTLE = {"little-embedded": "little, embedded", "little-kafka": "little, Kafka"}
NAMES = {**LITTLE, "dbos": "DBOS 3.4.0 (sqlite)", "langgraph": "LangGraph 1.2.22 (sqlite, sync)"}
PEERS = ["dbos", "langgraph"]
SLEEP = 0.010
SIZE = 200
WARM = 2

# wid -> [start, end, start, end, ...] of each step body, in this process
MARKS: dict[str, list[float]] = {}


def payload(wid: str, i: int) -> str:
    return f"{wid}/{i}:".ljust(SIZE, "x")


async def body(wid: str, i: int) -> str:
    """The step's own work, the same on every system: 10 ms awaited, 200 characters back."""
    marks = MARKS.setdefault(wid, [])
    marks.append(time.perf_counter())
    await asyncio.sleep(SLEEP)
    marks.append(time.perf_counter())
    return payload(wid, i)


# -- the systems: each returns (start one workflow, close) -----------------------------------

Start = Callable[[str], Awaitable[str]]


async def little_system(name: str, tmp: str, steps: int) -> tuple[Start, Callable[[], None]]:
    from little._world import kafka_world, local_world
    from little.runtime import StepContext, WorkflowContext, run, workflow

    async def step_body(step: StepContext, wid: str, i: int) -> str:
        return await body(wid, i)

    @workflow("bench.peers", version="1")
    async def twenty(ctx: WorkflowContext, input: dict[str, Any]) -> str:
        out = ""
        for i in range(steps):
            out = await ctx.step(f"s{i}", step_body, input["wid"], i)
        return out

    if name == "little-kafka":
        bs = bootstrap()
        prefix = f"bench.peers.{uuid.uuid4().hex[:8]}."
        world = kafka_world(bs, topic_prefix=prefix, provision=True, artifacts_dir=f"{tmp}/a")
    else:
        world = local_world(f"{tmp}/embedded")

    async def start(wid: str) -> str:
        result = await run(world, twenty, {"wid": wid})
        if result.status != "completed":
            raise RuntimeError(f"little run {wid} ended {result.status}: {result.error}")
        return str(result.output)

    def close() -> None:
        world.close()
        if name == "little-kafka":
            _delete_topics(bs, prefix)

    return start, close


def _delete_topics(bs: str, prefix: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bs})
    names = [t for t in admin.list_topics(timeout=30).topics if t.startswith(prefix)]
    if names:
        for future in admin.delete_topics(names, operation_timeout=30).values():
            future.result()


async def dbos_system(tmp: str, steps: int) -> tuple[Start, Callable[[], None]]:
    from dbos import DBOS, DBOSConfig

    @DBOS.step()
    async def dbos_step(wid: str, i: int) -> str:
        return await body(wid, i)

    @DBOS.workflow()
    async def dbos_twenty(wid: str) -> str:
        out = ""
        for i in range(steps):
            out = await dbos_step(wid, i)
        return out

    config: DBOSConfig = {
        "name": "little-bench-peers",
        "system_database_url": f"sqlite:///{tmp}/dbos.sqlite",
        "log_level": "WARNING",
    }
    DBOS(config=config)
    DBOS.launch()

    async def start(wid: str) -> str:
        return await dbos_twenty(wid)

    return start, lambda: DBOS.destroy()


async def langgraph_system(tmp: str, steps: int) -> tuple[Start, Callable[[], None]]:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.graph import END, START, StateGraph

    class State(TypedDict):
        wid: str
        last: str

    def node(i: int) -> Callable[[State], Awaitable[dict[str, str]]]:
        async def run_step(state: State) -> dict[str, str]:
            return {"last": await body(state["wid"], i)}

        return run_step

    graph = StateGraph(State)
    for i in range(steps):
        graph.add_node(f"s{i}", node(i))
        graph.add_edge(START if i == 0 else f"s{i - 1}", f"s{i}")
    graph.add_edge(f"s{steps - 1}", END)
    saver_cm = AsyncSqliteSaver.from_conn_string(f"{tmp}/langgraph.sqlite")
    saver = await saver_cm.__aenter__()
    app = graph.compile(checkpointer=saver)

    async def start(wid: str) -> str:
        state = await app.ainvoke(
            {"wid": wid, "last": ""}, {"configurable": {"thread_id": wid}}, durability="sync"
        )
        return str(state["last"])

    def close() -> None:
        _ = saver_cm  # held until here: collecting it would close the connection mid-run

    return start, close


# -- one measurement, in a child process ------------------------------------------------------


async def child(system: str, n: int, steps: int, repeat: int) -> dict[str, Any]:
    from little import tune_gc

    with tempfile.TemporaryDirectory() as tmp:
        if system in LITTLE:
            start, close = await little_system(system, tmp, steps)
        elif system == "dbos":
            start, close = await dbos_system(tmp, steps)
        elif system == "langgraph":
            start, close = await langgraph_system(tmp, steps)
        else:
            raise SystemExit(f"unknown system {system!r}: one of {', '.join(SYSTEMS)}")
        try:
            await asyncio.gather(*(start(f"warm-{uuid.uuid4().hex}") for _ in range(WARM)))
            MARKS.clear()
            tune_gc()
            batches = [[f"w{i}-{uuid.uuid4().hex[:12]}" for i in range(n)] for _ in range(repeat)]
            cpu, begin = time.process_time(), time.perf_counter()
            outs = []
            for wids in batches:  # one batch unless N=1 (more samples of one run alone)
                outs += await asyncio.gather(*(start(wid) for wid in wids))
            wall, cpu = time.perf_counter() - begin, time.process_time() - cpu
            wids = [wid for batch in batches for wid in batch]
        finally:
            close()
    for wid, out in zip(wids, outs, strict=True):
        if out != payload(wid, steps - 1):
            raise RuntimeError(f"{system}: workflow {wid} returned {out[:40]!r}")
        if len(MARKS.get(wid, ())) != 2 * steps:
            raise RuntimeError(f"{system}: workflow {wid} ran {len(MARKS.get(wid, ())) // 2} steps")
    gaps = sorted(
        marks[j + 1] - marks[j] for marks in MARKS.values() for j in range(1, len(marks) - 1, 2)
    )
    return {
        "system": system,
        "n": n,
        "steps": len(wids) * steps,
        "wall": wall,
        "cpu": cpu,
        "p50": gaps[len(gaps) // 2],
        "p99": gaps[min(len(gaps) - 1, int(0.99 * len(gaps)))],
    }


def measure(system: str, n: int, steps: int, repeat: int) -> dict[str, Any]:
    proc = subprocess.run(
        [
            *(sys.executable, __file__, "--child", system, "--n", str(n)),
            *("--steps", str(steps), "--repeat", str(repeat)),
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{system} at N={n} failed:\n{proc.stderr[-4000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


# -- the table ---------------------------------------------------------------------------------


def rate(m: dict[str, Any]) -> float:
    return float(m["steps"]) / float(m["wall"])


def cpu_us(m: dict[str, Any]) -> float:
    return float(m["cpu"]) / float(m["steps"]) * 1e6


def span(values: list[float], fmt: str) -> str:
    return f"{fmt.format(min(values))}-{fmt.format(max(values))}" if len(values) > 1 else ""


def ms_(seconds: float) -> str:
    return f"{seconds * 1000:.1f}" if seconds < 0.1 else f"{seconds * 1000:,.0f}"


def rows_for(n: int, systems: list[str], got: dict[str, list[dict[str, Any]]]) -> list[list[str]]:
    rounds = len(next(iter(got.values())))
    peers = [s for s in systems if s in PEERS]
    fastest = [
        max(rate(got[s][r]) for s in peers) if peers else float("nan") for r in range(rounds)
    ]
    rows = []
    for s in systems:
        ms = got[s]
        ratios = [rate(m) / f for m, f in zip(ms, fastest, strict=True)]
        order = sorted(range(rounds), key=lambda r: rate(ms[r]))
        mid = order[len(order) // 2]
        m = ms[mid]
        rates = [rate(x) for x in ms]
        cpus = [cpu_us(x) for x in ms]
        rng = span(rates, "{:,.0f}")
        rows.append(
            [
                NAMES[s],
                f"{n:,}",
                f"{rate(m):,.0f}" + (f" ({rng})" if rng else ""),
                f"{ratios[mid]:.2f}x" + (f" ({span(ratios, '{:.2f}')})" if rounds > 1 else ""),
                f"{cpu_us(m):,.0f}" + (f" ({span(cpus, '{:,.0f}')})" if rounds > 1 else ""),
                f"{ms_(m['p50'])} / {ms_(m['p99'])}",
            ]
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", default="1,100,1000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--repeat", type=int, default=10, help="N=1: workflows run one after another")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(child(args.child, int(args.n), args.steps, args.repeat))))
        return
    systems = args.systems.split(",")
    unknown = sorted(set(systems) - set(SYSTEMS))
    if unknown:
        raise SystemExit(f"--systems: unknown {unknown}; known: {', '.join(SYSTEMS)}")
    if "little-kafka" in systems:
        bootstrap()  # starts the local broker once here if none is named
    rows: list[list[str]] = []
    for n in [int(x) for x in args.n.split(",")]:
        got: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
        for r in range(args.rounds):
            for s in systems[r % len(systems) :] + systems[: r % len(systems)]:
                m = measure(s, n, args.steps, args.repeat if n == 1 else 1)
                got[s].append(m)
                print(
                    f"N={n} round {r + 1}: {s} {rate(m):,.0f} steps/s, {cpu_us(m):,.0f} us CPU/step,"
                    f" gap p50 {m['p50'] * 1000:.1f} p99 {m['p99'] * 1000:.1f} ms",
                    file=sys.stderr,
                    flush=True,
                )
        rows += rows_for(n, systems, got)
    print(
        table(
            f"Beside the peers ({stamp()}, {machine()}; N workflows x {args.steps} durable steps, "
            f"a step = {SLEEP * 1000:.0f} ms awaited + {SIZE} characters persisted; "
            f"median of {args.rounds} interleaved rounds, ranges in brackets)",
            [
                "system",
                "N",
                "steps/s",
                "vs fastest peer",
                "process CPU us/step",
                "step overhead p50 / p99 ms",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
