"""``little projections rebuild | status``: operate the projector's run-state projection.

The ``little`` command finds this group through the ``little.cli`` entry point of
little-services (``pip install little-workflow`` alone does not carry the projector).

A rebuild resets the projector group's offsets (the group must be stopped, as for
``kafka-consumer-groups --reset-offsets``) and refolds until caught up, with a progress bar;
the store and the snapshots it leaves are the ones the service would. On Kafka it folds in
worker processes (one per core, at most one per partition), in this process otherwise.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from little.cli import Bootstrap, DataDir, console
from little.errors import ConfigurationError
from little.log import ResetTo

__all__ = ["default_workers", "parse_reset", "projections_app", "rebuild_command", "status_command"]

projections_app = typer.Typer(help="Rebuild or inspect the projector's run-state projection.")

_StorePath = Annotated[
    str | None,
    typer.Option(
        "--store",
        help="Projection store: an sqlite file or a postgresql:// URL [env "
        "LITTLE_PROJECTION_STORE; default <data-dir>/projection.sqlite3]",
    ),
]
_Group = Annotated[
    str | None,
    typer.Option("--group", help="Projector consumer group [env LITTLE_PROJECTOR_GROUP]"),
]
_Topic = Annotated[str | None, typer.Option("--topic", help="Runs topic [env LITTLE_RUNS_TOPIC]")]


def _settings(
    data_dir: Path | None,
    bootstrap: str | None,
    store: str | None,
    group: str | None,
    topic: str | None,
) -> Any:
    from little_services.projection import ProjectionSettings

    overrides: dict[str, Any] = {}
    if data_dir is not None:
        overrides["data_dir"] = data_dir
    if bootstrap:
        overrides["kafka_bootstrap"] = bootstrap
    if store is not None:
        overrides["projection_store"] = store
    if group:
        overrides["projector_group"] = group
    settings = ProjectionSettings(**overrides)
    if topic:  # a flag names the topic exactly (LITTLE_TOPIC_PREFIX prefixes the settings)
        settings = settings.model_copy(update={"runs_topic": topic})
    return settings


def parse_reset(to_earliest: bool, to_offset: list[str] | None, to_datetime: str | None) -> ResetTo:
    """``--to-earliest`` (the default), ``--to-offset P:O`` (repeatable) or ``--to-datetime``."""
    chosen = sum([to_earliest, bool(to_offset), to_datetime is not None])
    if chosen > 1:
        raise ConfigurationError("choose one of --to-earliest, --to-offset, --to-datetime")
    if to_offset:
        offsets: dict[int, int] = {}
        for item in to_offset:
            try:
                p, o = item.split(":")
                offsets[int(p)] = int(o)
            except ValueError as exc:
                raise ConfigurationError(
                    f"--to-offset wants PARTITION:OFFSET (e.g. 3:1200), not {item!r}"
                ) from exc
        return ResetTo(offsets=offsets)
    if to_datetime is not None:
        try:
            t = datetime.fromisoformat(to_datetime)
        except ValueError as exc:
            raise ConfigurationError(
                f"--to-datetime wants an ISO 8601 time (e.g. 2025-06-01T12:00:00Z), not {to_datetime!r}"
            ) from exc
        return ResetTo(timestamp=t if t.tzinfo else t.replace(tzinfo=UTC))
    return ResetTo(earliest=True)


class _Records(ProgressColumn):
    def render(self, task: Task) -> Text:
        total = "?" if task.total is None else f"{task.total:,.0f}"
        return Text(f"{task.completed:,.0f}/{total} records")


class _Speed(ProgressColumn):
    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(
            f"{speed:,.0f} events/s" if speed else "- events/s", style="progress.data.speed"
        )


def _progress_listener(progress: Progress, task_id: Any) -> Any:
    from little_services.projection import PartitionBatch, ProjectorListener

    class Listener(ProjectorListener):
        def __init__(self) -> None:
            self.done = 0

        def committed(self, batch: PartitionBatch, seconds: float) -> None:
            self.done += batch.consumed
            progress.update(task_id, completed=self.done)

        def lag(self, lag: Mapping[int, int]) -> None:
            left = sum(lag.values())
            progress.update(task_id, total=self.done + left, lag=f"{left:,}")

        def progress(self, done: int, lag: Mapping[int, int]) -> None:  # worker processes
            self.done = done
            progress.update(task_id, completed=done)
            self.lag(lag)

    return Listener()


def default_workers(kafka: bool, partitions: int) -> int:
    """One worker process per core, at most one per partition, on Kafka; else in-process."""
    return max(1, min(os.cpu_count() or 1, partitions)) if kafka else 1


@projections_app.command("rebuild")
def rebuild_command(
    to_earliest: Annotated[
        bool, typer.Option("--to-earliest", help="Refold everything (clears the store first).")
    ] = False,
    to_offset: Annotated[
        list[str] | None,
        typer.Option("--to-offset", help="Refold from PARTITION:OFFSET (repeatable)."),
    ] = None,
    to_datetime: Annotated[
        str | None,
        typer.Option("--to-datetime", help="Refold from the first record at or after this time."),
    ] = None,
    bootstrap_servers: Bootstrap = None,
    data_dir: DataDir = None,
    store: _StorePath = None,
    group: _Group = None,
    topic: _Topic = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            min=1,
            help="Processes that fold, each a projector in the group [default on Kafka: one "
            "per core, at most one per partition; 1 (in-process) otherwise]",
        ),
    ] = None,
) -> None:
    """Reset the projector group's offsets and refold the projection."""
    from little_services.projection import (
        ProjectorStalledError,
        open_store,
        open_world,
        rebuild,
        tune_gc,
    )

    reset = parse_reset(to_earliest, to_offset, to_datetime)
    tune_gc()
    settings = _settings(data_dir, bootstrap_servers, store, group, topic)
    config = settings.projection_config()
    with (
        open_world(settings) as world,
        open_store(settings) as projection,
        Progress(
            TextColumn("[bold]rebuild[/] {task.description}"),
            BarColumn(),
            _Records(),
            _Speed(),
            TextColumn("lag {task.fields[lag]}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        ) as progress,
    ):
        if workers is None:
            workers = default_workers(bool(settings.kafka_bootstrap), world.log.partitions)
        task = progress.add_task(f"{config.group} on {config.topic}", total=None, lag="?")
        try:
            result = rebuild(
                world,
                projection,
                config,
                reset,
                bootstrap_servers=settings.kafka_bootstrap,
                listener=_progress_listener(progress, task),
                workers=workers,
                settings=settings,
            )
        except ProjectorStalledError as exc:  # a thread stuck in librdkafka: exit would wait
            progress.stop()
            console.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
            sys.stdout.flush()
            os._exit(75)
        progress.update(task, total=result.totals.consumed, completed=result.totals.consumed)
        counts = projection.count_by_status()
    t = result.totals
    seconds = result.seconds
    by = f"{result.workers} worker processes" if result.workers > 1 else "this process"
    table = Table(title=f"projection rebuilt from {_describe(reset)} in {seconds:.1f}s by {by}")
    for col in ("records", "events folded", "events/s", "dead letters", "runs refolded", "runs"):
        table.add_column(col)
    table.add_row(
        f"{t.consumed:,}",
        f"{t.folded:,}",
        f"{t.consumed / seconds:,.0f}" if seconds > 0 else "-",
        str(t.dead_letters),
        str(t.refolded_runs),
        ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "none",
    )
    console.print(table)


@projections_app.command("status")
def status_command(
    bootstrap_servers: Bootstrap = None,
    data_dir: DataDir = None,
    store: _StorePath = None,
    group: _Group = None,
    topic: _Topic = None,
) -> None:
    """Committed offsets, what the store covers, lag and runs by status."""
    from little_services.projection import open_store, open_world

    settings = _settings(data_dir, bootstrap_servers, store, group, topic)
    with open_world(settings) as world, open_store(settings) as projection:
        committed = world.cursors.committed(settings.projector_group)
        ends = world.log.end_offsets()
        covered = projection.cursors(settings.runs_topic)
        counts = projection.count_by_status()
    table = Table(title=f"group {settings.projector_group} on {settings.runs_topic}")
    for col in ("partition", "committed", "store covers", "end", "lag"):
        table.add_column(col, justify="right")
    for p in sorted(ends):
        c = committed.get(p)
        table.add_row(
            str(p),
            "-" if c is None else f"{c:,}",
            f"{covered[p].covered:,}" if p in covered else "-",
            f"{ends[p]:,}",
            f"{ends[p] - (c or 0):,}",
        )
    console.print(table)
    console.print("runs: " + (", ".join(f"{n:,} {s}" for s, n in sorted(counts.items())) or "none"))


def _describe(reset: ResetTo) -> str:
    if reset.earliest:
        return "the earliest offsets"
    if reset.offsets is not None:
        return ", ".join(f"{p}:{o}" for p, o in sorted(reset.offsets.items()))
    return f"{reset.timestamp:%Y-%m-%d %H:%M:%S %Z}"
