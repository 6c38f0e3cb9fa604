"""Exported names a package imports on first use (PEP 562 module ``__getattr__``/``__dir__``):
what a fresh process resuming a run does not use is not imported with the package."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def lazy_exports(
    package: str, namespace: dict[str, Any], lazy: Mapping[str, str], exported: Sequence[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package`` (its ``globals()``: ``namespace``): a name of
    ``lazy`` is imported from its module on first use and kept in ``namespace``, so the next
    lookup finds it as any other name; ``dir()`` lists ``exported`` too."""

    def __getattr__(name: str) -> Any:
        module = lazy.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exported))

    return __getattr__, __dir__
