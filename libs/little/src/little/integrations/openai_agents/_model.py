"""One ``LittleRunner`` call's exchange with the recording kernel, and the Agents SDK ``Model``
that routes every model request of the run through it.

A request is recorded as the SDK hands it to its model: the Responses-format input items (the
SDK's native messages) and a head (model, instructions, tools, handoffs, output schema, model
settings, prompt), with the per-run ``prompt_cache_key`` and null fields stripped. A response
is recorded as its output items (``exclude_unset``: a JSON round trip adds nothing), its usage
and its id; a served one is rebuilt from that, and on a streamed turn the SDK's own stream
events are synthesised from it.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.model_settings import ModelSettings
from agents.models.interface import Model, ModelTracing
from agents.tool import FunctionTool, Tool
from agents.usage import Usage as SdkUsage
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseOutputItem,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseOutputMessage,
    ResponseTextDeltaEvent,
    ResponseUsage,
)
from openai.types.responses.response_prompt_param import ResponsePromptParam
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails
from pydantic import BaseModel, TypeAdapter

from little._canonical import canonical_hash, canonical_json
from little.errors import ConfigurationError, UnsupportedFeatureError
from little.events import Usage
from little.harness import Tool as LittleTool
from little.harness import ToolCallRequest
from little.integrations.openai_agents._as_tool import NestedRunner
from little.integrations.openai_agents._common import RequestChain, is_control
from little.runtime import (
    AgentCallTicket,
    Recorder,
    SessionDivergedError,
    StepContext,
    TurnRequest,
)

_T = TypeVar("_T")

PER_RUN = ("prompt_cache_key",)
"""What the SDK stamps per run and the hash never sees (``agents-sdk:run:<uuid4>``)."""

_OUTPUT = TypeAdapter(list[ResponseOutputItem])


def _json_data(value: Any) -> Any:
    """A pydantic model as its set fields (JSON mode), anything else as it is."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_unset=True)
    return value


def _usage_json(u: SdkUsage) -> dict[str, int]:
    return {
        "requests": u.requests,
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "total_tokens": u.total_tokens,
        "cached_tokens": u.input_tokens_details.cached_tokens or 0,
        "cache_write_tokens": getattr(u.input_tokens_details, "cache_write_tokens", 0) or 0,
        "reasoning_tokens": u.output_tokens_details.reasoning_tokens or 0,
    }


def _input_details(d: dict[str, int], cls: Any = InputTokensDetails) -> Any:
    return cls.model_validate(
        {
            "cached_tokens": d.get("cached_tokens", 0),
            "cache_write_tokens": d.get("cache_write_tokens", 0),
        }
    )


def _sdk_usage(d: dict[str, int]) -> SdkUsage:
    return SdkUsage(
        requests=d.get("requests", 1),
        input_tokens=d["input_tokens"],
        output_tokens=d["output_tokens"],
        total_tokens=d["total_tokens"],
        input_tokens_details=_input_details(d),
        output_tokens_details=OutputTokensDetails(reasoning_tokens=d.get("reasoning_tokens", 0)),
    )


