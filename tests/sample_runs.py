"""Hand-written event streams of a crashed and resumed research run, for replay tests.

Two writers record one run: the first dies after turn 2 of the agent session was logged
(``harness.model.called``) but before the model's answer; the second claims the run with epoch 2
and writes only the in-flight call's result and what follows.
"""

from __future__ import annotations

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
