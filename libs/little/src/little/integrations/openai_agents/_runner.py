"""``LittleRunner``: ``Runner.run`` / ``Runner.run_streamed`` as one little agent call.

A call clones the agent graph (the starting agent and every agent it hands off to): each
agent's model (resolved as the SDK would: the run config's model or provider, else the
agent's) is wrapped in ``LittleModel`` and each function tool in a recorded copy; the run
config's own model is cleared so nothing bypasses them. The call is admitted with a request
key made of the session's manifest (the graph's models, instructions hashes, static tools,
handoffs, output schemas, model settings and approval policies; never the SDK's version), its
node, the stripped input and ``max_turns``; it is settled with every turn's response and
every tool call's output, so a call served whole from a recorded run runs the SDK again over
that record, invoking nothing, and returns the SDK's own ``RunResult``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

from agents import Agent, Runner
from agents.handoffs import Handoff
from agents.result import RunResult, RunResultStreaming
from agents.run_config import DEFAULT_MAX_TURNS, RunConfig
from agents.run_internal.turn_preparation import get_model, get_output_schema
from agents.stream_events import StreamEvent
from agents.tool import FunctionTool

from little._canonical import sha256_hex
from little.errors import StreamStoppedError, UnsupportedFeatureError
from little.integrations.openai_agents._as_tool import NestedRunner
from little.integrations.openai_agents._common import (
    in_chain,
    is_control,
    note_refusal,
    stripped,
)
from little.integrations.openai_agents._mcp import check_servers, recorded_mcp_tools
from little.integrations.openai_agents._model import (
    PER_RUN,
    Exchange,
    LittleModel,
    output_schema_json,
    settings_json,
    tool_json,
)
from little.integrations.openai_agents._tools import (
    approval_of,
    flags_of,
    recorded_tool,
    refuse_tool,
)
from little.runtime import ENDS_THE_RUN, SETTLING, StepContext

_WHERE = "little.integrations.openai_agents"


def _model_id(model: Any) -> str:
    name = getattr(model, "model", None)
    return str(name) if name is not None else type(model).__name__


def _provider_of(model: Any) -> str:
    module = type(model).__module__
    return "openai" if module.startswith("agents.models.openai") else module.split(".")[0]


def _instructions(agent: Agent[Any]) -> str:
    instructions = agent.instructions
    if instructions is None or isinstance(instructions, str):
        return sha256_hex(instructions or "")
    # dynamic instructions: the function is named; what it returns is in each request's hash
    return (
        f"{getattr(instructions, '__module__', '?')}.{getattr(instructions, '__qualname__', '?')}"
    )


def _where(step: StepContext) -> str:
    return f"{_WHERE} (run {step.run_id}, step {step.step_path})"


def _refuse(
    where: str,
    input: Any,
    previous_response_id: str | None,
    auto_previous_response_id: bool,
    conversation_id: str | None,
    session: Any,
) -> None:
    refused = {
        "previous_response_id": previous_response_id is not None or auto_previous_response_id,
        "conversation_id (OpenAI Conversations)": conversation_id is not None,
        "session= (SDK-managed history)": session is not None,
    }
    for what, present in refused.items():
        if present:
            raise UnsupportedFeatureError(
                f"{where}: {what} keeps the conversation outside the log and cannot be "
                "replayed; pass the history as input (result.to_input_list())"
            )
    if not isinstance(input, str | list):
        raise UnsupportedFeatureError(
            f"{where}: a RunState input (resuming an SDK interruption) is not supported; "
            "little resumes the run itself (approvals are little's durable waits)"
        )


def check_call(step: StepContext, agent: Agent[Any], input: Any, kwargs: dict[str, Any]) -> None:
    """Raise what ``LittleRunner.run(step, agent, input, **kwargs)`` would refuse (an
    ``UnsupportedFeatureError``), recording nothing."""
    where = _where(step)
    with _noting_refusals(step):
        _refuse(
            where,
            input,
            kwargs.get("previous_response_id"),
            bool(kwargs.get("auto_previous_response_id")),
            kwargs.get("conversation_id"),
            kwargs.get("session"),
        )
        _Graph(kwargs.get("run_config") or RunConfig(), where).walk(agent)


def _new_call(
    step: StepContext,
    agent: Agent[Any],
    input: Any,
    max_turns: int | None,
    run_config: RunConfig | None,
    name: str | None,
    refusable: tuple[str | None, bool, str | None, Any],
) -> _Call:
    """A ``LittleRunner`` call, once nothing of it is refused (``refusable``: its
    ``previous_response_id``, ``auto_previous_response_id``, ``conversation_id`` and
    ``session``); a refusal is noted for the recorded tool it is met in, if any."""
    with _noting_refusals(step):
        _refuse(_where(step), input, *refusable)
        step._check_group()
        return _Call(step, agent, input, max_turns, run_config, name)


@contextmanager
def _noting_refusals(step: StepContext) -> Iterator[None]:
    """A refusal raised in the block is noted for the recorded tool of ``step`` it is met in,
    if any."""
    try:
        yield
    except UnsupportedFeatureError as exc:
        note_refusal(exc, step)
        raise


class _Graph:
    """The agent graph cloned for one call, and the manifest it makes."""

    def __init__(self, run_config: RunConfig, where: str) -> None:
        self.run_config = run_config
        self.where = where
        self.clones: dict[int, Agent[Any]] = {}
        self.models: dict[int, Any] = {}
        self.agents: dict[str, Any] = {}
        self.side_effecting = False
        self.exchange: Exchange | None = None

    def walk(self, agent: Any) -> None:
        """Resolve and describe every agent of the graph (before anything is cloned)."""
        if id(agent) in self.models:
            return
        if type(agent).__module__.startswith("agents.realtime") or not isinstance(agent, Agent):
            raise UnsupportedFeatureError(
                f"{self.where}: {type(agent).__name__} {getattr(agent, 'name', '?')!r} is not an "
                "agents.Agent; realtime agents (audio sessions) cannot be recorded"
            )
        servers = check_servers(agent, self.where) if agent.mcp_servers else []
        self.side_effecting |= bool(servers)  # a server's state is not in the log
        model = get_model(agent, self.run_config)
        self.models[id(agent)] = model
        for tool in agent.tools:
            refuse_tool(tool, agent.name, self.where)
            self.side_effecting |= flags_of(tool).side_effecting
        targets: list[Agent[Any]] = []
        for h in agent.handoffs:
            if isinstance(h, Handoff):
                raise UnsupportedFeatureError(
                    f"{self.where}: agent {agent.name!r} hands off through a handoff(...) object, "
                    "whose target agent little cannot reach to record; list the Agent itself"
                )
            targets.append(h)
        schema = get_output_schema(agent)
        self.agents[agent.name] = {
            "model": f"{_provider_of(model)}:{_model_id(model)}",
            "instructions": _instructions(agent),
            "tools": [tool_json(t) for t in agent.tools],
            "approval": {
                t.name: approval_of(t)
                for t in agent.tools
                if isinstance(t, FunctionTool) and approval_of(t) is not False
            },
            "handoffs": [h.name for h in targets],
            "output_schema": output_schema_json(schema),
            "model_settings": stripped(settings_json(agent.model_settings), PER_RUN),
        }
        if servers:  # absent (not empty) without: the manifests of agents without stay as were
            self.agents[agent.name]["mcp_servers"] = sorted(servers)
        for target in targets:
            self.walk(target)

    def clone(self, agent: Agent[Any]) -> Agent[Any]:
        done = self.clones.get(id(agent))
        if done is not None:
            return done
        x = self.exchange
        assert x is not None
        model = self.models[id(agent)]
        copy = agent.clone(
            model=LittleModel(model, x, _model_id(model)),
            tools=[recorded_tool(t, x, agent.name, self.where) for t in agent.tools],
        )
        if agent.mcp_servers:  # the SDK asks the clone for its MCP tools on every turn
            tools = recorded_mcp_tools(agent, x, self.where)
            copy.get_mcp_tools = tools  # type: ignore[method-assign,assignment]
        self.clones[id(agent)] = copy
        copy.handoffs = [self.clone(h) for h in agent.handoffs if isinstance(h, Agent)]
        return copy


class _Call:
    """One admitted runner call: its exchange, to be made ready, run and settled."""

    def __init__(
        self,
        step: StepContext,
        agent: Agent[Any],
        input: Any,
        max_turns: int | None,
        run_config: RunConfig | None,
        name: str | None,
    ) -> None:
        config = run_config or RunConfig()
        graph = _Graph(config, _where(step))
        graph.walk(agent)
        model = graph.models[id(agent)]
        manifest = {"framework": "openai-agents", "agent": agent.name, "agents": graph.agents}
        recorder = step.recorder(  # a runner call is stateless: a session of its own
            name or agent.name,
            provider=_provider_of(model),
            model=_model_id(model),
            manifest=manifest,
            side_effecting=graph.side_effecting,
            numbered=True,
        )
        self.exchange = x = Exchange(recorder, _model_id(model))
        x.step = step
        x.nested = _NESTED
        graph.exchange = x
        self.agent = graph.clone(agent)
        self.run_config = dataclasses.replace(config, model=None)
        self.input = input
        self.system = agent.instructions if isinstance(agent.instructions, str) else None
        self.name = name or agent.name
        self.turns_seen = 0
        # admitted now, before any await: its ordinal never depends on timing
        x.ticket = recorder.admit(
            {"input": stripped(_input_json(input), PER_RUN), "max_turns": max_turns}
        )

    async def ready(self) -> None:
        """Open the session and, for a call served whole, read its recorded result."""
        x = self.exchange
        assert x.ticket is not None
        await x.recorder.start(self.name, self.system)
        if x.ticket.served:
            x.whole = await x.recorder.served_result(x.ticket)

    async def settled(self, final_output: Any) -> None:
        x = self.exchange
        assert x.ticket is not None
        if x.ticket.served:
            await x.recorder.settle_served(x.ticket)
        else:
            await x.recorder.settle(x.ticket, "succeeded", x.result(final_output))
            await x.recorder.flush()
        await x.recorder.finish(len(x.turns), x.result(final_output)["final_output"], None)

    async def failed(self, exc: BaseException) -> None:
        """Settle a call that raised as failed, unless the error leaves it in flight (a
        suspension, a stop, a log failure: the resume runs it on)."""
        x = self.exchange
        assert x.ticket is not None
        ends = isinstance(exc, SETTLING) or (
            isinstance(exc, Exception) and not isinstance(exc, ENDS_THE_RUN)
        )
        if ends and not x.ticket.served:
            await x.recorder.settle(x.ticket, "failed", x.result(None))
            await x.recorder.flush()
        await x.recorder.finish(len(x.turns), None, exc)


def _input_json(input: Any) -> Any:
    if isinstance(input, str):
        return input
    from little.integrations.openai_agents._model import _json_data

    return [_json_data(item) for item in input]


class LittleRunner:
    """``Runner.run`` and ``Runner.run_streamed`` with a step first: each call is one little
    agent call, recorded, served on a resume and from a recorded run on ``replay_from``."""

    @classmethod
    async def run(
        cls,
        step: StepContext,
        starting_agent: Agent[Any],
        input: str | list[Any],
        *,
        context: Any = None,
        max_turns: int | None = DEFAULT_MAX_TURNS,
        hooks: Any = None,
        run_config: RunConfig | None = None,
        error_handlers: Any = None,
        previous_response_id: str | None = None,
        auto_previous_response_id: bool = False,
        conversation_id: str | None = None,
        session: Any = None,
        name: str | None = None,
    ) -> RunResult:
        """``Runner.run(starting_agent, input, ...)`` as one agent call of ``step``'s session
        ``name`` (default: the agent's name)."""
        call = _new_call(
            step,
            starting_agent,
            input,
            max_turns,
            run_config,
            name,
            (previous_response_id, auto_previous_response_id, conversation_id, session),
        )
        try:
            await call.ready()
            result = await Runner.run(
                call.agent,
                input,
                context=context,
                max_turns=max_turns,
                hooks=hooks,
                run_config=call.run_config,
                error_handlers=error_handlers,
            )
        except BaseException as exc:
            cause = _cause(exc)
            note_refusal(cause, step)  # in a recorded tool: never its answer (``_tools``)
            await call.failed(cause)
            if cause is not exc:
                raise cause from None  # little's own, as itself, not the SDK's wrapper
            raise
        await call.settled(result.final_output)
        return result

    @classmethod
    def run_streamed(
        cls,
        step: StepContext,
        starting_agent: Agent[Any],
        input: str | list[Any],
        *,
        context: Any = None,
        max_turns: int | None = DEFAULT_MAX_TURNS,
        hooks: Any = None,
        run_config: RunConfig | None = None,
        error_handlers: Any = None,
        previous_response_id: str | None = None,
        auto_previous_response_id: bool = False,
        conversation_id: str | None = None,
        session: Any = None,
        name: str | None = None,
    ) -> RunResultStreaming:
        """``Runner.run_streamed``: the SDK's ``RunResultStreaming``; its ``stream_events()``
        is live on a fresh turn and synthesised from the record on a served one, and settles
        the call when the stream ends."""
        call = _new_call(
            step,
            starting_agent,
            input,
            max_turns,
            run_config,
            name,
            (previous_response_id, auto_previous_response_id, conversation_id, session),
        )
        started = False
        original: Any = None

        async def first_ready() -> None:
            nonlocal started
            if not started:
                started = True
                await call.ready()

        # the session opens (and a served call's record is read) before the first model call
        call.exchange.before_first = first_ready
        result = Runner.run_streamed(
            call.agent,
            input,
            context=context,
            max_turns=max_turns,
            hooks=hooks,
            run_config=call.run_config,
            error_handlers=error_handlers,
        )
        original = result.stream_events

        async def stream_events() -> AsyncIterator[StreamEvent]:
            ended = False
            try:
                async for event in original():
                    yield event
                await first_ready()
            except GeneratorExit:
                raise  # the consumer stopped early: below
            except BaseException as exc:
                ended = True
                cause = _cause(exc)
                note_refusal(cause, step)
                await call.failed(cause)
                if cause is not exc:
                    raise cause from None
                raise
            else:
                ended = True
                await call.settled(result.final_output)
            finally:
                if not ended:
                    # the consumer stopped early (closed the stream): the run is cancelled,
                    # nothing more of it is recorded, and the call is settled as failed
                    call.exchange.abandoned = True
                    result.cancel()
                    await call.failed(StreamStoppedError(f"{call.exchange.recorder.session_id}"))

        setattr(result, "stream_events", stream_events)  # noqa: B010
        return result


_NESTED = NestedRunner(LittleRunner.run, LittleRunner.run_streamed, check_call)
"""How an ``agent.as_tool()`` tool's agent is run (``_as_tool``)."""


def _cause(exc: BaseException) -> BaseException:
    """little's own control exception or refusal, if the SDK wrapped one in its own error."""
    found = in_chain(exc, lambda e: is_control(e) or isinstance(e, UnsupportedFeatureError))
    return exc if found is None else found
