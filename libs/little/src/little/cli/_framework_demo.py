"""``little demo --framework pydantic-ai``: a framework agent crashed for real and resumed.

A child process runs ``little.examples.pydantic_ai_research:brief`` (a Pydantic AI agent under
``durable``, its model a ``FunctionModel``: no network) on the embedded world and is killed with
SIGKILL right after the model answered its second request, before the answer reached the log.
A second process resumes the run: the agent's first request and its search are served from the
log, only the request in flight is made again. The invocation files count what really ran.
Last, the agent's follow-up prompt is edited and the workflow re-run against the finished run:
the first agent call is answered from its record, the edited one is asked fresh.
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
from little.replay import ReplayResult, replay_run

FRAMEWORKS = ("pydantic-ai",)
"""The frameworks ``little demo --framework`` knows."""

CRASH_AFTER_CALL = 2
"""Invocations in order: model request 1, search, model request 2, ...: die after request 2."""

_CALLS_DIR = "LITTLE_EXAMPLE_CALLS_DIR"


def child(argv: list[str]) -> None:
    """``python -m little.cli._framework_demo <data_dir> <run_id> [resume | replay <source>]``:
    one process of the demo (``replay`` runs the edited workflow against run ``source``)."""
    from little.examples import pydantic_ai_research
    from little.logging_setup import configure

    configure()
    data_dir, run_id = argv[0], argv[1]
    with little.local_world(data_dir) as world:
        mode = argv[2] if len(argv) > 2 else "run"
        if mode == "resume":
            result = asyncio.run(little.runtime.resume(world, run_id))
        elif mode == "replay":
            wf = pydantic_ai_research.BRIEF_EDITED
            result = asyncio.run(
                little.runtime.run(world, wf, "Kafka", run_id=run_id, replay_from=argv[3])
            )
        else:
            wf = pydantic_ai_research.brief
            result = asyncio.run(little.runtime.run(world, wf, "Kafka", run_id=run_id))
    print(json.dumps({"status": result.status, "error": result.error, "output": result.output}))


def _process(
    data_dir: Path, run_id: str, *extra: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "little.cli._framework_demo", str(data_dir), run_id, *extra],
        capture_output=True,
        text=True,
        env={**os.environ, "LITTLE_LOG_LEVEL": "warning", **env},
        timeout=300,
    )
    if done.returncode not in (0, -9):
        raise little.LittleError(
            f"a demo process exited {done.returncode}: {done.stderr.strip()[-500:]}"
        )
    return done


def _lines(path: Path) -> list[dict[str, object]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def run_framework_demo(data_dir: Path, console: Console, framework: str) -> str:
    if framework not in FRAMEWORKS:
        raise little.ConfigurationError(
            f"little demo --framework: unknown framework {framework!r} "
            f"(known: {', '.join(FRAMEWORKS)})"
        )
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    calls = data_dir / "calls"
    run_id = f"run_demo_{uuid.uuid4().hex[:8]}"
    env = {_CALLS_DIR: str(calls)}

    crash = {**env, "LITTLE_CRASH_AFTER_CALL": str(CRASH_AFTER_CALL)}
    code = _process(data_dir, run_id, env=crash).returncode
    if code != -9:
        raise little.LittleError(
            f"the demo's first process should have been killed, it exited {code}"
        )
    with little.local_world(data_dir) as world:
        crashed = replay_run(world, run_id)
    console.print(
        f"process 1 ran a Pydantic AI agent (workflow [bold]pydantic_ai_research[/], the agent "
        f"under little.integrations.pydantic_ai.durable) as {run_id} and was killed with SIGKILL "
        f"(exit -9) after {crashed.state.last_seq + 1} events: the model had answered request 2, "
        "but the answer never reached the log."
    )
    _print_log_table(crashed, console)

    if _process(data_dir, run_id, "resume", env=env).returncode != 0:
        raise little.LittleError("the demo's resume was killed")
    with little.local_world(data_dir) as world:
        final = replay_run(world, run_id)
    console.print(
        f"process 2 claimed the run (epoch {final.state.epoch}) and finished it: "
        f"status [bold]{final.state.status}[/]."
    )
    requests = [int(str(c["n"])) for c in _lines(calls / "pyai-model.jsonl")]
    order = sorted(set(requests), key=requests.index)
    counts = {n: requests.count(n) for n in order}
    again = [i + 1 for i, n in enumerate(order) if counts[n] > 1]
    console.print(
        "real model requests: "
        + ", ".join(f"request {i + 1}: {counts[n]}" for i, n in enumerate(order))
        + f"  -> only request {', '.join(map(str, again)) or 'none'} ran again"
    )
    searches = [str(c["q"]) for c in _lines(calls / "pyai-tool.jsonl")]
    console.print(
        "real tool invocations: "
        + ", ".join(f"search({q!r})" for q in searches)
        + (" (once)" if len(searches) == 1 else f" ({len(searches)} times)")
    )
    from little.cli._shell import print_report

    print_report(final)
    _replay_edited(data_dir, final, console, env)
    return run_id


def _print_log_table(crashed: ReplayResult, console: Console) -> None:
    table = Table(title="what process 2 finds in the log")
    for col in ("call", "status in log", "on resume"):
        table.add_column(col)
    for call in crashed.state.agent_calls:
        if call.outcome is None:
            table.add_row(f"agent call {call.ordinal}", "admitted", "run again, its calls:")
        else:
            table.add_row(f"agent call {call.ordinal}", call.outcome, "served from the log")
    for session in crashed.state.sessions:
        rows: list[tuple[int, int, str, str, str]] = []
        for t in session.turns:
            served = "served from the log" if t.status == "responded" else "invoke again"
            rows.append((t.turn, 0, f"  model request {t.turn}", t.status, served))
        for c in session.tool_calls:
            served = "served from the log" if c.status == "succeeded" else "invoke again"
            rows.append((c.turn, 1, f"  tool {c.tool} ({c.call_id})", c.status, served))
        for row in sorted(rows):  # a request, then the tool calls it asked for
            table.add_row(*row[2:])
    console.print(table)


def _replay_edited(
    data_dir: Path, original: ReplayResult, console: Console, env: dict[str, str]
) -> None:
    """Edit the follow-up prompt and re-run against the finished run: the first agent call is
    answered from its record; the edited one misses and asks the model."""
    from little.examples import pydantic_ai_research
    from little.replay import replay_envelope
    from little.report import dollars, replay_line

    calls = Path(env[_CALLS_DIR])

    def invocations() -> tuple[int, int]:
        return len(_lines(calls / "pyai-model.jsonl")), len(_lines(calls / "pyai-tool.jsonl"))

    before = invocations()
    run_id = f"run_demo_{uuid.uuid4().hex[:8]}"
    done = _process(data_dir, run_id, "replay", original.run_id, env=env)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    with little.local_world(data_dir) as world:
        replayed = replay_run(world, run_id)
    section = replay_line(replay_envelope(replayed.state))
    if result["status"] != "completed" or section is None:
        raise little.LittleError(f"the demo's replay did not complete: {result['error']}")
    after = invocations()
    avoided = replayed.state.avoided_usage
    console.print(
        f"\nthen the follow-up prompt was edited ({pydantic_ai_research.FOLLOW_UP!r} -> "
        f"{pydantic_ai_research.EDITED_FOLLOW_UP!r}) and the workflow re-run as "
        f"{run_id} with replay_from={original.run_id}: {section}."
    )
    console.print(
        f"during the re-run: {after[0] - before[0]} model request(s) and "
        f"{after[1] - before[1]} tool invocation(s) made; avoided: {avoided.calls} model "
        f"call(s), {dollars(avoided)}. Output: {result['output']!r}"
    )


if __name__ == "__main__":
    child(sys.argv[1:])
