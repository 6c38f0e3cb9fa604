"""Replay modes against the recorded run (seed 004; issue 15's benchmark, the modes built).

A run of 100 agent calls (one step each, one turn, a 50 ms model) is recorded on a world and
its wall time taken. Then, on the same world, in the same process:

1. inference-skipping: ``replay_run`` (the run's state, sessions and plan rebuilt from its
   log, no model), from the log alone and from a snapshot. Raw: reading the run's records
   from the log without decoding or folding them (``world.log.read_run``).
2. partial: ``step_through`` the last 10 events, from zero (the prefix folded in one go) and
   from a snapshot taken 10 events before the end (the snapshot decoded, the rest read).
3. recorded-call replay of the unchanged workflow (``run(..., replay_from=)``): every call
   served, no model invoked; and ``simulate`` of the unchanged workflow against the run (the
   same execution in a sandbox world holding a copy of the run's records, then the
   comparison of the two runs' traces).

Targets (issue 15): inference-skipping <= 2% of the recorded run's wall time, simulate <= 5%.

    .venv/bin/python bench/replay_modes.py [--calls 100] [--latency 0.05] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import bootstrap, machine, stamp, table
from bench._replay_flow import pipeline
from bench.durable_call import fresh_prefix
from little import tune_gc
from little._world import World, kafka_world, local_world
from little.replay import (
    LogPosition,
    Snapshot,
    decode_snapshot,
    encode_snapshot,
    materialize_run_state_from_events,
    replay_run,
    step_through,
)
from little.runtime import run, simulate


def best(fn: Any, repeat: int = 5) -> float:
    """The fastest of ``repeat`` timings (a read-only operation: the noise is all upward)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(world: World, calls: int, latency: float, tag: str) -> dict[str, float]:
    wf = pipeline(calls, latency, f"{tag}-a")
    start = time.perf_counter()
    recorded = asyncio.run(run(world, wf, None))
    recorded_s = time.perf_counter() - start
    assert recorded.status == "completed", recorded.error
    run_id = recorded.run_id

    raw = best(lambda: sum(1 for _ in world.log.read_run(run_id)))
    inference = best(lambda: replay_run(world, run_id, use_snapshot=False))

    events = list(world.read_run(run_id))
    cut = len(events) - 10
    state = materialize_run_state_from_events(events[:cut], run_id=run_id)
    last = events[cut - 1]
    snap = encode_snapshot(
        Snapshot.of(
            state.model_copy(
                update={"last_position": LogPosition(partition=last.partition, offset=last.offset)}
            )
        )
    )
    from_seq = events[cut].event.seq

    def partial_zero() -> None:
        list(step_through(world.read_run(run_id), run_id, from_seq=from_seq))

    def partial_snapshot() -> None:
        start = decode_snapshot(snap).state
        pos = start.last_position
        assert pos is not None
        after = world.read_run(run_id, after=pos)
        list(step_through(after, run_id, from_seq=from_seq, start=start))

    zero, snapshot = best(partial_zero), best(partial_snapshot)

    served_wf = pipeline(calls, latency, f"{tag}-b")
    start = time.perf_counter()
    replay = asyncio.run(run(world, served_wf, None, replay_from=run_id))
    served_s = time.perf_counter() - start
    assert replay.replay is not None
    assert replay.replay.replayed_calls == calls, replay.replay

    sim_wf = pipeline(calls, latency, f"{tag}-c")
    start = time.perf_counter()
    sim = asyncio.run(simulate(world, sim_wf, run_id))
    simulate_s = time.perf_counter() - start
    assert sim.identical, sim.lines()
    return {
        "recorded": recorded_s,
        "raw_read": raw,
        "inference": inference,
        "partial_zero": zero,
        "partial_snapshot": snapshot,
        "served": served_s,
        "simulate": simulate_s,
        "events": float(len(events)),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--latency", type=float, default=0.05)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    tune_gc()
    bs = bootstrap()
    prefix = fresh_prefix(bs)
    results: dict[str, list[dict[str, float]]] = {"embedded": [], "Kafka": []}
    with tempfile.TemporaryDirectory() as d:
        for r in range(args.rounds):  # the worlds interleaved, round by round
            with local_world(Path(d) / f"e{r}") as world:
                results["embedded"].append(measure(world, args.calls, args.latency, f"e{r}"))
            with kafka_world(bs, topic_prefix=prefix, artifacts_dir=Path(d) / "art") as world:
                results["Kafka"].append(measure(world, args.calls, args.latency, f"k{r}"))

    def cell(rounds: list[dict[str, float]], key: str, of: str = "recorded") -> str:
        shares = [100 * x[key] / x[of] for x in rounds]
        ms = statistics.median(x[key] for x in rounds) * 1000
        return (
            f"{ms:,.1f} ms = {statistics.median(shares):.2f}% ({min(shares):.2f}-{max(shares):.2f})"
        )

    rows = []
    for name, rounds in results.items():
        rec = statistics.median(x["recorded"] for x in rounds)
        raw = statistics.median(x["raw_read"] for x in rounds) * 1000
        inf = statistics.median(x["inference"] for x in rounds) * 1000
        rows.append(
            [
                name,
                f"{int(rounds[0]['events'])}",
                f"{rec:.2f} s",
                f"{raw:.1f} ms",
                cell(rounds, "inference"),
                f"{inf / raw:.1f}x",
                cell(rounds, "partial_zero"),
                cell(rounds, "partial_snapshot"),
                cell(rounds, "served"),
                cell(rounds, "simulate"),
            ]
        )
    print(
        table(
            f"Replay modes, {args.calls} calls of a {args.latency * 1000:.0f} ms model "
            f"({stamp()}, {machine()}, median of {args.rounds} rounds, range in brackets)",
            [
                "world",
                "events",
                "recorded run",
                "raw read",
                "inference-skipping (% of recorded)",
                "vs raw read",
                "partial last 10, from zero",
                "partial last 10, from a snapshot",
                "replay_from, all served",
                "simulate",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
