"""``little demo``: the main job on the embedded world, through the public API only."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

from rich.console import Console
from rich.table import Table

import little
from little._canonical import canonical_hash, canonical_json
from little.events import (
    ModelCalled,
    ModelResponded,
    RunClaimed,
    RunCompleted,
    RunStarted,
    SessionCompleted,
    SessionStarted,
    StepCompleted,
    StepStarted,
    ToolCallStarted,
    ToolCallSucceeded,
    Usage,
)


def sample_run(run_id: str) -> list[little.events.Event]:
    """A small research run: a plan step, then a step whose agent session calls one tool."""
    manifest = {"model": "scripted:demo", "tools": ["search"], "system_prompt_hash": "0" * 64}
    request1 = [{"role": "user", "content": "Find three facts about Kafka."}]
    request2 = [
        *request1,
        {"role": "assistant", "tool_call": "search"},
        {"role": "tool", "content": "..."},
    ]
    s = "research"
    sess = f"{s}#agent"
    usage1 = Usage(input_tokens=120, output_tokens=30)
    usage2 = Usage(input_tokens=260, output_tokens=90, cached_input_tokens=120)
    events: list[little.events.Event] = [
        RunClaimed(run_id=run_id, owner="demo", observed_seq=-1),
        RunStarted(
            run_id=run_id,
            seq=0,
            workflow="research",
            workflow_version="1",
            input_json=canonical_json({"topic": "Kafka"}),
        ),
        StepStarted(run_id=run_id, seq=1, step_path="plan", step_id="plan"),
        StepCompleted(
            run_id=run_id,
            seq=2,
            step_path="plan",
            step_id="plan",
            output_json=canonical_json(["search", "summarise"]),
        ),
        StepStarted(run_id=run_id, seq=3, step_path=s, step_id=s),
        SessionStarted(
            run_id=run_id,
            seq=4,
            step_path=s,
            session_id=sess,
            session_name="agent",
            model="scripted:demo",
            manifest_json=canonical_json(manifest),
            manifest_hash=canonical_hash(manifest),
        ),
        ModelCalled(
            run_id=run_id,
            seq=5,
            step_path=s,
            session_id=sess,
            turn=1,
            provider="scripted",
            model="demo",
            request_hash=canonical_hash(request1),
            message_count=1,
            appended_messages_json=canonical_json(request1),
        ),
        ModelResponded(
            run_id=run_id,
            seq=6,
            step_path=s,
            session_id=sess,
            turn=1,
            provider="scripted",
            model="demo",
            request_hash=canonical_hash(request1),
            response_json=canonical_json({"tool_call": "search"}),
            usage=usage1,
        ),
        ToolCallStarted(
            run_id=run_id,
            seq=7,
            step_path=s,
            session_id=sess,
            call_id="c1",
            tool="search",
            turn=1,
            arguments_json=canonical_json({"q": "Kafka"}),
            idempotency_key=f"{run_id}/{s}/c1",
        ),
        ToolCallSucceeded(
            run_id=run_id,
            seq=8,
            step_path=s,
            session_id=sess,
            call_id="c1",
            tool="search",
            result_json=canonical_json(["log", "partitions", "offsets"]),
        ),
        ModelCalled(
            run_id=run_id,
            seq=9,
            step_path=s,
            session_id=sess,
            turn=2,
            provider="scripted",
            model="demo",
            request_hash=canonical_hash(request2),
            previous_request_hash=canonical_hash(request1),
            message_count=3,
            appended_messages_json=canonical_json(request2[1:]),
        ),
        ModelResponded(
            run_id=run_id,
            seq=10,
            step_path=s,
            session_id=sess,
            turn=2,
            provider="scripted",
            model="demo",
            request_hash=canonical_hash(request2),
            response_json=canonical_json({"text": "Kafka is a log."}),
            usage=usage2,
        ),
        SessionCompleted(
            run_id=run_id,
            seq=11,
            step_path=s,
            session_id=sess,
            turns=2,
            usage=Usage(input_tokens=380, output_tokens=120, cached_input_tokens=120),
        ),
        StepCompleted(
            run_id=run_id,
            seq=12,
            step_path=s,
            step_id=s,
            output_json=canonical_json("Kafka is a log."),
        ),
        RunCompleted(run_id=run_id, seq=13, output_json=canonical_json("Kafka is a log.")),
    ]
    return events


def run_demo(data_dir: Path, console: Console) -> None:
    shutil.rmtree(data_dir, ignore_errors=True)
    run_id = f"run_demo_{uuid.uuid4().hex[:8]}"
    with little.local_world(data_dir) as world:
        events = sample_run(run_id)
        positions = world.append(events[:5])  # claim, start, plan step, research step begins
        positions += world.append(events[5:])
        console.print(
            f"wrote run [bold]{run_id}[/] to {world.description}: {len(positions)} events, "
            f"partition {positions[0].partition}, offsets {positions[0].offset}..{positions[-1].offset}"
        )
        replayed = list(world.read_run(run_id))
    table = Table(title=f"replay of {run_id} (read back and decoded from the log)")
    for col in ("offset", "seq", "type", "step", "detail"):
        table.add_column(col)
    for row in replayed:
        e = row.event
        detail = ""
        if isinstance(e, ModelResponded):
            detail = (
                f"turn {e.turn}: {e.usage.input_tokens} in / {e.usage.output_tokens} out tokens"
            )
        elif isinstance(e, ToolCallStarted):
            detail = f"{e.tool}({e.arguments_json})"
        elif isinstance(e, StepCompleted | RunCompleted):
            detail = e.output_json or ""
        table.add_row(str(row.offset), str(e.seq), e.type, e.step_path or "", detail)
    console.print(table)
    assert [r.event for r in replayed] == events, "the log must give back exactly what was written"
    console.print(f"{len(replayed)} events read back equal to those written.")
