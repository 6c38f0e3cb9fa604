"""CPU per recorded call against the session's length: is a long session's call as cheap as a
short one's?

One run, one step, one agent session of E exchanges (``await agent.run(prompt)``), each a
~1 KB prompt and a ~1 KB answer from a zero-latency scripted model, so the conversation grows
by ~2 KB an exchange. Every call's process CPU (all threads: the loop's own work and the
log's committer or delivery pump) is taken with ``time.process_time`` around it; printed: the
CPU of the first 100 calls, of the last 100, and their ratio (target <= 1.2x), over rounds.

    .venv/bin/python bench/session_length.py [--exchanges 1000] [--rounds 3]
        [--world embedded|kafka]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import bootstrap, machine, stamp, table
from little import tune_gc
from little._world import World, kafka_world, local_world
from little.events import Usage
from little.harness import ModelRequest, ModelResponse, ScriptedModel
from little.runtime import StepContext, WorkflowContext, run, workflow

WINDOW = 100
CALL_CPU: list[float] = []
PROFILE: dict[str, cProfile.Profile | None] = {"last": None}


def text(i: int, kind: str) -> str:
    return f"{kind} {i}: " + ("lorem ipsum dolor sit amet " * 38)  # ~1 KB


async def _session(step: StepContext, exchanges: int) -> int:
    usage = Usage(input_tokens=250, output_tokens=250)
    script = [
        ModelResponse(content=text(i, "answer"), usage=usage, finish_reason="stop")
        for i in range(exchanges)
    ]
    model = _Answers(script)
    profile = PROFILE["last"]
    async with step.session("agent", model=model, system="Be brief.") as agent:
        for i in range(exchanges):
            if profile is not None and i == exchanges - WINDOW:
                profile.enable()
            start = time.process_time()
            await agent.run(text(i, "question"), max_turns=1)
            CALL_CPU.append(time.process_time() - start)
        if profile is not None:
            profile.disable()
    return exchanges


class _Answers(ScriptedModel):
    """The script's answers in order, counted, not found by counting the request's assistant
    messages as ScriptedModel does (a scan of the whole conversation per call: the model's
    cost, which a call to a real provider does not pay on this process's CPU)."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.invocations += 1
        return self.script[self.invocations - 1]


@workflow("bench.session_length", version="1")
async def long_session(ctx: WorkflowContext, input: dict[str, Any]) -> int:
    return int(await ctx.step("agent", _session, int(input["exchanges"])))


async def one_round(world: World, exchanges: int) -> tuple[float, float]:
    CALL_CPU.clear()
    result = await run(world, long_session, {"exchanges": exchanges})
    if result.status != "completed" or result.output != exchanges:
        raise RuntimeError(f"run did not complete: {result}")
    return sum(CALL_CPU[:WINDOW]), sum(CALL_CPU[-WINDOW:])


async def main_async(args: argparse.Namespace) -> None:
    tune_gc()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if args.world == "kafka":
            bs = bootstrap()
            prefix = f"bench.{uuid.uuid4().hex[:8]}."
            kafka_world(bs, topic_prefix=prefix, provision=True, artifacts_dir=tmp).close()
            world = kafka_world(bs, topic_prefix=prefix, artifacts_dir=tmp / "artifacts")
        else:
            world = local_world(tmp / "embedded")
        if args.profile:
            PROFILE["last"] = cProfile.Profile()
            await one_round(world, args.exchanges)
            pstats.Stats(PROFILE["last"]).sort_stats(args.sort).print_stats(30)
            world.close()
            return
        rows = []
        ratios = []
        for r in range(args.rounds):
            first, last = await one_round(world, args.exchanges)
            ratios.append(last / first)
            rows.append(
                [
                    str(r + 1),
                    f"{first / WINDOW * 1e6:.0f}",
                    f"{last / WINDOW * 1e6:.0f}",
                    f"{last / first:.2f}x",
                ]
            )
        world.close()
    med = statistics.median(ratios)
    rows.append(
        [
            "median (range)",
            "",
            "",
            f"{med:.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) "
            + ("**yes**" if med <= 1.2 else "**no**"),
        ]
    )
    print(
        table(
            f"CPU per call against session length, {args.world} world, {stamp()}, {machine()}",
            [
                "round",
                f"first {WINDOW} calls: CPU per call us",
                f"last {WINDOW} calls: CPU per call us",
                "last / first (<= 1.2x)",
            ],
            rows,
        )
    )
    print(
        f"\nOne session of {args.exchanges} exchanges, ~1 KB prompt and ~1 KB answer each "
        "(a zero-latency scripted model), one run per round; a call's CPU is the process's (all "
        "threads) around `await agent.run(...)`."
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--exchanges", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--world", choices=("embedded", "kafka"), default="embedded")
    ap.add_argument("--profile", action="store_true", help="cProfile the last 100 calls")
    ap.add_argument("--sort", default="cumulative", help="the profile's order")
    asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    main()
