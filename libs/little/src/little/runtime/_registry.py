"""Workflows by name and version: an async function registered with a name and a version.

One name may be registered in several versions at once (a deploy keeps the version its
in-flight runs started on beside the new one). A new run uses the name's *current* version:
the one registered last among those not marked ``resume_only``; a resume uses the version the
run's ``RunStarted`` names (docs/architecture.md, "Changing workflow code").
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Generic, ParamSpec, TypeVar

from little.errors import ConfigurationError
from little.runtime._errors import UnknownWorkflowError, WorkflowVersionError

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
    resume_only: bool = field(default=False, compare=False)
    """Kept registered only to resume the runs that started on it: a new run of the name never
    uses this version (``@workflow(name, version=..., resume_only=True)``)."""

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Awaitable[R]:
        return self.fn(*args, **kwargs)

    @property
    def __wrapped__(self) -> Callable[P, Awaitable[R]]:
        return self.fn


AnyWorkflow = Workflow[..., Any]

_REGISTRY: dict[str, dict[str, AnyWorkflow]] = {}
"""Name -> version -> workflow, each name's versions in registration order."""


def _current(name: str) -> AnyWorkflow | None:
    """The version of ``name`` a new run uses: the last registered without ``resume_only``."""
    found = None
    for wf in _REGISTRY.get(name, {}).values():
        if not wf.resume_only:
            found = wf
    return found


class _Current(Mapping[str, AnyWorkflow]):
    """``registered()``: name -> the version a new run uses, read from the registry on every
    access (so it never goes stale), and read-only."""

    def __getitem__(self, name: str) -> AnyWorkflow:
        found = _current(name)
        if found is None:
            raise KeyError(name)
        return found

    def __iter__(self) -> Iterator[str]:
        return iter([name for name in _REGISTRY if _current(name) is not None])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"registered({dict(self)!r})"


_VIEW = _Current()


def register(wf: Workflow[P, R]) -> Workflow[P, R]:
    """Register ``wf`` under its name and version, beside the name's other versions. The same
    name and version twice with different functions is an error; the same workflow again
    changes nothing."""
    versions = _REGISTRY.setdefault(wf.name, {})
    existing = versions.get(wf.version)
    if existing is not None and existing is not wf and existing.fn is not wf.fn:
        raise ConfigurationError(
            f"workflow {wf.name} v{wf.version} is registered twice ({existing.fn} and {wf.fn})"
        )
    if existing is not None and existing.resume_only != wf.resume_only:
        raise ConfigurationError(
            f"workflow {wf.name} v{wf.version} is registered both resume_only and not"
        )
    if existing is None:
        versions[wf.version] = wf
    return wf


def workflow(
    name: str | None = None, *, version: str = "1", resume_only: bool = False
) -> Callable[[Callable[P, Awaitable[R]]], Workflow[P, R]]:
    """Register ``async def fn(ctx, input)`` as a workflow (the name defaults to ``fn``'s).

    ``version`` names this code; several versions of one name may be registered at once, and
    a run is always resumed with the version it started on. ``resume_only=True`` keeps an old
    version registered for its in-flight runs only: new runs use the newest version
    registered without it."""

    def decorate(fn: Callable[P, Awaitable[R]]) -> Workflow[P, R]:
        caller = sys._getframe(1).f_globals.get("__name__")
        made_in = caller if isinstance(caller, str) and caller != fn.__module__ else None
        return register(Workflow(name or fn.__name__, version, fn, made_in, resume_only))

    return decorate


def registered() -> Mapping[str, AnyWorkflow]:
    """The registered workflows by name, each as the version a new run uses (its newest
    version registered without ``resume_only``); a read-only view: register with
    ``@workflow`` or ``register``. Every version of a name: ``versions(name)``."""
    return _VIEW


def versions(name: str) -> Mapping[str, AnyWorkflow]:
    """Every registered version of workflow ``name`` by version, oldest registration first
    (empty if the name is not registered); read-only."""
    return MappingProxyType(dict(_REGISTRY.get(name, {})))


def registered_names() -> list[str]:
    """Every registered workflow name (in any version, ``resume_only`` ones too), sorted."""
    return sorted(name for name, known in _REGISTRY.items() if known)


def lookup(name: str, version: str | None = None, *, run_id: str | None = None) -> AnyWorkflow:
    """The workflow registered as ``name``: in ``version`` if given (the version a run started
    on), else the version a new run uses. ``UnknownWorkflowError`` (naming ``run_id``, the run
    that needs it, when given) if no version of the name is registered;
    ``WorkflowVersionError`` if that version is not, or (no version given) if every version
    of the name is ``resume_only``."""
    known = _REGISTRY.get(name)
    if not known:
        raise UnknownWorkflowError(name, _REGISTRY, run_id=run_id)
    if version is None:
        current = _current(name)
        if current is None:
            raise WorkflowVersionError(
                f"workflow {name} has only resume_only versions registered "
                f"({', '.join(known)}): a new run needs a version registered without "
                "resume_only",
                workflow=name,
                version=None,
                registered=tuple(known),
                run_id=run_id,
            )
        return current
    found = known.get(version)
    if found is None:
        run = f"run {run_id} was started by" if run_id is not None else "no"
        raise WorkflowVersionError(
            f"{run} workflow {name} v{version}, which is not registered in this process "
            f"(registered versions: {', '.join(known)}); keep that version registered "
            f"(@workflow({name!r}, version={version!r}, resume_only=True)) until its runs end",
            workflow=name,
            version=version,
            registered=tuple(known),
            run_id=run_id,
        )
    return found
