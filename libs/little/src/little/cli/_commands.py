"""``little submit / resume / cancel / status``: commands for the resume coordinator
(``little resume`` on the embedded world resumes in this process, ``little.cli._local``).

``submit``, ``resume`` and ``cancel`` publish a command to the commands topic on Kafka (keyed by
run id, so it reaches the coordinator that owns the run); ``status`` lists runs from the
projector's HTTP API. Failures are one line and exit 1, like every ``little`` command.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from little import tracing
from little.cli._local import (
    AsJson,
    Detach,
    MaxAgentCalls,
    MaxTokens,
    ReplayFrom,
    ReplayModeOption,
    Workflows,
    replay_mode_of,
    resume_here,
)
from little.cli._shell import Bootstrap, DataDir, app, console
from little.commands import Budgets, CancelRun, Command, ResumeRun, StartRun
from little.errors import ConfigurationError, LittleError
from little.settings import LittleSettings

if TYPE_CHECKING:
    from little.replay import ReplayEnvelope

DEFAULT_PROJECTOR_URL = "http://127.0.0.1:8080"


class CommandSettings(LittleSettings):
    """``LITTLE_PROJECTOR_URL`` and ``LITTLE_API_TOKEN``, besides the world's own settings
    (``LITTLE_COMMANDS_TOPIC`` among them)."""

    projector_url: str | None = None
    """The projector's HTTP API, which ``little status`` asks [default:
    ``http://127.0.0.1:8080``]."""
    api_token: str | None = None
    """The bearer token ``little status`` sends to the projector."""


CommandsTopic = Annotated[
    str | None,
    typer.Option("--commands-topic", help="Commands topic [env LITTLE_COMMANDS_TOPIC]"),
]


def _bootstrap(bootstrap: str | None, command: str) -> str:
    found = bootstrap or CommandSettings().kafka_bootstrap
    if not found:
        raise ConfigurationError(
            f"{command} goes to the resume coordinator on Kafka: pass "
            "--bootstrap-servers or set LITTLE_KAFKA_BOOTSTRAP"
        )
    return found


def _publish(
    bootstrap: str | None, topic: str | None, command: Command, span: str | None = None
) -> None:
    """Send one command, in a span of its own (``span``, else ``little.<command type>``) whose
    W3C context the command's record carries: the execution it causes is a child of it."""
    from little.commands import CommandPublisher

    settings = CommandSettings()
    bootstrap = _bootstrap(bootstrap, command.command_type)
    with (
        tracing.span(
            span or f"little.{command.command_type}",
            {"little.run_id": command.run_id, "little.command": command.command_type},
            kind="producer",
        ),
        CommandPublisher(bootstrap, topic=topic or settings.commands_topic) as publisher,
    ):
        publisher.send([command])


def _state(bootstrap: str, run_id: str) -> tuple[Any, str]:
    """The run as its log has it now, and the world's description (for messages)."""
    from little.replay import fold_run

    with CommandSettings().world(bootstrap_servers=bootstrap) as world:
        state, _, _ = fold_run(world, run_id)
        return state, world.description


def _live_run(
    bootstrap: str | None, run_id: str, command: str, *, may_be_on_its_way: bool = False
) -> None:
    """Refuse a ResumeRun or CancelRun the coordinator could only drop: a run that does not
    exist or has ended."""
    state, where = _state(_bootstrap(bootstrap, command), run_id)
    if state.last_position is None:
        hint = (
            " (if its StartRun is on its way, wait for it, or pass --force)"
            if may_be_on_its_way
            else ""
        )
        raise ConfigurationError(
            f"run {run_id} has no events in {where}: nothing to {command}{hint}"
        )
    if state.terminal:
        raise ConfigurationError(
            f"run {run_id} has already ended ({state.status}) in {where}: nothing to {command}"
        )


