"""``little demo``: the main job on the embedded world, with a real crash.

A child process runs the reference research workflow and is killed with SIGKILL in the middle
of its agent session: right after the model answered turn 2, before that answer reached the
log. A second process resumes the run from the log: finished steps are skipped, finished model
and tool calls are served from the log, and only the call that was in flight runs again. The
report then shows tokens and dollars billed versus avoided, and the real invocation counts.
Last, the workflow's final stage is edited and the workflow re-run against the finished run
(recorded-call replay): the agent call is answered from its record, no model is invoked.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

from rich.console import Console
from rich.table import Table

import little
from little.examples import research
from little.harness import count_invocations
from little.replay import ReplayResult, replay_run

CRASH_AFTER_CALL = 2
"""Invocations in order: model turn 1, search, model turn 2, ... : die after model turn 2."""


def child(argv: list[str]) -> None:
    """``python -m little.cli._demo <data_dir> <run_id> [resume]``: one process of the demo."""
    from little.logging_setup import configure

    configure()
    data_dir, run_id = argv[0], argv[1]
    with little.local_world(data_dir) as world:
        if len(argv) > 2 and argv[2] == "resume":
            result = asyncio.run(little.runtime.resume(world, run_id))
        else:
            result = asyncio.run(
                little.runtime.run(world, research.research, {"topic": "Kafka"}, run_id=run_id)
            )
    print(json.dumps({"status": result.status, "error": result.error}))


def _process(
    data_dir: Path, run_id: str, *extra: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "little.cli._demo", str(data_dir), run_id, *extra],
        capture_output=True,
        text=True,
        env={**os.environ, "LITTLE_LOG_LEVEL": "warning", **env},
        timeout=300,
    )


def run_demo(data_dir: Path, console: Console, *, model: str | None = None) -> str:
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    calls = data_dir / "calls"
    run_id = f"run_demo_{uuid.uuid4().hex[:8]}"
    env = {research.CALLS_DIR: str(calls)}
    if model:
        env[research.REAL_MODEL] = model

    first = _process(
        data_dir, run_id, env={**env, "LITTLE_CRASH_AFTER_CALL": str(CRASH_AFTER_CALL)}
    )
    if first.returncode != -9:
        raise little.LittleError(
            f"the demo's first process should have been killed, it exited {first.returncode}: "
            f"{first.stderr.strip()[-500:]}"
        )
    with little.local_world(data_dir) as world:
        crashed = replay_run(world, run_id)
    console.print(
        f"process 1 ran workflow [bold]research[/] as {run_id} and was killed with SIGKILL "
        f"(exit -9) after {crashed.state.last_seq + 1} events: the model had answered turn 2, "
        "but the answer never reached the log."
    )
    plan = Table(title="what process 2 finds in the log")
    for col in ("step", "status", "on resume"):
        plan.add_column(col)
    for step in crashed.steps:
        plan.add_row(
            step.step_path,
            step.status,
            "skip (output from the log)" if not step.should_run else "run",
        )
    console.print(plan)
    calls_table = Table(title="agent session calls of the step in flight")
    for col in ("call", "status in log", "on resume"):
        calls_table.add_column(col)
    for session in crashed.state.sessions:
        for t in session.turns:
            calls_table.add_row(
                f"model turn {t.turn}",
                t.status,
                "served from the log" if t.status == "responded" else "invoke again",
            )
        for c in session.tool_calls:
            calls_table.add_row(
                f"tool {c.tool} ({c.call_id})",
                c.status,
                "served from the log" if c.status == "succeeded" else "invoke again",
            )
    console.print(calls_table)

    second = _process(data_dir, run_id, "resume", env=env)
    if second.returncode != 0:
        raise little.LittleError(f"the resume failed: {second.stderr.strip()[-500:]}")
    with little.local_world(data_dir) as world:
        final = replay_run(world, run_id)
    console.print(
        f"process 2 claimed the run (epoch {final.state.epoch}) and finished it: "
        f"status [bold]{final.state.status}[/]."
    )
    if not model:
        turns = count_invocations(calls / "model.jsonl")
        again = [t for t, n in sorted(turns.items()) if n > 1]
        console.print(
            "real model invocations per turn: "
            + ", ".join(f"turn {t}: {n}" for t, n in sorted(turns.items()))
            + f"  -> only turn {', '.join(map(str, again))} ran again"
        )
        tools = [json.loads(line) for line in (calls / "tools.jsonl").read_text().splitlines()]
        # a turn's calls run concurrently, so the file has them in the order they finished;
        # listed in the order the model asked for them ("<turn>:c<n>")
        tools.sort(key=lambda t: tuple(int(part.lstrip("c")) for part in t["call_id"].split(":")))
        console.print(
            "real tool invocations: "
            + ", ".join(f"{t['tool']}({t['call_id']})" for t in tools)
            + " (each once)"
        )
    from little.cli._shell import print_report

    print_report(final)
    _replay_edited(data_dir, final, console, counted=not model)
    return run_id


def _replay_edited(
    data_dir: Path, original: ReplayResult, console: Console, *, counted: bool
) -> None:
    """Edit the last stage and re-run against the finished run: the agent call is answered
    from its record, so the re-run calls no model and no tool and pays nothing for them."""
    calls = data_dir / "calls"
    run_id = original.run_id

    def invocations() -> int:
        if not counted:
            return 0
        return sum(count_invocations(calls / "model.jsonl").values()) + len(
            (calls / "tools.jsonl").read_text().splitlines()
        )

    before = invocations()
    with little.local_world(data_dir) as world:
        result = asyncio.run(
            little.runtime.run(
                world, research.RESEARCH_BRIEF, {"topic": "Kafka"}, replay_from=run_id
            )
        )
        replayed = replay_run(world, result.run_id)
    from little.replay import replay_envelope
    from little.report import replay_line

    section = replay_line(replay_envelope(replayed.state))
    if result.status != "completed" or section is None:
        raise little.LittleError(f"the demo's replay did not complete: {result.error}")
    usage = replayed.state.usage
    console.print(
        f"\nthen the last stage (write) was edited and the workflow re-run as {result.run_id} "
        f"with replay_from={run_id}: {section}."
    )
    from little.report import dollars

    paid, avoided = original.state.usage, replayed.state.avoided_usage
    console.print(
        f"model and tool invocations during the re-run: {invocations() - before}; billed: "
        f"{usage.calls} model call(s), {dollars(usage)}; avoided: {avoided.calls} model "
        f"call(s), {dollars(avoided)} (the first run paid {paid.calls} model call(s), "
        f"{dollars(paid)}). Output: {result.output!r}"
    )


if __name__ == "__main__":
    child(sys.argv[1:])
