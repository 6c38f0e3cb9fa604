"""``little demo``: the main job on the embedded world, through the public API only.

Two writers record one research run: the first dies in the middle of an agent session (after
``harness.model.called`` of turn 2 is acked, before its response); the second claims the run
with a higher epoch, replays it, skips the finished step, serves turn 1 and the tool call from
the log and runs only turn 2 again. A late write by the dead writer is fenced. Then the run is
snapshotted and replayed from the snapshot, and the report shows billed versus avoided.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

from rich.console import Console
from rich.table import Table

import little
from little._canonical import canonical_hash, canonical_json
from little.events import (
    Event,
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
from little.replay import Snapshot, encode_snapshot, replay_run

PROVIDER, MODEL = "openai", "gpt-4o-mini"
STEP = "research"
SESSION = f"{STEP}#agent"
MANIFEST = {"model": f"{PROVIDER}:{MODEL}", "tools": ["search"], "system_prompt_hash": "0" * 64}
Message = dict[str, object]
REQUEST_1: list[Message] = [{"role": "user", "content": "Find three facts about Kafka."}]
REQUEST_2: list[Message] = [
    *REQUEST_1,
    {"role": "assistant", "tool_calls": [{"id": "c1", "name": "search"}]},
    {"role": "tool", "tool_call_id": "c1", "content": '["log","partitions","offsets"]'},
]


def _turn(
    run_id: str,
    seq: int,
    epoch: int,
    turn: int,
    request: list[Message],
    previous: list[Message] | None,
) -> ModelCalled:
    appended = request[len(previous or []) :]
    return ModelCalled(
        run_id=run_id,
        seq=seq,
        epoch=epoch,
        step_path=STEP,
        session_id=SESSION,
        turn=turn,
        provider=PROVIDER,
        model=MODEL,
        request_hash=canonical_hash(request),
        previous_request_hash=canonical_hash(previous) if previous else None,
        appended_messages_json=canonical_json(appended),
        message_count=len(request),
    )


def first_writer(run_id: str) -> list[Event]:
    """Epoch 1: everything up to the write-ahead record of turn 2, then the process dies."""
    e = 1
    return [
        RunClaimed(run_id=run_id, epoch=e, owner="writer-1", observed_seq=-1),
        RunStarted(
            run_id=run_id,
            seq=0,
            epoch=e,
            workflow="research",
            workflow_version="1",
            input_json=canonical_json({"topic": "Kafka"}),
        ),
        StepStarted(run_id=run_id, seq=1, epoch=e, step_path="plan", step_id="plan"),
        StepCompleted(
            run_id=run_id,
            seq=2,
            epoch=e,
            step_path="plan",
            step_id="plan",
            output_json=canonical_json(["search", "summarise"]),
        ),
        StepStarted(run_id=run_id, seq=3, epoch=e, step_path=STEP, step_id=STEP),
        SessionStarted(
            run_id=run_id,
            seq=4,
            epoch=e,
            step_path=STEP,
            session_id=SESSION,
            session_name="agent",
            model=f"{PROVIDER}:{MODEL}",
            manifest_json=canonical_json(MANIFEST),
            manifest_hash=canonical_hash(MANIFEST),
        ),
        _turn(run_id, 5, e, 1, REQUEST_1, None),
        ModelResponded(
            run_id=run_id,
            seq=6,
            epoch=e,
            step_path=STEP,
            session_id=SESSION,
            turn=1,
            provider=PROVIDER,
            model=MODEL,
            request_hash=canonical_hash(REQUEST_1),
            response_json=canonical_json({"tool_calls": [{"id": "c1", "name": "search"}]}),
            usage=Usage(input_tokens=1_200, output_tokens=300),
        ),
        ToolCallStarted(
            run_id=run_id,
            seq=7,
            epoch=e,
            step_path=STEP,
            session_id=SESSION,
            call_id="c1",
            tool="search",
            turn=1,
            arguments_json=canonical_json({"q": "Kafka"}),
            idempotency_key=f"{run_id}/{STEP}/c1",
        ),
        ToolCallSucceeded(
            run_id=run_id,
            seq=8,
            epoch=e,
            step_path=STEP,
            session_id=SESSION,
            call_id="c1",
            tool="search",
            result_json=canonical_json(["log", "partitions", "offsets"]),
        ),
        _turn(run_id, 9, e, 2, REQUEST_2, REQUEST_1),
    ]


def second_writer(run_id: str, observed_seq: int) -> list[Event]:
    """Epoch 2: the claim, then only the in-flight call's result and what follows it."""
    e = 2
    answer = canonical_json("Kafka is a partitioned, replicated commit log.")
    return [
        ModelResponded(
            run_id=run_id,
            seq=observed_seq + 1,
            epoch=e,
            step_path=STEP,
            session_id=SESSION,
            turn=2,
            provider=PROVIDER,
            model=MODEL,
            request_hash=canonical_hash(REQUEST_2),
            response_json=answer,
            usage=Usage(input_tokens=2_600, output_tokens=900, cached_input_tokens=1_200),
        ),
        SessionCompleted(
            run_id=run_id,
            seq=observed_seq + 2,
            epoch=e,
            step_path=STEP,
            session_id=SESSION,
            turns=2,
            output_json=answer,
            usage=Usage(input_tokens=3_800, output_tokens=1_200, cached_input_tokens=1_200),
        ),
        StepCompleted(
            run_id=run_id,
            seq=observed_seq + 3,
            epoch=e,
            step_path=STEP,
            step_id=STEP,
            output_json=answer,
        ),
        RunCompleted(run_id=run_id, seq=observed_seq + 4, epoch=e, output_json=answer),
    ]


