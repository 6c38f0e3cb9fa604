"""The ``little`` commands that read a world: events, report, explain, export, replay, demo,
topics.

Every command works on the embedded world by default and on Kafka with
``--bootstrap-servers`` / ``LITTLE_KAFKA_BOOTSTRAP``; the shared shell (the app, the world
options, errors as one line) is ``_shell``, which this module uses and never feeds back.
"""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from little.cli._shell import (
    Bootstrap,
    DataDir,
    app,
    console,
    open_world,
    print_report,
    quiet,
)
from little.errors import ConfigurationError, LittleError
from little.settings import LittleSettings

topics_app = typer.Typer(help="Create or check the Kafka topics of deploy/topics.yaml.")
app.add_typer(topics_app, name="topics")


@app.command()
def events(
    run_id: Annotated[str, typer.Argument(help="The run whose events to print.")],
    data_dir: DataDir = None,
    bootstrap_servers: Bootstrap = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
) -> None:
    """Print a run's events in log order, decoded, with their offsets; an agent call served
    from a recorded run is marked ``[replayed]``."""
    with open_world(data_dir, bootstrap_servers) as world:
        rows = list(world.read_run(run_id))
    if not rows:
        raise LittleError(f"run {run_id} has no events in {world.description}")
    if as_json:
        for row in rows:
            body = row.event.model_dump(mode="json")
            print(
                __import__("json").dumps(
                    {
                        "partition": row.partition,
                        "offset": row.offset,
                        "type": row.event.type,
                        **body,
                    }
                )
            )
        return
    from rich.text import Text

    from little.events import AgentCallSettled

    table = Table(title=f"run {run_id}")
    for col in ("offset", "seq", "epoch", "type", "step", "session"):
        table.add_column(col)
    for row in rows:
        e = row.event
        # an agent call served from a recorded run is recorded evidence, not fresh evidence
        served = isinstance(e, AgentCallSettled) and e.replayed
        table.add_row(  # Text: names and "[replayed]" are not rich markup
            f"{row.partition}:{row.offset}",
            str(e.seq),
            str(e.epoch),
            Text(f"{e.type} [replayed]" if served else e.type),
            Text(e.step_path or ""),
            Text(e.session_id or ""),
        )
    console.print(table)


@app.command()
def report(
    run_id: Annotated[str, typer.Argument(help="The run to report on.")],
    data_dir: DataDir = None,
    bootstrap_servers: Bootstrap = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    no_snapshot: Annotated[
        bool, typer.Option("--no-snapshot", help="Fold the whole log, ignoring snapshots.")
    ] = False,
) -> None:
    """Replay a run from its log and print steps, visits, tokens and dollars."""
    from little.replay import replay_run
    from little.report import redacted_line, redactions, report_data

    with open_world(data_dir, bootstrap_servers) as world:
        result = replay_run(world, run_id, use_snapshot=not no_snapshot)
        if not result.found:
            raise LittleError(f"run {run_id} has no events in {world.description}")
        redacted = redactions(list(world.read_run(run_id)))
    if as_json:
        data = report_data(result)
        data["redacted"] = [r.to_json() for r in redacted]
        print(__import__("json").dumps(data, indent=2))
        return
    print_report(result)
    line = redacted_line(redacted)
    if line is not None:  # field names are not rich markup
        console.print(line, markup=False, highlight=False, soft_wrap=True)


