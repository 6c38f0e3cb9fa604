"""Workflows by name: an async function registered with a name and a version."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Generic, ParamSpec, TypeVar

from little.errors import ConfigurationError
from little.runtime._errors import UnknownWorkflowError

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class Workflow(Generic[P, R]):
    """A registered workflow: calling it calls ``fn`` (same parameters, same result), and
    ``inspect.signature`` and type checkers see ``fn``'s signature."""

    name: str
    version: str
    fn: Callable[P, Awaitable[R]]
    registered_in: str | None = field(default=None, compare=False, repr=False)
    """The module that made the workflow of ``fn`` (``@workflow`` records it), when that is not
    ``fn``'s own: its source is part of the workflow's identity."""

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Awaitable[R]:
        return self.fn(*args, **kwargs)

    @property
    def __wrapped__(self) -> Callable[P, Awaitable[R]]:
        return self.fn


AnyWorkflow = Workflow[..., Any]

_REGISTRY: dict[str, AnyWorkflow] = {}


def register(wf: Workflow[P, R]) -> Workflow[P, R]:
    """Register ``wf`` under its name. The same name and version twice with different
    functions is an error; a new version replaces the old one."""
    existing = _REGISTRY.get(wf.name)
    if (
        existing is not None
        and existing is not wf
        and existing.fn is not wf.fn
        and existing.version == wf.version
    ):
        raise ConfigurationError(
            f"workflow {wf.name} v{wf.version} is registered twice ({existing.fn} and {wf.fn})"
        )
    _REGISTRY[wf.name] = wf
    return wf


def workflow(
    name: str | None = None, *, version: str = "1"
) -> Callable[[Callable[P, Awaitable[R]]], Workflow[P, R]]:
    """Register ``async def fn(ctx, input)`` as a workflow (the name defaults to ``fn``'s)."""

    def decorate(fn: Callable[P, Awaitable[R]]) -> Workflow[P, R]:
        caller = sys._getframe(1).f_globals.get("__name__")
        made_in = caller if isinstance(caller, str) and caller != fn.__module__ else None
        return register(Workflow(name or fn.__name__, version, fn, made_in))

    return decorate


def registered() -> Mapping[str, AnyWorkflow]:
    """The registered workflows by name (a read-only view: register with ``@workflow`` or
    ``register``)."""
    return MappingProxyType(_REGISTRY)


def lookup(name: str, *, run_id: str | None = None) -> AnyWorkflow:
    """The workflow registered as ``name``; ``UnknownWorkflowError`` (naming ``run_id``, the
    run that needs it, when given) if there is none."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownWorkflowError(name, _REGISTRY, run_id=run_id) from None