@app.command()
def submit(
    workflow: Annotated[str, typer.Argument(help="A workflow registered with the coordinator.")],
    input: Annotated[str, typer.Option("--input", help="The workflow's input, as JSON.")] = "null",
    run_id: Annotated[
        str | None, typer.Option("--run-id", help="Run id [default: run_<random hex>]")
    ] = None,
    max_agent_calls: MaxAgentCalls = None,
    max_tokens: MaxTokens = None,
    replay_from: ReplayFrom = None,
    replay_mode: ReplayModeOption = None,
    bootstrap_servers: Bootstrap = None,
    commands_topic: CommandsTopic = None,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="Wait until the run is claimed and started (or ends) and print its status; "
            "exit 1 if it failed, was cancelled, was parked or nothing took it up in --timeout.",
        ),
    ] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds --wait waits.")] = 60.0,
) -> None:
    """Start a run on the resume coordinator (StartRun); prints the run id."""
    try:
        value: Any = json.loads(input)
    except ValueError as exc:
        raise ConfigurationError(f"--input is not JSON: {exc}") from exc
    run_id = run_id or f"run_{uuid.uuid4().hex}"
    budgets = Budgets(max_agent_calls=max_agent_calls, max_tokens=max_tokens)
    mode = replay_mode_of(replay_mode, replay_from)
    start = StartRun.of(
        run_id,
        workflow,
        value,
        budgets=budgets,
        replay_from=replay_from,
        replay_mode=mode,
    )
    _publish(bootstrap_servers, commands_topic, start, f"little.submit {workflow}")
    print(run_id)
    if wait:
        _wait_started(_bootstrap(bootstrap_servers, "StartRun"), run_id, timeout)


def _wait_started(bootstrap: str, run_id: str, timeout: float) -> None:
    import time

    from little.replay import fold_run

    deadline = time.monotonic() + timeout
    with CommandSettings().world(bootstrap_servers=bootstrap) as world:
        where = world.description
        while True:
            state, _, _ = fold_run(world, run_id)
            if state.terminal or state.parked_reason is not None:
                break
            if state.workflow is not None:
                console.print(f"{run_id}: {state.status} (claimed by {state.owner})")
                return
            if time.monotonic() > deadline:
                raise LittleError(
                    f"run {run_id}: no coordinator started it within {timeout:.0f}s in {where} "
                    "(is a little-resume-coordinator running on this commands topic?)"
                )
            time.sleep(0.25)
    if state.parked_reason is not None:
        raise LittleError(f"run {run_id} is parked: {state.parked_reason}")
    if state.status != "completed":
        raise LittleError(f"run {run_id} {state.status}: {state.error}")
    console.print(f"{run_id}: completed")


@app.command()
def resume(
    run_id: Annotated[str, typer.Argument(help="The run to resume from its log.")],
    bootstrap_servers: Bootstrap = None,
    commands_topic: CommandsTopic = None,
    data_dir: DataDir = None,
    workflows: Workflows = None,
    as_json: AsJson = False,
    detach: Detach = False,
) -> None:
    """Resume a run: on Kafka, ask the coordinator that owns it (ResumeRun); on the embedded
    world, resume it in this process (waking it when it waits, unless --detach) and print its
    outcome."""
    if not (bootstrap_servers or CommandSettings().kafka_bootstrap):
        resume_here(run_id, workflows, data_dir, as_json, detach)
        return
    _live_run(bootstrap_servers, run_id, "resume")
    _publish(bootstrap_servers, commands_topic, ResumeRun(run_id=run_id))
    print(run_id)


@app.command()
def cancel(
    run_id: Annotated[str, typer.Argument(help="The run to cancel.")],
    reason: Annotated[str, typer.Option("--reason", help="Recorded on RunCancelled.")] = "",
    bootstrap_servers: Bootstrap = None,
    commands_topic: CommandsTopic = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Send it even if the run has no events yet (its StartRun is queued)."
        ),
    ] = False,
) -> None:
    """Cancel a run (CancelRun): it stops at its next event boundary and gets RunCancelled."""
    if not force:
        _live_run(bootstrap_servers, run_id, "cancel", may_be_on_its_way=True)
    _publish(bootstrap_servers, commands_topic, CancelRun(run_id=run_id, reason=reason))
    print(run_id)


