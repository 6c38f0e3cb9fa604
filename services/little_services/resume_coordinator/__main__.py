"""``little-resume-coordinator``: run the resume coordinator until SIGTERM (then exit 0).

Settings come from ``LITTLE_*`` variables (see ``_settings.py``); logs are JSON lines on
stderr. A configuration or connection problem at start is one ``coordinator_failed`` line and
exit status 1.
"""

from __future__ import annotations

import asyncio
import signal
import sys

import structlog
from pydantic import ValidationError

from little import tune_gc
from little.errors import ConfigurationError, LittleError
from little.logging_setup import configure
from little.runtime import load_workflows
from little.tracing import configure_from_env
from little_services._entry import handle_arguments
from little_services.resume_coordinator._coordinator import Coordinator
from little_services.resume_coordinator._http import HttpServer, make_app
from little_services.resume_coordinator._metrics import Metrics
from little_services.resume_coordinator._settings import CoordinatorSettings
from little_services.resume_coordinator._world import open_world

log = structlog.get_logger("little.coordinator")


async def serve(settings: CoordinatorSettings) -> int:
    workflows = load_workflows(settings.workflows)
    if not workflows:
        raise ConfigurationError(
            "no workflows are registered: set LITTLE_WORKFLOWS=module[:attr],... (importable "
            "modules) or install a package that declares little.workflows entry points; "
            "without them every run this coordinator adopted would fail"
        )
    world, snapshots = await asyncio.to_thread(open_world, settings)
    coordinator = Coordinator(settings, world, snapshots, Metrics())
    http = HttpServer(
        make_app(coordinator, api_token=settings.api_token, metrics_open=settings.metrics_open),
        settings.http_host,
        settings.http_port,
    )
    await asyncio.to_thread(http.start)
    tune_gc()  # a long-lived process recording many calls: collect less often
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        return await coordinator.run(stop)
    finally:
        await asyncio.to_thread(http.stop)


SUMMARY = (
    "The resume coordinator: executes StartRun commands, resumes the in-flight runs of the "
    "partitions it owns, cancels on CancelRun. Runs until SIGTERM."
)


def settings_from_environment() -> CoordinatorSettings:
    """``CoordinatorSettings()``; a value that does not validate is a ``ConfigurationError``
    naming each variable and what it should be (one line, not a traceback)."""
    try:
        return CoordinatorSettings()
    except ValidationError as exc:
        problems = "; ".join(
            f"{_variable(error['loc'])}: {error['msg']} (got {error.get('input')!r})"
            for error in exc.errors()
        )
        raise ConfigurationError(f"bad settings: {problems}") from None


def _variable(loc: tuple[int | str, ...]) -> str:
    name = str(loc[0]).upper() if loc else "?"
    return name if name.startswith("LITTLE_") else f"LITTLE_{name}"


def main() -> None:
    handle_arguments("little-resume-coordinator", SUMMARY, CoordinatorSettings, sys.argv[1:])
    configure(json=True)
    try:
        configure_from_env("little-resume-coordinator")  # traces, where OTEL_* ask for them
        settings = settings_from_environment()
        code = asyncio.run(serve(settings))
    except LittleError as exc:
        log.error("coordinator_failed", error=str(exc))
        sys.exit(1)
    sys.exit(code)


if __name__ == "__main__":
    main()
