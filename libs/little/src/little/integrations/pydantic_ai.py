"""Pydantic AI agents on little: ``durable(step, agent)`` records every run of the agent.

``durable(step, agent, name=...)`` is a ``pydantic_ai`` ``WrapperAgent``: each ``run``,
``run_stream``, ``run_stream_events``, ``run_sync`` and ``iter`` on it is one **agent call** of a
session of the step (``step_path#name``), admitted before its first model request with a key of
the session's manifest (model, agent name, instructions, static tools, output schema, model
settings, approvals; never the framework's version) and the call's input. Under it, a per-run
capability

* wraps the model that serves each request (``get_wrapper_model``): ``harness.model.called``
  is acked before the model is asked, ``responded`` (the native ``ModelResponse`` and its usage)
  or ``failed`` after; a stream passes through live and is recorded when it ends;
* records each tool call (``wrap_tool_execute``: function tools by default, MCP and dynamic ones
  too): ``harness.tool_call.started`` with its idempotency key, then ``succeeded``/``failed``;
  an ``MCPToolset``'s listing is recorded once per agent call as ``mcp:<id>/tools/list`` and
  its calls as ``mcp:<id>/<tool>``, side-effecting (``get_wrapper_toolset``);
  Pydantic AI's control exceptions (``ModelRetry``, ``ToolFailed``, ``CallDeferred``,
  ``ApprovalRequired``) are recorded as failures with their class and raised again when served;
* turns a tool that needs approval (``requires_approval=True``, or one raising
  ``ApprovalRequired``) into little's durable approval wait (``handle_deferred_tool_calls``).

On a resume the run's own log answers each request and tool call it recorded (only the one in
flight runs again); with ``replay_from`` a whole call whose key is unchanged is answered from the
recorded run, by running the framework's loop over the recorded responses and tool results (the
framework's own events, streams included, are synthesised from them). Framework code between
calls (history processors, dynamic instructions, output validators) runs again every time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from typing import Any, NoReturn

from pydantic_ai import ModelRetry
from pydantic_ai.agent import AbstractAgent, WrapperAgent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import (
    ApprovalRequired,
    CallDeferred,
    ToolFailed,
    ToolFailedError,
    ToolRetryError,
)
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    ToolReturnPart,
)
from pydantic_ai.models import CompletedStreamedResponse, Model, ModelRequestParameters
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.run import AgentRun
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import (
    DeferredToolRequests,
    DeferredToolResults,
    RunContext,
    ToolApproved,
    ToolDefinition,
    ToolDenied,
)
from pydantic_ai.toolsets import AbstractToolset
from pydantic_core import to_jsonable_python

from little._canonical import canonical_hash, canonical_json
from little.errors import StreamStoppedError
from little.events import Usage
from little.harness import Tool, ToolCallRequest, ToolContext, ToolError
from little.integrations._common import MessageChain, json_value, refuse, strip_stamps
from little.integrations._pydantic_ai_mcp import (
    MCP_TOOL,
    SIDE_EFFECTING,
    TOOL_DEFS,
    is_mcp,
    mcp_leaves,
    mcp_servers,
    record_listing,
    swap_servers,
)
from little.runtime import CONTROL_ERRORS, AgentCallTicket, Recorder, StepContext, TurnRequest

__all__ = [
    "FORMAT",
    "SIDE_EFFECTING",
    "STAMPS",
    "DurableAgent",
    "durable",
    "manifest_of",
    "stripped",
]

FORMAT = "pydantic-ai"
"""The message format a session's manifest names: its recorded messages are Pydantic AI's."""

STAMPS = frozenset(
    {"timestamp", "run_id", "conversation_id", "model_id", "workspace_ref", "history_digest"}
)
"""What Pydantic AI stamps on its messages per run (or after the model answered): never hashed."""

_FRAMEWORK = "pydantic_ai"


def durable(
    step: StepContext, agent: AbstractAgent[Any, Any], *, name: str | None = None
) -> DurableAgent:
    """``agent`` recorded as a session of ``step`` named ``name`` (default: the agent's name,
    else ``"agent"``); every run of the returned agent is one recorded agent call."""
    return DurableAgent(step, agent, name=name)


def stripped(message: ModelMessage) -> Any:
    """A message as hashed: its native JSON without the per-run stamps (``STAMPS``)."""
    return strip_stamps(_dump(message), STAMPS)


def _dump(message: ModelMessage) -> Any:
    return ModelMessagesTypeAdapter.dump_python([message], mode="json")[0]


def _usage(native: ModelResponse) -> Usage:
    u = native.usage
    return Usage(
        input_tokens=u.input_tokens,
        output_tokens=u.output_tokens,
        cached_input_tokens=u.cache_read_tokens,
        reasoning_tokens=getattr(u, "output_reasoning_tokens", 0)
        or int(u.details.get("reasoning_tokens", 0)),
    )


class _Response:
    """A native response as the recording kernel reads it (``little.runtime.Recorder``)."""

    __slots__ = ("native", "usage")

    def __init__(self, native: ModelResponse, usage: Usage | None = None) -> None:
        self.native = native
        self.usage = _usage(native) if usage is None else usage

    @property
    def finish_reason(self) -> str | None:
        return self.native.finish_reason

    def to_json(self) -> str:
        return canonical_json(_dump(self.native))

    @staticmethod
    def decode(text: str, usage: Usage) -> _Response:
        return _Response(_rebuilt_response(json.loads(text)), usage)


def _rebuilt_response(data: Any) -> ModelResponse:
    """A recorded response, as this run's: the framework stamps its own run on it."""
    (message,) = ModelMessagesTypeAdapter.validate_python([data])
    if not isinstance(message, ModelResponse):
        raise ToolError(f"a recorded model response is a {type(message).__name__}")
    message.run_id = None
    message.conversation_id = None
    return message


