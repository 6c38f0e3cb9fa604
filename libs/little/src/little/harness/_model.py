"""Models as the harness sees them: a request of messages and tools in, a response out.

Messages are plain JSON dicts in the common chat shape (``role``, ``content``, assistant
``tool_calls`` of ``{id, name, arguments}``, tool results with ``tool_call_id``), so a request
hashes canonically and replays byte for byte. Adapters translate to each provider's SDK.

A model that streams (``StreamingModel``) also has ``stream(request)``: an async iterator of
the answer's text deltas (``str``) as they arrive, then the whole ``ModelResponse``, last.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from little._canonical import canonical_json
from little.errors import ConfigurationError
from little.events import Usage

Message = dict[str, Any]


@dataclass(frozen=True)
class ToolSpec:
    """What a model is told about a tool."""

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object"})

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


@dataclass(frozen=True)
class OutputSchema:
    """The shape a model's final answer must have (structured output): a JSON schema and a
    name. Adapters ask for it the provider's native way (OpenAI ``response_format``
    json_schema, Anthropic a forced tool); the answer is its JSON, as the message's text."""

    name: str
    schema: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "schema": self.schema}


@dataclass(frozen=True)
class ModelRequest:
    system: str | None
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...]
    output: OutputSchema | None = None
    """Structured output: the final answer is JSON of this schema (None: free text)."""

    def canonical(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "system": self.system,
            "messages": list(self.messages),
            "tools": [t.as_json() for t in self.tools],
        }
        if self.output is not None:  # absent (not null) without one
            data["output"] = self.output.as_json()
        return data


@dataclass(frozen=True)
class ToolCallRequest:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ModelResponse:
    """One assistant turn: text, tool calls, and tokens (never a cost)."""

    content: str | None = None
    tool_calls: tuple[ToolCallRequest, ...] = ()
    usage: Usage = field(default_factory=lambda: Usage(input_tokens=0, output_tokens=0))
    finish_reason: str | None = None
    reasoning: tuple[dict[str, Any], ...] = ()
    """Provider blocks the model must be shown again on the next turn, kept verbatim (JSON):
    Anthropic's ``thinking`` / ``redacted_thinking`` blocks with their signatures. Recorded
    with the response and carried in the assistant message as ``reasoning``."""

    def as_message(self) -> Message:
        message: Message = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = self._tool_calls_json()
        if self.reasoning:
            message["reasoning"] = [dict(b) for b in self.reasoning]
        return message

    def to_json(self) -> str:
        data: dict[str, Any] = {
            "content": self.content,
            "tool_calls": self._tool_calls_json(),
            "finish_reason": self.finish_reason,
        }
        if self.reasoning:  # absent, not [], so responses without any record as before
            data["reasoning"] = list(self.reasoning)
        return canonical_json(data)

    def _tool_calls_json(self) -> list[dict[str, Any]]:
        return [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in self.tool_calls]

    @classmethod
    def from_json(cls, text: str, usage: Usage) -> ModelResponse:
        data = json.loads(text)
        return cls(
            content=data.get("content"),
            tool_calls=tuple(
                ToolCallRequest(c["id"], c["name"], c.get("arguments") or {})
                for c in data.get("tool_calls") or ()
            ),
            usage=usage,
            finish_reason=data.get("finish_reason"),
            reasoning=tuple(data.get("reasoning") or ()),
        )


@runtime_checkable
class Model(Protocol):
    """A chat model with tool calling. ``provider``/``name`` key the price table."""

    provider: str
    name: str

    async def complete(self, request: ModelRequest) -> ModelResponse: ...


ModelStreamItem = str | ModelResponse
"""What a model's stream yields: a text delta, or (once, last) the whole response."""


@runtime_checkable
class StreamingModel(Model, Protocol):
    """A model that can stream its answer: ``stream(request)`` yields each text delta as the
    provider sends it (never an empty one), then the whole ``ModelResponse`` (text, tool
    calls, usage), once and last. A stream closed before its end (``aclose``) must release
    what it holds (the HTTP response). A session streams a model without ``stream`` as one
    delta, its whole text, once ``complete`` answered."""

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamItem]: ...


ScriptEntry = ModelResponse | list[str] | tuple[str, ...]
"""A ``ScriptedModel`` turn: a response, or a text answer given as the chunks it streams in."""


class ScriptedModel:
    """A deterministic model for tests and the demo.

    The reply to a request is chosen by how many assistant turns the request already holds,
    not by how often the model was called, so a resumed session asking for turn 3 gets turn 3's
    reply. Every real invocation is appended to ``invocation_log`` (JSON lines) when given, so
    tests in other processes can count calls. ``provider``/``name`` may name a priced model the
    script stands in for.

    It streams (``stream``): a turn given as a list of text chunks streams them one by one
    (``complete`` answers their join, finish reason ``stop``); a ``ModelResponse`` streams its
    text as one delta.
    """

    def __init__(
        self,
        script: Sequence[ScriptEntry],
        *,
        provider: str = "scripted",
        name: str = "script",
        latency: float = 0.0,
        invocation_log: str | Path | None = None,
    ) -> None:
        self.script: tuple[ModelResponse, ...] = tuple(_scripted(e) for e in script)
        self.chunks: dict[int, tuple[str, ...]] = {
            i: tuple(e) for i, e in enumerate(script) if isinstance(e, list | tuple)
        }
        """The turns given as chunks (by index in the script): what ``stream`` yields."""
        self.provider = provider
        self.name = name
        self.latency = latency
        self.invocation_log = Path(invocation_log) if invocation_log else None
        self.invocations = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        return await self._answer(self._invoked(request))

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamItem]:
        turn = self._invoked(request)
        response = await self._answer(turn)
        for chunk in self.chunks.get(turn, (response.content,)):
            if chunk:
                yield chunk
        yield response

    def _invoked(self, request: ModelRequest) -> int:
        """The script index this request asks for, its invocation counted (and logged)."""
        turn = sum(1 for m in request.messages if m.get("role") == "assistant")
        self.invocations += 1
        if self.invocation_log is not None:
            with self.invocation_log.open("a") as f:
                f.write(json.dumps({"pid": os.getpid(), "turn": turn + 1}) + "\n")
                f.flush()
                os.fsync(f.fileno())
        return turn

    async def _answer(self, turn: int) -> ModelResponse:
        if self.latency:
            await asyncio.sleep(self.latency)
        if turn >= len(self.script):
            return ModelResponse(content="(script exhausted)", finish_reason="stop")
        return self.script[turn]


def _scripted(entry: ScriptEntry) -> ModelResponse:
    if isinstance(entry, ModelResponse):
        return entry
    if not isinstance(entry, list | tuple) or not all(isinstance(c, str) for c in entry):
        raise ConfigurationError(
            f"ScriptedModel: a script entry is a ModelResponse or a list of text chunks, "
            f"not {entry!r}"
        )
    return ModelResponse(content="".join(entry), finish_reason="stop")


def count_invocations(invocation_log: str | Path) -> dict[int, int]:
    """Per turn, how many times a ScriptedModel was really invoked (read from its log)."""
    counts: dict[int, int] = {}
    path = Path(invocation_log)
    if path.exists():
        for line in path.read_text().splitlines():
            turn = json.loads(line)["turn"]
            counts[turn] = counts.get(turn, 0) + 1
    return counts
