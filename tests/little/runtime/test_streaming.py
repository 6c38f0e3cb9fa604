"""Native streaming (issue 28 item 1): ``agent.stream(prompt)`` / ``agent.run(prompt,
on_delta=...)`` hand on each model turn's text deltas as the model sends them, the call recorded
write-ahead and its response when its stream ends; a resume or a full replay yields the recorded
text (one delta per model turn); a consumer that stops early records the turn and the exchange
as failed (``StreamStoppedError``) and a resume asks the model again. On the embedded world
and on the broker."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

import little
from little.events import (
    AgentCallSettled,
    ModelCalled,
    ModelFailed,
    ModelResponded,
    ToolCallStarted,
)
from little.harness import (
    ModelRequest,
    ModelResponse,
    ModelStreamItem,
    ProviderFailure,
    RetryPolicy,
    ScriptedModel,
    ToolCallRequest,
    ToolContext,
    tool,
)
from little.runtime import (
    StepContext,
    Workflow,
    WorkflowContext,
    execute,
    follow,
    resume,
    run,
    send_signal,
    workflow,
)

LOOKUP = ModelResponse(
    content="Let me look.",
    tool_calls=(ToolCallRequest("c1", "look_up", {"term": "Kafka"}),),
    finish_reason="tool_calls",
)
CHUNKS = ["Kafka ", "is ", "a log."]
ANSWER = "Kafka is a log."


class Bench:
    """What the test's model, tool and consumer did, in order."""

    def __init__(self) -> None:
        self.timeline: list[str] = []
        self.looked_up = 0
        self.world: little.World | None = None
        self.run_id = ""
        self.written_ahead: list[bool] = []
        """Per stream asked of the model: its turn's ``harness.model.called`` was in the log."""


BENCH = Bench()
NAMES = itertools.count()
"""Workflow names and run ids (a test's workflows are new each time; no randomness, which a
replay's source scan would refuse)."""


@pytest.fixture(params=["embedded", pytest.param("kafka", marks=pytest.mark.kafka)])
def world(request: pytest.FixtureRequest, tmp_path: Path, unique: str) -> Iterator[little.World]:
    global BENCH
    BENCH = Bench()
    if request.param == "embedded":
        with little.local_world(tmp_path / "world") as w:
            BENCH.world = w
            yield w
        return
    bootstrap = request.getfixturevalue("kafka_bootstrap_servers")
    with little.kafka_world(
        bootstrap,
        topic_prefix=f"stream-{unique}.",
        provision=True,
        artifacts_dir=str(tmp_path / "artifacts"),
    ) as w:
        BENCH.world = w
        yield w