def _model_id(model: Any) -> str:
    if isinstance(model, Model):
        return f"{model.system}:{model.model_name}"
    return str(model) if model is not None else "none"


def _named(value: Any) -> Any:
    """JSON for a manifest; a function is named by its module and qualified name."""
    if callable(value) and not isinstance(value, type):
        return f"<{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', '?')}>"
    if isinstance(value, list | tuple):
        return [_named(v) for v in value]
    return json_value(value)


def _tool_json(tool_def: ToolDefinition) -> dict[str, Any]:
    return {
        "name": tool_def.name,
        "description": tool_def.description,
        "parameters": tool_def.parameters_json_schema,
        "kind": tool_def.kind,
        "metadata": json_value(tool_def.metadata),
    }


def _is_side_effecting(tool_def: ToolDefinition) -> bool:
    return bool((tool_def.metadata or {}).get(SIDE_EFFECTING))


def manifest_of(agent: AbstractAgent[Any, Any]) -> dict[str, Any]:
    """What configures ``agent``, as its session's manifest (in every call's key)."""
    tools: list[dict[str, Any]] = []
    toolsets: list[str] = []
    approvals: list[str] = []
    effects: list[str] = []
    servers = mcp_servers(agent.toolsets, f"agent {agent.name!r}")
    for toolset in agent.toolsets:
        if is_mcp(toolset):  # its tools are listed per call, through the log
            effects.append(f"mcp:{toolset.id}")
            continue
        found = getattr(toolset, "tools", None)
        if not isinstance(found, dict):
            # MCP servers, dynamic toolsets: their tools are known per run only; their calls
            # are recorded, and the agent is side-effecting (a server's state is not replayed)
            toolsets.append(f"{type(toolset).__qualname__}:{getattr(toolset, 'id', None)}")
            effects.append(f"toolset:{type(toolset).__qualname__}")
            continue
        for tool in found.values():
            tool_def = tool.tool_def
            tools.append(_tool_json(tool_def))
            if tool_def.kind == "unapproved":
                approvals.append(tool_def.name)
            if _is_side_effecting(tool_def):
                effects.append(tool_def.name)
    try:
        output: Any = agent.output_json_schema()
    except Exception as exc:  # an output type without a schema: named instead
        output = f"<unschematised: {type(exc).__name__}>"
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "model": _model_id(agent.model),
        "agent": agent.name,
        "instructions": _named([getattr(i, "instruction", i) for i in _instructions(agent)]),
        "tools": sorted(tools, key=lambda t: t["name"]),
        "output_schema": json_value(output),
        "model_settings": _named(getattr(agent, "model_settings", None)),
    }
    if toolsets:
        manifest["toolsets"] = sorted(toolsets)
    if servers:  # absent (not empty) without one: other agents' manifests are unchanged
        manifest["mcp_servers"] = sorted(servers)
    if approvals:  # absent (not empty) when nothing waits for a person
        manifest["approval"] = {"tools": sorted(approvals), "policy": False}
    if effects:
        manifest["side_effecting"] = sorted(effects)
    return manifest


