"""``little run / runs`` and the in-process ``little resume``: a world from the command line,
with no service running.

``little run MODULE:WORKFLOW`` starts (or continues) a run in this process, on the embedded
world by default or on Kafka; ``little resume RUN`` on the embedded world resumes the run here
(on Kafka it asks the coordinator, ``little.cli._commands``); ``little runs`` lists the runs
of a world from its log, without a projector.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import sys
from collections.abc import Awaitable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from rich.table import Table

from little.cli._shell import Bootstrap, DataDir, app, console, open_world, quiet
from little.errors import ConfigurationError, LittleError

if TYPE_CHECKING:
    from little._world import World
    from little.replay import MaterializedRunState
    from little.runtime import RunResult, Workflow

Workflows = Annotated[
    str | None,
    typer.Option(
        "--workflows",
        help="module[:attr],... to import first, registering their workflows "
        "[env LITTLE_WORKFLOWS]",
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]
Detach = Annotated[
    bool,
    typer.Option(
        "--detach",
        help="Return once the run waits (a timer, a signal, an approval) instead of waking it "
        "here; `little resume` or `little worker` takes it up.",
    ),
]
ReplayFrom = Annotated[
    str | None,
    typer.Option(
        "--replay-from",
        help="A recorded run of this workflow: agent calls that match it are answered "
        "from its record, up to the first that does not (you pay for that call and what "
        "comes after it).",
    ),
]


class ReplayMode(StrEnum):
    """``--replay-mode``: ``run(..., replay_mode=)``."""

    repairable = "repairable"
    strict = "strict"


ReplayModeOption = Annotated[
    ReplayMode | None,
    typer.Option(
        "--replay-mode",
        help="With --replay-from: repairable (reuse the unchanged prefix of an edited "
        "workflow) or strict (any change of its source or version refuses reuse, and the "
        "run executes fresh) [default: repairable].",
    ),
]


def replay_mode_of(
    mode: ReplayMode | None, replay_from: str | None
) -> Literal["repairable", "strict"] | None:
    """The mode's value; a mode without a run to replay is a usage error."""
    if mode is not None and replay_from is None:
        raise ConfigurationError("--replay-mode needs --replay-from (the run to replay)")
    if mode is None:
        return None
    return "strict" if mode is ReplayMode.strict else "repairable"


MaxAgentCalls = Annotated[
    int | None,
    typer.Option("--max-agent-calls", help="Cap on fresh agent calls (agent.run exchanges)."),
]
MaxTokens = Annotated[int | None, typer.Option("--max-tokens", help="Cap on tokens.")]


def load(workflows: str | None) -> None:
    """Import ``--workflows`` (or ``LITTLE_WORKFLOWS``) and the ``little.workflows`` entry
    points, with the current directory importable (as ``python -m`` has it)."""
    from little.runtime import load_workflows

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    spec = workflows if workflows is not None else os.environ.get("LITTLE_WORKFLOWS", "")
    load_workflows(spec, source="--workflows" if workflows is not None else "LITTLE_WORKFLOWS")


def resolve(target: str, workflows: str | None) -> Workflow[..., Any]:
    """``module:attr`` (a ``Workflow`` object, or the name of one the module registers) or
    the name of a registered workflow."""
    from little.runtime import Workflow, lookup

    load(workflows)
    module_name, colon, attr = target.partition(":")
    if not colon:
        try:
            return lookup(target)
        except LittleError as exc:
            raise ConfigurationError(
                f"{exc}: name it as MODULE:WORKFLOW, or import its module with --workflows"
            ) from None
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ConfigurationError(
            f"{target}: cannot import {module_name}: {type(exc).__name__}: {exc}"
        ) from exc
    found = getattr(module, attr, None)
    if isinstance(found, Workflow):
        return found
    if found is None:
        try:
            return lookup(attr)
        except LittleError:
            raise ConfigurationError(
                f"{target}: module {module_name} has no attribute {attr} and registers no "
                f"workflow named {attr}"
            ) from None
    raise ConfigurationError(
        f"{target}: {module_name}.{attr} is a {type(found).__name__}, not a workflow "
        "(decorate it with @little.runtime.workflow)"
    )