def run_demo(data_dir: Path, console: Console) -> str:
    shutil.rmtree(data_dir, ignore_errors=True)
    run_id = f"run_demo_{uuid.uuid4().hex[:8]}"
    with little.local_world(data_dir) as world:
        written = world.append(first_writer(run_id))
        console.print(
            f"writer 1 recorded [bold]{run_id}[/] ({len(written)} events, partition "
            f"{written[0].partition}) and died after turn 2 of the agent session was logged "
            "but before the model answered."
        )

        before = replay_run(world, run_id)
        session = before.state.session(SESSION)
        assert session is not None
        plan = Table(title="replay plan read from the log by writer 2")
        for col in ("step", "status", "on resume"):
            plan.add_column(col)
        for step in before.steps:
            plan.add_row(step.step_path, step.status, "run" if step.should_run else "skip")
        console.print(plan)
        calls = Table(title=f"agent session {SESSION}: calls on resume")
        for col in ("call", "status in log", "on resume"):
            calls.add_column(col)
        for t in session.turns:
            calls.add_row(
                f"model turn {t.turn}",
                t.status,
                "served from the log" if t.status == "responded" else "invoke again",
            )
        for c in session.tool_calls:
            calls.add_row(
                f"tool {c.tool}({c.call_id})",
                c.status,
                "served from the log" if c.status == "succeeded" else "invoke again",
            )
        console.print(calls)

        observed = before.state.last_seq
        world.append([RunClaimed(run_id=run_id, epoch=2, owner="writer-2", observed_seq=observed)])
        world.append(second_writer(run_id, observed))
        # The first writer was not dead after all: its late write carries epoch 1 and is fenced.
        world.append(
            [
                ToolCallStarted(
                    run_id=run_id,
                    seq=observed + 1,
                    epoch=1,
                    step_path=STEP,
                    session_id=SESSION,
                    call_id="c2",
                    tool="search",
                    turn=2,
                    arguments_json="{}",
                    idempotency_key=f"{run_id}/{STEP}/c2",
                )
            ]
        )

        full = replay_run(world, run_id, use_snapshot=False)
        # A snapshot of the state writer 2 read before resuming: replay folds only what follows.
        world.snapshots.put(run_id, encode_snapshot(Snapshot.of(before.state)))
        again = replay_run(world, run_id)
        assert again.state == full.state, "a snapshot must fold to the same state"
        console.print(
            f"snapshot at offset {again.from_snapshot.offset if again.from_snapshot else '?'}: "
            f"replay from it folded {again.events_folded} event(s) instead of {full.events_folded}, "
            "same state."
        )
    from little.cli._app import print_report

    print_report(again)
    return run_id