def _instructions(agent: AbstractAgent[Any, Any]) -> list[Any]:
    while isinstance(agent, WrapperAgent):
        agent = agent.wrapped
    found = getattr(agent, "_instructions", None)
    return list(found) if isinstance(found, list | tuple) else [found]


def _refuse(feature: str, why: str) -> NoReturn:
    raise refuse(_FRAMEWORK, feature, why)


def _check_settings(settings: Any, where: str) -> None:
    if isinstance(settings, dict):
        for key, value in settings.items():
            if key.endswith("previous_response_id") and value:
                _refuse(
                    f"{where} {key}",
                    "server-side conversation state cannot be replayed from the log; "
                    "pass message_history instead",
                )


class _Session:
    """One durable agent's session: its recorder, its request hash chain and turn count."""

    def __init__(self, step: StepContext, agent: AbstractAgent[Any, Any], name: str) -> None:
        self.name = name
        self.manifest = manifest_of(agent)
        _check_settings(getattr(agent, "model_settings", None), "the agent's model_settings")
        model_id = self.manifest["model"]
        provider, _, model = model_id.partition(":")
        self.recorder: Recorder = step.recorder(
            name,
            provider=provider,
            model=model or provider,
            manifest=self.manifest,
            side_effecting="side_effecting" in self.manifest,
        )
        self.chain = MessageChain(
            {"format": FORMAT, "model": model_id, "agent": agent.name}, stripped
        )
        self.turns = 0
        self.started = False

    def request(
        self, messages: Sequence[ModelMessage], params: ModelRequestParameters
    ) -> TurnRequest:
        """The next model request of the session, linked into its chain."""
        self.turns += 1
        link = self.chain.link(messages)
        tools = [_tool_json(t) for t in (*params.function_tools, *params.output_tools)]
        return TurnRequest(
            self.turns,
            link.request_hash,
            link.previous_hash,
            link.appended_text,
            link.message_count,
            canonical_hash(tools),
        )

    def serving_model(self, model: Model) -> None:
        """The provider and model of the call about to be recorded (a fallback's may differ)."""
        self.recorder.provider = model.system
        self.recorder.model = model.model_name


class _Recorded:
    """A whole agent call answered from a recorded run: its responses in order and its tool
    results by call id, which the framework's loop runs over again (no model, no tool)."""

    def __init__(self, result: Any, where: str) -> None:
        messages = ModelMessagesTypeAdapter.validate_python(result.get("messages") or [])
        self.where = where
        self.mcp_listings: dict[str, Any] = result.get("mcp_listings") or {}
        """Each MCP server's listing (tool definitions) as the call recorded it."""
        self.responses: deque[ModelResponse] = deque()
        self.returns: dict[str, ToolReturnPart] = {}
        for message in messages:
            if isinstance(message, ModelResponse):
                self.responses.append(message)
                continue
            for part in message.parts:
                if isinstance(part, ToolReturnPart):
                    self.returns[part.tool_call_id] = part

    def next_response(self) -> ModelResponse:
        if not self.responses:
            raise ToolError(
                f"{self.where}: the recorded call answered fewer model requests than this "
                "run makes (framework code between requests changed?)"
            )
        response = self.responses.popleft()
        response.run_id = None
        response.conversation_id = None
        return response

    def tool_return(self, tool_call_id: str, tool: str) -> ToolReturnPart:
        part = self.returns.get(tool_call_id)
        if part is None:
            raise ToolError(
                f"{self.where}: the recorded call has no result for {tool} call {tool_call_id}"
            )
        return part


class _RecordingModel(WrapperModel):
    """The model of one run, wrapped: each request recorded write-ahead, or served."""

    def __init__(self, wrapped: Model, run: _Run) -> None:
        super().__init__(wrapped)
        self._run = run

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        run = self._run
        _check_settings(model_settings, "the request's model_settings")
        turn = run.session.request(messages, model_request_parameters)
        if run.recorded is not None:
            return run.served_turn(turn)
        run.session.serving_model(self.wrapped)

        async def invoke() -> _Response:
            return _Response(
                await self.wrapped.request(messages, model_settings, model_request_parameters)
            )

        with run.guard():
            response = await run.session.recorder.model_turn(turn, invoke, _Response.decode)
        return response.native

    def request_stream(  # type: ignore[override]
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AbstractAsyncContextManager[Any]:
        stream = self._request_stream(
            messages, model_settings, model_request_parameters, run_context
        )
        return _Tracked(stream, self._run)

    @asynccontextmanager
    async def _request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None,
    ) -> AsyncIterator[Any]:
        run = self._run
        _check_settings(model_settings, "the request's model_settings")
        turn = run.session.request(messages, model_request_parameters)
        if run.recorded is not None:
            yield _replayed(run.served_turn(turn), model_request_parameters)
            return
        run.session.serving_model(self.wrapped)
        with run.guard():
            async with self._live(
                turn, messages, model_settings, model_request_parameters, run_context
            ) as stream:
                yield stream

    @asynccontextmanager
    async def _live(
        self,
        turn: TurnRequest,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None,
    ) -> AsyncIterator[Any]:
        run = self._run
        async with run.session.recorder.live_turn(turn, _Response.decode) as live:
            if live.served is not None:  # this run's own log answered it: replayed
                yield _replayed(live.served.native, model_request_parameters)
            else:  # live: the deltas pass through as they arrive
                async with self.wrapped.request_stream(
                    messages, model_settings, model_request_parameters, run_context
                ) as stream:
                    yield stream
                live.response = _Response(stream.get())


