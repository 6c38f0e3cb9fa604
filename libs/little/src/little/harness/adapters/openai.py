"""The OpenAI adapter: the harness's ``Model`` over ``AsyncOpenAI`` Chat Completions.

Translation (deterministic, so equal requests send equal bodies):

* the system prompt is the first message, ``{"role": "system", ...}``;
* user and tool-result messages keep their shape (``tool_call_id`` and string ``content``);
  content of parts (``little.harness.content``) is a list of content parts: ``text``,
  ``image_url`` (a URL, or the bytes as a ``data:`` URL) and ``file`` (a document's bytes as
  a ``data:`` URL in ``file_data``, with a ``filename``; a document by URL is refused, as
  Chat Completions takes none);
* a tool message holds text only, so a tool result's images and documents go in one user
  message after the turn's last tool result (each result's introduced by ``Tool call <id>
  returned:``), the tool message keeping its text parts (``ATTACHED`` when it has none);
* assistant tool calls become ``{"id", "type": "function", "function": {"name", "arguments"}}``
  with the arguments as canonical JSON (sorted keys, no whitespace); arguments recorded as
  ``{"_raw": text}`` (the model sent invalid JSON) are sent back as that text;
* tools are sent in the function format, ``{"type": "function", "function": {...}}``;
* structured output (``request.output``) is ``response_format`` ``{"type": "json_schema",
  "json_schema": {"name", "schema"}}``; the answer is the JSON text of the message.

The response's tool-call arguments (a JSON string) are parsed to a dict, or kept as
``{"_raw": text}`` when they do not parse to a JSON object. Usage is tokens only:
``input_tokens`` is ``prompt_tokens`` (cached tokens included), ``cached_input_tokens`` is
``prompt_tokens_details.cached_tokens`` and ``reasoning_tokens`` is
``completion_tokens_details.reasoning_tokens``.

``stream(request)`` sends the same body with ``stream: true`` and ``stream_options:
{"include_usage": true}`` and yields each ``content`` delta as it arrives (a ``refusal`` delta
too); the chunks are accumulated by the SDK's own ``ChatCompletionStreamState`` into the
completion translated as above.

The SDK is imported when an ``OpenAIModel`` is constructed, never when ``little.harness`` is.
Errors and retries are as the package says (``little.harness.adapters``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, cast

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
from little.harness.content import chat_part

__all__ = [
    "ATTACHED",
    "PROVIDER",
    "RAW_ARGUMENTS",
    "OpenAIModel",
    "from_openai_completion",
    "parse_arguments",
    "to_openai_messages",
    "to_openai_response_format",
    "to_openai_tool",
    "to_usage",
]

if TYPE_CHECKING:
    from openai import AsyncOpenAI
    from openai.types.chat import (
        ChatCompletion,
        ChatCompletionContentPartParam,
        ChatCompletionContentPartTextParam,
        ChatCompletionFunctionToolParam,
        ChatCompletionMessageFunctionToolCallParam,
        ChatCompletionMessageParam,
        ChatCompletionToolMessageParam,
    )
    from openai.types.completion_usage import CompletionUsage
    from openai.types.shared_params import FunctionDefinition

PROVIDER = "openai"
ATTACHED = "(its images and documents follow in a user message)"
"""A tool message's text when its result has only images and documents (which a tool
message cannot hold: they go in the user message after the turn's results)."""
RAW_ARGUMENTS = "_raw"
"""The key holding tool-call arguments that were not a JSON object, verbatim."""