class Answer:
    """A model response as the kernel records it (``to_json``, usage) and the SDK takes it."""

    __slots__ = ("response",)

    def __init__(self, response: ModelResponse) -> None:
        self.response = response

    @property
    def usage(self) -> Usage:
        u = self.response.usage
        return Usage(
            input_tokens=u.input_tokens,
            output_tokens=u.output_tokens,
            cached_input_tokens=u.input_tokens_details.cached_tokens or 0,
            reasoning_tokens=u.output_tokens_details.reasoning_tokens or 0,
        )

    @property
    def finish_reason(self) -> str | None:
        return None

    def to_json(self) -> str:
        r = self.response
        return canonical_json(
            {
                "output": [_json_data(item) for item in r.output],
                "usage": _usage_json(r.usage),
                "response_id": r.response_id,
            }
        )

    @classmethod
    def from_json(cls, text: str, usage: Usage | None = None) -> Answer:
        d = json.loads(text)
        return cls(
            ModelResponse(
                output=_OUTPUT.validate_python(d["output"]),
                usage=_sdk_usage(d["usage"]),
                response_id=d.get("response_id"),
            )
        )

    @classmethod
    def from_stream(cls, response: Response) -> Answer:
        u = response.usage
        usage = SdkUsage(requests=1)
        if u is not None:
            usage = _sdk_usage(
                {
                    "input_tokens": u.input_tokens,
                    "output_tokens": u.output_tokens,
                    "total_tokens": u.total_tokens,
                    "cached_tokens": u.input_tokens_details.cached_tokens or 0,
                    "cache_write_tokens": getattr(u.input_tokens_details, "cache_write_tokens", 0)
                    or 0,
                    "reasoning_tokens": u.output_tokens_details.reasoning_tokens or 0,
                }
            )
        return cls(
            ModelResponse(output=list(response.output), usage=usage, response_id=response.id)
        )

    def stream_events(self, model: str) -> list[TResponseStreamEvent]:
        """The SDK's own stream events for this response: each output item added, its text as
        one delta per content part, done; then ``response.completed`` with the response."""
        events: list[TResponseStreamEvent] = []
        seq = 0
        for index, item in enumerate(self.response.output):
            events.append(
                ResponseOutputItemAddedEvent.model_construct(
                    type="response.output_item.added",
                    item=item,
                    output_index=index,
                    sequence_number=seq,
                )
            )
            seq += 1
            if isinstance(item, ResponseOutputMessage):
                for part_index, part in enumerate(item.content):
                    text = getattr(part, "text", None)
                    if text:
                        events.append(
                            ResponseTextDeltaEvent.model_construct(
                                type="response.output_text.delta",
                                delta=text,
                                item_id=item.id,
                                output_index=index,
                                content_index=part_index,
                                logprobs=[],
                                sequence_number=seq,
                            )
                        )
                        seq += 1
            events.append(
                ResponseOutputItemDoneEvent.model_construct(
                    type="response.output_item.done",
                    item=item,
                    output_index=index,
                    sequence_number=seq,
                )
            )
            seq += 1
        recorded = _usage_json(self.response.usage)
        usage = ResponseUsage(
            input_tokens=recorded["input_tokens"],
            output_tokens=recorded["output_tokens"],
            total_tokens=recorded["total_tokens"],
            input_tokens_details=_input_details(recorded, InputTokensDetails),
            output_tokens_details=OutputTokensDetails(
                reasoning_tokens=recorded["reasoning_tokens"]
            ),
        )
        response = Response.model_construct(
            id=self.response.response_id or "little-served",
            object="response",
            created_at=0,
            model=model,
            output=list(self.response.output),
            parallel_tool_calls=True,
            tool_choice="auto",
            tools=[],
            status="completed",
            usage=usage,
        )
        events.append(
            ResponseCompletedEvent.model_construct(
                type="response.completed", response=response, sequence_number=seq
            )
        )
        return events


def tool_json(tool: Tool) -> dict[str, Any]:
    """What of a tool the request (and the manifest) commits to."""
    if isinstance(tool, FunctionTool):
        return {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.params_json_schema,
            "strict": tool.strict_json_schema,
        }
    return {"type": type(tool).__name__, "name": getattr(tool, "name", None)}


def handoff_json(h: Handoff[Any, Any]) -> dict[str, Any]:
    return {
        "tool_name": h.tool_name,
        "description": h.tool_description,
        "parameters": h.input_json_schema,
        "agent": h.agent_name,
    }


def output_schema_json(schema: AgentOutputSchemaBase | None) -> Any:
    if schema is None or schema.is_plain_text():
        return None
    return {"schema": schema.json_schema(), "strict": schema.is_strict_json_schema()}


def settings_json(settings: ModelSettings) -> dict[str, Any]:
    data: dict[str, Any] = settings.to_json_dict()
    return data


def refuse_server_state(
    session_id: str, previous_response_id: str | None, conversation_id: str | None
) -> None:
    """The SDK's model asked to use server-side state (a hook or a handoff set it)."""
    where = f"little.integrations.openai_agents (session {session_id})"
    if previous_response_id is not None:
        raise UnsupportedFeatureError(
            f"{where}: previous_response_id (Responses server-side state) cannot be "
            "replayed; pass the history as input (result.to_input_list())"
        )
    if conversation_id is not None:
        raise UnsupportedFeatureError(
            f"{where}: conversation_id (OpenAI Conversations, server-side state) cannot be "
            "replayed; pass the history as input"
        )


