"""Command groups other packages add to ``little``, through the ``little.cli`` entry points.

A distribution names a ``typer.Typer`` in its metadata::

    [project.entry-points."little.cli"]
    projections = "little_services.cli:projections_app"

and ``little <name>`` is that group. ``little projections`` comes this way from
little-services, so the SDK does not carry the projector; without little-services installed
the command says how to get it. A plugin that fails to load does not break the other
commands: its command reports the failure when run.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib.metadata import EntryPoint, entry_points

import typer

from little.errors import ConfigurationError

GROUP = "little.cli"

# Commands the docs promise, with the distribution that brings each.
EXPECTED = {"projections": "little-services"}


def add_plugins(app: typer.Typer, plugins: Iterable[EntryPoint] | None = None) -> None:
    """Add every ``little.cli`` entry point's group (or ``plugins``) to ``app``, and a pointer
    for any expected group that is not installed."""
    found: set[str] = set()
    for ep in entry_points(group=GROUP) if plugins is None else plugins:
        found.add(ep.name)
        try:
            group = ep.load()
        except Exception as exc:
            _add_placeholder(
                app,
                ep.name,
                f"`little {ep.name}` could not be loaded from {ep.value}: "
                f"{type(exc).__name__}: {exc}",
            )
            continue
        if not isinstance(group, typer.Typer):
            _add_placeholder(
                app,
                ep.name,
                f"`little {ep.name}`: entry point {ep.value} is a {type(group).__name__}, "
                "not a typer.Typer",
            )
            continue
        app.add_typer(group, name=ep.name)
    for name, distribution in EXPECTED.items():
        if name not in found:
            _add_placeholder(
                app,
                name,
                f"`little {name}` comes with the {distribution} package: "
                f"pip install {distribution}",
            )


def _add_placeholder(app: typer.Typer, name: str, message: str) -> None:
    @app.command(
        name,
        help=f"(not available: {message})",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
        add_help_option=False,
    )
    def _unavailable() -> None:
        raise ConfigurationError(message)
