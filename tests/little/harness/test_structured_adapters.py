"""Structured output over the real ``openai`` and ``anthropic`` clients (issue 28 item 3): each
adapter asks for the schema the provider's native way (OpenAI ``response_format`` json_schema,
Anthropic a forced tool), the session validates the answer, sends an invalid one back with its
error, and returns the validated object; no network (an ``httpx2.MockTransport``)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import little
from little.harness import Model, ModelRequest, OutputSchema, ToolCallRequest
from little.runtime import StepContext, WorkflowContext, run, workflow
from tests.little.harness.test_adapters import (
    WEATHER,
    Recorded,
    anthropic_message,
    anthropic_model,
    chat_completion,
    openai_model,
)


class Forecast(BaseModel):
    city: str
    celsius: float


SCHEMA = Forecast.model_json_schema()


def forecast_flow(name: str, model: Model) -> Any:
    async def ask(step: StepContext, _: None) -> Any:
        async with step.session("agent", model=model) as agent:
            got = await agent.run("Forecast for Paris?", output=Forecast)
            assert isinstance(got, Forecast)
            return got

    async def wf(ctx: WorkflowContext, _: None) -> Any:
        return await ctx.step("ask", ask, None)

    return workflow(name, version="1")(wf)


def openai_answer(content: str) -> dict[str, Any]:
    return chat_completion({"content": content}, "stop", prompt_tokens=80, completion_tokens=12)


def anthropic_forced(input: dict[str, Any]) -> dict[str, Any]:
    return anthropic_message(
        [{"type": "tool_use", "id": "toolu_01Forecast", "name": "Forecast", "input": input}],
        "tool_use",
        input_tokens=90,
        output_tokens=20,
    )


def test_openai_asks_with_response_format_and_an_invalid_answer_is_retried(
    tmp_path: Path,
) -> None:
    recorded = Recorded(
        (200, openai_answer('{"city": "Paris"}')),
        (200, openai_answer('{"city": "Paris", "celsius": 18}')),
    )
    with little.local_world(tmp_path) as world:
        result = asyncio.run(
            run(world, forecast_flow("tests.so.openai", openai_model(recorded)), None)
        )
    assert result.status == "completed", result.error
    assert result.output == Forecast(city="Paris", celsius=18)
    assert recorded.calls == 2
    first = recorded.body(0)
    assert first["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Forecast", "schema": SCHEMA},
    }
    second = recorded.body(1)
    assert second["response_format"] == first["response_format"]
    # the invalid answer went back as the assistant's, then the error as the user's
    assert second["messages"][-2] == {"role": "assistant", "content": '{"city": "Paris"}'}
    assert second["messages"][-1]["role"] == "user"
    assert "celsius: Field required" in second["messages"][-1]["content"]


def test_anthropic_forces_a_tool_of_the_schema_and_its_input_is_the_answer(
    tmp_path: Path,
) -> None:
    recorded = Recorded(
        (200, anthropic_forced({"city": "Paris", "celsius": "warm"})),
        (200, anthropic_forced({"city": "Paris", "celsius": 18.5})),
    )
    with little.local_world(tmp_path) as world:
        result = asyncio.run(
            run(world, forecast_flow("tests.so.anthropic", anthropic_model(recorded)), None)
        )
    assert result.status == "completed", result.error
    assert result.output == Forecast(city="Paris", celsius=18.5)
    first = recorded.body(0)
    assert first["tools"] == [
        {
            "name": "Forecast",
            "description": "Give the final answer: its input is the answer, in this schema.",
            "input_schema": SCHEMA,
        }
    ]
    assert first["tool_choice"] == {"type": "tool", "name": "Forecast"}
    second = recorded.body(1)
    # the forced answer went back as the assistant's text, then the error as the user's
    assert second["messages"][-2] == {
        "role": "assistant",
        "content": [{"type": "text", "text": '{"celsius":"warm","city":"Paris"}'}],
    }
    assert "celsius: Input should be a valid number" in json.dumps(second["messages"][-1])


def test_anthropic_with_tools_of_its_own_lets_the_model_call_them_or_answer() -> None:
    recorded = Recorded(
        (
            200,
            anthropic_message(
                [
                    {
                        "type": "tool_use",
                        "id": "toolu_01W",
                        "name": "get_weather",
                        "input": {"city": "Paris"},
                    }
                ],
                "tool_use",
                input_tokens=90,
                output_tokens=20,
            ),
        ),
        (200, anthropic_forced({"city": "Paris", "celsius": 18})),
    )
    model = anthropic_model(recorded)
    output = OutputSchema("Forecast", SCHEMA)
    request = ModelRequest(None, ({"role": "user", "content": "Paris?"},), (WEATHER,), output)
    first = asyncio.run(model.complete(request))
    assert first.tool_calls == (ToolCallRequest("toolu_01W", "get_weather", {"city": "Paris"}),)
    body = recorded.body(0)
    assert body["tool_choice"] == {"type": "any"}
    assert [t["name"] for t in body["tools"]] == ["get_weather", "Forecast"]
    answer = asyncio.run(model.complete(request))
    assert (answer.content, answer.tool_calls, answer.finish_reason) == (
        '{"celsius":18,"city":"Paris"}',
        (),
        "stop",
    )


def test_without_an_output_the_bodies_are_unchanged() -> None:
    recorded = Recorded((200, openai_answer("hi")), (200, anthropic_forced({})))
    request = ModelRequest(None, ({"role": "user", "content": "hi"},), ())
    asyncio.run(openai_model(recorded).complete(request))
    assert "response_format" not in recorded.body(0)
    asyncio.run(anthropic_model(recorded).complete(request))
    assert "tool_choice" not in recorded.body(1)
    assert "tools" not in recorded.body(1)
