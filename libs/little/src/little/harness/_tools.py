"""Tools an agent can call: a name, a JSON schema, and a function given an idempotency key."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from little.errors import LittleError
from little.harness._model import ToolSpec


class ToolError(LittleError):
    """Raise from a tool to report a failure to the model (recorded, not retried). Terminal."""

    retryable = False


@dataclass(frozen=True)
class ToolContext:
    """Passed to every tool invocation.

    ``idempotency_key`` is ``run_id/step_path/call_id``: the same on every re-invocation of
    the same call, so a tool with external effects can deduplicate. Derived, documented, never
    changed.
    """

    run_id: str
    step_path: str | None
    call_id: str
    idempotency_key: str
    attempt: int


ToolFn = Callable[[dict[str, Any], ToolContext], Any | Awaitable[Any]]


@dataclass(frozen=True)
class Tool:
    name: str
    fn: ToolFn = field(compare=False)
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object"})
    side_effecting: bool = False
    """It changes the world (writes files, sends mail, ...): an exchange of a session holding
    it is never answered from a recorded run, since replay reuses answers, not effects."""
    requires_approval: bool = False
    """A person approves each call before it runs (``little approve`` / ``little reject``):
    the session records the request and the run waits, holding no process."""
    recorded_name: str | None = None
    """The name its calls are recorded under when it differs from the name the model is told
    (an MCP server's tool: told ``mcp__<server>__<tool>``, recorded ``mcp:<server>/<tool>``)."""

    @property
    def recorded_as(self) -> str:
        """The name its calls are recorded under."""
        return self.recorded_name or self.name

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.parameters)

    async def invoke(self, arguments: dict[str, Any], ctx: ToolContext) -> Any:
        result = self.fn(arguments, ctx)
        if inspect.isawaitable(result):
            result = await result
        return result


def tool(
    name: str | None = None,
    *,
    description: str = "",
    parameters: dict[str, Any] | None = None,
    side_effecting: bool = False,
    requires_approval: bool = False,
) -> Callable[[ToolFn], Tool]:
    """Decorator: ``@tool()`` over ``def search(args, ctx) -> result``."""

    def wrap(fn: ToolFn) -> Tool:
        return Tool(
            name or fn.__name__,
            fn,
            description or (fn.__doc__ or "").strip(),
            parameters or {"type": "object"},
            side_effecting,
            requires_approval,
        )

    return wrap
