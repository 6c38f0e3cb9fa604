"""Cost of durable model calls: write-ahead recording per call, and resume after a crash.

1. Added latency per model call. An agent session of M turns (M-1 turns that call one no-op
   tool, then an answer) runs through the runtime with a zero-latency ScriptedModel; every
   model turn is timed from before ``harness.model.called`` is appended to after
   ``harness.model.responded`` is acked, and split into the time inside the log's two acked
   appends and the rest (the harness's own CPU). The same conversation is also driven by
   calling the model directly (``await model.complete(request)``). Overhead = recorded -
   direct, per turn.
   In the same run, on the same broker: one raw confluent-kafka produce-and-wait round trip
   (acks=all, idempotent, linger.ms=0, one record + flush), back to back and spaced by 0.1 ms
   of CPU work as session appends are, and one KafkaEventLog append; for the embedded world,
   one raw sqlite commit (WAL, synchronous=FULL) of one row.
2. Resume. The M-turn session runs fresh with a 50 ms model and is timed. A copy of it is
   crashed by a child process (LITTLE_CRASH_AFTER_CALL: SIGKILL right after the M-th model
   invocation returns, before its response is logged); ``little.runtime.resume`` then serves
   M-1 turns from the log and calls the model once. Resume is timed in this process (world
   already open) and in a fresh process (world opened, then resume timed; process wall time
   too).

Fresh topics per invocation (runs, index, snapshots); the embedded world lives in a temp dir.

    .venv/bin/python bench/durable_call.py [--turns 200] [--rounds 3] [--latency 0.05]
    .venv/bin/python bench/durable_call.py --profile   # cProfile a session and a resume
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import bootstrap, machine, percentiles, stamp, table
from bench.log_append import ours_acked, raw_acked
from little import tune_gc
from little._world import World, kafka_world, local_world
from little.events import Usage
from little.harness import (
    ModelRequest,
    ModelResponse,
    ScriptedModel,
    ToolCallRequest,
    ToolContext,
    tool,
)
from little.log import RUNS_TOPIC
from little.replay import fold_run
from little.runtime import AgentSession, StepContext, WorkflowContext, resume, run, workflow
from little.runtime._writer import RunWriter

RAW_PAYLOAD = bytes(range(200))  # the raw engine's record: 200 bytes
GAP = 0.0001  # CPU work before each spaced raw round trip: about the gap between session appends
RAW: dict[str, Any] = {"payload": RAW_PAYLOAD, "partitions": 12}
SYSTEM = "Be brief."
WORKFLOW = "bench.durable_call"

# -- the workflow: one step, one agent session of N turns ---------------------------------

MODEL_LATENCY = {"seconds": 0.0}  # read when the session starts, so a resume may differ
MODELS: list[ScriptedModel] = []  # every model the workflow built in this process


def script(turns: int) -> tuple[ModelResponse, ...]:
    usage = Usage(input_tokens=10, output_tokens=5)
    asks = tuple(
        ModelResponse(
            tool_calls=(ToolCallRequest(f"c{i}", "noop", {"i": i}),),
            usage=usage,
            finish_reason="tool_calls",
        )
        for i in range(1, turns)
    )
    return (*asks, ModelResponse(content="done", usage=usage, finish_reason="stop"))


@tool(description="Do nothing.")
def noop(args: dict[str, Any], ctx: ToolContext) -> str:
    return "ok"


async def agent_step(step: StepContext, turns: int) -> str | None:
    model = ScriptedModel(script(turns), latency=MODEL_LATENCY["seconds"])
    MODELS.append(model)
    async with step.session("agent", model=model, tools=[noop], system=SYSTEM) as agent:
        return await agent.run("go", max_turns=turns)


@workflow(WORKFLOW, version="1")
async def durable_call(ctx: WorkflowContext, input: dict[str, Any]) -> Any:
    return await ctx.step("agent", agent_step, input["turns"])


def require(ok: bool, what: object) -> None:
    if not ok:
        raise RuntimeError(f"benchmark check failed: {what}")


def crash_call_index(turns: int) -> int:
    """LITTLE_CRASH_AFTER_CALL counts model and tool invocations (0-based): model, tool, ...

    Turn k's model call is invocation 2(k-1), so the last model call is 2(turns-1).
    """
    return 2 * (turns - 1)


# -- worlds ---------------------------------------------------------------------------------


def fresh_prefix(bs: str) -> str:
    """A topic prefix of this invocation's own, with its topics created (deploy/topics.yaml)."""
    prefix = f"bench.{uuid.uuid4().hex[:8]}."
    with tempfile.TemporaryDirectory() as d:
        kafka_world(bs, topic_prefix=prefix, provision=True, artifacts_dir=d).close()
    return prefix


