"""The OpenAI and Anthropic adapters against recorded HTTP responses: no network.

The SDKs (openai 3.x, anthropic 2.x) send through ``httpx2``, which respx does not patch, so
each test hands the SDK an ``httpx2.AsyncClient`` over a ``MockTransport`` that serves JSON
bodies shaped like the real APIs' responses and keeps every request it was sent.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest

import little
from little.events import ModelFailed, ModelResponded, Usage
from little.harness import Model, ModelRequest, ModelResponse, ToolCallRequest, ToolSpec, tool
from little.harness.adapters import AnthropicModel, OpenAIModel
from little.replay import replay_run
from little.runtime import StepContext, WorkflowContext, execute, resume, run, workflow
from tests.cli import little_cli
from tests.keyless import get_time, get_weather  # the keyless workflow's tools
from tests.paths import REPO

# -- recorded HTTP -----------------------------------------------------------------------------


class Recorded:
    """A mock transport: serves queued (status, JSON body) replies and keeps the requests."""

    def __init__(self, *replies: tuple[int, dict[str, Any]]) -> None:
        self.replies = list(replies)
        self.requests: list[httpx2.Request] = []

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        if not self.replies:
            raise AssertionError(f"unexpected HTTP call: {request.method} {request.url}")
        status, body = self.replies.pop(0)
        return httpx2.Response(status, json=body, headers={"request-id": "req_test"})

    @property
    def calls(self) -> int:
        return len(self.requests)

    def body(self, i: int) -> Any:
        return json.loads(self.requests[i].content)

    def http_client(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(transport=httpx2.MockTransport(self.handle))


def openai_model(recorded: Recorded, name: str = "gpt-4o-mini", **kw: Any) -> OpenAIModel:
    client = openai.AsyncOpenAI(
        api_key="sk-test",
        base_url="https://api.openai.com/v1",
        max_retries=0,
        http_client=recorded.http_client(),
    )
    return OpenAIModel(name, client=client, **kw)


def anthropic_model(
    recorded: Recorded, name: str = "claude-haiku-4-5", **kw: Any
) -> AnthropicModel:
    client = anthropic.AsyncAnthropic(
        api_key="sk-ant-test",
        base_url="https://api.anthropic.com",
        max_retries=0,
        http_client=recorded.http_client(),
    )
    return AnthropicModel(name, client=client, **kw)


# Bodies as the APIs return them (field for field, ids and fingerprints made up).


def chat_completion(
    message: dict[str, Any],
    finish_reason: str,
    *,
    prompt_tokens: int,
    completion_tokens: int,
    cached_tokens: int = 0,
    reasoning_tokens: int = 0,
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-BZ3kTq1mQ0dX9yW7vN2pL8sR4eF6a",
        "object": "chat.completion",
        "created": 1747900000,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "refusal": None, "annotations": [], **message},
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": reasoning_tokens,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        },
        "service_tier": "default",
        "system_fingerprint": "fp_34a54ae93c",
    }


OPENAI_TOOL_CALLS = chat_completion(
    {
        "content": None,
        "tool_calls": [
            {
                "id": "call_Wq1bA2",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "c"}'},
            },
            {
                "id": "call_Xr3cD4",
                "type": "function",
                "function": {"name": "get_time", "arguments": '{"tz":"Europe/Paris"}'},
            },
        ],
    },
    "tool_calls",
    prompt_tokens=1117,
    completion_tokens=46,
    cached_tokens=1024,
    reasoning_tokens=12,
)

OPENAI_ANSWER = chat_completion(
    {"content": "It is 18 degrees in Paris."},
    "stop",
    prompt_tokens=1210,
    completion_tokens=9,
    cached_tokens=1152,
)


def anthropic_message(
    content: list[dict[str, Any]],
    stop_reason: str,
    *,
    input_tokens: int,
    output_tokens: int,
    cache_read: int = 0,
    cache_write: int = 0,
) -> dict[str, Any]:
    return {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": "claude-haiku-4-5-20251001",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_tokens,
            "cache_creation_input_tokens": cache_write,
            "cache_read_input_tokens": cache_read,
            "cache_creation": {
                "ephemeral_5m_input_tokens": cache_write,
                "ephemeral_1h_input_tokens": 0,
            },
            "output_tokens": output_tokens,
            "service_tier": "standard",
        },
    }


ANTHROPIC_TOOL_USE = anthropic_message(
    [
        {"type": "text", "text": "I'll look that up."},
        {
            "type": "tool_use",
            "id": "toolu_01A09q90qw90lq917835lq9",
            "name": "get_weather",
            "input": {"city": "Paris", "unit": "c"},
        },
        {
            "type": "tool_use",
            "id": "toolu_01B77x12kd83jd74nf93ma2",
            "name": "get_time",
            "input": {"tz": "Europe/Paris"},
        },
    ],
    "tool_use",
    input_tokens=472,
    output_tokens=89,
    cache_read=1024,
    cache_write=100,
)

ANTHROPIC_ANSWER = anthropic_message(
    [{"type": "text", "text": "It is 18 degrees "}, {"type": "text", "text": "in Paris."}],
    "end_turn",
    input_tokens=60,
    output_tokens=12,
    cache_read=1596,
)

WEATHER = ToolSpec(
    "get_weather",
    "Current weather for a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
CLOCK = ToolSpec("get_time", "", {"type": "object", "properties": {"tz": {"type": "string"}}})

CONVERSATION: tuple[dict[str, Any], ...] = (
    {"role": "user", "content": "Weather and time in Paris?"},
    {
        "role": "assistant",
        "content": "Checking.",
        "tool_calls": [
            {"id": "c1", "name": "get_weather", "arguments": {"unit": "c", "city": "Paris"}},
            {"id": "c2", "name": "get_time", "arguments": {"tz": "Europe/Paris"}},
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": '{"temp":18}'},
    {"role": "tool", "tool_call_id": "c2", "content": '"19:05"'},
)


def complete(model: Model, request: ModelRequest) -> ModelResponse:
    return asyncio.run(model.complete(request))


def assert_tokens_only(usage: Usage) -> None:
    dumped = usage.model_dump()
    assert set(dumped) == {
        "input_tokens",
        "output_tokens",
        "cached_input_tokens",
        "reasoning_tokens",
    }
    assert not any("cost" in key for key in dumped)


# -- OpenAI --------------------------------------------------------------------------------------


def test_openai_request_translates_system_messages_tool_calls_and_tools() -> None:
    recorded = Recorded((200, OPENAI_ANSWER))
    model = openai_model(recorded, max_tokens=256, temperature=0)
    complete(model, ModelRequest("Be brief.", CONVERSATION, (WEATHER, CLOCK)))

    (request,) = recorded.requests
    assert request.method == "POST"
    assert str(request.url) == "https://api.openai.com/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test"
    assert recorded.body(0) == {
        "model": "gpt-4o-mini",
        "max_completion_tokens": 256,
        "temperature": 0,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather and time in Paris?"},
            {
                "role": "assistant",
                "content": "Checking.",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {
                            "name": "get_weather",
                            "arguments": '{"city":"Paris","unit":"c"}',
                        },
                    },
                    {
                        "id": "c2",
                        "type": "function",
                        "function": {"name": "get_time", "arguments": '{"tz":"Europe/Paris"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": '{"temp":18}'},
            {"role": "tool", "tool_call_id": "c2", "content": '"19:05"'},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Current weather for a city.",
                    "parameters": WEATHER.parameters,
                },
            },
            {"type": "function", "function": {"name": "get_time", "parameters": CLOCK.parameters}},
        ],
    }


def test_openai_request_is_deterministic_and_minimal() -> None:
    recorded = Recorded((200, OPENAI_ANSWER), (200, OPENAI_ANSWER))
    model = openai_model(recorded)
    request = ModelRequest(None, ({"role": "user", "content": "hi"},), ())
    complete(model, request)
    complete(model, request)
    assert recorded.requests[0].content == recorded.requests[1].content
    # no system message, no tools, no token cap unless asked for
    assert recorded.body(0) == {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "hi"}],
    }


def test_openai_response_parses_tool_calls_and_normalises_usage() -> None:
    recorded = Recorded((200, OPENAI_TOOL_CALLS))
    response = complete(openai_model(recorded), ModelRequest(None, CONVERSATION[:1], (WEATHER,)))
    assert response.content is None
    assert response.tool_calls == (
        ToolCallRequest("call_Wq1bA2", "get_weather", {"city": "Paris", "unit": "c"}),
        ToolCallRequest("call_Xr3cD4", "get_time", {"tz": "Europe/Paris"}),
    )
    assert response.finish_reason == "tool_calls"
    # prompt_tokens already counts the cached ones
    assert response.usage == Usage(
        input_tokens=1117, output_tokens=46, cached_input_tokens=1024, reasoning_tokens=12
    )
    assert_tokens_only(response.usage)


def test_openai_text_response() -> None:
    recorded = Recorded((200, OPENAI_ANSWER))
    response = complete(openai_model(recorded), ModelRequest(None, CONVERSATION, ()))
    assert response.content == "It is 18 degrees in Paris."
    assert response.tool_calls == ()
    assert response.finish_reason == "stop"
    assert response.usage == Usage(input_tokens=1210, output_tokens=9, cached_input_tokens=1152)


def test_openai_usage_without_details_and_length_finish() -> None:
    body = chat_completion({"content": "It is"}, "length", prompt_tokens=10, completion_tokens=2)
    del body["usage"]["prompt_tokens_details"], body["usage"]["completion_tokens_details"]
    response = complete(
        openai_model(Recorded((200, body))), ModelRequest(None, CONVERSATION[:1], ())
    )
    assert response.usage == Usage(input_tokens=10, output_tokens=2)
    assert response.finish_reason == "length"


def test_openai_invalid_arguments_are_kept_raw_and_sent_back_verbatim() -> None:
    bad = chat_completion(
        {
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Par'},
                }
            ],
        },
        "tool_calls",
        prompt_tokens=50,
        completion_tokens=5,
    )
    recorded = Recorded((200, bad), (200, OPENAI_ANSWER))
    model = openai_model(recorded)
    first = complete(model, ModelRequest(None, CONVERSATION[:1], (WEATHER,)))
    assert first.tool_calls == (
        ToolCallRequest("call_1", "get_weather", {"_raw": '{"city": "Par'}),
    )

    follow_up = (
        *CONVERSATION[:1],
        first.as_message(),
        {"role": "tool", "tool_call_id": "call_1", "content": "?"},
    )
    complete(model, ModelRequest(None, follow_up, (WEATHER,)))
    assistant = recorded.body(1)["messages"][1]
    assert assistant == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Par'},
            }
        ],
    }


def test_openai_provider_error_propagates_as_sdk_exception() -> None:
    error = {
        "error": {
            "message": "Invalid value for 'messages'.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": None,
        }
    }
    with pytest.raises(openai.BadRequestError, match="Invalid value"):
        complete(openai_model(Recorded((400, error))), ModelRequest(None, CONVERSATION[:1], ()))


def test_openai_key_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    model = OpenAIModel("gpt-4o-mini")
    assert (model.provider, model.name) == ("openai", "gpt-4o-mini")
    assert model.client.api_key == "sk-from-env"
    assert OpenAIModel("gpt-4o-mini", api_key="sk-given").client.api_key == "sk-given"


# -- Anthropic -----------------------------------------------------------------------------------


def test_anthropic_request_translates_system_messages_tool_uses_and_results() -> None:
    recorded = Recorded((200, ANTHROPIC_ANSWER))
    model = anthropic_model(recorded, stop_sequences=["END"])
    complete(model, ModelRequest("Be brief.", CONVERSATION, (WEATHER, CLOCK)))

    (request,) = recorded.requests
    assert request.method == "POST"
    assert str(request.url) == "https://api.anthropic.com/v1/messages"
    assert request.headers["authorization"] == "Bearer sk-ant-test"
    assert "anthropic-version" in request.headers
    assert recorded.body(0) == {
        "model": "claude-haiku-4-5",
        "max_tokens": 1024,
        "stop_sequences": ["END"],
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": "Weather and time in Paris?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {
                        "type": "tool_use",
                        "id": "c1",
                        "name": "get_weather",
                        "input": {"unit": "c", "city": "Paris"},
                    },
                    {
                        "type": "tool_use",
                        "id": "c2",
                        "name": "get_time",
                        "input": {"tz": "Europe/Paris"},
                    },
                ],
            },
            {
                # both results of the turn in one user message
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "c1", "content": '{"temp":18}'},
                    {"type": "tool_result", "tool_use_id": "c2", "content": '"19:05"'},
                ],
            },
        ],
        "tools": [
            {
                "name": "get_weather",
                "description": "Current weather for a city.",
                "input_schema": WEATHER.parameters,
            },
            {"name": "get_time", "input_schema": CLOCK.parameters},
        ],
    }


def test_anthropic_request_is_deterministic_and_minimal() -> None:
    recorded = Recorded((200, ANTHROPIC_ANSWER), (200, ANTHROPIC_ANSWER))
    model = anthropic_model(recorded, max_tokens=300)
    request = ModelRequest(None, ({"role": "user", "content": "hi"},), ())
    complete(model, request)
    complete(model, request)
    assert recorded.requests[0].content == recorded.requests[1].content
    assert recorded.body(0) == {
        "model": "claude-haiku-4-5",
        "max_tokens": 300,
        "messages": [{"role": "user", "content": "hi"}],
    }


def test_anthropic_tool_only_turn_and_user_after_results_merge() -> None:
    recorded = Recorded((200, ANTHROPIC_ANSWER))
    messages = (
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "t", "name": "x", "arguments": {}}],
        },
        {"role": "tool", "tool_call_id": "t", "content": "done"},
        {"role": "user", "content": "and now?"},
    )
    complete(anthropic_model(recorded), ModelRequest(None, messages, ()))
    assert recorded.body(0)["messages"] == [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t", "name": "x", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t", "content": "done"},
                {"type": "text", "text": "and now?"},
            ],
        },
    ]


def test_anthropic_response_tool_uses_and_usage_include_cache_reads_and_writes() -> None:
    recorded = Recorded((200, ANTHROPIC_TOOL_USE))
    response = complete(anthropic_model(recorded), ModelRequest(None, CONVERSATION[:1], (WEATHER,)))
    assert response.content == "I'll look that up."
    assert response.tool_calls == (
        ToolCallRequest(
            "toolu_01A09q90qw90lq917835lq9", "get_weather", {"city": "Paris", "unit": "c"}
        ),
        ToolCallRequest("toolu_01B77x12kd83jd74nf93ma2", "get_time", {"tz": "Europe/Paris"}),
    )
    assert response.finish_reason == "tool_calls"
    # Anthropic's input_tokens (472) excludes cache reads (1024) and writes (100)
    assert response.usage == Usage(input_tokens=1596, output_tokens=89, cached_input_tokens=1024)
    assert_tokens_only(response.usage)


def test_anthropic_text_blocks_join_and_stop_reasons_map() -> None:
    response = complete(
        anthropic_model(Recorded((200, ANTHROPIC_ANSWER))), ModelRequest(None, CONVERSATION, ())
    )
    assert response.content == "It is 18 degrees in Paris."
    assert response.tool_calls == ()
    assert response.finish_reason == "stop"
    assert response.usage == Usage(input_tokens=1656, output_tokens=12, cached_input_tokens=1596)

    capped = anthropic_message(
        [{"type": "text", "text": "It is"}], "max_tokens", input_tokens=5, output_tokens=2
    )
    response = complete(
        anthropic_model(Recorded((200, capped))), ModelRequest(None, CONVERSATION[:1], ())
    )
    assert response.finish_reason == "max_tokens"
    assert response.usage == Usage(input_tokens=5, output_tokens=2)


def test_anthropic_provider_error_propagates_as_sdk_exception() -> None:
    error = {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "messages: roles must alternate"},
    }
    with pytest.raises(anthropic.BadRequestError, match="roles must alternate"):
        complete(anthropic_model(Recorded((400, error))), ModelRequest(None, CONVERSATION[:1], ()))


def test_anthropic_key_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-env")
    model = AnthropicModel("claude-haiku-4-5")
    assert (model.provider, model.name) == ("anthropic", "claude-haiku-4-5")
    assert model.client.api_key == "sk-ant-from-env"
    assert AnthropicModel("claude-haiku-4-5", api_key="k").client.api_key == "k"


# -- without the SDKs ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sdk", "make", "extra"),
    [
        ("openai", lambda: OpenAIModel("gpt-4o-mini"), "little-workflow[openai]"),
        ("anthropic", lambda: AnthropicModel("claude-haiku-4-5"), "little-workflow[anthropic]"),
    ],
)
def test_missing_sdk_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch, sdk: str, make: Callable[[], Model], extra: str
) -> None:
    monkeypatch.setitem(sys.modules, sdk, None)  # makes `import <sdk>` raise ImportError
    with pytest.raises(little.ConfigurationError) as err:
        make()
    assert f"pip install '{extra}'" in str(err.value)


# -- a whole session through the runtime ---------------------------------------------------------


class Crash(BaseException):
    """Stands in for the process dying: not an Exception, so nothing records it."""


PROVIDERS: dict[str, dict[str, Any]] = {
    "openai": {
        "replies": (OPENAI_TOOL_CALLS, OPENAI_ANSWER),
        "tail": [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_Wq1bA2",
                        "type": "function",
                        "function": {
                            "name": "get_weather",
                            "arguments": '{"city":"Paris","unit":"c"}',
                        },
                    },
                    {
                        "id": "call_Xr3cD4",
                        "type": "function",
                        "function": {"name": "get_time", "arguments": '{"tz":"Europe/Paris"}'},
                    },
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "call_Wq1bA2",
                "content": '{"city":"Paris","temp":18}',
            },
            {"role": "tool", "tool_call_id": "call_Xr3cD4", "content": '"19:05"'},
        ],
        "model": openai_model,
        "name": "gpt-4o-mini",
        "usage": Usage(
            input_tokens=1117 + 1210,
            output_tokens=46 + 9,
            cached_input_tokens=1024 + 1152,
            reasoning_tokens=12,
        ),
    },
    "anthropic": {
        "replies": (ANTHROPIC_TOOL_USE, ANTHROPIC_ANSWER),
        "tail": [
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "I'll look that up."},
                    {
                        "type": "tool_use",
                        "id": "toolu_01A09q90qw90lq917835lq9",
                        "name": "get_weather",
                        "input": {"city": "Paris", "unit": "c"},
                    },
                    {
                        "type": "tool_use",
                        "id": "toolu_01B77x12kd83jd74nf93ma2",
                        "name": "get_time",
                        "input": {"tz": "Europe/Paris"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_01A09q90qw90lq917835lq9",
                        "content": '{"city":"Paris","temp":18}',
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_01B77x12kd83jd74nf93ma2",
                        "content": '"19:05"',
                    },
                ],
            },
        ],
        "model": anthropic_model,
        "name": "claude-haiku-4-5",
        "usage": Usage(
            input_tokens=1596 + 1656, output_tokens=89 + 12, cached_input_tokens=1024 + 1596
        ),
    },
}


def session_workflow(
    provider: str,
    recorded: Recorded,
    *,
    crash_once: bool = False,
    options: dict[str, Any] | None = None,
) -> little.runtime.Workflow:
    """``options`` (the model's request options) are read at each call, so a test may change
    them between a crash and the resume."""
    spec = PROVIDERS[provider]
    crashed: list[bool] = []
    options = {} if options is None else options

    async def ask(step: StepContext, city: str) -> str | None:
        model = spec["model"](recorded, spec["name"], **options)
        async with step.session(
            "a", model=model, tools=[get_weather, get_time], system="Be brief."
        ) as agent:
            answer: str | None = await agent.run(f"Weather and time in {city}?")
        if crash_once and not crashed:
            crashed.append(True)
            raise Crash
        return answer

    async def flow(ctx: WorkflowContext, input: dict[str, Any]) -> Any:
        return await ctx.step("ask", ask, input["city"])

    return workflow(f"adapters-{provider}-{uuid.uuid4().hex[:8]}", version="1")(flow)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_session_records_tokens_the_fold_prices_and_resume_calls_no_model(
    tmp_path: Path, provider: str
) -> None:
    spec = PROVIDERS[provider]
    recorded = Recorded(*((200, body) for body in spec["replies"]))
    wf = session_workflow(provider, recorded)
    with little.local_world(tmp_path) as world:
        result = asyncio.run(run(world, wf, {"city": "Paris"}))
        assert (result.status, result.output) == ("completed", "It is 18 degrees in Paris.")
        assert recorded.calls == 2

        # the second request carries the assistant's tool calls and both results
        second = recorded.body(1)
        assert second["model"] == spec["name"]
        assert second["messages"][-len(spec["tail"]) :] == spec["tail"]

        events = [x.event for x in world.read_run(result.run_id)]
        responded = [e for e in events if isinstance(e, ModelResponded)]
        assert [(e.provider, e.model) for e in responded] == [(provider, spec["name"])] * 2
        for e in responded:
            assert_tokens_only(e.usage)
        assert [e.finish_reason for e in responded] == ["tool_calls", "stop"]

        usage = replay_run(world, result.run_id).state.usage
        assert usage.calls == 2
        expected: Usage = spec["usage"]
        assert (
            usage.input_tokens,
            usage.output_tokens,
            usage.cached_input_tokens,
            usage.reasoning_tokens,
        ) == (
            expected.input_tokens,
            expected.output_tokens,
            expected.cached_input_tokens,
            expected.reasoning_tokens,
        )
        assert usage.cost_usd is not None
        assert usage.cost_usd > 0
        assert usage.unpriced_calls == 0

        again = asyncio.run(resume(world, result.run_id))
        assert (again.status, again.output) == ("completed", "It is 18 degrees in Paris.")
        assert recorded.calls == 2


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_crash_after_the_session_resumes_from_the_log_without_http(
    tmp_path: Path, provider: str
) -> None:
    spec = PROVIDERS[provider]
    recorded = Recorded(*((200, body) for body in spec["replies"]))
    wf = session_workflow(provider, recorded, crash_once=True)
    run_id = f"run_{uuid.uuid4().hex}"
    with little.local_world(tmp_path) as world:
        with pytest.raises(Crash):
            asyncio.run(execute(world, run_id, wf, {"city": "Paris"}))
        assert recorded.calls == 2
        assert replay_run(world, run_id).state.status not in ("completed", "failed")

        # the step runs again, its session is rebuilt from the log: both turns served
        result = asyncio.run(resume(world, run_id, wf))
        assert (result.status, result.output) == ("completed", "It is 18 degrees in Paris.")
        assert recorded.calls == 2
        assert replay_run(world, run_id).state.usage.calls == 2


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_provider_error_is_recorded_as_model_failed(tmp_path: Path, provider: str) -> None:
    error = (
        {
            "error": {
                "message": "bad request",
                "type": "invalid_request_error",
                "param": None,
                "code": None,
            }
        }
        if provider == "openai"
        else {"type": "error", "error": {"type": "invalid_request_error", "message": "bad request"}}
    )
    recorded = Recorded((400, error))
    wf = session_workflow(provider, recorded)
    with little.local_world(tmp_path) as world:
        result = asyncio.run(run(world, wf, {"city": "Paris"}))
        assert result.status == "failed"
        failed = [
            x.event for x in world.read_run(result.run_id) if isinstance(x.event, ModelFailed)
        ]
        assert [(e.error_type, e.provider) for e in failed] == [("BadRequestError", provider)]
        assert "bad request" in failed[0].message
        assert recorded.calls == 1


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_changed_request_options_on_resume_are_capability_drift(
    tmp_path: Path, provider: str
) -> None:
    """Request options (max tokens, temperature, ...) are part of the session's manifest: a
    resume with other options refuses to serve the calls recorded under the old ones; the same
    options resume."""
    spec = PROVIDERS[provider]
    recorded = Recorded(*((200, body) for body in spec["replies"]))
    options: dict[str, Any] = {"max_tokens": 512}
    sent_as = "max_completion_tokens" if provider == "openai" else "max_tokens"
    wf = session_workflow(provider, recorded, crash_once=True, options=options)
    run_id = f"run_{uuid.uuid4().hex}"
    with little.local_world(tmp_path) as world:
        with pytest.raises(Crash):
            asyncio.run(execute(world, run_id, wf, {"city": "Paris"}))
        assert recorded.calls == 2
        assert recorded.body(0)[sent_as] == 512
        session = replay_run(world, run_id).state.session("ask#a")
        assert session is not None
        assert json.loads(session.manifest_json)["model_options"][sent_as] == 512

        options["max_tokens"] = 2048
        with pytest.raises(little.CapabilityDriftError, match="changed: model_options"):
            asyncio.run(resume(world, run_id, wf))
        assert recorded.calls == 2

        options["max_tokens"] = 512
        result = asyncio.run(resume(world, run_id, wf))
        assert (result.status, result.output) == ("completed", "It is 18 degrees in Paris.")
        assert recorded.calls == 2


THINKING = {
    "type": "thinking",
    "thinking": "The user wants the weather; call get_weather.",
    "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds",
}
REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8"}
ANTHROPIC_THINKING_TOOL_USE = anthropic_message(
    [
        THINKING,
        REDACTED,
        {
            "type": "tool_use",
            "id": "toolu_01A09q90qw90lq917835lq9",
            "name": "get_weather",
            "input": {"city": "Paris"},
        },
    ],
    "tool_use",
    input_tokens=420,
    output_tokens=130,
)


def test_anthropic_thinking_blocks_go_back_verbatim_also_after_a_resume(tmp_path: Path) -> None:
    """A thinking model's tool use continues only if its thinking blocks (signatures and all)
    come back first in the assistant turn: on the next request of the same process, and on the
    request of a resumed process that served the thinking turn from the log."""
    fresh = Recorded((200, ANTHROPIC_THINKING_TOOL_USE), (200, ANTHROPIC_ANSWER))
    crashing = Recorded((200, ANTHROPIC_THINKING_TOOL_USE), (200, ANTHROPIC_ANSWER))
    tool_runs: list[str] = []

    def weather_workflow(recorded: Recorded, crash_in_tool: bool) -> little.runtime.Workflow:
        @tool(description="Current weather.", parameters={"type": "object"})
        def get_weather(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
            tool_runs.append(ctx.call_id)
            if crash_in_tool and len(tool_runs) == 1:
                raise Crash  # the process dies inside the tool: turn 1 is on the log
            return {"city": args["city"], "temp": 18}

        async def ask(step: StepContext, city: str) -> str | None:
            model = anthropic_model(recorded, thinking={"type": "enabled", "budget_tokens": 1024})
            async with step.session("a", model=model, tools=[get_weather]) as agent:
                return await agent.run(f"Weather in {city}?")

        async def flow(ctx: WorkflowContext, input: dict[str, Any]) -> Any:
            return await ctx.step("ask", ask, input["city"])

        return workflow(f"thinking-{uuid.uuid4().hex[:8]}", version="1")(flow)

    with little.local_world(tmp_path / "fresh") as world:
        result = asyncio.run(run(world, weather_workflow(fresh, False), {"city": "Paris"}))
    assert result.output == "It is 18 degrees in Paris."
    assistant = fresh.body(1)["messages"][1]
    assert assistant["role"] == "assistant"
    assert assistant["content"][:2] == [THINKING, REDACTED]
    assert assistant["content"][2]["type"] == "tool_use"

    tool_runs.clear()
    wf = weather_workflow(crashing, True)
    run_id = f"run_{uuid.uuid4().hex}"
    with little.local_world(tmp_path / "crashed") as world:
        with pytest.raises(Crash):
            asyncio.run(execute(world, run_id, wf, {"city": "Paris"}))
        assert crashing.calls == 1
        result = asyncio.run(resume(world, run_id, wf))
        assert result.output == "It is 18 degrees in Paris."
        assert crashing.calls == 2  # turn 1 served from the log, turn 2 called once
        assert len(tool_runs) == 2  # the tool the process died in ran again, once
    assert crashing.body(1) == fresh.body(1)


def test_a_resume_and_a_replay_of_a_real_adapter_run_need_no_key_and_no_network(
    tmp_path: Path,
) -> None:
    """Keys are needed only when a call is actually invoked: a process with no OPENAI_API_KEY
    and an unreachable API resumes a crashed run and replays a recorded one, every call served
    from the log."""
    import os
    import subprocess

    from tests import keyless

    data = tmp_path / "w"
    recorded = Recorded(*((200, body) for body in PROVIDERS["openai"]["replies"] * 2))
    keyless.MODEL = lambda: openai_model(recorded)
    try:
        with little.local_world(data) as world:
            done = asyncio.run(run(world, keyless.weather, {"city": "Paris"}, run_id="source"))
            assert (done.status, recorded.calls) == ("completed", 2)
            keyless.CRASH_AFTER_SESSION.append(True)
            with pytest.raises(keyless.Crash):
                asyncio.run(execute(world, "crashed", keyless.weather, {"city": "Paris"}))
            assert recorded.calls == 4
    finally:
        keyless.MODEL = lambda: OpenAIModel("gpt-4o-mini")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LITTLE_"))}
    env["OPENAI_BASE_URL"] = "http://127.0.0.1:9/v1"  # nothing listens: a call would fail
    code = (
        "import asyncio, json, sys, little\n"
        "from tests import keyless\n"
        "from little.runtime import resume, run\n"
        "with little.local_world(sys.argv[1]) as world:\n"
        "    a = asyncio.run(resume(world, 'crashed'))\n"
        "    b = asyncio.run(run(world, keyless.weather, {'city': 'Paris'}, replay_from='source'))\n"
        "    print(json.dumps([a.status, a.output, a.served_calls, b.status, b.output]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(data)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    answer = "It is 18 degrees in Paris."
    assert json.loads(out.stdout) == ["completed", answer, 2, "completed", answer]
    # inference-skipping replay (issue 15 item 2): the run and its sessions rebuilt from the
    # recorded responses, in a process with no key and no network
    replayed = little_cli("replay", "source", "--json", "--data-dir", str(data), env=env)
    assert replayed.returncode == 0, replayed.stderr
    report = json.loads(replayed.stdout)
    assert (report["status"], report["billed"]["calls"]) == ("completed", 2)


def test_a_missing_key_is_a_configuration_error_when_a_call_is_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_ADMIN_KEY", raising=False)
    model = OpenAIModel("gpt-4o-mini")  # building it needs no key
    with pytest.raises(little.ConfigurationError, match="set OPENAI_API_KEY or pass api_key="):
        _ = model.client