class _Tracked(AbstractAsyncContextManager[Any]):
    """A model stream of a run, known to the run while it is open: one the framework abandons
    (its consumer stopped early) is closed by the run as failed (``StreamStoppedError``)."""

    def __init__(self, stream: AbstractAsyncContextManager[Any], run: _Run) -> None:
        self._stream = stream
        self._run = run

    async def __aenter__(self) -> Any:
        entered = await self._stream.__aenter__()
        self._run.open_streams.append(self)
        return entered

    async def __aexit__(self, *exc: Any) -> bool | None:
        if self in self._run.open_streams:
            self._run.open_streams.remove(self)
        if exc[0] is not None and issubclass(exc[0], GeneratorExit | asyncio.CancelledError):
            # the framework closes a stream its consumer stopped reading: a failure, recorded
            # (the closing goes on as it was)
            await self.abandon()
            return None
        return await self._stream.__aexit__(*exc)

    async def abandon(self) -> None:
        """Close it as failed: its consumer stopped before the end."""
        if self in self._run.open_streams:
            self._run.open_streams.remove(self)
        stopped = StreamStoppedError(
            f"session {self._run.session.recorder.session_id} turn {self._run.session.turns}: "
            "the stream's consumer stopped before its end"
        )
        with contextlib.suppress(StreamStoppedError):
            await self._stream.__aexit__(StreamStoppedError, stopped, None)


def _replayed(response: ModelResponse, params: ModelRequestParameters) -> Any:
    """A recorded response as a stream: the framework's own events synthesised from it."""
    return CompletedStreamedResponse(response, model_request_parameters=params, replay_events=True)


class _Outcome:
    __slots__ = ("exc", "ran", "result")

    def __init__(self) -> None:
        self.ran = False
        self.result: Any = None
        self.exc: BaseException | None = None


_CONTROL: dict[str, Callable[[str], Exception]] = {
    "ModelRetry": ModelRetry,
    "ToolFailed": ToolFailed,
    "ApprovalRequired": lambda _: ApprovalRequired(),
    "CallDeferred": lambda _: CallDeferred(),
}


def _raise_recorded(error: str) -> NoReturn:
    """Raise a recorded tool failure again: a framework control exception as itself, anything
    else as the tool's error (``"<type>: <message>"``)."""
    kind, _, message = error.partition(": ")
    rebuild = _CONTROL.get(kind)
    if rebuild is not None:
        raise rebuild(message)
    raise ToolError(error)


