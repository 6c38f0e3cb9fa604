"""Many runs in flight in one process: 10,000 runs, each one session of 5 exchanges, 1 s model.

Issue 29, target 5. N runs (default 10,000) start at once with ``asyncio.gather`` in one
process; each is one step holding one agent session of K single-turn exchanges (default 5)
with a ``ScriptedModel`` that takes L seconds (default 1 s) per call, so every run is in flight
for at least K x L. Each world is measured in a fresh child process (a fresh embedded world in
a temp dir; on Kafka fresh topics on the broker the benches read, deleted afterwards), after a
warm-up of 10 runs and ``little.tune_gc()`` (what a hosting process calls).

Printed per world: whether every run completed with its K answers; the added latency per call
(the wall time of ``await agent.run(...)`` minus the model's L) p50/p99/max; the event loop's
lag p99/max (a 1 ms ticker); the resident memory per run in flight (RSS sampled every 50 ms;
the sample with the most runs in flight, less the RSS after the warm-up, over those runs); the
process CPU per call (all threads), recorded calls/s and the wall time, and how long the last
run took to reach its first call (the start-up of 10,000 runs is CPU the loop spends before any
of them calls a model). Targets: added latency p99 <= 50 ms, RSS <= 100 KB per run in flight.

    .venv/bin/python bench/many_runs.py [--n 10000] [--k 5] [--latency 1.0]
        [--worlds embedded,kafka] [--rounds 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import bootstrap, machine, stamp, table
from bench.concurrent_runs import Ticker, p
from little.events import Usage
from little.harness import ModelResponse, ScriptedModel
from little.runtime import StepContext, WorkflowContext, run, workflow

CALLS: list[float] = []  # wall time of each agent.run
FIRST: list[float] = []  # when each session began its first call
PAGE = os.sysconf("SC_PAGE_SIZE")


@workflow("bench.many_runs", version="1")
async def sessions(ctx: WorkflowContext, input: dict[str, Any]) -> int:
    return int(await ctx.step("agent", _session, int(input["k"]), float(input["latency"])))


async def _session(step: StepContext, k: int, latency: float) -> int:
    usage = Usage(input_tokens=10, output_tokens=5)
    script = [ModelResponse(content="ok", usage=usage, finish_reason="stop")] * k
    model = ScriptedModel(script, latency=latency)
    done = 0
    async with step.session("agent", model=model) as agent:
        for i in range(k):
            start = time.perf_counter()
            if i == 0:
                FIRST.append(start)
            await agent.run(f"question {i}", max_turns=1)
            CALLS.append(time.perf_counter() - start)
            done += 1
    return done


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


async def child(world_name: str, n: int, k: int, latency: float) -> dict[str, Any]:
    from little import tune_gc
    from little._world import kafka_world, local_world

    with tempfile.TemporaryDirectory() as tmp:
        if world_name == "kafka":
            bs = bootstrap()
            prefix = f"bench.many.{uuid.uuid4().hex[:8]}."
            world = kafka_world(bs, topic_prefix=prefix, provision=True, artifacts_dir=f"{tmp}/a")
        else:
            world = local_world(f"{tmp}/embedded")
        try:
            await asyncio.gather(
                *(run(world, sessions, {"k": 2, "latency": 0.01}) for _ in range(10))
            )
            CALLS.clear()
            FIRST.clear()
            tune_gc()
            base = rss()
            in_flight = 0
            samples: list[tuple[int, int]] = []  # (runs in flight, RSS)

            async def one() -> Any:
                nonlocal in_flight
                in_flight += 1
                try:
                    return await run(world, sessions, {"k": k, "latency": latency})
                finally:
                    in_flight -= 1

            async def sample() -> None:
                while True:
                    samples.append((in_flight, rss()))
                    await asyncio.sleep(0.05)

            sampler = asyncio.ensure_future(sample())
            cpu, begin = time.process_time(), time.perf_counter()
            with Ticker() as ticker:
                results = await asyncio.gather(*(one() for _ in range(n)))
            wall, cpu = time.perf_counter() - begin, time.process_time() - cpu
            sampler.cancel()
        finally:
            world.close()
            if world_name == "kafka":
                from bench.peers import _delete_topics

                _delete_topics(bs, prefix)
    completed = sum(1 for r in results if r.status == "completed" and r.output == k)
    most, at = max(samples)
    added = [c - latency for c in CALLS]
    return {
        "world": world_name,
        "n": n,
        "k": k,
        "completed": completed,
        "calls": len(CALLS),
        "wall": wall,
        "cpu": cpu,
        "added_p50": p(added, 0.5),
        "added_p99": p(added, 0.99),
        "added_max": max(added),
        "lag_p99": p(ticker.lags, 0.99),
        "lag_max": max(ticker.lags),
        "in_flight": most,
        "rss_per_run": (at - base) / most,
        "rss_peak_mb": max(r for _, r in samples) / 2**20,
        "base_mb": base / 2**20,
        "last_first_call": max(FIRST) - begin,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--latency", type=float, default=1.0)
    ap.add_argument("--worlds", default="embedded,kafka")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(child(args.child, args.n, args.k, args.latency))))
        return
    worlds = args.worlds.split(",")
    if "kafka" in worlds:
        bootstrap()
    rows = []
    for r in range(args.rounds):
        for w in worlds:
            proc = subprocess.run(
                [
                    *(sys.executable, __file__, "--child", w, "--n", str(args.n)),
                    *("--k", str(args.k), "--latency", str(args.latency)),
                ],
                capture_output=True,
                text=True,
                timeout=3600,
            )
            if proc.returncode != 0:
                raise SystemExit(f"{w} failed:\n{proc.stderr[-4000:]}")
            m = json.loads(proc.stdout.strip().splitlines()[-1])
            print(f"round {r + 1}: {m}", file=sys.stderr, flush=True)
            rows.append(
                [
                    w,
                    f"{m['completed']:,} of {m['n']:,}",
                    f"{m['added_p50'] * 1000:,.0f} / {m['added_p99'] * 1000:,.0f}"
                    f" / {m['added_max'] * 1000:,.0f}",
                    f"{m['lag_p99'] * 1000:,.0f} / {m['lag_max'] * 1000:,.0f}",
                    f"{m['rss_per_run'] / 1024:,.0f} ({m['in_flight']:,} in flight)",
                    f"{m['cpu'] / m['calls'] * 1e6:,.0f}",
                    f"{m['calls'] / m['wall']:,.0f}",
                    f"{m['wall']:,.1f}",
                    f"{m['last_first_call']:,.1f}",
                ]
            )
    print(
        table(
            f"Many runs in one process ({stamp()}, {machine()}; {args.n:,} runs at once, each "
            f"one session of {args.k} exchanges with a {args.latency:g} s model)",
            [
                "world",
                "runs completed",
                "added latency per call p50 / p99 / max ms",
                "loop lag p99 / max ms",
                "RSS KB per run in flight",
                "CPU us/call",
                "calls/s",
                "wall s",
                "last run's first call at s",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