class TimedModel(ScriptedModel):
    """A scripted model that logs each delta it produces and, when asked for a stream, whether
    its call was already recorded (write-ahead)."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamItem]:
        turn = 1 + sum(1 for m in request.messages if m.get("role") == "assistant")
        assert BENCH.world is not None
        events = [x.event for x in BENCH.world.read_run(BENCH.run_id)]
        BENCH.written_ahead.append(
            any(isinstance(e, ModelCalled) and e.turn == turn for e in events)
            and not any(isinstance(e, ModelResponded) and e.turn == turn for e in events)
        )
        async for item in super().stream(request):
            if isinstance(item, str):
                BENCH.timeline.append(f"produced {item!r}")
            yield item


@tool(description="Looks a term up.", parameters={"type": "object"})
async def look_up(args: dict[str, Any], ctx: ToolContext) -> str:
    BENCH.looked_up += 1
    return f"{args['term']}: a log"


def model() -> TimedModel:
    return TimedModel([LOOKUP, CHUNKS])


def flow(step_fn: Any) -> Workflow:
    async def wf(ctx: WorkflowContext, prompt: str) -> Any:
        return await ctx.step("ask", step_fn, prompt)

    return workflow(f"tests.stream.{next(NAMES)}", version="1")(wf)


async def consume(step: StepContext, prompt: str) -> dict[str, Any]:
    deltas: list[str] = []
    async with step.session("agent", model=model(), tools=[look_up]) as agent:
        stream = agent.stream(prompt)
        async for delta in stream:
            BENCH.timeline.append(f"consumed {delta!r}")
            deltas.append(delta)
        return {"deltas": deltas, "answer": stream.answer}


def events(world: little.World, run_id: str) -> list[Any]:
    return [x.event for x in world.read_run(run_id)]


def start(world: little.World, wf: Workflow, prompt: str = "What is Kafka?") -> Any:
    BENCH.run_id = f"run_stream_{next(NAMES)}"
    return asyncio.run(run(world, wf, prompt, run_id=BENCH.run_id))


def test_a_stream_is_live_written_ahead_and_recorded_when_it_ends(world: little.World) -> None:
    result = start(world, flow(consume))
    assert result.status == "completed", result.error
    assert result.output == {"deltas": ["Let me look.", *CHUNKS], "answer": ANSWER}
    # live: each delta reached the consumer before the model produced the next one
    assert BENCH.timeline == [
        f"{what} {d!r}" for d in ["Let me look.", *CHUNKS] for what in ("produced", "consumed")
    ]
    assert BENCH.written_ahead == [True, True]  # each turn's call acked before it was asked
    log = events(world, result.run_id)
    assert [
        (type(e).__name__, e.turn) for e in log if isinstance(e, ModelCalled | ModelResponded)
    ] == [
        ("ModelCalled", 1),
        ("ModelResponded", 1),
        ("ModelCalled", 2),
        ("ModelResponded", 2),
    ]
    responded = [e for e in log if isinstance(e, ModelResponded)]
    assert '"content":"Kafka is a log."' in (responded[-1].response_json or "")
    assert [e.call_id for e in log if isinstance(e, ToolCallStarted)] == ["1:c1"]
    assert BENCH.looked_up == 1  # the tool call of the streamed turn ran (recorded) once
    assert [e.outcome for e in log if isinstance(e, AgentCallSettled)] == ["succeeded"]


def test_run_with_on_delta_streams_to_a_callback_sync_or_async(world: little.World) -> None:
    async def ask(step: StepContext, prompt: str) -> dict[str, Any]:
        seen: list[str] = []
        later: list[str] = []

        async def collect(delta: str) -> None:
            await asyncio.sleep(0)
            later.append(delta)

        async with step.session("agent", model=model(), tools=[look_up]) as agent:
            first = await agent.run(prompt, on_delta=seen.append)
            second = await agent.run("Again?", on_delta=collect)
        return {"first": first, "seen": seen, "second": second, "later": later}

    result = start(world, flow(ask))
    assert result.status == "completed", result.error
    assert result.output["first"] == ANSWER
    assert result.output["seen"] == ["Let me look.", *CHUNKS]
    # the script's third turn: the exhausted answer, one delta
    assert result.output["later"] == [result.output["second"]] == ["(script exhausted)"]


class Crash(BaseException):
    """Stands in for the process dying: not an Exception, so nothing records it."""


def test_a_resume_after_a_crash_yields_the_recorded_text_one_delta_per_turn(
    world: little.World,
) -> None:
    crashed: list[bool] = []

    async def crash_once(step: StepContext, prompt: str) -> dict[str, Any]:
        out = await consume(step, prompt)
        if not crashed:
            crashed.append(True)
            raise Crash
        return out

    wf = flow(crash_once)
    BENCH.run_id = run_id = f"run_stream_{next(NAMES)}"
    with pytest.raises(Crash):
        asyncio.run(execute(world, run_id, wf, "What is Kafka?"))
    assert BENCH.looked_up == 1
    produced = [t for t in BENCH.timeline if t.startswith("produced")]
    BENCH.timeline.clear()

    result = asyncio.run(resume(world, run_id, wf))
    assert result.status == "completed", result.error
    # served from the run's own log: each turn's recorded text as one delta; nothing invoked
    assert result.output == {"deltas": ["Let me look.", ANSWER], "answer": ANSWER}
    assert not [t for t in BENCH.timeline if t.startswith("produced")]
    assert len(produced) == 4
    assert BENCH.looked_up == 1
    assert len([e for e in events(world, run_id) if isinstance(e, ModelCalled)]) == 2


def test_a_replay_serves_the_recorded_text_invoking_nothing(world: little.World) -> None:
    wf = flow(consume)
    source = start(world, wf)
    assert source.status == "completed", source.error
    BENCH.timeline.clear()
    replay = asyncio.run(run(world, wf, "What is Kafka?", replay_from=source.run_id))
    assert replay.status == "completed", replay.error
    assert replay.output == {"deltas": ["Let me look.", ANSWER], "answer": ANSWER}
    log = events(world, replay.run_id)
    assert [e.replayed for e in log if isinstance(e, AgentCallSettled)] == [True]
    assert not [e for e in log if isinstance(e, ModelCalled)]
    assert not [t for t in BENCH.timeline if t.startswith("produced")]  # no model invoked
    assert BENCH.looked_up == 1  # the source's call only


@pytest.mark.parametrize("how", ["aclose", "async with", "break"])
def test_a_consumer_that_stops_early_fails_the_turn_and_a_resume_asks_again(
    world: little.World, how: str
) -> None:
    """The first execution reads one delta of the answer, then stops (``aclose()``, leaving
    ``async with``, or a bare ``break``: closed when the session ends) and waits for a signal;
    the turn in flight and the exchange are recorded as failed; the resume asks the model for
    that turn again and this time reads the stream to its end."""
    executions: list[int] = []

    async def stop_once(step: StepContext, prompt: str) -> dict[str, Any]:
        executions.append(1)
        stopping = len(executions) == 1
        deltas: list[str] = []
        async with step.session("agent", model=model(), tools=[look_up]) as agent:
            if stopping and how == "async with":
                async with agent.stream(prompt) as s:
                    async for delta in s:
                        deltas.append(delta)
                        if delta == CHUNKS[0]:
                            break
            else:
                stream = agent.stream(prompt)
                async for delta in stream:
                    deltas.append(delta)
                    if stopping and delta == CHUNKS[0]:
                        break
                if stopping and how == "aclose":
                    await stream.aclose()
                    assert not stream.done
        await step.wait_for_signal("go")
        return {"deltas": deltas}

    wf = flow(stop_once)
    first = start(world, wf)
    assert first.status == "waiting", first.error
    log = events(world, first.run_id)
    (failed,) = [e for e in log if isinstance(e, ModelFailed)]
    assert (failed.turn, failed.error_type) == (2, "StreamStoppedError")
    assert "consumer stopped before its end" in failed.message
    assert [e.turn for e in log if isinstance(e, ModelResponded)] == [1]
    assert [e.outcome for e in log if isinstance(e, AgentCallSettled)] == ["failed"]
    # the model's stream was closed where the consumer stopped
    assert [t for t in BENCH.timeline if t.startswith("produced")][-1] == f"produced {CHUNKS[0]!r}"

    BENCH.timeline.clear()
    asyncio.run(send_signal(world, first.run_id, "go"))
    done = asyncio.run(follow(world, first.run_id))
    assert done.status == "completed", done.error
    # turn 1 served from the log (one delta); turn 2, failed, streamed from the model again
    assert done.output == {"deltas": ["Let me look.", *CHUNKS]}
    assert [t for t in BENCH.timeline if t.startswith("produced")] == [
        f"produced {c!r}" for c in CHUNKS
    ]
    assert BENCH.looked_up == 1
    log = events(world, first.run_id)
    assert [e.turn for e in log if isinstance(e, ModelCalled)] == [1, 2, 2]
    assert [e.outcome for e in log if isinstance(e, AgentCallSettled)] == ["failed", "succeeded"]


def test_an_error_raised_by_on_delta_is_the_turns_recorded_failure(world: little.World) -> None:
    async def ask(step: StepContext, prompt: str) -> str:
        def refuse(delta: str) -> None:
            if delta == CHUNKS[1]:
                raise ValueError("no more")

        async with step.session("agent", model=model(), tools=[look_up]) as agent:
            try:
                await agent.run(prompt, on_delta=refuse)
            except ValueError as exc:
                return f"caught {exc}"
        return "not raised"

    result = start(world, flow(ask))
    assert (result.status, result.output) == ("completed", "caught no more"), result.error
    log = events(world, result.run_id)
    (failed,) = [e for e in log if isinstance(e, ModelFailed)]
    assert (failed.turn, failed.error_type, failed.message) == (2, "ValueError", "no more")
    assert [e.outcome for e in log if isinstance(e, AgentCallSettled)] == ["failed"]


class Flaky(Exception):
    """A provider error the test's retry policy calls retryable."""


