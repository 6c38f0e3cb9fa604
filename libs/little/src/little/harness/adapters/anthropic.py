"""The Anthropic adapter: the harness's ``Model`` over ``AsyncAnthropic`` Messages.

Translation (deterministic, so equal requests send equal bodies):

* the system prompt is the ``system`` parameter, not a message;
* a user message keeps its content, its parts (``little.harness.content``) as ``text``,
  ``image`` and ``document`` blocks, each with a ``url`` or ``base64`` source (a plain-text
  document: a ``text`` source); an assistant message becomes a ``text`` block (when it has
  text) followed by one ``tool_use`` block per tool call (``input`` is the arguments dict); an
  assistant message with neither is left out;
* tool results become ``tool_result`` blocks of a user message (content of parts as those
  blocks: a tool result may hold images and documents), and consecutive messages of one
  role are merged into one message (all results of a turn go back in one user message, as the
  API requires);
* tools are ``{"name", "description", "input_schema"}``;
* structured output (``request.output``) is tool forcing: one more tool, named as the output,
  whose ``input_schema`` is the output's, and ``tool_choice`` that tool (``any`` when the
  session has tools of its own); the model's call of it is the answer (its input's JSON).

From the response, the ``text`` blocks joined are the content and the ``tool_use`` blocks the
tool calls; ``thinking`` and ``redacted_thinking`` blocks are kept verbatim (signature
included) as the response's ``reasoning`` and sent back first in that assistant message, as
the API requires when a thinking model's tool use continues; other blocks (server tools) are
not kept. ``stop_reason`` maps
``tool_use`` to ``tool_calls`` and ``end_turn`` to ``stop`` (others as they are). Usage is
tokens only: Anthropic's ``input_tokens`` excludes cache reads and writes, so
``input_tokens`` here is ``input_tokens + cache_read_input_tokens +
cache_creation_input_tokens`` (all input, as the price table expects),
``cached_input_tokens`` is ``cache_read_input_tokens`` and ``reasoning_tokens`` is
``output_tokens_details.thinking_tokens`` when reported.

``stream(request)`` sends the same body through the SDK's ``messages.stream`` and yields each
``text`` delta as it arrives (a forced structured answer streams no text: it is a tool's
input); the SDK accumulates the events into the final message, translated as above.

The SDK is imported when an ``AnthropicModel`` is constructed, never when ``little.harness``
is. Errors and retries are as the package says (``little.harness.adapters``).
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Literal, cast

from little._canonical import canonical_json
from little.errors import ConfigurationError
from little.events import Usage
from little.harness._model import (
    Message,
    ModelRequest,
    ModelResponse,
    ModelStreamItem,
    OutputSchema,
    ToolCallRequest,
    ToolSpec,
)
from little.harness.adapters._common import ProviderSDK, SDKModel
from little.harness.content import is_parts, part_data

__all__ = [
    "PROVIDER",
    "STOP_REASONS",
    "AnthropicModel",
    "from_anthropic_message",
    "to_anthropic_block",
    "to_anthropic_messages",
    "to_anthropic_output_tool",
    "to_anthropic_tool",
    "to_usage",
]

if TYPE_CHECKING:
    from anthropic import AsyncAnthropic
    from anthropic.types import (
        ContentBlockParam,
        MessageParam,
        ToolParam,
    )
    from anthropic.types import Message as AnthropicMessage
    from anthropic.types import Usage as AnthropicUsage

PROVIDER = "anthropic"
STOP_REASONS = {"tool_use": "tool_calls", "end_turn": "stop"}
"""Anthropic stop reasons that have a common name; others are recorded as they are."""


class AnthropicModel(SDKModel["AsyncAnthropic"]):
    """A chat model served by the Anthropic Messages API.

    ``client`` is an ``anthropic.AsyncAnthropic`` (one is made from ``api_key``, else from
    the SDK's defaults, ``ANTHROPIC_API_KEY``, when not given). ``max_tokens`` is required by
    the API; other keyword arguments (``thinking``, ``stop_sequences``, ...) are passed to every
    ``messages.create`` call.
    """

    _provider_sdk = ProviderSDK(
        provider=PROVIDER,
        module="anthropic",
        title="Anthropic",
        extra="anthropic",
        client="AsyncAnthropic",
        error="AnthropicError",
        key_variable="ANTHROPIC_API_KEY",
        adapter="AnthropicModel",
    )

    def __init__(
        self,
        model: str,
        *,
        client: AsyncAnthropic | None = None,
        api_key: str | None = None,
        max_retries: int | None = None,
        retry_delay: float | None = None,
        retry_max_delay: float | None = None,
        max_tokens: int = 1024,
        **kw: Any,
    ) -> None:
        super().__init__(
            model,
            client=client,
            api_key=api_key,
            max_retries=max_retries,
            retry_delay=retry_delay,
            retry_max_delay=retry_max_delay,
            options=kw,
        )
        self.max_tokens = max_tokens

    def __repr__(self) -> str:
        return f"AnthropicModel({self.name!r})"

    @property
    def request_options(self) -> dict[str, Any]:
        """What every request carries besides the conversation (``max_tokens``,
        ``thinking``, ``stop_sequences``, ...): part of a session's manifest, so changing it on
        resume is capability drift, not a silent change of the calls served from the log."""
        return {"max_tokens": self.max_tokens, **self.options}

    def request_params(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments of ``messages.create`` for ``request``."""
        params: dict[str, Any] = {
            "model": self.name,
            "messages": to_anthropic_messages(request.messages),
        }
        if request.system:
            params["system"] = request.system
        tools = [to_anthropic_tool(t) for t in request.tools]
        if request.output is not None:
            # structured output by tool forcing: the answer is the input of a tool whose
            # schema is the output's; with other tools the model must call one of them or it
            tools.append(to_anthropic_output_tool(request.output))
            params["tool_choice"] = (
                {"type": "tool", "name": request.output.name}
                if not request.tools
                else {"type": "any"}
            )
        if tools:
            params["tools"] = tools
        params.update(self.request_options)
        return params

    async def complete(self, request: ModelRequest) -> ModelResponse:
        message: AnthropicMessage = await self.client.messages.create(
            **self.request_params(request)
        )
        return from_anthropic_message(
            message, None if request.output is None else request.output.name
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamItem]:
        """The answer as it is generated: each text delta, then the whole response."""
        async with self.client.messages.stream(**self.request_params(request)) as events:
            async for event in events:
                if event.type == "text" and event.text:
                    yield event.text
            message: AnthropicMessage = await events.get_final_message()
        yield from_anthropic_message(
            message, None if request.output is None else request.output.name
        )


# -- request translation -------------------------------------------------------------------


def to_anthropic_tool(spec: ToolSpec) -> ToolParam:
    tool: ToolParam = {"name": spec.name, "input_schema": spec.parameters}
    if spec.description:
        tool["description"] = spec.description
    return tool


def to_anthropic_output_tool(output: OutputSchema) -> ToolParam:
    """The tool a structured answer is forced through (its input is the answer)."""
    return {
        "name": output.name,
        "description": "Give the final answer: its input is the answer, in this schema.",
        "input_schema": output.schema,
    }


def to_anthropic_block(part: dict[str, Any]) -> ContentBlockParam:
    """A content part (``little.harness.content``) as a Messages API block: ``text``,
    ``image`` and ``document`` with a ``url`` or ``base64`` source (a ``text/plain`` document:
    a ``text`` source; a document's name is its ``title``). A block given in the API's own
    shape (with a ``source``) is kept as it is."""
    kind, url, media = part.get("type"), part.get("url"), part.get("media_type")
    if kind == "text" or "source" in part:
        return cast(
            "ContentBlockParam",
            part if "source" in part else {"type": "text", "text": part.get("text", "")},
        )
    source: dict[str, Any]
    if url:
        source = {"type": "url", "url": url}
    elif kind == "image" or media == "application/pdf":
        source = {"type": "base64", "media_type": media, "data": part_data(part)}
    elif media == "text/plain":
        source = {"type": "text", "media_type": media, "data": _plain_text(part)}
    else:
        raise ConfigurationError(
            "Anthropic takes documents as PDF (application/pdf) or plain text (text/plain), "
            f"not {media!r}"
        )
    block: dict[str, Any] = {"type": kind, "source": source}
    if kind == "document" and part.get("name"):
        block["title"] = part["name"]
    return cast("ContentBlockParam", block)


def _plain_text(part: dict[str, Any]) -> str:
    try:
        return base64.b64decode(part_data(part)).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigurationError(f"a text/plain document is not UTF-8 text: {exc}") from None


def _content(content: Any) -> Any:
    """A message's content as blocks when it is parts, else as it is."""
    return [to_anthropic_block(p) for p in content] if is_parts(content) else content


def _blocks(m: Message) -> tuple[Literal["user", "assistant"], list[ContentBlockParam] | str]:
    role = m.get("role")
    if role == "tool":
        return "user", [
            {
                "type": "tool_result",
                "tool_use_id": m["tool_call_id"],
                "content": _content(m.get("content")) or "",
            }
        ]
    if role == "assistant":
        blocks: list[ContentBlockParam] = list(m.get("reasoning") or ())  # thinking first
        content = m.get("content")
        if isinstance(content, str) and content:
            blocks.append({"type": "text", "text": content})
        elif isinstance(content, list):
            blocks.extend(content)
        blocks.extend(
            {
                "type": "tool_use",
                "id": c["id"],
                "name": c["name"],
                "input": c.get("arguments") or {},
            }
            for c in m.get("tool_calls") or ()
        )
        return "assistant", blocks
    content = _content(m.get("content"))
    return "user", content if isinstance(content, str | list) else ""


def to_anthropic_messages(messages: tuple[Message, ...] | list[Message]) -> list[MessageParam]:
    """The harness's chat messages as Messages API messages, roles alternating."""
    out: list[dict[str, Any]] = []
    for m in messages:
        role, content = _blocks(m)
        if role == "assistant" and not content:
            continue
        if out and out[-1]["role"] == role:
            previous = out[-1]["content"]
            merged: list[Any] = [
                *([{"type": "text", "text": previous}] if isinstance(previous, str) else previous),
                *([{"type": "text", "text": content}] if isinstance(content, str) else content),
            ]
            out[-1] = {"role": role, "content": merged}
        else:
            out.append({"role": role, "content": content})
    return cast("list[MessageParam]", out)


# -- response translation ------------------------------------------------------------------


def to_usage(usage: AnthropicUsage) -> Usage:
    """Tokens of one message; ``input_tokens`` counts cache reads and writes too."""
    cache_read = usage.cache_read_input_tokens or 0
    cache_write = usage.cache_creation_input_tokens or 0
    details = usage.output_tokens_details
    return Usage(
        input_tokens=usage.input_tokens + cache_read + cache_write,
        output_tokens=usage.output_tokens,
        cached_input_tokens=cache_read,
        reasoning_tokens=details.thinking_tokens if details is not None else 0,
    )


def from_anthropic_message(
    message: AnthropicMessage, output_tool: str | None = None
) -> ModelResponse:
    """The message as a ModelResponse. ``output_tool``: the tool a structured answer was
    forced through; a call of it is the final answer (its input's canonical JSON is the
    content, finish reason ``stop``) and any other call beside it is dropped."""
    texts: list[str] = []
    calls: list[ToolCallRequest] = []
    reasoning: list[dict[str, Any]] = []
    answer: str | None = None
    for block in message.content:
        if block.type == "text":
            texts.append(block.text)
        elif block.type == "tool_use":
            if output_tool is not None and block.name == output_tool and answer is None:
                answer = canonical_json(block.input)
            else:
                calls.append(ToolCallRequest(block.id, block.name, dict(block.input)))
        elif block.type in ("thinking", "redacted_thinking"):
            reasoning.append(block.to_dict(mode="json"))
    stop = message.stop_reason
    if answer is not None:
        return ModelResponse(
            content=answer,
            usage=to_usage(message.usage),
            finish_reason="stop",
            reasoning=tuple(reasoning),
        )
    return ModelResponse(
        content="".join(texts) if texts else None,
        tool_calls=tuple(calls),
        usage=to_usage(message.usage),
        finish_reason=STOP_REASONS.get(stop, stop) if stop is not None else None,
        reasoning=tuple(reasoning),
    )