@app.command()
def explain(
    run_id: Annotated[str, typer.Argument(help="The run.")],
    seq: Annotated[int, typer.Argument(help="The seq of the event to explain (little events).")],
    data_dir: DataDir = None,
    bootstrap_servers: Bootstrap = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per link.")] = False,
) -> None:
    """Why an event happened, from the run's events alone: for a tool call, the model turn
    that requested it; then its agent call, session, step, the decision that chose the step,
    its branch and the run."""
    from little.report import explain as explain_event

    with open_world(data_dir, bootstrap_servers) as world:
        rows = list(world.read_run(run_id))
        where = world.description
    if not rows:
        raise LittleError(f"run {run_id} has no events in {where}")
    try:
        causes = explain_event(rows, seq)
    except LookupError as exc:
        raise LittleError(f"run {run_id}: {exc}") from None
    if as_json:
        for cause in causes:
            print(__import__("json").dumps(cause.to_json()))
        return
    width = max(len(c.role) for c in causes)
    for cause in causes:
        e = cause.event
        console.print(
            f"{cause.role:<{width}}  seq {e.event.seq:<4} {e.event.type:<28} "
            f"{e.partition}:{e.offset}  {cause.detail}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


class ExportFormat(StrEnum):
    """``little export --format``."""

    chat_jsonl = "chat-jsonl"


@app.command()
def export(
    run_id: Annotated[str, typer.Argument(help="The run to export.")],
    golden: Annotated[
        Path | None,
        typer.Option(
            "--golden",
            help="Write the finished run (and its sub-runs, and the artifacts they name) to "
            "this file as a golden run: an Avro object container file any Avro tool reads, "
            "that `little replay FILE --mode simulate` and assert_replays accept.",
        ),
    ] = None,
    format: Annotated[
        ExportFormat | None,
        typer.Option(
            "--format",
            help="chat-jsonl: the run's model calls as chat fine-tuning JSONL, one line per "
            "answered call: its full request rebuilt from the log, and the answer.",
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="--format: write here [default: stdout]"),
    ] = None,
    allow_missing_system: Annotated[
        bool,
        typer.Option(
            "--allow-missing-system",
            help="chat-jsonl: export the calls of sessions logged before system prompts were "
            "recorded without their prompt, instead of refusing.",
        ),
    ] = False,
    data_dir: DataDir = None,
    bootstrap_servers: Bootstrap = None,
) -> None:
    """Export a run from its log (reading only): a golden file, or its model exchanges."""
    if (golden is None) == (format is None):
        raise ConfigurationError("little export needs one of --golden FILE and --format chat-jsonl")
    if golden is not None and (output is not None or allow_missing_system):
        raise ConfigurationError("--output and --allow-missing-system are for --format")
    if golden is not None:
        from little.golden import write_golden

        with open_world(data_dir, bootstrap_servers) as world:
            written = write_golden(world, run_id, golden)
        events = sum(len(e) for e in written.runs.values())
        console.print(
            f"wrote {golden}: {events} event(s) of {len(written.runs)} run(s) (the run and "
            f"{len(written.runs) - 1} sub-run(s)), {len(written.artifacts)} artifact(s)",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        return
    import json

    from little.chat import chat_example, model_exchanges

    with open_world(data_dir, bootstrap_servers) as world:
        rows = list(world.read_run(run_id))
        if not rows:
            raise LittleError(f"run {run_id} has no events in {world.description}")
        exchanges = model_exchanges(rows, world.artifacts.get)
    missing = sorted({x.session_id for x in exchanges if not x.system_recorded})
    if missing and not allow_missing_system:
        raise LittleError(
            f"run {run_id}: session(s) {', '.join(missing)} were logged before system prompts "
            "were (harness.session.started v1) and had one, so their requests cannot be "
            "rebuilt in full: pass --allow-missing-system to export them without it"
        )
    lines = [json.dumps(chat_example(x), ensure_ascii=False) + "\n" for x in exchanges]
    if output is None:
        sys.stdout.write("".join(lines))
        return
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text("".join(lines), "utf-8")
    sessions = len({x.session_id for x in exchanges})
    console.print(
        f"wrote {output}: {len(lines)} model call(s) of {sessions} session(s)",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


class ReplayModeName(StrEnum):
    """``little replay --mode``: the replay modes of seed 004 (``little.replay_in_mode``)."""

    inference_skipping = "inference-skipping"
    partial = "partial"
    projection_only = "projection-only"
    full = "full"
    simulate = "simulate"


@app.command()
def replay(
    run_id: Annotated[
        str | None,
        typer.Argument(
            help="The run to replay from its log; for simulate, a golden file (`little export "
            "--golden`) instead: an existing file, or a name ending in .avro; none with --all."
        ),
    ] = None,
    mode: Annotated[
        ReplayModeName,
        typer.Option(
            "--mode",
            help="inference-skipping: the run's state and sessions rebuilt from its recorded "
            "responses (no model, tool, network or key); partial: fold from a cursor "
            "(--from-seq, --from-offset or --from-snapshot) to --to-seq and say what changed; "
            "projection-only: the run's projection (or with --all every run's) folded from the "
            "log, nothing executed (--rebuild: the projector's rebuild of its store); full: a NEW run of the workflow with every model call live "
            "(each session's own model unless --model names another) and every tool result "
            "served from the run's receipts (unless --live-tools); simulate: re-execute "
            "--workflow against the run with every model call served from its record and every "
            "tool call that is not side-effecting run again, and compare (exit 1 on a "
            "divergence).",
        ),
    ] = ReplayModeName.inference_skipping,
    from_seq: Annotated[
        int, typer.Option("--from-seq", min=0, help="partial: the first event applied.")
    ] = 0,
    from_offset: Annotated[
        int | None,
        typer.Option(
            "--from-offset",
            min=0,
            help="partial: start at the run's first event at or after this offset of its "
            "partition (`little events` shows them).",
        ),
    ] = None,
    from_snapshot: Annotated[
        bool,
        typer.Option(
            "--from-snapshot", help="partial: start from the run's snapshot, after its events."
        ),
    ] = False,
    to_seq: Annotated[
        int | None, typer.Option("--to-seq", min=0, help="partial: the last event applied.")
    ] = None,
    step: Annotated[
        bool,
        typer.Option("--step", help="partial: print every event as it is applied, and its change."),
    ] = False,
    all_runs: Annotated[
        bool, typer.Option("--all", help="projection-only: every run of the world.")
    ] = False,
    rebuild: Annotated[
        bool,
        typer.Option(
            "--rebuild",
            help="projection-only --all: the projector's own rebuild (little-services): reset "
            "its group's offsets and refold its store, as `little projections rebuild "
            "--to-earliest` (the group must be stopped)",
        ),
    ] = False,
    model: Annotated[
        list[str] | None,
        typer.Option(
            "--model",
            help="full: NAME=MODEL makes the sessions named NAME ask MODEL (repeat it for "
            "others), a bare MODEL every other session; a session not named keeps its own. "
            "MODEL: anthropic:<id>, openai:<id> (keys from ANTHROPIC_API_KEY / "
            "OPENAI_API_KEY) or module:factory",
        ),
    ] = None,
    live_tools: Annotated[
        bool,
        typer.Option("--live-tools", help="full: run the tools instead of serving their results."),
    ] = False,
    new_run_id: Annotated[
        str | None, typer.Option("--run-id", help="full: the new run's id [default: made up]")
    ] = None,
    workflow: Annotated[
        str | None,
        typer.Option(
            "--workflow",
            help="simulate and full: the workflow to re-execute, MODULE:WORKFLOW or a registered "
            "name [default: the run's own, from --workflows]",
        ),
    ] = None,
    workflows: Annotated[
        str | None,
        typer.Option("--workflows", help="simulate and full: module[:attr],... to import first"),
    ] = None,
    data_dir: DataDir = None,
    bootstrap_servers: Bootstrap = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Replay a run from its log in one of the modes of seed 004; only --mode full writes to
    the log (its new run), and --rebuild to the projector's store: the others never invoke a
    model or a tool, nor write anything."""
    partial_options = (
        bool(from_seq) or from_offset is not None or from_snapshot or to_seq is not None
    )
    if (partial_options or step) and mode is not ReplayModeName.partial:
        raise ConfigurationError(
            "--from-seq, --from-offset, --from-snapshot, --to-seq and --step are for --mode partial"
        )
    if (
        model is not None or live_tools or new_run_id is not None
    ) and mode is not ReplayModeName.full:
        raise ConfigurationError("--model, --live-tools and --run-id are for --mode full")
    if (workflow is not None or workflows is not None) and mode not in (
        ReplayModeName.simulate,
        ReplayModeName.full,
    ):
        raise ConfigurationError("--workflow and --workflows are for --mode simulate and full")
    if all_runs != (run_id is None):
        raise ConfigurationError(
            "--all replaces the run id (projection-only)"
            if all_runs
            else "little replay needs a run id (or --all, with --mode projection-only)"
        )
    if all_runs and mode is not ReplayModeName.projection_only:
        raise ConfigurationError("--all is for --mode projection-only")
    if rebuild and not all_runs:
        raise ConfigurationError("--rebuild is for --mode projection-only --all")
    if to_seq is not None and to_seq < from_seq:
        raise ConfigurationError(f"--to-seq {to_seq} is before --from-seq {from_seq}")
    if sum((bool(from_seq), from_offset is not None, from_snapshot)) > 1:
        raise ConfigurationError("choose one cursor: --from-seq, --from-offset or --from-snapshot")
    if mode is ReplayModeName.simulate:
        assert run_id is not None
        _simulate(run_id, workflow, workflows, data_dir, bootstrap_servers, as_json)
        return
    if run_id is not None and _is_golden_file(run_id):
        raise ConfigurationError(f"{run_id} is a golden file: it is for --mode simulate")
    if mode is ReplayModeName.projection_only:
        _projection_only(run_id, rebuild, data_dir, bootstrap_servers, as_json)
        return
    assert run_id is not None
    if mode is ReplayModeName.full:
        _full(
            run_id,
            model,
            live_tools,
            new_run_id,
            workflow,
            workflows,
            data_dir,
            bootstrap_servers,
            as_json,
        )
        return
    if mode is ReplayModeName.inference_skipping:
        _inference_skipping(run_id, data_dir, bootstrap_servers, as_json)
        return
    _partial(
        run_id,
        from_seq,
        from_offset,
        from_snapshot,
        to_seq,
        step,
        data_dir,
        bootstrap_servers,
        as_json,
    )


def _inference_skipping(
    run_id: str, data_dir: Path | None, bootstrap_servers: str | None, as_json: bool
) -> None:
    import asyncio
    import json

    from little.replay_modes import replay_in_mode
    from little.report import report_data

    with open_world(data_dir, bootstrap_servers) as world:
        result = asyncio.run(replay_in_mode(world, run_id))
    if as_json:
        print(json.dumps(report_data(result), indent=2))
        return
    console.print("inference-skipping: rebuilt from the log; no model or tool was invoked")
    print_report(result)


def _partial(
    run_id: str,
    from_seq: int,
    from_offset: int | None,
    from_snapshot: bool,
    to_seq: int | None,
    step: bool,
    data_dir: Path | None,
    bootstrap_servers: str | None,
    as_json: bool,
) -> None:
    import asyncio
    import json

    from little.replay import state_changes
    from little.replay_modes import replay_in_mode

    with open_world(data_dir, bootstrap_servers) as world:
        partial = asyncio.run(
            replay_in_mode(
                world,
                run_id,
                mode="partial",
                from_seq=from_seq,
                from_offset=from_offset,
                from_snapshot=from_snapshot,
                to_seq=to_seq,
            )
        )
    applied = partial.applied
    if as_json:
        for a in applied:
            print(
                json.dumps(
                    {
                        "seq": a.event.event.seq,
                        "type": a.event.event.type,
                        "partition": a.event.partition,
                        "offset": a.event.offset,
                        "changes": list(a.changes),
                    }
                )
            )
        return
    if not applied:
        console.print(
            f"partial: no event after the {partial.cursor}: the snapshot is the run's state",
            markup=False,
            highlight=False,
        )
        return
    if step:
        for a in applied:
            e = a.event
            console.print(
                f"seq {e.event.seq} {e.event.type} ({e.partition}:{e.offset})",
                markup=False,
                highlight=False,
            )
            for line in a.changes or ("(no change)",):
                console.print(f"    {line}", markup=False, highlight=False, soft_wrap=True)
    first, last = applied[0], applied[-1]
    summary = state_changes(first.before, last.state)
    seqs = [a.event.event.seq for a in applied if a.accepted and a.event.event.seq >= 0]
    console.print(
        f"partial from {partial.cursor}: {len(applied)} event(s) applied, seq "
        f"{min(seqs, default=from_seq)} to {max(seqs, default=from_seq)}; status "
        f"{last.state.status}; {len(summary)} change(s)" + ("" if step else ":"),
        markup=False,
        highlight=False,
    )
    if not step:
        for line in summary:
            console.print(f"    {line}", markup=False, highlight=False, soft_wrap=True)


def _projection_only(
    run_id: str | None,
    rebuild: bool,
    data_dir: Path | None,
    bootstrap_servers: str | None,
    as_json: bool,
) -> None:
    """One run, or every run: its projection folded from the log and printed (read-only).
    ``--rebuild``: the projector's own rebuild (``little projections rebuild --to-earliest``),
    where little-services is installed."""
    import asyncio
    import json

    from little.replay_modes import replay_in_mode

    if rebuild:
        command = _plugin_command("projections")
        if command is None:
            raise ConfigurationError(
                "--rebuild is the projector's rebuild, which comes with the little-services "
                "package: pip install little-services"
            )
        if as_json:
            raise ConfigurationError("--rebuild prints its own table: no --json")
        args = ["rebuild", "--to-earliest"]
        args += ["--data-dir", str(data_dir)] if data_dir is not None else []
        args += ["--bootstrap-servers", bootstrap_servers] if bootstrap_servers else []
        command.main(args, prog_name="little projections", standalone_mode=False)
        return
    with open_world(data_dir, bootstrap_servers) as world:
        projected = asyncio.run(replay_in_mode(world, run_id, mode="projection-only"))
        where = world.description
    if run_id is not None and not as_json:
        from types import SimpleNamespace

        console.print("projection-only: folded from the log; nothing was executed")
        (state,) = projected.states
        print_report(
            SimpleNamespace(state=state, events_folded=projected.events_folded, from_snapshot=None)
        )
        return
    from little.cli._local import _row

    rows = [_row(s) for s in projected.states]
    rows += [
        {"run_id": r, "status": "unreadable", "detail": why} for r, why in projected.unreadable
    ]
    if as_json:
        for row in rows:
            print(json.dumps(row))
        return
    table = Table(title=f"projections folded from {where}")
    for col in ("run", "workflow", "status", "agent calls", "$ billed", "$ avoided"):
        table.add_column(col)
    for row in rows:
        table.add_row(
            row["run_id"],
            str(row.get("workflow") or ""),
            row["status"],
            str(row.get("agent_calls") or ""),
            str(row.get("billed_usd") or ""),
            str(row.get("avoided_usd") or ""),
        )
    console.print(table)


def _plugin_command(name: str) -> Any:
    """The click command of the ``little.cli`` plugin group ``name``, or None if no installed
    distribution brings it (``little.cli._plugins``)."""
    from importlib.metadata import entry_points

    for ep in entry_points(group="little.cli", name=name):
        group = ep.load()
        if isinstance(group, typer.Typer):
            return typer.main.get_command(group)
    return None


def _full(
    run_id: str,
    model: list[str] | None,
    live_tools: bool,
    new_run_id: str | None,
    target: str | None,
    workflows: str | None,
    data_dir: Path | None,
    bootstrap_servers: str | None,
    as_json: bool,
) -> None:
    import asyncio

    from little.cli._local import finish, resolve
    from little.replay import fold_run
    from little.replay_modes import replay_in_mode

    with open_world(data_dir, bootstrap_servers) as world:
        if target is None:
            state, _, _ = fold_run(world, run_id)
            if state.workflow is None:
                raise LittleError(f"run {run_id} has no RunStarted in {world.description}")
            from little.cli._local import load

            load(workflows)
            from little.runtime import lookup

            wf = lookup(state.workflow, state.workflow_version, run_id=run_id)
        else:
            wf = resolve(target, workflows)
        quiet()
        result = asyncio.run(
            replay_in_mode(
                world,
                run_id,
                mode="full",
                model=model,
                workflow=wf,
                live_tools=live_tools,
                new_run_id=new_run_id,
            )
        )
        finish(world, result, as_json)


def _is_golden_file(name: str) -> bool:
    """``little replay``'s run argument names a golden file: an existing file, or a name
    ending in ``.avro`` (a run id never names a file; a missing file is then said so)."""
    return name.endswith(".avro") or Path(name).is_file()


def _simulate(
    run_id: str,
    target: str | None,
    workflows: str | None,
    data_dir: Path | None,
    bootstrap_servers: str | None,
    as_json: bool,
) -> None:
    import asyncio
    import json

    from little.cli._local import resolve
    from little.replay import fold_run
    from little.runtime import simulate

    if _is_golden_file(run_id):
        from little.golden import read_golden

        golden = read_golden(run_id)
        if target is None:
            target = golden.workflow
            if target is None:
                raise LittleError(f"golden file {run_id} has no RunStarted: nothing to simulate")
        wf = resolve(target, workflows)
        quiet()
        sim = asyncio.run(simulate(None, wf, golden))
    else:
        with open_world(data_dir, bootstrap_servers) as world:
            if target is None:
                state, _, _ = fold_run(world, run_id)
                if state.workflow is None:
                    raise LittleError(f"run {run_id} has no RunStarted in {world.description}")
                target = state.workflow
            wf = resolve(target, workflows)
            quiet()
            sim = asyncio.run(simulate(world, wf, run_id))
    d = sim.divergence
    if as_json:
        print(
            json.dumps(
                {
                    "golden_run_id": sim.golden_run_id,
                    "golden_file": sim.golden_file,
                    "identical": sim.identical,
                    "divergence": None
                    if d is None
                    else {
                        "index": d.index,
                        "expected": d.expected,
                        "got": d.got,
                        "call": d.ordinal,
                    },
                    "calls_after": sim.calls_after,
                    "cost_after_usd": None if sim.cost_after is None else str(sim.cost_after),
                    "tools_run": list(sim.tools_run),
                    "tools_served": list(sim.tools_served),
                }
            )
        )
    else:
        for line in sim.lines():
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    if d is not None:
        raise LittleError(f"run {sim.golden}: the simulation diverged at trace entry {d.index}")


@app.command()
def demo(
    data_dir: Annotated[
        Path, typer.Option("--data-dir", help="Embedded world directory for the demo.")
    ] = Path(".little/demo"),
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            help="openai:<model> or anthropic:<model> (needs OPENAI_API_KEY / ANTHROPIC_API_KEY); "
            "default: a scripted stand-in for openai:gpt-4o-mini",
        ),
    ] = None,
    framework: Annotated[
        str | None,
        typer.Option(
            "--framework",
            help="pydantic-ai or openai-agents: crash and resume that framework's agent under "
            "little instead (its model a stand-in, no network)",
        ),
    ] = None,
) -> None:
    """Run the research workflow, SIGKILL it mid-session, resume it, print the report."""
    if framework is not None:
        if model is not None:
            raise LittleError("little demo: --model and --framework do not go together")
        from little.cli._framework_demo import run_framework_demo

        run_framework_demo(data_dir, console, framework)
        return
    from little.cli._demo import run_demo

    run_demo(data_dir, console, model=model)


@topics_app.command("apply")
def topics_apply(
    bootstrap_servers: Bootstrap = None,
    file: Annotated[
        Path | None, typer.Option("--file", help="Topic specs [default: deploy/topics.yaml]")
    ] = None,
    check: Annotated[bool, typer.Option("--check", help="Report drift, create nothing.")] = False,
    fix: Annotated[
        bool,
        typer.Option(
            "--fix",
            help="Set drifted topic configs (retention, cleanup policy, min ISR) to the specs' "
            "after printing what changes; partition counts are only reported.",
        ),
    ] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds to wait for the broker.")
    ] = 30.0,
) -> None:
    """Create missing topics and report drift of existing ones (under the names
    ``LITTLE_RUNS_TOPIC`` and the other topic variables give, as the services use them)."""
    from little.log import load_topic_specs
    from little.log.kafka import apply_topics

    settings = LittleSettings()
    bootstrap = bootstrap_servers or settings.kafka_bootstrap
    if not bootstrap:
        raise ConfigurationError("topics apply needs --bootstrap-servers or LITTLE_KAFKA_BOOTSTRAP")
    if check and fix:
        raise ConfigurationError("choose one of --check and --fix")
    specs = settings.topics().specs(load_topic_specs(file))
    if fix:
        planned = apply_topics(bootstrap, specs, create=False, timeout=timeout)
        for r in planned:
            settable = [d for d in r.drift if not d.startswith(("partitions:", "missing"))]
            if settable:
                console.print(f"{r.name}: will set " + "; ".join(settable))
            elif r.status == "drift":
                console.print(f"{r.name}: nothing to set (" + "; ".join(r.drift) + ")")
    reports = apply_topics(bootstrap, specs, create=not check, fix=fix, timeout=timeout)
    table = Table(title=f"topics on {bootstrap}")
    for col in ("topic", "status", "drift", "notes"):
        table.add_column(col)
    for r in reports:
        table.add_row(r.name, r.status, "; ".join(r.drift), "; ".join(r.notes))
    console.print(table)
    if any(r.status == "drift" for r in reports):
        raise typer.Exit(2)