class FlakyModel:
    """Its stream fails once before its first delta (``before``) or after it (``after``)."""

    provider = "scripted"
    name = "flaky"

    def __init__(self, when: str) -> None:
        self.when = when
        self.attempts = 0
        self.waits: list[float] = []

        async def record(seconds: float) -> None:
            self.waits.append(seconds)

        self.retry_policy = RetryPolicy(
            max_retries=2,
            base_delay=0.5,
            classify=lambda exc: ProviderFailure(isinstance(exc, Flaky)),
            sleep=record,
        )

    async def complete(self, request: ModelRequest) -> ModelResponse:
        raise AssertionError("a streamed session asks stream()")

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamItem]:
        self.attempts += 1
        if self.attempts == 1 and self.when == "before":
            raise Flaky("overloaded")
        yield "Kafka "
        if self.attempts == 1 and self.when == "after":
            raise Flaky("connection reset")
        if self.when == "refused after":
            raise ValueError("bad request")
        yield "is a log."
        yield ModelResponse(content=ANSWER, finish_reason="stop")


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_stream_failing_before_its_first_delta_is_retried_after_one_it_is_not(
    world: little.World, when: str
) -> None:
    flaky = FlakyModel(when)

    async def ask(step: StepContext, prompt: str) -> Any:
        deltas: list[str] = []
        async with step.session("agent", model=flaky) as agent:
            try:
                answer = await agent.run(prompt, on_delta=deltas.append)
            except Flaky as exc:
                return {"deltas": deltas, "error": str(exc)}
        return {"deltas": deltas, "answer": answer}

    result = start(world, flow(ask))
    assert result.status == "completed", result.error
    log = events(world, result.run_id)
    model_events = [
        (type(e).__name__, getattr(e, "retryable", None))
        for e in log
        if isinstance(e, ModelCalled | ModelFailed | ModelResponded)
    ]
    if when == "before":
        assert result.output == {"deltas": ["Kafka ", "is a log."], "answer": ANSWER}
        assert model_events == [
            ("ModelCalled", None),
            ("ModelFailed", True),
            ("ModelCalled", None),
            ("ModelResponded", None),
        ]
        assert flaky.waits == [0.5]
    else:  # the consumer has a part of the first attempt's text: the turn ends there
        assert result.output == {"deltas": ["Kafka "], "error": "connection reset"}
        assert model_events == [("ModelCalled", None), ("ModelFailed", True)]
        assert flaky.waits == []
    assert flaky.attempts == (2 if when == "before" else 1)


