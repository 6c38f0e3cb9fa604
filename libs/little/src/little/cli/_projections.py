"""``little projections ...``: operate the projector's read model (filled in by the projector work)."""

from __future__ import annotations

import typer

from little.cli._app import app

projections_app = typer.Typer(help="Rebuild or inspect the projector's run-state projection.")
app.add_typer(projections_app, name="projections")
