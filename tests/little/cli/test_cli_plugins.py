"""``little`` command groups from other distributions (``little.cli`` entry points)."""

from __future__ import annotations

import importlib.util
from importlib.metadata import EntryPoint

import typer
from typer.testing import CliRunner

from little.cli._plugins import GROUP, add_plugins
from tests.cli import little_cli


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.command()
    def version() -> None:
        typer.echo("0")

    return app


def _ep(name: str, value: str) -> EntryPoint:
    return EntryPoint(name=name, value=value, group=GROUP)


def _run(app: typer.Typer, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    text = result.output + (str(result.exception) if result.exception else "")
    return result.exit_code, text


def test_the_sdk_does_not_carry_the_projector() -> None:
    assert importlib.util.find_spec("little.projection") is None
    assert importlib.util.find_spec("little_services.projection") is not None


def test_installed_little_services_brings_little_projections() -> None:
    out = little_cli("projections", "--help")
    assert out.returncode == 0, out.stderr
    assert "rebuild" in out.stdout
    assert "status" in out.stdout


def test_a_plugin_group_becomes_a_command_group() -> None:
    app = _app()
    add_plugins(app, [_ep("projections", "little_services.cli:projections_app")])
    code, text = _run(app, "projections", "--help")
    assert code == 0
    assert "rebuild" in text


def test_without_little_services_the_command_says_how_to_get_it() -> None:
    app = _app()
    add_plugins(app, [])
    code, text = _run(app, "projections", "rebuild", "--to-earliest")
    assert code != 0
    assert "pip install little-services" in text
    assert _run(app, "version") == (0, "0\n")


def test_a_plugin_that_fails_to_load_breaks_only_its_own_command() -> None:
    app = _app()
    add_plugins(
        app,
        [
            _ep("broken", "little_services.no_such_module:app"),
            _ep("projections", "little_services.cli:projections_app"),
        ],
    )
    code, text = _run(app, "broken")
    assert code != 0
    assert "little_services.no_such_module:app" in text
    assert "ModuleNotFoundError" in text
    assert _run(app, "projections", "--help")[0] == 0


def test_an_entry_point_that_is_not_a_typer_app_is_named() -> None:
    app = _app()
    add_plugins(app, [_ep("odd", "little.cli:main")])
    code, text = _run(app, "odd")
    assert code != 0
    assert "little.cli:main is a function, not a typer.Typer" in text
