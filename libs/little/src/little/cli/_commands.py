"""``little submit / resume / cancel / status``: commands for the resume coordinator."""

from __future__ import annotations

from little.cli._app import app

__all__ = ["app"]
