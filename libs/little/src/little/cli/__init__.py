"""The ``little`` command."""

from little.cli import _commands, _projections  # noqa: F401  (they register their commands)
from little.cli._app import app, main

__all__ = ["app", "main"]