def open_world(spec: dict[str, Any]) -> World:
    if spec["kind"] == "kafka":
        artifacts = Path(spec["dir"]) / "artifacts"
        return kafka_world(spec["bs"], topic_prefix=spec["prefix"], artifacts_dir=artifacts)
    return local_world(spec["dir"])


# -- part 1: per-call overhead ----------------------------------------------------------------

TURN_TIMES: list[float] = []
TURN_APPENDS: list[float] = []  # per turn: time spent inside log.append (its acked write-ahead)
APPEND_TIMES: list[float] = []
_model_turn = AgentSession._model_turn


async def _timed_model_turn(self: AgentSession, *args: Any, **kwargs: Any) -> Any:
    """Called append + ack (carrying the previous deferred result), model call, request hashing;
    the response is deferred to the next write-ahead append."""
    first = len(APPEND_TIMES)
    start = time.perf_counter()
    response = await _model_turn(self, *args, **kwargs)
    TURN_TIMES.append(time.perf_counter() - start)
    TURN_APPENDS.append(sum(APPEND_TIMES[first:]))
    return response


async def recorded_turns(world: World, turns: int) -> tuple[list[float], list[float]]:
    """Per model turn: its wall time, and the part of it spent in the log's acked appends."""
    MODEL_LATENCY["seconds"] = 0.0
    TURN_TIMES.clear()
    TURN_APPENDS.clear()
    APPEND_TIMES.clear()
    flush = RunWriter._flush

    async def timed_flush(self: RunWriter) -> Any:  # ~0.3 us of bookkeeping
        start = time.perf_counter()  # encoding, submit and the awaited ack of one batch
        positions = await flush(self)
        APPEND_TIMES.append(time.perf_counter() - start)
        return positions

    RunWriter._flush = timed_flush  # type: ignore[method-assign]
    AgentSession._model_turn = _timed_model_turn  # type: ignore[method-assign]
    try:
        result = await run(world, durable_call, {"turns": turns})
    finally:
        AgentSession._model_turn = _model_turn  # type: ignore[method-assign]
        RunWriter._flush = flush  # type: ignore[method-assign]
    require(result.status == "completed" and result.output == "done", result)
    assert len(TURN_TIMES) == turns
    return list(TURN_TIMES), list(TURN_APPENDS)


async def direct_turns(turns: int) -> list[float]:
    """The same conversation with no log: build the request, await model.complete."""
    model = ScriptedModel(script(turns))
    specs = (noop.spec,)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    out = []
    for _ in range(turns):
        start = time.perf_counter()
        response = await model.complete(ModelRequest(SYSTEM, tuple(messages), specs))
        out.append(time.perf_counter() - start)
        messages.append(response.as_message())
        for call in response.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": '"ok"'})
    return out


