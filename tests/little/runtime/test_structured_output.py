"""Structured output (issue 28 item 3): ``agent.run(prompt, output=Model)`` asks the model for
that schema, validates the answer, asks again with the error when it does not validate (each a
recorded turn, at most ``output_retries`` times), returns the validated object, and a replay
serves it; the schema is in the call's key and the session's configuration."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from pydantic import BaseModel

import little
from little.errors import CapabilityDriftError
from little.events import AgentCallSettled, ModelCalled, SessionStarted, Usage
from little.harness import ModelRequest, ModelResponse, ScriptedModel
from little.runtime import (
    OutputValidationError,
    StepContext,
    WorkflowContext,
    execute,
    run,
    workflow,
)

USAGE = Usage(input_tokens=10, output_tokens=5)


class Invoice(BaseModel):
    number: str
    total: float


class Receipt(BaseModel):
    number: str
    total: float
    paid: bool


REQUESTS: list[ModelRequest] = []


class Recording(ScriptedModel):
    async def complete(self, request: ModelRequest) -> ModelResponse:
        REQUESTS.append(request)
        return await super().complete(request)


def answer(text: str) -> ModelResponse:
    return ModelResponse(content=text, usage=USAGE, finish_reason="stop")


@pytest.fixture
def world(tmp_path: Path) -> Iterator[little.World]:
    REQUESTS.clear()
    with little.local_world(tmp_path / "world") as w:
        yield w


def events(world: little.World, run_id: str) -> list[little.Event]:
    return [x.event for x in world.read_run(run_id)]


def flow(
    name: str,
    script: list[ModelResponse],
    output: Any,
    retries: int | None = None,
    version: str = "1",
    session: dict[str, Any] | None = None,
) -> Any:
    async def ask(step: StepContext, _: None) -> Any:
        async with step.session("agent", model=Recording(script), **(session or {})) as agent:
            got = await agent.run("Read the invoice.", output=output, output_retries=retries)
            expected = output or (session or {}).get("output")
            if isinstance(got, BaseModel):
                assert isinstance(got, expected)  # the validated object itself
            return got

    async def wf(ctx: WorkflowContext, _: None) -> Any:
        return await ctx.step("read", ask, None)

    return workflow(name, version=version)(wf)


def test_the_answer_is_asked_for_validated_and_returned_as_the_model(
    world: little.World,
) -> None:
    wf = flow("tests.so.basic", [answer('{"number": "A-1", "total": 12.5}')], Invoice)
    result = asyncio.run(run(world, wf, None))
    assert result.status == "completed", result.error
    assert result.output == Invoice(number="A-1", total=12.5)  # the step returned the object
    state = little.replay_run(world, result.run_id).state
    assert state.output_json == '{"number":"A-1","total":12.5}'  # recorded as its JSON
    (request,) = REQUESTS
    assert request.output is not None
    assert (request.output.name, request.output.schema) == ("Invoice", Invoice.model_json_schema())


def test_an_invalid_answer_is_sent_back_with_its_error_each_retry_a_recorded_turn(
    world: little.World,
) -> None:
    script = [answer('{"number": "A-1"}'), answer('{"number": "A-1", "total": 3}')]
    result = asyncio.run(run(world, flow("tests.so.retry", script, Invoice), None))
    assert result.status == "completed", result.error
    assert result.output == Invoice(number="A-1", total=3)
    assert len(REQUESTS) == 2
    told = REQUESTS[1].messages[-1]
    assert told["role"] == "user"
    assert "does not match the required output schema 'Invoice'" in told["content"]
    assert "total: Field required" in told["content"]
    log = events(world, result.run_id)
    assert [e.turn for e in log if isinstance(e, ModelCalled)] == [1, 2]
    (settled,) = [e for e in log if isinstance(e, AgentCallSettled)]
    assert (settled.outcome, settled.model_calls) == ("succeeded", 2)


def test_retries_are_bounded_then_the_call_fails_with_the_error(world: little.World) -> None:
    bad = answer('{"number": 7}')

    async def ask(step: StepContext, _: None) -> Any:
        async with step.session("agent", model=Recording([bad, bad, bad])) as agent:
            try:
                await agent.run("Read it.", output=Invoice, output_retries=1)
            except OutputValidationError as exc:
                return {"schema": exc.schema, "error": exc.error}
        raise AssertionError("validated")

    async def wf(ctx: WorkflowContext, _: None) -> Any:
        return await ctx.step("read", ask, None)

    result = asyncio.run(run(world, workflow("tests.so.bounded", version="1")(wf), None))
    assert result.status == "completed", result.error
    assert result.output["schema"] == "Invoice"
    assert "number: Input should be a valid string" in result.output["error"]
    assert len(REQUESTS) == 2  # the answer, and one retry
    (settled,) = [e for e in events(world, result.run_id) if isinstance(e, AgentCallSettled)]
    assert settled.outcome == "failed"


def test_a_json_schema_dict_is_validated_and_returns_the_json(world: little.World) -> None:
    schema = {
        "title": "Verdict",
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
    }
    script = [answer('{"ok": "yes"}'), answer('{"ok": true}')]
    result = asyncio.run(run(world, flow("tests.so.dict", script, schema), None))
    assert result.status == "completed", result.error
    assert result.output == {"ok": True}
    assert REQUESTS[0].output is not None
    assert REQUESTS[0].output.name == "Verdict"
    assert "ok: 'yes' is not of type 'boolean'" in REQUESTS[1].messages[-1]["content"]


def test_a_replay_serves_the_validated_object_and_a_changed_schema_misses_naming_it(
    world: little.World,
) -> None:
    script = [answer('{"number": "A-1", "total": 12.5, "paid": true}')]
    source = asyncio.run(run(world, flow("tests.so.replay", script, Invoice), None))
    assert source.status == "completed", source.error
    REQUESTS.clear()

    same = asyncio.run(
        run(
            world,
            flow("tests.so.replay", script, Invoice, version="2"),
            None,
            replay_from=source.run_id,
        )
    )
    assert same.output == Invoice(number="A-1", total=12.5)  # validated from the record
    assert REQUESTS == []  # served: no model call
    assert same.replay is not None
    assert same.replay.replayed_calls == 1

    with structlog.testing.capture_logs() as logs:
        changed = asyncio.run(
            run(
                world,
                flow("tests.so.replay", script, Receipt, version="3"),
                None,
                replay_from=source.run_id,
            )
        )
    assert changed.output == Receipt(number="A-1", total=12.5, paid=True)
    assert len(REQUESTS) == 1  # asked again, for the new schema
    assert changed.replay is not None
    assert changed.replay.miss_reason == "configuration-changed"
    (miss,) = [e for e in logs if e["event"] == "replay_call_configuration_changed"]
    assert miss["changed"] == ["output"]

    # old recordings keep their keys: a call without a schema is served as before
    REQUESTS.clear()
    plain = [answer("free text")]
    first = asyncio.run(run(world, flow("tests.so.plain", plain, None), None))
    again = asyncio.run(
        run(world, flow("tests.so.plain", plain, None, version="2"), None, replay_from=first.run_id)
    )
    assert (again.output, len(REQUESTS)) == ("free text", 1)


def test_a_sessions_output_is_its_configuration(world: little.World) -> None:
    script = [answer('{"number": "A-1", "total": 1}')]
    first = asyncio.run(
        run(world, flow("tests.so.session", script, None, session={"output": Invoice}), None)
    )
    assert first.output == Invoice(number="A-1", total=1)
    (started,) = [e for e in events(world, first.run_id) if isinstance(e, SessionStarted)]
    manifest = json.loads(started.manifest_json)
    assert manifest["output"] == {"name": "Invoice", "schema": Invoice.model_json_schema()}

    REQUESTS.clear()
    replay = asyncio.run(
        run(
            world,
            flow("tests.so.session", script, None, version="2", session={"output": Receipt}),
            None,
            replay_from=first.run_id,
        )
    )
    assert replay.replay is not None
    assert replay.replay.miss_reason == "configuration-changed"
    # a session without one records no output part: older manifests keep their hash
    plain = asyncio.run(run(world, flow("tests.so.noout", [answer("x")], None), None))
    (started,) = [e for e in events(world, plain.run_id) if isinstance(e, SessionStarted)]
    assert "output" not in json.loads(started.manifest_json)


class Crash(BaseException):
    """Stands in for the process dying in the model call: not an Exception."""


def test_a_resume_under_another_session_output_is_capability_drift(world: little.World) -> None:
    chosen: dict[str, Any] = {"output": Invoice, "crash": True}

    class Dying(ScriptedModel):
        async def complete(self, request: ModelRequest) -> ModelResponse:
            if chosen["crash"]:
                raise Crash
            return await super().complete(request)

    async def ask(step: StepContext, _: None) -> Any:
        model = Dying([answer('{"number": "A-1", "total": 1, "paid": false}')])
        async with step.session("agent", model=model, output=chosen["output"]) as agent:
            return await agent.run("Read it.")

    async def flow(ctx: WorkflowContext, _: None) -> Any:
        return await ctx.step("read", ask, None)

    wf = workflow("tests.so.drift", version="1")(flow)
    with pytest.raises(Crash):
        asyncio.run(execute(world, "run_so_drift", wf, None))
    chosen.update(output=Receipt, crash=False)
    with pytest.raises(CapabilityDriftError, match="output"):
        asyncio.run(execute(world, "run_so_drift", wf, None))
    chosen["output"] = Invoice  # the code the run was recorded by resumes it
    done = asyncio.run(execute(world, "run_so_drift", wf, None))
    assert done.output == Invoice(number="A-1", total=1)