class OpenAIModel(SDKModel["AsyncOpenAI"]):
    """A chat model served by the OpenAI Chat Completions API.

    ``client`` is an ``openai.AsyncOpenAI`` (one is made from ``api_key``, else from the
    SDK's defaults, ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL``, when not given).
    ``max_tokens`` is sent as ``max_completion_tokens``; other keyword arguments
    (``temperature``, ``seed``, ...) are passed to every ``chat.completions.create`` call.
    """

    _provider_sdk = ProviderSDK(
        provider=PROVIDER,
        module="openai",
        title="OpenAI",
        extra="openai",
        client="AsyncOpenAI",
        error="OpenAIError",
        key_variable="OPENAI_API_KEY",
        adapter="OpenAIModel",
    )

    def __init__(
        self,
        model: str,
        *,
        client: AsyncOpenAI | None = None,
        api_key: str | None = None,
        max_retries: int | None = None,
        retry_delay: float | None = None,
        retry_max_delay: float | None = None,
        max_tokens: int | None = None,
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
        return f"OpenAIModel({self.name!r})"

    @property
    def request_options(self) -> dict[str, Any]:
        """What every request carries besides the conversation (``max_completion_tokens``,
        ``temperature``, ...): part of a session's manifest, so changing it on resume is
        capability drift, not a silent change of the calls served from the log."""
        options: dict[str, Any] = {}
        if self.max_tokens is not None:
            options["max_completion_tokens"] = self.max_tokens
        return {**options, **self.options}

    def request_params(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments of ``chat.completions.create`` for ``request``."""
        params: dict[str, Any] = {
            "model": self.name,
            "messages": to_openai_messages(request.system, request.messages),
        }
        if request.tools:
            params["tools"] = [to_openai_tool(t) for t in request.tools]
        if request.output is not None:
            params["response_format"] = to_openai_response_format(request.output)
        params.update(self.request_options)
        return params

    async def complete(self, request: ModelRequest) -> ModelResponse:
        completion: ChatCompletion = await self.client.chat.completions.create(
            **self.request_params(request)
        )
        return from_openai_completion(completion)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamItem]:
        """The answer as it is generated: each text delta, then the whole response."""
        from openai.lib.streaming.chat import ChatCompletionStreamState

        params = self.request_params(request)
        params["stream"] = True
        params["stream_options"] = {"include_usage": True}
        chunks = await self.client.chat.completions.create(**params)
        state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
        seen = False
        try:
            async for chunk in chunks:
                seen = True
                state.handle_chunk(chunk)
                for choice in chunk.choices:
                    if choice.index != 0:
                        continue
                    text = choice.delta.content or choice.delta.refusal
                    if text:
                        yield text
        finally:
            await chunks.close()
        if not seen:  # no answer at all: worth another attempt, as a dropped connection is
            raise self._sdk.APIConnectionError(
                message=f"{self!r}: the stream ended before its first chunk",
                request=chunks.response.request,
            )
        yield from_openai_completion(state.get_final_completion())


# -- request translation -------------------------------------------------------------------


def to_openai_tool(spec: ToolSpec) -> ChatCompletionFunctionToolParam:
    function: FunctionDefinition = {"name": spec.name, "parameters": spec.parameters}
    if spec.description:
        function["description"] = spec.description
    return {"type": "function", "function": function}


def to_openai_response_format(output: OutputSchema) -> dict[str, Any]:
    """Structured output as Chat Completions asks for it: ``response_format`` json_schema
    (``strict`` left unset: OpenAI's strict mode takes only schemas that close every object,
    which most pydantic models do not; the session validates the answer either way)."""
    return {"type": "json_schema", "json_schema": {"name": output.name, "schema": output.schema}}


def _arguments_text(arguments: dict[str, Any]) -> str:
    if set(arguments) == {RAW_ARGUMENTS} and isinstance(arguments[RAW_ARGUMENTS], str):
        return str(arguments[RAW_ARGUMENTS])
    return canonical_json(arguments)


def to_openai_messages(
    system: str | None, messages: tuple[Message, ...] | list[Message]
) -> list[ChatCompletionMessageParam]:
    """The harness's chat messages as Chat Completions messages, system prompt first."""
    out: list[ChatCompletionMessageParam] = []
    if system:
        out.append({"role": "system", "content": system})
    attached: list[ChatCompletionContentPartParam] = []  # tool results' images and files
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == "assistant":
            calls: list[ChatCompletionMessageFunctionToolCallParam] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {
                        "name": c["name"],
                        "arguments": _arguments_text(c.get("arguments") or {}),
                    },
                }
                for c in m.get("tool_calls") or ()
            ]
            content = m.get("content")
            if calls:
                out.append({"role": "assistant", "content": content, "tool_calls": calls})
            else:
                out.append({"role": "assistant", "content": "" if content is None else content})
        elif role == "tool":
            out.append(_tool_message(m, attached))
            following = messages[i + 1].get("role") if i + 1 < len(messages) else None
            if attached and following != "tool":  # after the turn's last tool result
                out.append({"role": "user", "content": attached})
                attached = []
        elif role == "system":
            out.append({"role": "system", "content": m.get("content") or ""})
        else:
            content = m.get("content")
            if isinstance(content, list):
                out.append({"role": "user", "content": [_part(p) for p in content]})
            else:
                out.append({"role": "user", "content": content or ""})
    return out


