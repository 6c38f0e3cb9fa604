"""Workflows of the crash tests for little's native harness over real clients (registered on
import): ``rate_limited`` asks the real ``openai`` client, over an ``httpx2`` ``MockTransport``
that answers the run's first HTTP request with a 429 and every later one with a completion;
``mcp_notes`` holds the MCP server ``tests/mcp_notes_server.py`` (a child process over stdio,
its requests logged to ``$LITTLE_EXAMPLE_CALLS_DIR/mcp.jsonl``) and the model asks for its
``add``; ``streamed`` streams the real ``openai`` client's answer (server-sent events from the
mock transport) and, where ``$CRASH_TEST_KILL_MID_STREAM`` is set, SIGKILLs its own process as
soon as its consumer has the first delta (the call in flight: written ahead, not answered);
every delta its consumer got is logged to ``$LITTLE_EXAMPLE_CALLS_DIR/deltas.jsonl``.
Which request is the first is read from ``$LITTLE_EXAMPLE_CALLS_DIR/http.jsonl``, where every
request is logged, so the answer does not depend on the process asking (a resume after a
SIGKILL sees the 429 already given).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import openai
from mcp import StdioServerParameters

from little.examples.research import _calls_dir, _log_call
from little.harness import McpServer, mcp
from little.harness.adapters import OpenAIModel
from little.runtime import StepContext, WorkflowContext, workflow

RATE_LIMITED = {
    "error": {
        "message": "Rate limit reached for gpt-4o-mini on requests per min (RPM).",
        "type": "requests",
        "param": None,
        "code": "rate_limit_exceeded",
    }
}
ANSWER = {
    "id": "chatcmpl-crash",
    "object": "chat.completion",
    "created": 1747900000,
    "model": "gpt-4o-mini-2024-07-18",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Kafka is a log.", "refusal": None},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
}


def _http_requests_so_far() -> int:
    d = _calls_dir()
    path = None if d is None else d / "http.jsonl"
    return 0 if path is None or not path.exists() else len(path.read_text().splitlines())


def _provider(request: httpx2.Request) -> httpx2.Response:
    first = _http_requests_so_far() == 0
    _log_call("http", path=request.url.path, status=429 if first else 200)
    if first:
        return httpx2.Response(429, json=RATE_LIMITED, headers={"retry-after-ms": "0"})
    return httpx2.Response(200, json=ANSWER)


def rate_limited_model() -> OpenAIModel:
    client = openai.AsyncOpenAI(
        api_key="sk-test",
        base_url="https://api.openai.com/v1",
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(_provider)),
    )
    return OpenAIModel("gpt-4o-mini", client=client, retry_delay=0, retry_max_delay=0)


@workflow("rate_limited", version="1")
async def rate_limited(ctx: WorkflowContext, input: Any) -> Any:
    async def ask(step: StepContext, topic: str) -> str | None:
        async with step.session("agent", model=rate_limited_model()) as agent:
            return await agent.run(f"What is {topic}?")

    return await ctx.step("ask", ask, json.dumps(input))


# -- an MCP server's tools ---------------------------------------------------------------------

NOTES_SERVER = Path(__file__).resolve().parents[1] / "mcp_notes_server.py"


def _tool_then_answer(request: httpx2.Request) -> httpx2.Response:
    """Turn 1 asks for the notes server's ``add``; turn 2 answers with what the tool gave."""
    body = json.loads(request.content)
    last = body["messages"][-1]
    _log_call("http", path=request.url.path, status=200)
    if last["role"] == "tool":
        message: dict[str, Any] = {"role": "assistant", "content": f"told: {last['content']}"}
        finish = "stop"
    else:
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "mcp__notes__add", "arguments": '{"a": 2, "b": 3}'},
        }
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        finish = "tool_calls"
    reply = {**ANSWER, "choices": [{"index": 0, "message": message, "finish_reason": finish}]}
    return httpx2.Response(200, json=reply)


def notes_server() -> McpServer:
    d = _calls_dir()
    env = {"MCP_NOTES_LOG": str(d / "mcp.jsonl")} if d is not None else {}
    params = StdioServerParameters(command=sys.executable, args=[str(NOTES_SERVER)], env=env)
    return mcp(params, name="notes")


@workflow("mcp_notes", version="1")
async def mcp_notes(ctx: WorkflowContext, input: Any) -> Any:
    async def ask(step: StepContext, prompt: str) -> str | None:
        client = openai.AsyncOpenAI(
            api_key="sk-test",
            http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(_tool_then_answer)),
        )
        model = OpenAIModel("gpt-4o-mini", client=client)
        async with step.session("agent", model=model, tools=[notes_server()]) as agent:
            return await agent.run(prompt)

    return await ctx.step("ask", ask, str(input))


# -- a stream killed mid-way -------------------------------------------------------------------

KILL_MID_STREAM = "CRASH_TEST_KILL_MID_STREAM"
STREAMED = ("Kafka ", "is ", "a log.")


def _chunk(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> bytes:
    """One ``chat.completion.chunk`` event (no delta: the usage chunk, no choices)."""
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    chunk = {
        "id": "chatcmpl-crash",
        "object": "chat.completion.chunk",
        "created": 1747900000,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": choices,
        **extra,
    }
    return f"data: {json.dumps(chunk)}\n\n".encode()


def _streaming(request: httpx2.Request) -> httpx2.Response:
    _log_call("http", path=request.url.path, status=200)

    async def body() -> AsyncIterator[bytes]:
        yield _chunk({"role": "assistant", "content": ""})
        for piece in STREAMED:
            yield _chunk({"content": piece})
        yield _chunk({}, "stop")
        yield _chunk(None, usage={"prompt_tokens": 20, "completion_tokens": 3, "total_tokens": 23})
        yield b"data: [DONE]\n\n"

    return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body())


@workflow("streamed", version="1")
async def streamed(ctx: WorkflowContext, input: Any) -> Any:
    async def ask(step: StepContext, prompt: str) -> Any:
        client = openai.AsyncOpenAI(
            api_key="sk-test",
            http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(_streaming)),
        )
        model = OpenAIModel("gpt-4o-mini", client=client)
        deltas: list[str] = []
        async with step.session("agent", model=model) as agent:
            async with agent.stream(prompt) as stream:
                async for delta in stream:
                    _log_call("deltas", delta=delta)
                    deltas.append(delta)
                    if os.environ.get(KILL_MID_STREAM):
                        os.kill(os.getpid(), signal.SIGKILL)
            return {"deltas": deltas, "answer": stream.answer}

    return await ctx.step("ask", ask, str(input))
