"""The SDK's ``agent.as_tool()`` under ``LittleRunner``: the tool runs its agent through
``Runner.run`` (or ``run_streamed``), which the SDK sends to its default agent runner. While
little runs such a tool (a recorded tool call of the outer runner call), that one runner call,
for that very agent, is made a ``LittleRunner`` call of the same step instead: an agent call of
its own session and node name, admitted inside the outer tool call, each of its model requests
and tool calls recorded. The default runner is wrapped once (``set_default_agent_runner``, the
SDK's hook for it), and it hands every other call to the runner it wrapped unchanged. What
``LittleRunner`` refuses (``as_tool(session=...)``, ``previous_response_id``, a shell tool of
the agent, ...) is refused as an ``UnsupportedFeatureError``, which ends the outer runner call
rather than becoming the tool's error string for the model, and is recorded as no outcome of
the tool call (``_tools``): a resume or a replay runs it again, and is refused again."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, cast

from agents import Agent
from agents.run import AgentRunner, get_default_agent_runner, set_default_agent_runner
from agents.tool import FunctionTool, ToolOriginType, get_function_tool_origin

from little.errors import ConfigurationError, UnsupportedFeatureError
from little.runtime import StepContext

__all__ = ["NestedRunner", "agent_of_tool", "as_tool_call"]


@dataclass(frozen=True, slots=True)
class NestedRunner:
    """``LittleRunner``'s entry points, as the detour calls them (given by the runner module,
    which imports this one)."""

    run: Callable[..., Any]
    run_streamed: Callable[..., Any]
    check: Callable[[StepContext, Agent[Any], Any, dict[str, Any]], None]
    """Raise what ``run`` would refuse (an ``UnsupportedFeatureError``), recording nothing."""


_PENDING: ContextVar[tuple[StepContext, str, NestedRunner] | None] = ContextVar(
    "little_openai_agents_as_tool", default=None
)
"""While an ``as_tool()`` tool runs under little: its step, the name of the agent it runs and
the runner to run it with."""


def agent_of_tool(tool: FunctionTool) -> str | None:
    """The name of the agent an ``agent.as_tool()`` tool runs (None: another tool)."""
    origin = get_function_tool_origin(tool)
    if origin is None or origin.type != ToolOriginType.AGENT_AS_TOOL:
        return None
    return origin.agent_name


class _Dispatch:
    """The default agent runner, with the one detour above."""

    def __init__(self, fallback: AgentRunner) -> None:
        self.fallback = fallback

    @staticmethod
    def _claim(
        agent: Any, input: Any, kwargs: dict[str, Any]
    ) -> tuple[StepContext, NestedRunner] | None:
        pending = _PENDING.get()
        if pending is None or not isinstance(agent, Agent) or agent.name != pending[1]:
            return None
        step, _, runner = pending
        try:  # before anything of it is recorded
            runner.check(step, agent, input, kwargs)
        except ConfigurationError as exc:
            raise UnsupportedFeatureError(
                f"agent.as_tool() of agent {agent.name!r}: {exc}"
            ) from None
        return step, runner

    async def run(self, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        claimed = self._claim(starting_agent, input, kwargs)
        if claimed is None:
            return await self.fallback.run(starting_agent, input, **kwargs)
        step, runner = claimed
        token = _PENDING.set(None)  # the inner call's own runner calls are not detoured
        try:
            return await runner.run(step, starting_agent, input, **kwargs)
        finally:
            _PENDING.reset(token)

    def run_streamed(self, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        claimed = self._claim(starting_agent, input, kwargs)
        if claimed is None:
            return self.fallback.run_streamed(starting_agent, input, **kwargs)
        step, runner = claimed
        token = _PENDING.set(None)
        try:
            return runner.run_streamed(step, starting_agent, input, **kwargs)
        finally:
            _PENDING.reset(token)

    def run_sync(self, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        return self.fallback.run_sync(starting_agent, input, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fallback, name)


@contextmanager
def as_tool_call(step: StepContext, agent_name: str, runner: NestedRunner) -> Iterator[None]:
    """Inside it, the runner call an ``as_tool()`` tool makes for ``agent_name`` is a
    ``LittleRunner`` call of ``step`` (through ``runner``)."""
    current: Any = get_default_agent_runner()
    if not isinstance(current, _Dispatch):  # wrapped again if the user set a runner since
        set_default_agent_runner(cast(AgentRunner, _Dispatch(current)))
    token = _PENDING.set((step, agent_name, runner))
    try:
        yield
    finally:
        _PENDING.reset(token)
