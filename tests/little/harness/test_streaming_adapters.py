"""Native streaming over the real ``openai`` and ``anthropic`` clients (issue 28 item 1): each
adapter's ``stream`` asks the provider for a stream and hands on its text deltas as the SSE
events arrive; a session streams a tool-call turn and a text turn through them, each call
recorded write-ahead (acked before the request is sent) and its response when the stream ends;
a resume yields the recorded text with no HTTP; a consumer that stops early closes the HTTP
stream and records the turn as failed. No network: an ``httpx2.MockTransport`` speaks each
provider's streaming wire format (server-sent events) from an async body, one event at a time.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest

import little
from little.events import AgentCallSettled, ModelCalled, ModelFailed, ModelResponded
from little.harness import Model, ToolContext, tool
from little.harness.adapters import AnthropicModel, OpenAIModel
from little.runtime import StepContext, Workflow, WorkflowContext, execute, resume, workflow

NAMES = itertools.count()

# -- the providers' streams, event by event ----------------------------------------------------


def sse(event: str | None, data: Any) -> bytes:
    head = f"event: {event}\n" if event else ""
    body = data if isinstance(data, str) else json.dumps(data)
    return f"{head}data: {body}\n\n".encode()


def openai_chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    return sse(
        None,
        {
            "id": "chatcmpl-stream1",
            "object": "chat.completion.chunk",
            "created": 1747900000,
            "model": "gpt-4o-mini-2024-07-18",
            "system_fingerprint": "fp_34a54ae93c",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        },
    )


def openai_usage(prompt: int, completion: int) -> bytes:
    return sse(
        None,
        {
            "id": "chatcmpl-stream1",
            "object": "chat.completion.chunk",
            "created": 1747900000,
            "model": "gpt-4o-mini-2024-07-18",
            "choices": [],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        },
    )


def openai_text(*pieces: str) -> list[bytes]:
    return [
        openai_chunk({"role": "assistant", "content": ""}),
        *(openai_chunk({"content": p}) for p in pieces),
        openai_chunk({}, "stop"),
        openai_usage(40, len(pieces)),
        sse(None, "[DONE]"),
    ]


OPENAI_LOOKUP = [
    openai_chunk({"role": "assistant", "content": "Let me look."}),
    openai_chunk(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_Lk1",
                    "type": "function",
                    "function": {"name": "look_up", "arguments": ""},
                }
            ]
        }
    ),
    openai_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"term":'}}]}),
    openai_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Kafka"}'}}]}),
    openai_chunk({}, "tool_calls"),
    openai_usage(30, 12),
    sse(None, "[DONE]"),
]


def anthropic_events(blocks: list[list[bytes]], stop: str, output_tokens: int) -> list[bytes]:
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_01Stream",
            "type": "message",
            "role": "assistant",
            "model": "claude-haiku-4-5",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 50, "output_tokens": 1},
        },
    }
    end = {
        "type": "message_delta",
        "delta": {"stop_reason": stop, "stop_sequence": None},
        "usage": {"output_tokens": output_tokens},
    }
    return [
        sse("message_start", start),
        sse("ping", {"type": "ping"}),
        *(event for block in blocks for event in block),
        sse("message_delta", end),
        sse("message_stop", {"type": "message_stop"}),
    ]


def anthropic_text_block(index: int, *pieces: str) -> list[bytes]:
    return [
        sse(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        *(
            sse(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "text_delta", "text": p},
                },
            )
            for p in pieces
        ),
        sse("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]


ANTHROPIC_LOOKUP = anthropic_events(
    [
        anthropic_text_block(0, "Let me look."),
        [
            sse(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 1,
                    "content_block": {
                        "type": "tool_use",
                        "id": "toolu_01Lk",
                        "name": "look_up",
                        "input": {},
                    },
                },
            ),
            sse(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 1,
                    "delta": {"type": "input_json_delta", "partial_json": '{"term": "Kafka"}'},
                },
            ),
            sse("content_block_stop", {"type": "content_block_stop", "index": 1}),
        ],
    ],
    "tool_use",
    20,
)


def anthropic_text(*pieces: str) -> list[bytes]:
    return anthropic_events([anthropic_text_block(0, *pieces)], "end_turn", len(pieces))


CHUNKS = ("Kafka ", "is ", "a log.")
ANSWER = "".join(CHUNKS)
STREAMS: dict[str, list[list[bytes]]] = {
    "openai": [OPENAI_LOOKUP, openai_text(*CHUNKS)],
    "anthropic": [ANTHROPIC_LOOKUP, anthropic_text(*CHUNKS)],
}


class Provider:
    """A mock transport answering each request with the next queued stream, sent one event at
    a time (an async body), logging what it sent; it also notes, per request, whether the
    run's log held that turn's ``harness.model.called`` already (write-ahead)."""

    def __init__(self, streams: list[list[bytes]], timeline: list[str]) -> None:
        self.streams = list(streams)
        self.timeline = timeline
        self.requests: list[httpx2.Request] = []
        self.written_ahead: list[bool] = []
        self.closed: list[bool] = []
        self.world: little.World | None = None
        self.run_id = ""

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        if self.world is not None:
            called = [
                x.event
                for x in self.world.read_run(self.run_id)
                if isinstance(x.event, ModelCalled)
            ]
            answered = {
                x.event.turn
                for x in self.world.read_run(self.run_id)
                if isinstance(x.event, ModelResponded | ModelFailed)
            }
            self.written_ahead.append(bool(called) and called[-1].turn not in answered)
        if not self.streams:
            raise AssertionError(f"unexpected HTTP call: {request.method} {request.url}")
        events = self.streams.pop(0)
        index = len(self.requests) - 1
        self.closed.append(False)

        async def body() -> AsyncIterator[bytes]:
            try:
                for i, event in enumerate(events):
                    self.timeline.append(f"sent {index}.{i}")
                    yield event
                    await asyncio.sleep(0)
            finally:
                self.closed[index] = True

        return httpx2.Response(
            200,
            headers={"content-type": "text/event-stream", "request-id": "req_stream"},
            content=body(),
        )

    def body(self, i: int) -> Any:
        return json.loads(self.requests[i].content)

    def http_client(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(transport=httpx2.MockTransport(self.handle))


def make_model(provider: str, transport: Provider) -> Model:
    if provider == "openai":
        client = openai.AsyncOpenAI(
            api_key="sk-test",
            base_url="https://api.openai.com/v1",
            http_client=transport.http_client(),
        )
        return OpenAIModel("gpt-4o-mini", client=client)
    aclient = anthropic.AsyncAnthropic(
        api_key="sk-ant-test",
        base_url="https://api.anthropic.com",
        http_client=transport.http_client(),
    )
    return AnthropicModel("claude-haiku-4-5", client=aclient)


LOOKED_UP: list[str] = []


@tool(description="Looks a term up.", parameters={"type": "object"})
async def look_up(args: dict[str, Any], ctx: ToolContext) -> str:
    LOOKED_UP.append(args["term"])
    return f"{args['term']}: a log"


class Crash(BaseException):
    """Stands in for the process dying: not an Exception, so nothing records it."""


def streaming_flow(
    provider: str, transport: Provider, timeline: list[str], *, stop_at: str | None = None
) -> tuple[Workflow, list[Any]]:
    """The session streams one exchange; the first execution crashes after it (``stop_at``:
    stops reading at that delta instead, and returns)."""
    crashed: list[bool] = []
    outputs: list[Any] = []

    async def ask(step: StepContext, prompt: str) -> Any:
        deltas: list[str] = []
        async with step.session(
            "agent", model=make_model(provider, transport), tools=[look_up]
        ) as agent:
            async with agent.stream(prompt) as stream:
                async for delta in stream:
                    timeline.append(f"consumed {delta!r}")
                    deltas.append(delta)
                    if delta == stop_at:
                        break
            out = {"deltas": deltas, "answer": stream.answer if stream.done else None}
        outputs.append(out)
        if stop_at is None and not crashed:
            crashed.append(True)
            raise Crash
        return out

    async def flow(ctx: WorkflowContext, prompt: str) -> Any:
        return await ctx.step("ask", ask, prompt)

    return workflow(f"tests.stream.adapters.{next(NAMES)}", version="1")(flow), outputs


def model_events(world: little.World, run_id: str) -> list[tuple[str, int]]:
    return [
        (type(x.event).__name__, x.event.turn)
        for x in world.read_run(run_id)
        if isinstance(x.event, ModelCalled | ModelResponded | ModelFailed)
    ]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_session_streams_live_through_the_real_client_and_a_resume_needs_no_http(
    tmp_path: Path, provider: str
) -> None:
    LOOKED_UP.clear()
    timeline: list[str] = []
    transport = Provider(STREAMS[provider], timeline)
    wf, outputs = streaming_flow(provider, transport, timeline)
    run_id = f"run_stream_{provider}_{next(NAMES)}"
    with little.local_world(tmp_path) as world:
        transport.world, transport.run_id = world, run_id
        with pytest.raises(Crash):
            asyncio.run(execute(world, run_id, wf, "What is Kafka?"))
        (live,) = outputs
        assert live == {"deltas": ["Let me look.", *CHUNKS], "answer": ANSWER}
        assert LOOKED_UP == ["Kafka"]  # the streamed turn's tool call ran (recorded)
        assert transport.written_ahead == [True, True]
        # live: the consumer had the first word of the answer before the provider sent its end
        first_word = timeline.index(f"consumed {CHUNKS[0]!r}")
        assert first_word < timeline.index(f"sent 1.{len(STREAMS[provider][1]) - 1}")
        assert model_events(world, run_id) == [
            ("ModelCalled", 1),
            ("ModelResponded", 1),
            ("ModelCalled", 2),
            ("ModelResponded", 2),
        ]
        responded = [x.event for x in world.read_run(run_id) if isinstance(x.event, ModelResponded)]
        first = json.loads(responded[0].response_json or "{}")
        assert first["content"] == "Let me look."
        assert [(c["name"], c["arguments"]) for c in first["tool_calls"]] == [
            ("look_up", {"term": "Kafka"})
        ]
        assert json.loads(responded[1].response_json or "{}")["content"] == ANSWER
        assert [r.finish_reason for r in responded] == ["tool_calls", "stop"]
        if provider == "openai":
            assert [(r.usage.input_tokens, r.usage.output_tokens) for r in responded] == [
                (30, 12),
                (40, 3),
            ]
            body = transport.body(0)
            assert (body["stream"], body["stream_options"]) == (True, {"include_usage": True})
            # the tool call and its result went back in the second request
            assert transport.body(1)["messages"][-1] == {
                "role": "tool",
                "tool_call_id": "call_Lk1",
                "content": '"Kafka: a log"',
            }
        else:
            assert [(r.usage.input_tokens, r.usage.output_tokens) for r in responded] == [
                (50, 20),
                (50, 3),
            ]
            assert transport.body(0)["stream"] is True
            assert transport.body(1)["messages"][-1]["content"][0]["tool_use_id"] == "toolu_01Lk"
        assert transport.closed == [True, True]

        # the resume: the step runs again, both turns served from the log, no HTTP
        done = asyncio.run(resume(world, run_id, wf))
        assert done.status == "completed", done.error
        assert done.output == {"deltas": ["Let me look.", ANSWER], "answer": ANSWER}
        assert len(transport.requests) == 2
        assert LOOKED_UP == ["Kafka"]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_consumer_that_stops_early_closes_the_http_stream_and_fails_the_turn(
    tmp_path: Path, provider: str
) -> None:
    timeline: list[str] = []
    transport = Provider([STREAMS[provider][1]], timeline)

    async def ask(step: StepContext, prompt: str) -> Any:
        async with step.session("agent", model=make_model(provider, transport)) as agent:
            async with agent.stream(prompt) as stream:
                async for delta in stream:
                    if delta == CHUNKS[0]:
                        break
            return stream.done

    async def flow(ctx: WorkflowContext, prompt: str) -> Any:
        return await ctx.step("ask", ask, prompt)

    wf = workflow(f"tests.stream.adapters.{next(NAMES)}", version="1")(flow)
    run_id = f"run_stop_{provider}_{next(NAMES)}"
    with little.local_world(tmp_path) as world:
        result = asyncio.run(execute(world, run_id, wf, "What is Kafka?"))
        assert (result.status, result.output) == ("completed", False), result.error
        assert model_events(world, run_id) == [("ModelCalled", 1), ("ModelFailed", 1)]
        (failed,) = [x.event for x in world.read_run(run_id) if isinstance(x.event, ModelFailed)]
        assert failed.error_type == "StreamStoppedError"
        settled = [x.event for x in world.read_run(run_id) if isinstance(x.event, AgentCallSettled)]
        assert [s.outcome for s in settled] == ["failed"]
    # the provider's stream was closed where the consumer stopped, not read to its end
    assert transport.closed == [True]
    assert f"sent 0.{len(STREAMS[provider][1]) - 1}" not in timeline


def test_a_rate_limited_stream_request_is_retried_before_any_delta(tmp_path: Path) -> None:
    """A 429 answering the stream's request is a failed attempt, recorded retryable, then a new
    ``harness.model.called`` and the stream: the consumer sees the text once."""
    timeline: list[str] = []
    transport = Provider([openai_text(*CHUNKS)], timeline)
    limited = [True]
    streamed = transport.handle

    def handle(request: httpx2.Request) -> httpx2.Response:
        if limited:
            limited.clear()
            return httpx2.Response(
                429,
                json={
                    "error": {
                        "message": "Rate limit reached",
                        "type": "requests",
                        "param": None,
                        "code": "rate_limit_exceeded",
                    }
                },
                headers={"retry-after-ms": "0"},
            )
        return streamed(request)

    client = openai.AsyncOpenAI(
        api_key="sk-test",
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handle)),
    )
    model = OpenAIModel("gpt-4o-mini", client=client, retry_delay=0, retry_max_delay=0)

    async def ask(step: StepContext, prompt: str) -> Any:
        deltas: list[str] = []
        async with step.session("agent", model=model) as agent:
            answer = await agent.run(prompt, on_delta=deltas.append)
        return {"deltas": deltas, "answer": answer}

    async def flow(ctx: WorkflowContext, prompt: str) -> Any:
        return await ctx.step("ask", ask, prompt)

    wf = workflow(f"tests.stream.adapters.{next(NAMES)}", version="1")(flow)
    run_id = f"run_limited_{next(NAMES)}"
    with little.local_world(tmp_path) as world:
        result = asyncio.run(execute(world, run_id, wf, "What is Kafka?"))
        assert result.status == "completed", result.error
        assert result.output == {"deltas": list(CHUNKS), "answer": ANSWER}
        assert model_events(world, run_id) == [
            ("ModelCalled", 1),
            ("ModelFailed", 1),
            ("ModelCalled", 1),
            ("ModelResponded", 1),
        ]
        (failed,) = [x.event for x in world.read_run(run_id) if isinstance(x.event, ModelFailed)]
        assert (failed.error_type, failed.retryable) == ("RateLimitError", True)


OVERLOADED = sse(
    "error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
)


@pytest.mark.parametrize("after_a_delta", [False, True])
def test_an_error_event_in_a_stream_is_retried_only_before_the_first_delta(
    tmp_path: Path, after_a_delta: bool
) -> None:
    """Anthropic reports an overload inside a stream it answered 200 (an ``error`` event):
    before any text it is a failed attempt, recorded retryable, and the turn is asked again;
    after a delta was handed on, it ends the turn (recorded, not asked again in the run)."""
    head = anthropic_text(*CHUNKS)[:4] if after_a_delta else anthropic_text(*CHUNKS)[:2]
    timeline: list[str] = []
    transport = Provider([[*head, OVERLOADED], anthropic_text(*CHUNKS)], timeline)
    aclient = anthropic.AsyncAnthropic(
        api_key="sk-ant-test",
        base_url="https://api.anthropic.com",
        http_client=transport.http_client(),
    )
    model = AnthropicModel("claude-haiku-4-5", client=aclient, retry_delay=0, retry_max_delay=0)

    async def ask(step: StepContext, prompt: str) -> Any:
        deltas: list[str] = []
        async with step.session("agent", model=model) as agent:
            try:
                answer = await agent.run(prompt, on_delta=deltas.append)
            except anthropic.APIStatusError as exc:
                return {"deltas": deltas, "error": type(exc).__name__}
        return {"deltas": deltas, "answer": answer}

    async def flow(ctx: WorkflowContext, prompt: str) -> Any:
        return await ctx.step("ask", ask, prompt)

    wf = workflow(f"tests.stream.adapters.{next(NAMES)}", version="1")(flow)
    run_id = f"run_overloaded_{next(NAMES)}"
    with little.local_world(tmp_path) as world:
        result = asyncio.run(execute(world, run_id, wf, "What is Kafka?"))
        assert result.status == "completed", result.error
        failed = [x.event for x in world.read_run(run_id) if isinstance(x.event, ModelFailed)]
        assert [(f.retryable, "overloaded_error" in f.message) for f in failed] == [(True, True)]
        if after_a_delta:
            assert result.output == {"deltas": [CHUNKS[0]], "error": "APIStatusError"}
            assert model_events(world, run_id) == [("ModelCalled", 1), ("ModelFailed", 1)]
            assert len(transport.requests) == 1
        else:
            assert result.output == {"deltas": list(CHUNKS), "answer": ANSWER}
            assert model_events(world, run_id) == [
                ("ModelCalled", 1),
                ("ModelFailed", 1),
                ("ModelCalled", 1),
                ("ModelResponded", 1),
            ]
            assert len(transport.requests) == 2


def test_an_openai_stream_that_ends_before_its_first_chunk_is_asked_again(
    tmp_path: Path,
) -> None:
    timeline: list[str] = []
    transport = Provider([[sse(None, "[DONE]")], openai_text(*CHUNKS)], timeline)
    client = openai.AsyncOpenAI(api_key="sk-test", http_client=transport.http_client())
    model = OpenAIModel("gpt-4o-mini", client=client, retry_delay=0, retry_max_delay=0)

    async def ask(step: StepContext, prompt: str) -> Any:
        async with step.session("agent", model=model) as agent:
            stream = agent.stream(prompt)
            return [delta async for delta in stream]

    async def flow(ctx: WorkflowContext, prompt: str) -> Any:
        return await ctx.step("ask", ask, prompt)

    wf = workflow(f"tests.stream.adapters.{next(NAMES)}", version="1")(flow)
    run_id = f"run_empty_{next(NAMES)}"
    with little.local_world(tmp_path) as world:
        result = asyncio.run(execute(world, run_id, wf, "What is Kafka?"))
        assert (result.status, result.output) == ("completed", list(CHUNKS)), result.error
        (failed,) = [x.event for x in world.read_run(run_id) if isinstance(x.event, ModelFailed)]
        assert (failed.error_type, failed.retryable) == ("APIConnectionError", True)
        assert "ended before its first chunk" in failed.message