class Exchange:
    """One ``LittleRunner`` call: its kernel session, its ticket, the request chain, and what
    its settlement records (every turn's response, every tool call's output), which is what a
    call served whole from a recorded run is answered from, turn by turn and tool by tool."""

    def __init__(self, recorder: Recorder, model_id: str) -> None:
        self.recorder = recorder
        self.step: StepContext | None = None
        """The step of the runner call (an ``agent.as_tool()`` tool runs its agent in it)."""
        self.nested: NestedRunner | None = None
        """``LittleRunner``, for the agent an ``agent.as_tool()`` tool runs."""
        self.ticket: AgentCallTicket | None = None
        self.chain = RequestChain({"framework": "openai-agents", "model": model_id}, PER_RUN)
        self.whole: dict[str, Any] | None = None
        """A call answered whole from a record: its recorded result."""
        self.turns: list[dict[str, Any]] = []
        self.tools: dict[str, Any] = {}
        self.mcp_listings: dict[str, list[dict[str, Any]]] = {}
        """Each MCP server's recorded tool listing, by server name (listed once per call)."""
        self.abandoned = False
        """A streamed call whose consumer closed the stream: no further request or tool call."""
        self._running = 0  # tool calls under way (the SDK runs a turn's calls in parallel)
        self.before_first: Callable[[], Awaitable[None]] | None = None
        """Awaited before the first request (a streamed call opens its session there)."""

    async def begin(self) -> None:
        if self.abandoned:
            raise asyncio.CancelledError  # the consumer closed the stream: nothing more runs
        if self.before_first is not None:
            await self.before_first()

    def result(self, final_output: Any) -> dict[str, Any]:
        """What the settlement records: the final output, each turn (its request hash and
        response), each tool call's output; a served replay needs nothing else."""
        return {
            "final_output": _json_data(final_output),
            "turns": self.turns,
            "tools": self.tools,
        }

    def request(
        self,
        model: str,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff[Any, Any]],
        prompt: ResponsePromptParam | None,
    ) -> TurnRequest:
        items: list[Any] = (
            [{"content": input, "role": "user"}] if isinstance(input, str) else list(input)
        )
        tools_json = [tool_json(t) for t in tools]
        head = {
            "model": model,
            "instructions": system_instructions,
            "tools": tools_json,
            "handoffs": [handoff_json(h) for h in handoffs],
            "output_schema": output_schema_json(output_schema),
            "settings": settings_json(model_settings),
            "prompt": prompt,
        }
        return self.chain.extend(head, items, canonical_hash(tools_json))

    def served(self, request: TurnRequest) -> Answer:
        """A turn of a call answered whole: its recorded response, the request checked."""
        assert self.whole is not None
        assert self.ticket is not None
        turns = self.whole.get("turns") or []
        index = request.turn - 1
        if index >= len(turns):
            raise SessionDivergedError(
                f"session {self.recorder.session_id}: turn {request.turn} was not in the "
                f"recorded call (it had {len(turns)})"
            )
        self.recorder.served_turn(self.ticket, request.turn, request.request_hash)
        answer = Answer.from_json(canonical_json(turns[index]["response"]))
        self.turns.append(turns[index])
        return answer

    async def turn(
        self, model: str, request: TurnRequest, invoke: Callable[[], Awaitable[Answer]]
    ) -> Answer:
        self.recorder.model = model  # the model of that very call (a handoff changes it)
        try:
            answer = await self.recorder.model_turn(request, invoke, Answer.from_json)
        except Exception as exc:
            if not is_control(exc):
                self.chain.rewind()  # the SDK's retry of it is the same turn, called again
            raise
        self.turns.append(
            {"request_hash": request.request_hash, "response": json.loads(answer.to_json())}
        )
        return answer

    async def tool_call(
        self,
        ctx: Any,
        input: str,
        name: str,
        invoke: Callable[[], Awaitable[Any]],
        side_effecting: bool,
        requires_approval: bool,
    ) -> Any:
        if self.abandoned:
            raise asyncio.CancelledError  # the consumer closed the stream: nothing more runs
        call_id = str(ctx.tool_call_id)
        turn = self.chain.turns
        key = f"{turn}:{call_id}"
        if self.whole is not None:
            recorded = self.whole.get("tools") or {}
            if key not in recorded:
                raise SessionDivergedError(
                    f"session {self.recorder.session_id}: tool call {key} ({name}) was not in "
                    "the recorded call"
                )
            self.tools[key] = recorded[key]
            return recorded[key]
        try:
            arguments = json.loads(input) if input else {}
        except ValueError:
            arguments = {"input": input}
        if not isinstance(arguments, dict):
            arguments = {"input": arguments}

        async def fn(_arguments: dict[str, Any], _ctx: Any) -> Any:
            return _json_data(await invoke())

        little_tool = LittleTool(
            name, fn, side_effecting=side_effecting, requires_approval=requires_approval
        )
        self._running += 1
        try:
            text = await self.recorder.tool_call(
                turn, ToolCallRequest(call_id, name, arguments), little_tool
            )
            if self._running > 1:
                # parallel calls: no write-ahead record of a sibling is sure to follow soon, so
                # this result is made durable now (a crash re-runs only calls still unanswered)
                await self.recorder.flush()
        finally:
            self._running -= 1
        output = None if text is None else json.loads(text)
        self.tools[key] = output
        return output