def _json_arg(text: str, option: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ConfigurationError(f"{option} is not JSON: {exc}") from exc


def finish(world: World, result: RunResult, as_json: bool) -> None:
    """Print what a run in this process came to; exit 1 (one line) unless it completed."""
    from little.replay import fold_run, replay_envelope
    from little.report import dollars, replay_line

    state, _, _ = fold_run(world, result.run_id)
    replay = result.replay if result.replay is not None else replay_envelope(state)
    if as_json:
        print(
            json.dumps(
                {
                    "run_id": result.run_id,
                    "status": result.status,
                    "output": result.output,
                    "error": result.error,
                    "served_calls": result.served_calls,
                    "reinvoked_calls": result.reinvoked_calls,
                    "replay": replay.model_dump(mode="json"),
                    "wake_at": None if result.wake_at is None else result.wake_at.isoformat(),
                    "waiting_for": list(result.waiting_for),
                },
                default=str,
            )
        )
    else:
        console.print(f"run {result.run_id}: [bold]{result.status}[/]")
        if result.status == "completed":
            print(json.dumps(result.output, indent=2, default=str))
        line = replay_line(replay)
        if line is not None:
            console.print(line, markup=False, highlight=False, soft_wrap=True)
        console.print(
            f"billed: {state.usage.calls} model call(s), {dollars(state.usage)}; avoided: "
            f"{state.avoided_usage.calls} model call(s), {dollars(state.avoided_usage)}"
        )
    if result.status == "waiting":
        if as_json:
            return  # (the JSON says it: status, wake_at, waiting_for)
        due = f" (due {result.wake_at.isoformat()})" if result.wake_at is not None else ""
        console.print(
            f"waiting for {', '.join(result.waiting_for)}{due}: `little resume "
            f"{result.run_id}` or `little worker` wakes it",
            markup=False,
        )
        return
    if result.status != "completed":
        raise LittleError(f"run {result.run_id} {result.status}: {result.error or ''}".rstrip())


@app.command("run")
def run_command(
    target: Annotated[
        str,
        typer.Argument(
            help="MODULE:WORKFLOW (a module importable from here and its workflow), or the "
            "name of a workflow --workflows registers."
        ),
    ],
    input: Annotated[str, typer.Option("--input", help="The workflow's input, as JSON.")] = "null",
    run_id: Annotated[
        str | None,
        typer.Option(
            "--run-id", help="Run id [default: a new one]; a run that exists is continued."
        ),
    ] = None,
    replay_from: ReplayFrom = None,
    replay_mode: ReplayModeOption = None,
    max_agent_calls: MaxAgentCalls = None,
    max_tokens: MaxTokens = None,
    workflows: Workflows = None,
    data_dir: DataDir = None,
    bootstrap_servers: Bootstrap = None,
    as_json: AsJson = False,
    detach: Detach = False,
) -> None:
    """Run a workflow in this process (embedded world by default) and print its outcome; a
    run that waits is woken here when it can go on (unless --detach)."""
    from little.runtime import run

    mode = replay_mode_of(replay_mode, replay_from)
    wf = resolve(target, workflows)
    value = _json_arg(input, "--input")
    quiet()
    with open_world(data_dir, bootstrap_servers) as world:
        started = run(
            world,
            wf,
            value,
            run_id=run_id,
            max_agent_calls=max_agent_calls,
            max_tokens=max_tokens,
            replay_from=replay_from,
            replay_mode=mode or "repairable",
        )
        finish(world, asyncio.run(_following(world, started, wf, detach)), as_json)


async def _following(
    world: World, started: Awaitable[RunResult], wf: Workflow[..., Any] | None, detach: bool
) -> RunResult:
    """The run's result, once it ended; with ``detach``, once it ends or waits."""
    from little.runtime import follow

    result = await started
    if result.status != "waiting" or detach:
        return result
    print(  # progress, on stderr: stdout is the outcome (JSON with --json)
        f"run {result.run_id} waits for {', '.join(result.waiting_for)}: waking it here when it "
        "can go on (Ctrl-C leaves it waiting, for `little resume` or `little worker`)",
        file=sys.stderr,
        flush=True,
    )
    return await follow(world, result.run_id, wf)


def resume_here(
    run_id: str,
    workflows: str | None,
    data_dir: Path | None,
    as_json: bool = False,
    detach: bool = False,
) -> None:
    """``little resume`` on the embedded world: resume the run in this process."""
    from little.replay import fold_run
    from little.runtime import lookup, resume

    load(workflows)
    quiet()
    with open_world(data_dir, None) as world:
        state, _, _ = fold_run(world, run_id)
        if state.last_position is None:
            raise ConfigurationError(f"run {run_id} has no events in {world.description}")
        if state.terminal:
            raise ConfigurationError(
                f"run {run_id} has already ended ({state.status}) in {world.description}: "
                "nothing to resume"
            )
        workflow = None
        if state.workflow is not None:
            # the version the run started on (several may be registered)
            workflow = lookup(state.workflow, state.workflow_version, run_id=run_id)
        result = asyncio.run(_following(world, resume(world, run_id, workflow), workflow, detach))
        finish(world, result, as_json)


# -- little runs ---------------------------------------------------------------------------


def run_ids(world: World) -> list[str]:
    """Every run id of the world's log (``World.run_ids``); folding the runs then reads each
    run again, from its snapshot if it has one."""
    return world.run_ids()


def _row(state: MaterializedRunState) -> dict[str, Any]:
    from little.replay import replay_envelope
    from little.report import waiting_line

    replay = replay_envelope(state)
    return {
        "run_id": state.run_id,
        "workflow": state.workflow,
        "workflow_version": state.workflow_version,
        "status": state.status,
        "agent_calls": replay.agent_calls,
        "replayed_calls": replay.replayed_calls,
        "billed_usd": None if state.usage.cost_usd is None else str(state.usage.cost_usd),
        "avoided_usd": (
            None if state.avoided_usage.cost_usd is None else str(state.avoided_usage.cost_usd)
        ),
        "replay_source_run_id": state.replay_source_run_id,
        "replay": replay.model_dump(mode="json"),
        "detail": state.parked_reason or state.error or waiting_line(state),
    }


@app.command()
def runs(
    data_dir: DataDir = None,
    bootstrap_servers: Bootstrap = None,
    status_filter: Annotated[
        str | None,
        typer.Option("--status", help="Only runs in this status (running, completed, ...)."),
    ] = None,
    workflow: Annotated[str | None, typer.Option("--workflow", help="Only this workflow.")] = None,
    limit: Annotated[int, typer.Option("--limit", help="At most this many runs.")] = 100,
    as_json: AsJson = False,
) -> None:
    """List the runs of a world from its log (no projector needed): status, workflow and the
    version it started on, billed and avoided dollars, and how many agent calls were
    replayed from a recorded run."""
    from little.replay import fold_run
    from little.report import dollars

    rows: list[dict[str, Any]] = []
    with open_world(data_dir, bootstrap_servers) as world:
        where = world.description
        for run_id in run_ids(world):
            try:
                state, _, _ = fold_run(world, run_id)
            except LittleError as exc:  # one broken run does not hide the others
                if status_filter in (None, "unreadable") and workflow is None:
                    rows.append({"run_id": run_id, "status": "unreadable", "detail": str(exc)})
                continue
            if status_filter and state.status != status_filter:
                continue
            if workflow and state.workflow != workflow:
                continue
            row = _row(state)
            row["_billed"], row["_avoided"] = dollars(state.usage), dollars(state.avoided_usage)
            rows.append(row)
    more = len(rows) > limit
    rows = rows[:limit]
    if as_json:
        for row in rows:
            print(json.dumps({k: v for k, v in row.items() if not k.startswith("_")}))
        return
    table = Table(title=f"runs in {where}" + (f" ({status_filter})" if status_filter else ""))
    for col in ("run", "workflow", "status", "agent calls", "$ billed", "$ avoided", "detail"):
        table.add_column(col)
    for row in rows:
        calls = row.get("agent_calls")
        replayed = row.get("replayed_calls") or 0
        table.add_row(
            row["run_id"],
            str(row.get("workflow") or "")
            + (f" v{row['workflow_version']}" if row.get("workflow_version") else ""),
            row["status"],
            "" if calls is None else f"{calls}" + (f" (replayed={replayed})" if replayed else ""),
            str(row.get("_billed", "")),
            str(row.get("_avoided", "")),
            str(row.get("detail") or ""),
        )
    console.print(table)
    if more:
        console.print(f"(more runs than --limit {limit})")
