"""``little demo --framework pydantic-ai | openai-agents``: a framework agent crashed for real
and resumed.

A child process runs the framework's example workflow on the embedded world
(``little.examples.pydantic_ai_research:brief``, a Pydantic AI agent under ``durable`` over a
``FunctionModel``; ``little.examples.openai_agents_support:support``, an Agents SDK agent under
``LittleRunner`` over the real ``openai`` client on a mock transport: no network either way) and
is killed with SIGKILL right after the model answered its second request, before the answer
reached the log. A second process resumes the run: the agent's first request and its tool call
are served from the log, only the request in flight is made again. The invocation files count
what really ran. Last, the agent's follow-up prompt is edited and the workflow re-run against
the finished run: the first agent call is answered from its record, the edited one runs fresh.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

import little
from little.replay import ReplayResult, replay_run


@dataclass(frozen=True)
class _Example:
    module: str
    workflow: str
    edited: str
    """The workflow with its follow-up prompt edited (unregistered), for the replay."""
    input: str
    what: str
    calls: str
    """The prefix of its invocation files (``<calls>-model.jsonl``, ``<calls>-tool.jsonl``)."""


FRAMEWORKS = {
    "pydantic-ai": _Example(
        "little.examples.pydantic_ai_research",
        "brief",
        "BRIEF_EDITED",
        "Kafka",
        "a Pydantic AI agent (under little.integrations.pydantic_ai.durable)",
        "pyai",
    ),
    "openai-agents": _Example(
        "little.examples.openai_agents_support",
        "support",
        "SUPPORT_EDITED",
        "Where is my order A1?",
        "an OpenAI Agents SDK agent (under little.integrations.openai_agents.LittleRunner)",
        "oa",
    ),
}
"""The frameworks ``little demo --framework`` knows, and the example each one runs."""

CRASH_AFTER_CALL = 2
"""Invocations in order: model request 1, search, model request 2, ...: die after request 2."""

_CALLS_DIR = "LITTLE_EXAMPLE_CALLS_DIR"


def _module(example: _Example) -> Any:
    return import_module(example.module)


def child(argv: list[str]) -> None:
    """``python -m little.cli._framework_demo <framework> <data_dir> <run_id> [resume | replay
    <source>]``: one process of the demo (``replay`` runs the edited workflow against run
    ``source``)."""
    from little.logging_setup import configure

    configure()
    example = FRAMEWORKS[argv[0]]
    module = _module(example)
    data_dir, run_id = argv[1], argv[2]
    with little.local_world(data_dir) as world:
        mode = argv[3] if len(argv) > 3 else "run"
        if mode == "resume":
            result = asyncio.run(little.runtime.resume(world, run_id))
        elif mode == "replay":
            wf = getattr(module, example.edited)
            result = asyncio.run(
                little.runtime.run(world, wf, example.input, run_id=run_id, replay_from=argv[4])
            )
        else:
            wf = getattr(module, example.workflow)
            result = asyncio.run(little.runtime.run(world, wf, example.input, run_id=run_id))
    print(json.dumps({"status": result.status, "error": result.error, "output": result.output}))


def _process(
    framework: str, data_dir: Path, run_id: str, *extra: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    argv = [framework, str(data_dir), run_id, *extra]
    done = subprocess.run(
        [sys.executable, "-m", "little.cli._framework_demo", *argv],
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
    example = FRAMEWORKS[framework]
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    calls = data_dir / "calls"
    run_id = f"run_demo_{uuid.uuid4().hex[:8]}"
    env = {_CALLS_DIR: str(calls)}

    crash = {**env, "LITTLE_CRASH_AFTER_CALL": str(CRASH_AFTER_CALL)}
    code = _process(framework, data_dir, run_id, env=crash).returncode
    if code != -9:
        raise little.LittleError(
            f"the demo's first process should have been killed, it exited {code}"
        )
    with little.local_world(data_dir) as world:
        crashed = replay_run(world, run_id)
    console.print(
        f"process 1 ran {example.what}, workflow [bold]{crashed.state.workflow}[/], as {run_id} "
        f"and was killed with SIGKILL (exit -9) after {crashed.state.last_seq + 1} events: the "
        "model had answered request 2, but the answer never reached the log."
    )
    _print_log_table(crashed, console)

    if _process(framework, data_dir, run_id, "resume", env=env).returncode != 0:
        raise little.LittleError("the demo's resume was killed")
    with little.local_world(data_dir) as world:
        final = replay_run(world, run_id)
    console.print(
        f"process 2 claimed the run (epoch {final.state.epoch}) and finished it: "
        f"status [bold]{final.state.status}[/]."
    )
    requests = [int(str(c["n"])) for c in _lines(calls / f"{example.calls}-model.jsonl")]
    order = sorted(set(requests), key=requests.index)
    counts = {n: requests.count(n) for n in order}
    again = [i + 1 for i, n in enumerate(order) if counts[n] > 1]
    console.print(
        "real model requests: "
        + ", ".join(f"request {i + 1}: {counts[n]}" for i, n in enumerate(order))
        + f"  -> only request {', '.join(map(str, again)) or 'none'} ran again"
    )
    tools = [f"{c['tool']}({str(c['q'])!r})" for c in _lines(calls / f"{example.calls}-tool.jsonl")]
    console.print(
        "real tool invocations: "
        + ", ".join(tools)
        + (" (once)" if len(tools) == 1 else f" ({len(tools)} in all)")
    )
    from little.cli._shell import print_report

    print_report(final)
    _replay_edited(framework, data_dir, final, console, env)
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
    framework: str, data_dir: Path, original: ReplayResult, console: Console, env: dict[str, str]
) -> None:
    """Edit the follow-up prompt and re-run against the finished run: the first agent call is
    answered from its record; the edited one misses and asks the model."""
    from little.replay import replay_envelope
    from little.report import dollars, replay_line

    calls = Path(env[_CALLS_DIR])
    example = FRAMEWORKS[framework]
    module = _module(example)

    def invocations() -> tuple[int, int]:
        return (
            len(_lines(calls / f"{example.calls}-model.jsonl")),
            len(_lines(calls / f"{example.calls}-tool.jsonl")),
        )

    before = invocations()
    run_id = f"run_demo_{uuid.uuid4().hex[:8]}"
    done = _process(framework, data_dir, run_id, "replay", original.run_id, env=env)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    with little.local_world(data_dir) as world:
        replayed = replay_run(world, run_id)
    section = replay_line(replay_envelope(replayed.state))
    if result["status"] != "completed" or section is None:
        raise little.LittleError(f"the demo's replay did not complete: {result['error']}")
    after = invocations()
    avoided = replayed.state.avoided_usage
    console.print(
        f"\nthen the follow-up prompt was edited ({module.FOLLOW_UP!r} -> "
        f"{module.EDITED_FOLLOW_UP!r}) and the workflow re-run as "
        f"{run_id} with replay_from={original.run_id}: {section}."
    )
    console.print(
        f"during the re-run: {after[0] - before[0]} model request(s) and "
        f"{after[1] - before[1]} tool invocation(s) made; avoided: {avoided.calls} model "
        f"call(s), {dollars(avoided)}. Output: {result['output']!r}"
    )


if __name__ == "__main__":
    child(sys.argv[1:])
