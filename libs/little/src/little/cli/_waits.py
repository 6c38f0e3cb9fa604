"""``little signal / approve / reject / worker``: what a waiting run waits for, from the
command line.

On Kafka a signal (an approval decision is the signal ``approval:<call id>``) is a
``SignalRun`` command to the coordinator that owns the run, which records it and wakes the
run; on the embedded world it is appended to the run's log here, and whoever hosts the run
(``little run``, ``little resume``, ``little worker``) wakes it. Either way the run is checked
first: an unknown or finished run, a payload that is not JSON, an approval nobody asked for
is one line and exit 1, with nothing recorded.
"""

from __future__ import annotations

import asyncio
import json
import signal
from typing import Annotated, Any

import typer

from little.cli._commands import CommandSettings, CommandsTopic, _publish, _state
from little.cli._shell import Bootstrap, DataDir, app, console, open_world, quiet
from little.errors import ConfigurationError


def _payload(data: str) -> Any:
    try:
        return json.loads(data)
    except ValueError as exc:
        raise ConfigurationError(f"--data is not JSON: {exc}") from exc


def _on_kafka(bootstrap: str | None) -> str | None:
    return bootstrap or CommandSettings().kafka_bootstrap or None


def _send(
    run_id: str,
    name: str,
    payload: Any,
    bootstrap: str | None,
    commands_topic: str | None,
    data_dir: Any,
) -> str:
    """Deliver the signal; returns its id."""
    from little.commands import SignalRun
    from little.runtime import prepare_signal, send_signal

    kafka = _on_kafka(bootstrap)
    if kafka is None:
        quiet()
        with open_world(data_dir, None) as world:
            return asyncio.run(send_signal(world, run_id, name, payload)).signal_id
    state, where = _state(kafka, run_id)
    event = prepare_signal(state, run_id, name, payload, where=where)
    command = SignalRun(
        run_id=run_id,
        name=name,
        payload_json=event.payload_json,
        signal_id=event.signal_id,
        issued_by=event.sender,
    )
    _publish(kafka, commands_topic, command)  # (a sub-run's coordinator wakes its top run)
    return command.signal_id


@app.command("signal")
def signal_command(
    run_id: Annotated[str, typer.Argument(help="The run to signal.")],
    name: Annotated[str, typer.Argument(help="The signal's name (what the run waits for).")],
    data: Annotated[str, typer.Option("--data", help="The signal's payload, as JSON.")] = "null",
    bootstrap_servers: Bootstrap = None,
    commands_topic: CommandsTopic = None,
    data_dir: DataDir = None,
) -> None:
    """Send a signal to a run: kept in its log until a ``wait_for_signal(name)`` takes it."""
    if name.startswith("approval:"):
        raise ConfigurationError("approvals are answered with `little approve` / `little reject`")
    payload = _payload(data)
    signal_id = _send(run_id, name, payload, bootstrap_servers, commands_topic, data_dir)
    console.print(f"signal {name} sent to run {run_id} ({signal_id})", markup=False)


def _decide(
    run_id: str,
    call_id: str,
    approved: bool,
    reason: str,
    bootstrap: str | None,
    commands_topic: str | None,
    data_dir: Any,
) -> None:
    from little.runtime import approval_decision

    _send(
        run_id,
        f"approval:{call_id}",
        approval_decision(approved, reason),
        bootstrap,
        commands_topic,
        data_dir,
    )
    verb = "approved" if approved else "rejected"
    console.print(f"call {call_id} of run {run_id} {verb}", markup=False)


@app.command()
def approve(
    run_id: Annotated[str, typer.Argument(help="The run that waits for the approval.")],
    call_id: Annotated[str, typer.Argument(help="The tool call's id (`little status`).")],
    bootstrap_servers: Bootstrap = None,
    commands_topic: CommandsTopic = None,
    data_dir: DataDir = None,
) -> None:
    """Approve a tool call a run waits on: the tool runs when the run goes on."""
    _decide(run_id, call_id, True, "", bootstrap_servers, commands_topic, data_dir)


@app.command()
def reject(
    run_id: Annotated[str, typer.Argument(help="The run that waits for the approval.")],
    call_id: Annotated[str, typer.Argument(help="The tool call's id (`little status`).")],
    reason: Annotated[str, typer.Option("--reason", help="Told to the model.")] = "",
    bootstrap_servers: Bootstrap = None,
    commands_topic: CommandsTopic = None,
    data_dir: DataDir = None,
) -> None:
    """Reject a tool call a run waits on: the model gets the tool's error, with the reason."""
    _decide(run_id, call_id, False, reason, bootstrap_servers, commands_topic, data_dir)


@app.command()
def worker(
    data_dir: DataDir = None,
    poll: Annotated[
        float, typer.Option("--poll", help="Seconds between looks for new signals.")
    ] = 0.5,
    once: Annotated[
        bool, typer.Option("--once", help="Wake what can go on now, then exit.")
    ] = False,
    workflows: Annotated[
        str | None,
        typer.Option("--workflows", help="module[:attr],... that register the workflows"),
    ] = None,
) -> None:
    """Wake the waiting runs of the embedded world at their due times and when their signals
    arrive, until interrupted (on Kafka the resume coordinator does this)."""
    from little.cli._local import load
    from little.runtime import Waker

    load(workflows)
    quiet()

    async def serve() -> None:
        with open_world(data_dir, None) as world:
            waker = Waker(world)
            if once:
                started, _ = await waker.wake_ready()
                for r in await asyncio.gather(*started):
                    console.print(f"run {r.run_id}: {r.status}", markup=False)
                return
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            console.print(f"waking the waiting runs of {world.description}", markup=False)
            await waker.serve(stop, poll=poll)

    asyncio.run(serve())
