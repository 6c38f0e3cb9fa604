"""Finding workflows: the ``little.workflows`` entry point group and ``LITTLE_WORKFLOWS``.

Importing a module registers its ``@workflow`` functions; an entry point or a ``module:attr``
may also name a ``Workflow`` (or a list of them) directly. A module that does not import is a
configuration error (the resume coordinator exits, ``little run`` prints one line); a run
naming an unknown workflow fails that run.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

from little.errors import ConfigurationError
from little.runtime._registry import Workflow, register, registered_names, versions

GROUP = "little.workflows"


def load_workflows(spec: str = "", *, source: str = "LITTLE_WORKFLOWS") -> list[str]:
    """Import every entry point of the group and every ``module[:attr]`` of ``spec`` (which
    errors call ``source``); returns the names registered (in any version)."""
    for ep in entry_points(group=GROUP):
        try:
            obj = ep.load()
        except Exception as exc:
            raise ConfigurationError(
                f"entry point {ep.name} = {ep.value} ({GROUP}) does not load: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        _register(obj, f"entry point {ep.name}")
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        module_name, _, attr = item.partition(":")
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:
            raise ConfigurationError(
                f"{source}: cannot import {module_name}: {type(exc).__name__}: {exc}"
            ) from exc
        if attr:
            try:
                obj = getattr(module, attr)
            except AttributeError:
                raise ConfigurationError(
                    f"{source}: module {module_name} has no attribute {attr}"
                ) from None
            _register(obj, item)
    return registered_names()


def _register(obj: Any, source: str) -> None:
    if isinstance(obj, Workflow):
        if obj.version not in versions(obj.name):  # (importing its module may have)
            register(obj)
    elif isinstance(obj, list | tuple):
        for item in obj:
            _register(item, source)
    elif not hasattr(obj, "__file__"):  # a module registers its workflows by being imported
        raise ConfigurationError(f"{source} is neither a module nor a Workflow: {obj!r}")
