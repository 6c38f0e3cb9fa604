"""The ``little`` command."""

from little.cli._app import app, main

__all__ = ["app", "main"]