def test_a_stream_failing_after_its_first_delta_is_recorded_as_its_policy_classifies_it(
    world: little.World,
) -> None:
    """Not retried either way once text was handed on; a failure the policy calls final is
    recorded ``retryable=false``, as the same failure of a turn not streamed is."""
    refusing = FlakyModel("refused after")

    async def ask(step: StepContext, prompt: str) -> Any:
        async with step.session("agent", model=refusing) as agent:
            try:
                await agent.run(prompt, on_delta=lambda delta: None)
            except ValueError as exc:
                return str(exc)
        return "not raised"

    result = start(world, flow(ask))
    assert (result.status, result.output) == ("completed", "bad request"), result.error
    (failed,) = [e for e in events(world, result.run_id) if isinstance(e, ModelFailed)]
    assert (failed.error_type, failed.retryable) == ("ValueError", False)


def test_a_callback_raising_a_generators_own_signal_fails_the_turn_not_the_stream(
    world: little.World,
) -> None:
    """``StopAsyncIteration`` or ``GeneratorExit`` from ``on_delta`` is the callback's error
    (a ``RuntimeError`` naming it), not the stream's end or the consumer's stop."""

    async def ask(step: StepContext, prompt: str) -> str:
        def stop(delta: str) -> None:
            raise StopAsyncIteration

        async with step.session("agent", model=model(), tools=[look_up]) as agent:
            try:
                await agent.run(prompt, on_delta=stop)
            except RuntimeError as exc:
                return str(exc)
        return "not raised"

    result = start(world, flow(ask))
    assert (result.status, result.output) == (
        "completed",
        "on_delta raised StopAsyncIteration",
    ), result.error
    log = events(world, result.run_id)
    (failed,) = [e for e in log if isinstance(e, ModelFailed)]
    assert failed.error_type == "RuntimeError"
    assert [e.outcome for e in log if isinstance(e, AgentCallSettled)] == ["failed"]
