"""Function tools under little: ``little_tool`` marks one side-effecting or gated by a person,
and ``recorded_tool`` makes the run's copy of each function tool go through the exchange
(recorded by default; approval through little's durable wait; little's control exceptions
and refusals never turned into a tool-error string by the SDK's failure handling, and a
refusal never recorded as the tool call's outcome)."""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass
from typing import Any

from agents.tool import (
    ApplyPatchTool,
    ComputerTool,
    FunctionTool,
    LocalShellTool,
    ShellTool,
    Tool,
    resolve_function_tool_failure_error_function,
    set_function_tool_failure_error_function,
)
from agents.tool_context import ToolContext

from little.errors import ConfigurationError, UnsupportedFeatureError
from little.integrations.openai_agents._as_tool import agent_of_tool, as_tool_call
from little.integrations.openai_agents._common import (
    is_control,
    latched_refusals,
    refusal_in,
)
from little.integrations.openai_agents._model import Exchange

_FLAGS = "_little_flags"


@dataclass(frozen=True, slots=True)
class ToolFlags:
    side_effecting: bool = False
    """It changes the world: a call holding it is never answered from a recorded run."""
    requires_approval: bool = False
    """Each call waits for a person (``little approve`` / ``little reject``), durably."""


def little_tool(
    tool: FunctionTool, *, side_effecting: bool = False, requires_approval: bool = False
) -> FunctionTool:
    """A copy of ``tool`` (a ``function_tool``) that little treats as side-effecting (never
    served from a recorded run) and/or gated by a person before each call. Every function tool
    is recorded without it; this only adds what little cannot know."""
    if not isinstance(tool, FunctionTool):
        raise ConfigurationError(
            f"little_tool: {tool!r} is not a FunctionTool; wrap a function_tool(...)"
        )
    marked = copy.copy(tool)
    setattr(marked, _FLAGS, ToolFlags(side_effecting, requires_approval))
    return marked


def flags_of(tool: Tool) -> ToolFlags:
    flags = getattr(tool, _FLAGS, None)
    return flags if isinstance(flags, ToolFlags) else ToolFlags()


def approval_of(tool: FunctionTool) -> Any:
    """A tool's approval policy as the manifest holds it."""
    if flags_of(tool).requires_approval or tool.needs_approval is True:
        return True
    needs = tool.needs_approval
    if callable(needs):
        return f"{getattr(needs, '__module__', '?')}.{getattr(needs, '__qualname__', '?')}"
    return False


REFUSED_TOOLS: tuple[tuple[type[Any], str], ...] = (
    (LocalShellTool, "local shell tools"),
    (ShellTool, "shell tools"),
    (ComputerTool, "computer tools"),
    (ApplyPatchTool, "apply_patch tools"),
)


def refuse_tool(tool: Tool, agent: str, where: str) -> None:
    for cls, what in REFUSED_TOOLS:
        if isinstance(tool, cls):
            raise UnsupportedFeatureError(
                f"{where}: agent {agent!r} has {what} "
                f"({type(tool).__name__}), which act on this machine outside a function tool "
                "and cannot be recorded or replayed; wrap the action in a function_tool"
            )


def _guarded(formatter: Any) -> Any:
    """The SDK's failure formatter, except for little's control exceptions and refusals (a
    feature little cannot record, met inside the tool): re-raised."""

    def guard(ctx: Any, error: Exception) -> Any:
        if is_control(error) or isinstance(error, UnsupportedFeatureError):
            raise error
        return formatter(ctx, error)

    return guard


class _Refused(BaseException):
    """A refusal met inside a tool (``UnsupportedFeatureError``: the run of an
    ``agent.as_tool()`` agent, or of one a tool runs through ``LittleRunner``, uses a feature
    little cannot record), carried out of the kernel's tool call unrecorded: a
    ``BaseException`` that is no interrupt is no outcome of the tool (the kernel records an
    ``Exception`` as the tool's failure, which a resume or a replay would serve the model as
    the tool's answer). The call's ``harness.tool_call.started`` stays unanswered, so it runs
    again there, refused again."""

    def __init__(self, error: UnsupportedFeatureError) -> None:
        super().__init__(str(error))
        self.error = error


def recorded_tool(
    tool: Tool, exchange: Exchange, agent: str, where: str, recorded_name: str | None = None
) -> Tool:
    """The run's copy of ``tool``: a function tool's every call goes through ``exchange``,
    recorded under ``recorded_name`` (default: the tool's name)."""
    refuse_tool(tool, agent, where)
    if not isinstance(tool, FunctionTool):
        return tool  # hosted tools run inside the model's response: recorded with it
    flags = flags_of(tool)
    inner = copy.copy(tool)  # its invoker rebinds to the copy, with the guarded formatter
    formatter = resolve_function_tool_failure_error_function(tool)
    if formatter is not None:
        set_function_tool_failure_error_function(inner, _guarded(formatter))
    needs = tool.needs_approval
    inner_agent = agent_of_tool(tool)  # an agent.as_tool(): its agent's run recorded too
    outer = copy.copy(tool)
    outer.needs_approval = False  # little's durable wait asks instead of the SDK's interruption

    async def invoke(ctx: ToolContext[Any], input: str) -> Any:
        # a refusal met in the tool (an agent's run in it refused) is raised below, whatever
        # the tool did with it: raised, wrapped, or caught and answered for
        with latched_refusals(exchange.step) as refusals:
            try:
                if inner_agent is None or exchange.step is None or exchange.nested is None:
                    answer = await inner.on_invoke_tool(ctx, input)
                else:
                    with as_tool_call(exchange.step, inner_agent, exchange.nested):
                        answer = await inner.on_invoke_tool(ctx, input)
            except Exception as exc:
                if is_control(exc):  # a stop, a spent budget, a log failure: as itself
                    raise  # (a resume meets a refusal it passed again, in the tool run again)
                refusal = refusal_in(exc) or (refusals[0] if refusals else None)
                if refusal is not None:
                    raise _Refused(refusal) from None
                raise
        if refusals:
            raise _Refused(refusals[0])
        return answer

    async def on_invoke_tool(ctx: ToolContext[Any], input: str) -> Any:
        gate = flags.requires_approval
        if not gate and needs is True:
            gate = True
        elif not gate and callable(needs):
            arguments = _arguments(input)
            verdict = needs(ctx, arguments, ctx.tool_call_id)
            gate = bool(await verdict if inspect.isawaitable(verdict) else verdict)
        try:
            return await exchange.tool_call(
                ctx,
                input,
                recorded_name or tool.name,
                lambda: invoke(ctx, input),
                flags.side_effecting,
                gate,
            )
        except _Refused as refused:  # ends the runner call, not a tool error the model reads
            raise refused.error from None

    outer.on_invoke_tool = on_invoke_tool
    return outer


def _arguments(input: str) -> dict[str, Any]:
    import json

    try:
        value = json.loads(input) if input else {}
    except ValueError:
        return {"input": input}
    return value if isinstance(value, dict) else {"input": value}
