"""The shell every ``little`` command shares: the typer app, the consoles, the world options.

``--data-dir`` / ``--bootstrap-servers`` name the world (``open_world``); a failure prints one
readable line and exits non-zero (``main``); ``--verbose`` adds the traceback. Commands live in
their own modules (``_app``, ``_local``, ``_commands``, ``_waits``), which import this one;
it never imports them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from little._world import World
from little.errors import LittleError
from little.settings import LittleSettings

app = typer.Typer(
    name="little",
    help="Durable, replayable LLM agent runs on Kafka.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

console = Console(width=None if sys.stdout.isatty() else 120)
err_console = Console(stderr=True)

_state: dict[str, Any] = {"verbose": False}

DataDir = Annotated[
    Path | None,
    typer.Option(
        "--data-dir", help="Embedded world directory [env LITTLE_DATA_DIR; default .little]"
    ),
]
Bootstrap = Annotated[
    str | None,
    typer.Option(
        "--bootstrap-servers", help="Use Kafka at this address [env LITTLE_KAFKA_BOOTSTRAP]"
    ),
]


@app.callback()
def _root(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show tracebacks.")] = False,
) -> None:
    _state["verbose"] = verbose
    from little.logging_setup import configure

    configure(json=False, level=None if verbose else os.environ.get("LITTLE_LOG_LEVEL", "warning"))
    from little.tracing import configure_from_env

    configure_from_env("little")  # traces, where OTEL_* variables ask for them


def open_world(data_dir: Path | None, bootstrap: str | None) -> World:
    """The world the environment names (``LittleSettings``), as the services see it;
    ``--data-dir`` and ``--bootstrap-servers`` win over their variables. ``--data-dir`` names
    a whole world: its artifacts are the ones under it, whatever LITTLE_ARTIFACTS_DIR or
    LITTLE_ARTIFACTS_URL say."""
    settings = LittleSettings()
    if data_dir is not None:
        settings = settings.model_copy(
            update={"data_dir": data_dir, "artifacts_dir": None, "artifacts_url": None}
        )
    return settings.world(bootstrap_servers=bootstrap)


def quiet() -> None:
    """A run's failure is the command's last line: the runtime's warning about it (with a
    traceback) shows only with ``--verbose`` or ``LITTLE_LOG_LEVEL``."""
    from little.logging_setup import configure

    if not _state["verbose"] and "LITTLE_LOG_LEVEL" not in os.environ:
        configure(json=False, level="error")


def print_report(result: Any) -> None:
    """A replayed run (``ReplayResult``) as ``little report`` and the demo print it."""
    from little.replay import replay_envelope
    from little.report import (
        configuration_line,
        decision_lines,
        dollars,
        interrupted_line,
        replay_line,
        tokens,
        waiting_line,
    )

    s = result.state
    console.print(
        f"[bold]run {s.run_id}[/]  workflow {s.workflow} v{s.workflow_version}  "
        f"status [bold]{s.status}[/]" + (f"  ({s.error})" if s.error else "")
    )
    console.print(
        f"epoch {s.epoch}: {s.accepted_claims} claim(s) accepted, {s.rejected_claims} rejected, "
        f"{s.fenced_events} fenced event(s)"
        + (f", {s.duplicate_events} exact duplicate(s) skipped" if s.duplicate_events else "")
        + f"; {result.events_folded} event(s) folded"
        + (
            f" after the snapshot at offset {result.from_snapshot.offset}"
            if result.from_snapshot
            else ""
        )
    )
    waiting = waiting_line(s)
    if waiting is not None:  # arguments and names are not rich markup
        console.print(waiting, markup=False, highlight=False, soft_wrap=True)
    replay = replay_line(replay_envelope(s))
    if replay is not None:  # labels and reasons are not rich markup
        console.print(replay, markup=False, highlight=False, soft_wrap=True)
    changed = configuration_line(s)
    if changed is not None:
        console.print(changed, markup=False, highlight=False, soft_wrap=True)
    table = Table()
    for col in ("step", "status", "visits", "attempts", "tokens billed", "$ billed", "$ avoided"):
        table.add_column(col)
    for step in s.steps:
        table.add_row(
            step.step_path,
            step.status,
            str(step.visits),
            str(step.attempts),
            tokens(step.usage),
            dollars(step.usage) if step.usage.calls else "-",
            dollars(step.avoided_usage) if step.avoided_usage.calls else "-",
        )
    console.print(table)
    for line in decision_lines(s):  # step names are not rich markup
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    console.print(f"billed:  {s.usage.calls} model call(s), {tokens(s.usage)}, {dollars(s.usage)}")
    console.print(
        f"avoided: {s.avoided_usage.calls} model call(s), {tokens(s.avoided_usage)}, "
        f"{dollars(s.avoided_usage)}"
    )
    lost = interrupted_line(s)
    if lost is not None:
        console.print(f"not billed in the log: {lost}", markup=False, highlight=False)


def main() -> None:
    """Entry point: usage errors are typer's; every other failure is one line, exit 1."""
    try:
        app()
    except LittleError as exc:
        _fail(str(exc))
    except Exception as exc:
        _fail(f"{type(exc).__name__}: {exc} (run with --verbose for details)")


def _fail(message: str) -> None:
    if _state["verbose"]:
        err_console.print_exception()
    err_console.print(f"error: {message}", markup=False, highlight=False, soft_wrap=True)
    sys.exit(1)