class _Run(AbstractCapability[Any]):
    """The capability of one recorded run (one agent call)."""

    def __init__(self, session: _Session, ticket: AgentCallTicket, recorded: _Recorded | None):
        super().__init__()
        self.session = session
        self.ticket = ticket
        self.recorded = recorded

        self.open_streams: list[_Tracked] = []
        """Model streams entered and not exited yet."""
        self.control: BaseException | None = None
        """The first of little's control errors raised inside the framework: raised again at
        every boundary the framework hands back through, whatever its hooks did with it."""
        self.mcp_listings: dict[str, Any] = {}
        """Each MCP server's listing (tool definitions, JSON) this call used."""

    def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any] | None:
        """Each MCP server of the run listed through the log (``_pydantic_ai_mcp``)."""
        known = set(self.session.manifest.get("mcp_servers", ()))
        where = f"session {self.session.recorder.session_id}"
        served = self.recorded is not None
        return swap_servers(toolset, known, where, self.mcp_listing, served)

    async def mcp_listing(
        self, server: str, toolset: AbstractToolset[Any], ctx: RunContext[Any]
    ) -> list[ToolDefinition]:
        """``server``'s tool definitions for this call: listed once through the log."""
        found = self.mcp_listings.get(server)
        if found is None and self.recorded is not None:  # served whole: as the call recorded
            found = self.recorded.mcp_listings.get(server)
            if found is None:
                raise ToolError(
                    f"{self.recorded.where}: the recorded call has no listing of MCP server "
                    f"{server!r}"
                )
        if found is None:
            with self.guard():
                found = await record_listing(
                    self.session.recorder, self.session.turns, server, toolset, ctx
                )
            self.reraise()
            self.mcp_listings[server] = found
        return TOOL_DEFS.validate_python(found)

    @contextmanager
    def guard(self) -> Iterator[None]:
        """Remember a control error passing out of little's code into the framework's."""
        try:
            yield
        except CONTROL_ERRORS as exc:
            if self.control is None:
                self.control = exc
            raise

    def reraise(self, cause: BaseException | None = None) -> None:
        """Raise the control error the framework swallowed (a fallback model, an error hook)."""
        if self.control is not None and self.control is not cause:
            raise self.control from cause

    def get_wrapper_model(self, model: Model) -> Model | None:
        return _RecordingModel(model, self)

    async def wrap_model_request(
        self, ctx: RunContext[Any], *, request_context: Any, handler: Any
    ) -> ModelResponse:
        try:
            response: ModelResponse = await handler(request_context)
        except BaseException as exc:
            self.reraise(exc)
            raise
        self.reraise()
        return response

    def served_turn(self, turn: TurnRequest) -> ModelResponse:
        assert self.recorded is not None
        self.session.recorder.served_turn(self.ticket, turn.turn, turn.request_hash)
        return self.recorded.next_response()

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: Any,
        tool_def: ToolDefinition,
        args: dict[str, Any],
        handler: Any,
    ) -> Any:
        if self.recorded is not None:
            part = self.recorded.tool_return(call.tool_call_id, call.tool_name)
            outcome = getattr(part, "outcome", "success")
            if outcome == "retried":
                raise ModelRetry(str(part.content))
            if outcome == "failed":
                raise ToolFailed(str(part.content))
            return part.content
        call_id = call.tool_call_id + ("~approved" if ctx.tool_call_approved else "")
        box = _Outcome()

        async def invoke(arguments: dict[str, Any], tool_ctx: ToolContext) -> Any:
            box.ran = True
            try:
                box.result = await handler(args)
            except ModelRetry as exc:
                box.exc = exc
                raise ModelRetry(str(exc.message)) from exc
            except ToolRetryError as exc:  # a ModelRetry the framework wrapped for the model
                box.exc = exc
                raise ModelRetry(str(exc.tool_retry.content)) from exc
            except ToolFailedError as exc:  # a ToolFailed the framework wrapped for the model
                box.exc = exc
                raise ToolFailed(str(exc.tool_failed.content)) from exc
            except Exception as exc:
                box.exc = exc
                if isinstance(exc, CONTROL_ERRORS) and self.control is None:
                    self.control = exc
                raise
            return to_jsonable_python(box.result)

        tool = Tool(
            call.tool_name,
            invoke,
            side_effecting=_is_side_effecting(tool_def),
            recorded_name=(tool_def.metadata or {}).get(MCP_TOOL),  # an MCP server's tool
        )
        request = ToolCallRequest(call_id, call.tool_name, to_jsonable_python(args))
        with self.guard():
            outcome = await self.session.recorder.tool_call_outcome(
                self.session.turns, request, tool
            )
        self.reraise()
        if box.exc is not None:
            raise box.exc  # made now: the framework sees the very exception
        if outcome.error is not None:
            _raise_recorded(outcome.error)
        if box.ran:
            return box.result
        return None if outcome.content is None else json.loads(outcome.content)

    async def handle_deferred_tool_calls(
        self, ctx: RunContext[Any], *, requests: DeferredToolRequests
    ) -> DeferredToolResults | None:
        """Calls waiting for a person: little's durable approval wait (the run suspends, holding
        no process, until ``little approve`` / ``little reject``)."""
        if not requests.approvals:
            return None
        results = DeferredToolResults()
        for call in requests.approvals:
            if self.recorded is not None:
                part = self.recorded.returns.get(call.tool_call_id)
                denied = part is not None and getattr(part, "outcome", None) == "denied"
                results.approvals[call.tool_call_id] = (
                    ToolDenied(str(part.content)) if denied and part else ToolApproved()
                )
                continue
            rejected = await self.session.recorder.approval(
                f"{self.session.turns}:{call.tool_call_id}", call.tool_name, call.args_as_dict()
            )
            results.approvals[call.tool_call_id] = (
                ToolApproved() if rejected is None else ToolDenied(rejected)
            )
        return results


