"""Provider errors as users expect them (issue 28 item 6): a rate limit or a 5xx is retried
with backoff inside the recorded turn, each attempt recorded (``harness.model.failed`` with
``retryable=true``, then a new ``harness.model.called``); a 4xx that will not succeed ends the
exchange at once; ``max_retries`` is configuration; the SDK's own retries are off, so no
attempt is hidden. The real ``openai`` and ``anthropic`` clients over an ``httpx2``
``MockTransport`` answering in each provider's wire format; the backoff's waits are injected
(recorded, not slept), so nothing here waits for real seconds."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest

import little
from little.events import ModelCalled, ModelFailed, ModelResponded
from little.harness import ProviderFailure, RetryPolicy
from little.harness.adapters import AnthropicModel, OpenAIModel
from little.replay import replay_run
from little.runtime import StepContext, WorkflowContext, resume, run, workflow
from tests.little.harness.test_adapters import PROVIDERS, Recorded, session_workflow

ERRORS: dict[str, dict[int, dict[str, Any]]] = {
    "openai": {
        429: {
            "error": {
                "message": "Rate limit reached for gpt-4o-mini on requests per min (RPM).",
                "type": "requests",
                "param": None,
                "code": "rate_limit_exceeded",
            }
        },
        500: {
            "error": {
                "message": "The server had an error while processing your request.",
                "type": "server_error",
                "param": None,
                "code": None,
            }
        },
        400: {
            "error": {
                "message": "Invalid value for 'messages'.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": None,
            }
        },
    },
    "anthropic": {
        429: {
            "type": "error",
            "error": {"type": "rate_limit_error", "message": "Number of requests exceeded."},
        },
        500: {"type": "error", "error": {"type": "api_error", "message": "Internal server error"}},
        400: {
            "type": "error",
            "error": {"type": "invalid_request_error", "message": "messages: field required"},
        },
    },
}
RETRY_ERROR = {
    ("openai", 429): "RateLimitError",
    ("openai", 500): "InternalServerError",
    ("anthropic", 429): "RateLimitError",
    ("anthropic", 500): "InternalServerError",
}


class WithHeaders(Recorded):
    """Replies ``(status, body)`` or ``(status, body, headers)``."""

    def __init__(self, *replies: tuple[Any, ...]) -> None:
        super().__init__()
        self.queued = list(replies)

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        if not self.queued:
            raise AssertionError(f"unexpected HTTP call: {request.method} {request.url}")
        status, body, *headers = self.queued.pop(0)
        return httpx2.Response(
            status, json=body, headers={"request-id": "req_test", **(headers[0] if headers else {})}
        )


def turn_events(world: little.World, run_id: str) -> list[tuple[Any, ...]]:
    """The model-call events of a run: (kind, turn[, error type, retryable])."""
    out: list[tuple[Any, ...]] = []
    for logged in world.read_run(run_id):
        e = logged.event
        if isinstance(e, ModelCalled):
            out.append(("called", e.turn))
        elif isinstance(e, ModelFailed):
            out.append(("failed", e.turn, e.error_type, e.retryable))
        elif isinstance(e, ModelResponded):
            out.append(("responded", e.turn))
    return out


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Adapters made without ``retry_delay=`` wait nothing between attempts here."""
    monkeypatch.setenv("LITTLE_MODEL_RETRY_DELAY", "0")
    monkeypatch.setenv("LITTLE_MODEL_RETRY_MAX_DELAY", "0")


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_rate_limit_and_a_5xx_are_retried_inside_the_turn_each_attempt_recorded(
    tmp_path: Path, provider: str
) -> None:
    spec = PROVIDERS[provider]
    first, second = spec["replies"]
    recorded = WithHeaders(
        (429, ERRORS[provider][429], {"retry-after-ms": "0"}),
        (500, ERRORS[provider][500]),
        (200, first),
        (200, second),
    )
    wf = session_workflow(provider, recorded)
    with little.local_world(tmp_path) as world:
        result = asyncio.run(run(world, wf, {"city": "Paris"}))
        assert (result.status, result.output) == ("completed", "It is 18 degrees in Paris.")
        assert recorded.calls == 4  # every HTTP attempt is one the log shows: none hidden
        assert turn_events(world, result.run_id) == [
            ("called", 1),
            ("failed", 1, RETRY_ERROR[provider, 429], True),
            ("called", 1),
            ("failed", 1, RETRY_ERROR[provider, 500], True),
            ("called", 1),
            ("responded", 1),
            ("called", 2),
            ("responded", 2),
        ]
        # the three attempts sent the same request
        assert recorded.body(0) == recorded.body(1) == recorded.body(2)
        state = replay_run(world, result.run_id).state
        assert state.usage.calls == 2  # failed attempts bill nothing in the fold
        assert state.interrupted_model_calls == 0  # each attempt was answered, by a failure

        # a resume serves both turns from the log: no HTTP call, no attempt again
        again = asyncio.run(resume(world, result.run_id))
        assert (again.status, again.output) == ("completed", "It is 18 degrees in Paris.")
        assert recorded.calls == 4


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_4xx_ends_the_exchange_at_once_not_retried(tmp_path: Path, provider: str) -> None:
    recorded = WithHeaders((400, ERRORS[provider][400]))
    wf = session_workflow(provider, recorded)
    with little.local_world(tmp_path) as world:
        result = asyncio.run(run(world, wf, {"city": "Paris"}))
        assert result.status == "failed"
        assert "BadRequestError" in str(result.error)
        assert recorded.calls == 1
        assert turn_events(world, result.run_id) == [
            ("called", 1),
            ("failed", 1, "BadRequestError", False),
        ]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_max_retries_is_configuration_and_the_last_failure_ends_the_exchange(
    tmp_path: Path, provider: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LITTLE_MODEL_MAX_RETRIES", "1")
    recorded = WithHeaders((429, ERRORS[provider][429]), (429, ERRORS[provider][429]))
    wf = session_workflow(provider, recorded)
    with little.local_world(tmp_path) as world:
        result = asyncio.run(run(world, wf, {"city": "Paris"}))
        assert result.status == "failed"
        assert "RateLimitError" in str(result.error)
        assert recorded.calls == 2
        assert turn_events(world, result.run_id) == [
            ("called", 1),
            ("failed", 1, "RateLimitError", True),
            ("called", 1),
            ("failed", 1, "RateLimitError", True),
        ]

    # the adapter's own argument wins over the setting: 0 retries, one attempt
    recorded = WithHeaders((500, ERRORS[provider][500]))
    wf = session_workflow(provider, recorded, options={"max_retries": 0})
    with little.local_world(tmp_path / "none") as world:
        result = asyncio.run(run(world, wf, {"city": "Paris"}))
        assert result.status == "failed"
        assert recorded.calls == 1
        assert turn_events(world, result.run_id) == [
            ("called", 1),
            ("failed", 1, "InternalServerError", True),
        ]


def _client(provider: str, recorded: Recorded) -> Any:
    """A client with the SDK's default retries (2), as a user would make it."""
    if provider == "openai":
        return openai.AsyncOpenAI(api_key="sk-test", http_client=recorded.http_client())
    return anthropic.AsyncAnthropic(api_key="sk-ant-test", http_client=recorded.http_client())


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_the_sdk_clients_own_retries_are_off_so_no_attempt_is_hidden(
    tmp_path: Path, provider: str
) -> None:
    """A client given with the SDK's default retries: the adapter turns them off, so a 5xx
    answered by one HTTP request is one recorded attempt (with 0 retries: the run fails)."""
    recorded = WithHeaders((500, ERRORS[provider][500]), (500, ERRORS[provider][500]))
    cls = OpenAIModel if provider == "openai" else AnthropicModel
    model = cls(PROVIDERS[provider]["name"], client=_client(provider, recorded), max_retries=0)
    assert model.client.max_retries == 0

    @workflow(f"sdk-retries-{provider}", version="1")
    async def flow(ctx: WorkflowContext, input: Any) -> Any:
        async def ask(step: StepContext) -> str | None:
            async with step.session("a", model=model) as agent:
                return await agent.run("hi")

        return await ctx.step("ask", ask)

    with little.local_world(tmp_path) as world:
        result = asyncio.run(run(world, flow, None))
        assert result.status == "failed"
        assert recorded.calls == 1
        assert [e[0] for e in turn_events(world, result.run_id)] == ["called", "failed"]


def test_backoff_doubles_honours_retry_after_and_is_capped() -> None:
    policy = RetryPolicy(max_retries=5, base_delay=0.5, max_delay=4.0)
    plain = ProviderFailure(True)
    assert [policy.delay(n, plain) for n in (1, 2, 3, 4, 5)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    assert policy.delay(1, ProviderFailure(True, retry_after=3.0)) == 3.0
    assert policy.delay(1, ProviderFailure(True, retry_after=60.0)) == 4.0  # capped


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_the_waits_between_attempts_follow_the_policy_and_the_providers_retry_after(
    tmp_path: Path, provider: str
) -> None:
    """The kernel waits through the policy's ``sleep`` (injected here: the waits are recorded,
    not taken): 2 s asked by ``retry-after`` on the 429, then the doubled base on the 500."""
    spec = PROVIDERS[provider]
    first, second = spec["replies"]
    recorded = WithHeaders(
        (429, ERRORS[provider][429], {"retry-after": "2"}),
        (500, ERRORS[provider][500]),
        (200, first),
        (200, second),
    )
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    build = spec["model"]

    def model(rec: Recorded, name: str, **kw: Any) -> Any:
        m = build(rec, name, retry_delay=0.25, retry_max_delay=10.0, **kw)
        m.retry_policy = dataclasses.replace(m.retry_policy, sleep=sleep)
        return m

    wf = session_workflow(provider, recorded)
    spec_model = spec["model"]
    spec["model"] = model
    try:
        with little.local_world(tmp_path) as world:
            result = asyncio.run(run(world, wf, {"city": "Paris"}))
    finally:
        spec["model"] = spec_model
    assert result.status == "completed"
    assert waits == [2.0, 0.5]


def test_the_retry_settings_are_read_when_an_adapter_is_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LITTLE_MODEL_MAX_RETRIES", "7")
    monkeypatch.setenv("LITTLE_MODEL_RETRY_DELAY", "0.125")
    monkeypatch.setenv("LITTLE_MODEL_RETRY_MAX_DELAY", "9")
    for cls in (OpenAIModel, AnthropicModel):
        policy = cls("m", api_key="k").retry_policy
        assert (policy.max_retries, policy.base_delay, policy.max_delay) == (7, 0.125, 9.0)
        assert cls("m", api_key="k", max_retries=1).retry_policy.max_retries == 1
        # the client the adapter makes retries nothing itself: every attempt is the kernel's
        assert cls("m", api_key="k").client.max_retries == 0
