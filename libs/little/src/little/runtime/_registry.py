"""Workflows by name: an async function registered with a name and a version."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from little.errors import ConfigurationError
from little.runtime._errors import UnknownWorkflowError

WorkflowFn = Callable[..., Awaitable[Any]]


@dataclass(frozen=True)
class Workflow:
    name: str
    version: str
    fn: WorkflowFn

    async def __call__(self, ctx: Any, input: Any) -> Any:
        return await self.fn(ctx, input)


REGISTRY: dict[str, Workflow] = {}


def workflow(name: str | None = None, *, version: str = "1") -> Callable[[WorkflowFn], Workflow]:
    """Register ``async def fn(ctx, input)`` as a workflow (the name defaults to ``fn``'s)."""

    def register(fn: WorkflowFn) -> Workflow:
        wf = Workflow(name or fn.__name__, version, fn)
        existing = REGISTRY.get(wf.name)
        if existing is not None and existing.fn is not fn and existing.version == wf.version:
            raise ConfigurationError(
                f"workflow {wf.name} v{wf.version} is registered twice ({existing.fn} and {fn})"
            )
        REGISTRY[wf.name] = wf
        return wf

    return register


def lookup(name: str, *, run_id: str | None = None) -> Workflow:
    """The workflow registered as ``name``; ``UnknownWorkflowError`` (naming ``run_id``, the
    run that needs it, when given) if there is none."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise UnknownWorkflowError(name, REGISTRY, run_id=run_id) from None