def _part(part: dict[str, Any]) -> ChatCompletionContentPartParam:
    if part.get("type") == "document" and part.get("url"):
        raise ConfigurationError(
            f"OpenAI Chat Completions takes a document as its bytes, not by URL "
            f"({part['url']!r}): give little.harness.Document(data, media_type)"
        )
    return cast("ChatCompletionContentPartParam", chat_part(part))


def _tool_message(
    m: Message, attached: list[ChatCompletionContentPartParam]
) -> ChatCompletionToolMessageParam:
    """A tool result; its images and files (a tool message takes text only) are added to
    ``attached``, for the user message that follows the turn's results."""
    content = m.get("content")
    if not isinstance(content, list):
        return {"role": "tool", "tool_call_id": m["tool_call_id"], "content": content or ""}
    texts: list[ChatCompletionContentPartTextParam] = [
        {"type": "text", "text": p.get("text", "")} for p in content if p.get("type") == "text"
    ]
    others = [p for p in content if p.get("type") != "text"]
    if others:
        call = m["tool_call_id"]
        attached.append({"type": "text", "text": f"Tool call {call} returned:"})
        attached.extend(_part(p) for p in others)
        if not texts:
            texts = [{"type": "text", "text": ATTACHED}]
    return {"role": "tool", "tool_call_id": m["tool_call_id"], "content": texts}


# -- response translation ------------------------------------------------------------------


def parse_arguments(text: str | None) -> dict[str, Any]:
    """Tool-call arguments as a dict; text that is not a JSON object is kept as ``_raw``."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {RAW_ARGUMENTS: text}
    if not isinstance(value, dict):
        return {RAW_ARGUMENTS: text}
    return value


def to_usage(usage: CompletionUsage | None) -> Usage:
    """Tokens of one completion; ``input_tokens`` counts cached ones too (``prompt_tokens``)."""
    if usage is None:
        return Usage(input_tokens=0, output_tokens=0)
    prompt = usage.prompt_tokens_details
    completion = usage.completion_tokens_details
    return Usage(
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.completion_tokens,
        cached_input_tokens=(prompt.cached_tokens or 0) if prompt else 0,
        reasoning_tokens=(completion.reasoning_tokens or 0) if completion else 0,
    )


def from_openai_completion(completion: ChatCompletion) -> ModelResponse:
    """The first choice as a ModelResponse (a refusal is its content when there is no text)."""
    usage = to_usage(completion.usage)
    if not completion.choices:
        return ModelResponse(usage=usage)
    choice = completion.choices[0]
    message = choice.message
    calls: list[ToolCallRequest] = []
    for call in message.tool_calls or ():
        if call.type == "function":
            calls.append(
                ToolCallRequest(
                    call.id, call.function.name, parse_arguments(call.function.arguments)
                )
            )
        else:  # a custom tool's free-form input
            calls.append(
                ToolCallRequest(call.id, call.custom.name, {RAW_ARGUMENTS: call.custom.input})
            )
    content = message.content if message.content is not None else message.refusal
    return ModelResponse(
        content=content,
        tool_calls=tuple(calls),
        usage=usage,
        finish_reason=choice.finish_reason,
    )