class LittleModel(Model):
    """The SDK's ``Model`` around the agent's own: each request goes through the exchange."""

    def __init__(self, inner: Model, exchange: Exchange, name: str) -> None:
        self.inner = inner
        self.exchange = exchange
        self.name = name

    def _supports_default_prompt_cache_key(self) -> bool:
        supports = getattr(self.inner, "_supports_default_prompt_cache_key", None)
        return bool(supports()) if callable(supports) else False

    def get_retry_advice(self, request: Any) -> Any:
        return self.inner.get_retry_advice(request)

    async def close(self) -> None:
        await self.inner.close()

    async def _begin(
        self,
        call: Callable[..., _T],
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff[Any, Any]],
        tracing: ModelTracing,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> tuple[TurnRequest, Callable[[], _T]]:
        """What a request and a streamed one share: server-side state refused, the exchange
        begun, the request as the chain records it, and ``call`` (the inner model's
        ``get_response`` or ``stream_response``) bound to the same arguments."""
        x = self.exchange
        refuse_server_state(x.recorder.session_id, previous_response_id, conversation_id)
        await x.begin()
        request = x.request(
            self.name,
            system_instructions,
            input,
            model_settings,
            tools,
            output_schema,
            handoffs,
            prompt,
        )
        inner = functools.partial(
            call,
            system_instructions,
            input,
            model_settings,
            tools,
            output_schema,
            handoffs,
            tracing,
            previous_response_id=None,
            conversation_id=None,
            prompt=prompt,
        )
        return request, inner

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff[Any, Any]],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        x = self.exchange
        request, respond = await self._begin(
            self.inner.get_response,
            system_instructions,
            input,
            model_settings,
            tools,
            output_schema,
            handoffs,
            tracing,
            previous_response_id,
            conversation_id,
            prompt,
        )
        if x.whole is not None:
            return x.served(request).response

        async def invoke() -> Answer:
            return Answer(await respond())

        return (await x.turn(self.name, request, invoke)).response

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff[Any, Any]],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        """Live on a fresh turn (each event passes through as it arrives; the response is
        recorded when the stream ends); on a served turn, the SDK's events synthesised from
        the recorded response."""
        x = self.exchange
        request, stream = await self._begin(
            self.inner.stream_response,
            system_instructions,
            input,
            model_settings,
            tools,
            output_schema,
            handoffs,
            tracing,
            previous_response_id,
            conversation_id,
            prompt,
        )
        if x.whole is not None:
            for event in x.served(request).stream_events(self.name):
                yield event
            return
        queue: asyncio.Queue[TResponseStreamEvent] = asyncio.Queue()
        invoked = False

        async def invoke() -> Answer:
            nonlocal invoked
            invoked = True
            final: Response | None = None
            async for event in stream():
                queue.put_nowait(event)
                if isinstance(event, ResponseCompletedEvent):
                    final = event.response
            if final is None:
                raise ConfigurationError(
                    f"session {x.recorder.session_id}: the model's stream ended without "
                    "response.completed"
                )
            return Answer.from_stream(final)

        task = asyncio.ensure_future(x.turn(self.name, request, invoke))
        try:
            while not task.done() or not queue.empty():
                if not queue.empty():
                    yield queue.get_nowait()
                    continue
                getter = asyncio.ensure_future(queue.get())
                await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    yield getter.result()
                else:
                    getter.cancel()
            answer = task.result()
        finally:
            if not task.done():
                task.cancel()
        if not invoked:  # served (from the log): the SDK's events, from the record
            for event in answer.stream_events(self.name):
                yield event