@app.command()
def status(
    projector_url: Annotated[
        str | None,
        typer.Option(
            "--projector-url",
            help=f"The projector's HTTP API [env LITTLE_PROJECTOR_URL; default {DEFAULT_PROJECTOR_URL}]",
        ),
    ] = None,
    status_filter: Annotated[
        str | None,
        typer.Option("--status", help="Only runs in this status (running, completed, ...)."),
    ] = None,
    workflow: Annotated[str | None, typer.Option("--workflow", help="Only this workflow.")] = None,
    limit: Annotated[int, typer.Option("--limit", help="At most this many runs.")] = 100,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait.")] = 10.0,
) -> None:
    """List runs, newest first, from the projector's read model (GET /runs).

    A replay run shows ``replayed=N`` (agent calls served from its recorded run) and a line
    ``N/M agent call(s) reused a recorded run (not fresh evidence)``."""
    settings = CommandSettings()
    base = (projector_url or settings.projector_url or DEFAULT_PROJECTOR_URL).rstrip("/")
    query = {"limit": str(limit)}
    if status_filter:
        query["status"] = status_filter
    if workflow:
        query["workflow"] = workflow
    body = _get_json(base, "/runs?" + urllib.parse.urlencode(query), settings.api_token, timeout)
    runs = body.get("runs") if isinstance(body, dict) else None
    if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
        raise LittleError(
            f'projector at {base}: GET /runs did not return a page ({{"runs": [...]}})'
        )
    if as_json:
        for r in runs:
            print(json.dumps(r))
        return
    from rich.text import Text

    from little.report import replay_line

    table = Table(title=f"runs at {base}" + (f" ({status_filter})" if status_filter else ""))
    table.add_column("run", overflow="fold")  # a run id is copied from here: never cut short
    for col in ("workflow", "status", "updated"):
        table.add_column(col)
    table.add_column("replay", no_wrap=True)
    table.add_column("error / parked")
    lines: list[str] = []
    for r in runs:
        replay = _replay_of(base, r)
        replayed = ""
        if replay is not None and replay.is_replay:
            replayed = f"replayed={replay.replayed_calls}"
            lines.append(f"{r.get('run_id', '')}: {replay_line(replay)}")
        table.add_row(  # Text: ids, reasons and errors are not rich markup
            Text(str(r.get("run_id", ""))),
            Text(str(r.get("workflow") or "")),
            Text(str(r.get("status", ""))),
            Text(str(r.get("updated_at") or "")),
            Text(replayed),
            Text(str(r.get("detail") or "")),
        )
    console.print(table)
    for line in lines:  # recorded evidence, not fresh evidence: said in words too
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    if body.get("next_cursor"):
        console.print(f"(more runs than --limit {limit})")


def _replay_of(base: str, row: dict[str, Any]) -> ReplayEnvelope | None:
    """The row's replay envelope (None from a projector that does not send one)."""
    from pydantic import ValidationError

    from little.replay import ReplayEnvelope

    raw = row.get("replay")
    if raw is None:
        return None
    try:
        return ReplayEnvelope.model_validate(raw)
    except ValidationError as exc:
        raise LittleError(
            f"projector at {base}: run {row.get('run_id')!r} in GET /runs has an invalid "
            f"replay envelope ({exc.error_count()} error(s), first: {exc.errors()[0]['msg']})"
        ) from exc


def _get_json(base: str, path: str, token: str | None, timeout: float) -> Any:
    request = urllib.request.Request(base + path, headers={"Accept": "application/json"})
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:200].decode(errors="replace").strip()
        raise LittleError(
            f"projector at {base} answered {exc.code} to GET {path}: {detail}"
        ) from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise LittleError(
            f"projector at {base} is unreachable ({reason}): start little-projector or pass "
            "--projector-url / LITTLE_PROJECTOR_URL"
        ) from exc
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise LittleError(f"projector at {base}: GET {path} did not return JSON") from exc