def _result(agent_run: AgentRun[Any, Any] | None, run: _Run) -> dict[str, Any]:
    """An agent call's recorded result: the messages it added (native) and its output (and
    the MCP servers' listings it used, when it used any: a call served whole needs them)."""
    found: dict[str, Any] = {"messages": [], "output": None}
    if agent_run is not None:
        result = agent_run.result
        found = {
            "messages": ModelMessagesTypeAdapter.dump_python(agent_run.new_messages(), mode="json"),
            "output": None if result is None else to_jsonable_python(result.output, fallback=repr),
        }
    if run.mcp_listings:
        found["mcp_listings"] = run.mcp_listings
    return found


_REFUSED_ARGUMENTS = {
    "conversation": "a Conversation object carries state the request key cannot see; pass "
    "message_history instead",
    "workspace": "a workspace's shell and file tools act outside the log",
}


class DurableAgent(WrapperAgent[Any, Any]):
    """A Pydantic AI agent whose every run is a recorded little agent call (``durable``)."""

    def __init__(
        self, step: StepContext, wrapped: AbstractAgent[Any, Any], *, name: str | None = None
    ) -> None:
        super().__init__(wrapped)
        self._session = _Session(step, wrapped, name or wrapped.name or "agent")

    @property
    def session_id(self) -> str:
        return self._session.recorder.session_id

    def realtime(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse("a realtime session", "a live audio session cannot be recorded and replayed")

    def _admit(self, user_prompt: Any, kwargs: dict[str, Any]) -> AgentCallTicket:
        for argument, why in _REFUSED_ARGUMENTS.items():
            if kwargs.get(argument) is not None:
                _refuse(f"{argument}=", why)
        _check_settings(kwargs.get("model_settings"), "the run's model_settings")
        if any(mcp_leaves(t) for t in kwargs.get("toolsets") or ()):
            _refuse(
                "an MCPToolset in the run's toolsets=",
                "an MCP server is in the session's manifest; give it to the Agent",
            )
        history = kwargs.get("message_history") or []
        request = {
            "prompt": to_jsonable_python(user_prompt, fallback=repr),
            "history": canonical_hash([stripped(m) for m in history]),
            "deferred_tool_results": to_jsonable_python(
                kwargs.get("deferred_tool_results"), fallback=repr
            ),
            "output_type": _named(kwargs.get("output_type")),
            "model": None if kwargs.get("model") is None else _model_id(kwargs.get("model")),
            "instructions": _named(kwargs.get("instructions")),
            "model_settings": _named(kwargs.get("model_settings")),
        }
        return self._session.recorder.admit(request)

    @asynccontextmanager
    async def iter(
        self, user_prompt: Any = None, **kwargs: Any
    ) -> AsyncIterator[AgentRun[Any, Any]]:
        session = self._session
        if not session.started:
            await session.recorder.start(session.name, None)
            session.started = True
        ticket = self._admit(user_prompt, kwargs)  # synchronous: no await since the check
        recorded = None
        if ticket.served:
            result = await session.recorder.served_result(ticket)
            recorded = _Recorded(result, f"session {session.recorder.session_id}")
        capability = _Run(session, ticket, recorded)
        kwargs["capabilities"] = [*(kwargs.get("capabilities") or ()), capability]
        agent_run: AgentRun[Any, Any] | None = None
        try:
            async with self.wrapped.iter(user_prompt, **kwargs) as agent_run:
                yield agent_run
            for stream in list(capability.open_streams):  # abandoned: stopped early
                await stream.abandon()
            capability.reraise()  # swallowed by the framework's own error handling
        except BaseException as exc:
            # what ended the run, whatever the framework's error handling made of it
            ended = capability.control or exc
            if not ticket.served:
                await session.recorder.settle_raised(ticket, ended, _result(agent_run, capability))
            if ended is not exc:
                raise ended from exc
            raise
        if ticket.served:
            await session.recorder.settle_served(ticket)
            return
        await session.recorder.settle(ticket, "succeeded", _result(agent_run, capability))
        # durable before the run's result reaches the caller: work after it never risks it
        await session.recorder.flush()