def raw_sqlite_acked(path: Path, n: int) -> list[float]:
    """One row per committed transaction, WAL + synchronous=FULL, as the embedded log."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE IF NOT EXISTS r (k TEXT, v BLOB)")
    out = []
    for _ in range(n):
        start = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO r VALUES (?, ?)", ("raw", RAW_PAYLOAD))
        conn.execute("COMMIT")
        out.append(time.perf_counter() - start)
    conn.close()
    return out


# -- part 2: fresh run vs resume after a crash at the last turn ---------------------------------


def child(mode: str, spec: dict[str, Any], run_id: str, turns: int, latency: float) -> Any:
    """Run this file in a fresh process; returns (returncode, RESULT json or None, wall s)."""
    env = dict(os.environ)
    env.pop("LITTLE_CRASH_AFTER_CALL", None)
    env.pop("LITTLE_CRASH_AFTER_EVENT", None)
    if mode == "crash":
        env["LITTLE_CRASH_AFTER_CALL"] = str(crash_call_index(turns))
    cmd = [sys.executable, __file__, "--child", mode, "--spec", json.dumps(spec)]
    cmd += ["--run-id", run_id, "--turns", str(turns), "--latency", str(latency)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    result = None
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT ") :])
    if mode == "resume" and (proc.returncode != 0 or result is None):
        raise RuntimeError(f"resume child failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return proc.returncode, result, wall, proc.stderr


async def child_main(mode: str, spec: dict[str, Any], run_id: str, turns: int, lat: float) -> None:
    t0 = time.perf_counter()
    world = open_world(spec)
    opened = time.perf_counter() - t0
    MODEL_LATENCY["seconds"] = lat
    if mode == "crash":
        result = await run(world, durable_call, {"turns": turns}, run_id=run_id)
        raise SystemExit(f"the crash hook did not fire: {result}")
    start = time.perf_counter()
    result = await resume(world, run_id)
    elapsed = time.perf_counter() - start
    invocations = sum(m.invocations for m in MODELS)
    world.close()
    out = {"resume_s": elapsed, "open_s": opened, "status": result.status}
    print("RESULT " + json.dumps({**out, "invocations": invocations}), flush=True)


def crashed_copy(spec: dict[str, Any], world: World, turns: int) -> str:
    run_id = f"run_{uuid.uuid4().hex}"
    rc, _, _, err = child("crash", spec, run_id, turns, 0.0)
    require(rc == -9, f"crash child exited {rc}, expected SIGKILL: {err[-3000:]}")
    state, _, _ = fold_run(world, run_id, use_snapshot=False)
    session = state.session("agent#agent")
    if session is None:
        raise RuntimeError(f"run {run_id} has no session agent#agent: {state}")
    last = session.turn(turns)
    require(last is not None and last.status == "called", last)
    responded = sum(1 for t in session.turns if t.status == "responded")
    require(responded == turns - 1, responded)
    return run_id


async def fresh_vs_resume(spec: dict[str, Any], turns: int, latency: float) -> dict[str, float]:
    world = open_world(spec)
    MODEL_LATENCY["seconds"] = latency
    start = time.perf_counter()
    fresh = await run(world, durable_call, {"turns": turns})
    fresh_s = time.perf_counter() - start
    require(fresh.status == "completed", fresh)

    in_proc_id = crashed_copy(spec, world, turns)
    MODELS.clear()
    MODEL_LATENCY["seconds"] = latency
    start = time.perf_counter()
    resumed = await resume(world, in_proc_id)
    in_proc_s = time.perf_counter() - start
    require(resumed.status == "completed" and resumed.output == "done", resumed)
    require(sum(m.invocations for m in MODELS) == 1, [m.invocations for m in MODELS])

    fresh_proc_id = crashed_copy(spec, world, turns)
    _, res, wall, _ = child("resume", spec, fresh_proc_id, turns, latency)
    require(res["status"] == "completed" and res["invocations"] == 1, res)
    world.close()
    return {
        "fresh": fresh_s,
        "in_process": in_proc_s,
        "fresh_process": res["resume_s"],
        "fresh_process_open": res["open_s"],
        "fresh_process_wall": wall,
    }


# -- main -------------------------------------------------------------------------------------


def yes(ok: bool) -> str:
    return "**yes**" if ok else "**no**"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f}" if seconds < 0.01 else f"{seconds * 1000:.2f}"


async def part1(bs: str, prefix: str, tmp: Path, turns: int, rounds: int) -> Any:
    kworld = open_world({"kind": "kafka", "bs": bs, "prefix": prefix, "dir": str(tmp / "k")})
    topic = prefix + RUNS_TOPIC
    eworld = local_world(tmp / "embedded-1")
    raw_k, raw_gap, raw_spin, ours_k, raw_sql, ours_e = [], [], [], [], [], []
    rec_k: list[list[float]] = []
    rec_e: list[list[float]] = []
    app_k: list[float] = []
    app_e: list[float] = []
    direct: list[list[float]] = []
    for r in range(rounds):  # interleaved, so drift on a shared machine hits all alike
        raw_k += raw_acked(bs, topic, turns, **RAW)
        raw_gap += raw_acked(bs, topic, turns, gap=GAP, **RAW)
        raw_spin += raw_acked(bs, topic, turns, gap=GAP, spin=True, **RAW)
        times, appends = await recorded_turns(kworld, turns)
        rec_k.append(times)
        app_k += appends
        ours_k += ours_acked(kworld.log, turns, RAW_PAYLOAD)
        direct.append(await direct_turns(turns))
        raw_sql += raw_sqlite_acked(tmp / f"raw-{r}.sqlite3", turns)
        times, appends = await recorded_turns(eworld, turns)
        rec_e.append(times)
        app_e += appends
        ours_e += ours_acked(eworld.log, turns, RAW_PAYLOAD)
    kworld.close()
    eworld.close()
    # direct cost of turn i: its median over rounds; overhead sample = recorded - direct
    direct_i = [statistics.median(d[i] for d in direct) for i in range(turns)]
    over_k = [rnd[i] - direct_i[i] for rnd in rec_k for i in range(turns)]
    over_e = [rnd[i] - direct_i[i] for rnd in rec_e for i in range(turns)]
    flat_k = [x for r in rec_k for x in r]
    flat_e = [x for r in rec_e for x in r]
    # the same ratio within each round (its raw and recorded halves measured seconds apart):
    # drift of a shared machine between rounds cancels, and the spread shows what is left
    round_ratios = []
    for r, rnd in enumerate(rec_k):
        over = statistics.median(rnd[i] - direct_i[i] for i in range(turns))
        raw = raw_k[r * turns : (r + 1) * turns]
        spin = raw_spin[r * turns : (r + 1) * turns]
        round_ratios.append((over / statistics.median(raw), over / statistics.median(spin)))
    return {
        "round_ratios": round_ratios,
        "raw_k": raw_k,
        "raw_gap": raw_gap,
        "raw_spin": raw_spin,
        "app_k": app_k,
        "app_e": app_e,
        "cpu_k": [t - a for t, a in zip(flat_k, app_k, strict=True)],
        "cpu_e": [t - a for t, a in zip(flat_e, app_e, strict=True)],
        "ours_k": ours_k,
        "raw_sql": raw_sql,
        "ours_e": ours_e,
        "direct": [x for d in direct for x in d],
        "rec_k": flat_k,
        "rec_e": flat_e,
        "over_k": over_k,
        "over_e": over_e,
    }


async def profile(bs: str, turns: int, latency: float) -> None:
    """cProfile of one recorded session (zero latency) and of one resume, on both worlds."""

    def show(prof: cProfile.Profile, title: str, sort: str) -> None:
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats(sort).print_stats(25)
        print(f"## {title}, by {sort} time\n{buf.getvalue()}")

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        specs: dict[str, dict[str, Any]] = {
            "kafka": {"kind": "kafka", "bs": bs, "prefix": fresh_prefix(bs), "dir": d},
            "embedded": {"kind": "embedded", "dir": str(tmp / "e")},
        }
        for name, spec in specs.items():
            world = open_world(spec)
            await recorded_turns(world, 5)  # warm
            prof = cProfile.Profile()
            prof.enable()
            await recorded_turns(world, turns)
            prof.disable()
            show(prof, f"{name}: {turns}-turn session, zero-latency model", "tottime")
            run_id = crashed_copy(spec, world, turns)
            MODEL_LATENCY["seconds"] = latency
            prof = cProfile.Profile()
            prof.enable()
            await resume(world, run_id)
            prof.disable()
            show(prof, f"{name}: in-process resume of a {turns}-turn session", "cumulative")
            world.close()


async def main_async(args: argparse.Namespace) -> None:
    bs = bootstrap()
    tune_gc()  # as the resume coordinator, the process that hosts runs, does at start-up
    if args.profile:
        await profile(bs, args.turns, args.latency)
        return
    wall_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        prefix = fresh_prefix(bs)
        p1 = await part1(bs, prefix, tmp, args.turns, args.rounds)
        kspec = {"kind": "kafka", "bs": bs, "prefix": prefix, "dir": str(tmp / "k2")}
        espec = {"kind": "embedded", "dir": str(tmp / "embedded-2")}
        p2 = {
            "kafka": await fresh_vs_resume(kspec, args.turns, args.latency),
            "embedded": await fresh_vs_resume(espec, args.turns, args.latency),
        }

    rk50, rk99 = percentiles(p1["raw_k"])
    lk50, lk99 = percentiles(p1["ours_k"])
    rs50, rs99 = percentiles(p1["raw_sql"])
    le50, le99 = percentiles(p1["ours_e"])
    d50, d99 = percentiles(p1["direct"])
    ck50, ck99 = percentiles(p1["rec_k"])
    ce50, ce99 = percentiles(p1["rec_e"])
    ok50, ok99 = percentiles(p1["over_k"])
    oe50, oe99 = percentiles(p1["over_e"])
    rg50, rg99 = percentiles(p1["raw_gap"])
    rs50s, rs99s = percentiles(p1["raw_spin"])
    ak50, ak99 = percentiles(p1["app_k"])
    ae50, ae99 = percentiles(p1["app_e"])
    uk50, uk99 = percentiles(p1["cpu_k"])
    ue50, ue99 = percentiles(p1["cpu_e"])
    per_append_k = ok50 / 2 / rk50
    rounds_raw = [raw for raw, _ in p1["round_ratios"]]
    rounds_spin = [spin for _, spin in p1["round_ratios"]]
    rows = [
        [
            "1",
            "raw confluent-kafka produce + flush (1 record)",
            "Kafka",
            ms(rk50),
            ms(rk99),
            "1.00x raw",
            "",
            "",
        ],
        [
            "1",
            f"raw produce + flush, each after {GAP * 1e3:.1f} ms of CPU work (spaced)",
            "Kafka",
            ms(rg50),
            ms(rg99),
            f"{rg50 / rk50:.2f}x raw",
            "",
            "",
        ],
        [
            "1",
            f"raw produce + busy-poll for the report, each after {GAP * 1e3:.1f} ms of CPU work",
            "Kafka",
            ms(rs50s),
            ms(rs99s),
            f"{rs50s / rk50:.2f}x raw",
            "",
            "",
        ],
        [
            "1",
            "KafkaEventLog.append (1 record, acked)",
            "Kafka",
            ms(lk50),
            ms(lk99),
            f"{lk50 / rk50:.2f}x raw",
            "",
            "",
        ],
        ["1", "direct `await model.complete(request)`", "none", ms(d50), ms(d99), "", "", ""],
        [
            "1",
            "recorded model call (called acked with the deferred previous result, model call)",
            "Kafka",
            ms(ck50),
            ms(ck99),
            f"{ck50 / rk50:.2f}x raw",
            "",
            "",
        ],
        [
            "1",
            "... of which in its acked append (log.append)",
            "Kafka",
            ms(ak50),
            ms(ak99),
            f"{ak50 / (2 * rk50):.2f}x 2 raw",
            "",
            "",
        ],
        [
            "1",
            "... of which harness CPU (request hashing, events, encoding)",
            "Kafka",
            ms(uk50),
            ms(uk99),
            "",
            "",
            "",
        ],
        [
            "1",
            "overhead per recorded call (recorded - direct)",
            "Kafka",
            ms(ok50),
            ms(ok99),
            f"{ok50 / rk50:.2f}x raw ({ok50 / rs50s:.2f}x busy-poll raw)",
            "<= 1.3x raw",
            yes(ok50 <= 1.3 * rk50),
        ],
        [
            "1",
            f"overhead / raw round trip within each round (median of {len(rounds_raw)} rounds)",
            "Kafka",
            "",
            "",
            f"{statistics.median(rounds_raw):.2f}x raw ({min(rounds_raw):.2f}-"
            f"{max(rounds_raw):.2f}); {statistics.median(rounds_spin):.2f}x busy-poll raw "
            f"({min(rounds_spin):.2f}-{max(rounds_spin):.2f})",
            "<= 1.3x raw",
            yes(statistics.median(rounds_raw) <= 1.3),
        ],
        [
            "1",
            "per-call overhead / 2 (the old two-ack reading)",
            "Kafka",
            ms(ok50 / 2),
            ms(ok99 / 2),
            f"{per_append_k:.2f}x raw ({ok50 / 2 / rg50:.2f}x spaced)",
            "",
            "",
        ],
        [
            "1",
            "raw sqlite commit (1 row, WAL, synchronous=FULL)",
            "embedded",
            ms(rs50),
            ms(rs99),
            "1.00x raw",
            "",
            "",
        ],
        [
            "1",
            "EmbeddedEventLog.append (1 record)",
            "embedded",
            ms(le50),
            ms(le99),
            f"{le50 / rs50:.2f}x raw",
            "",
            "",
        ],
        [
            "1",
            "recorded model call",
            "embedded",
            ms(ce50),
            ms(ce99),
            f"{ce50 / rs50:.2f}x raw",
            "",
            "",
        ],
        [
            "1",
            "... of which in its acked append",
            "embedded",
            ms(ae50),
            ms(ae99),
            f"{ae50 / (2 * rs50):.2f}x 2 raw",
            "",
            "",
        ],
        ["1", "... of which harness CPU", "embedded", ms(ue50), ms(ue99), "", "", ""],
        [
            "1",
            "overhead per recorded call",
            "embedded",
            ms(oe50),
            ms(oe99),
            f"{oe50 / rs50:.2f}x raw",
            "",
            "",
        ],
        [
            "1",
            "per-call overhead / 2 (old reading)",
            "embedded",
            ms(oe50 / 2),
            ms(oe99 / 2),
            f"{oe50 / 2 / rs50:.2f}x raw",
            "",
            "",
        ],
    ]
    for world, r in p2.items():
        rows.append(
            [
                "2",
                f"fresh {args.turns}-turn run, {args.latency * 1000:.0f} ms model",
                world,
                ms(r["fresh"]),
                "",
                "100%",
                "",
                "",
            ]
        )
        for key, label in (
            ("in_process", "resume after crash at last turn, in-process (world open)"),
            ("fresh_process", "resume after crash at last turn, fresh process (world open)"),
        ):
            pct = r[key] / r["fresh"]
            rows.append(
                ["2", label, world, ms(r[key]), "", f"{pct:.1%} of fresh", "< 5%", yes(pct < 0.05)]
            )
        pct = r["fresh_process_wall"] / r["fresh"]
        rows.append(
            [
                "2",
                "same, whole process (interpreter, imports, open world "
                f"{r['fresh_process_open'] * 1000:.0f} ms, resume)",
                world,
                ms(r["fresh_process_wall"]),
                "",
                f"{pct:.1%} of fresh",
                "",
                "",
            ]
        )
    print(
        table(
            f"Durable model calls, {stamp()}, {machine()}, local Kafka 4.1.1 broker (1 node)",
            [
                "part",
                "measurement",
                "world",
                "p50 (or total) ms",
                "p99 ms",
                "ratio",
                "target",
                "met",
            ],
            rows,
        )
    )
    print(
        f"\nPart 1: {args.turns}-turn agent session ({args.turns - 1} turns asking one no-op "
        f"tool, then an answer), zero-latency ScriptedModel, {args.rounds} rounds interleaved "
        f"with the raw measurements ({len(p1['over_k'])} recorded calls per world, "
        f"{len(p1['raw_k'])} raw round trips). A recorded call's time runs from before "
        "`harness.model.called` is built to after `harness.model.responded` is acked (request "
        "hashing included); the direct call's time for the same turn (median over rounds) is "
        "subtracted per turn. Raw records are 200 bytes, producer idempotent, acks=all, "
        "linger.ms=0; 'spaced' raw round trips follow a busy-wait, as session appends follow "
        "the harness's own work (the engine's round trip grows when the producer is not "
        "hammered back to back); the busy-poll raw row waits for the delivery report the way "
        "KafkaEventLog's latency profile does (poll(0) in a loop instead of a blocking "
        "flush), the engine's best round trip on this machine. The two '... of which' rows split each recorded call "
        "(p50/p99 of each part, so they need not add up). Since the runtime defers each call's "
        "terminal record to the next write-ahead batch, a recorded model call waits for one "
        "ack (its harness.model.called, carrying the previous call's result), so the per-call "
        "overhead row is the one compared with the 1.3x target; the '/ 2' rows are kept for "
        "comparison with the earlier two-ack protocol. The 'within each round' row divides "
        "each round's p50 overhead by the same round's raw p50 (median and range over rounds): "
        "on a shared machine the raw round trip itself drifts between rounds.\n"
        f"Part 2: fresh run timed in-process with ScriptedModel(latency={args.latency}); the "
        f"crashed copies come from a child process with LITTLE_CRASH_AFTER_CALL="
        f"{crash_call_index(args.turns)} (the last model call: the counter also counts tool "
        "calls) and a zero-latency model; the resume's model has the same latency and is "
        "invoked exactly once (checked). 'fresh process' times `resume(world, run_id)` in a "
        "new interpreter after the world is open. Fresh topics (runs, index, snapshots) per "
        f"invocation. Total bench wall time {time.perf_counter() - wall_start:.0f} s."
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--latency", type=float, default=0.05)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--child", choices=("crash", "resume"))
    ap.add_argument("--spec")
    ap.add_argument("--run-id")
    args = ap.parse_args()
    if args.child:
        spec = json.loads(args.spec)
        asyncio.run(child_main(args.child, spec, args.run_id, args.turns, args.latency))
        return
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
