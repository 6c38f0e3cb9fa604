"""``little-projector``: fold little.runs.v1 into run states and serve them over HTTP."""

from __future__ import annotations

import sys

import structlog

from little.errors import LittleError
from little.logging_setup import configure
from little.tracing import configure_from_env
from little_services._entry import handle_arguments
from little_services.projector._service import serve
from little_services.projector._settings import ProjectorServiceSettings

SUMMARY = (
    "The projector: folds the runs topic into run states (steps, tokens, dollars, artifacts) "
    "and serves them over HTTP. Runs until SIGTERM."
)


def main() -> None:
    handle_arguments("little-projector", SUMMARY, ProjectorServiceSettings, sys.argv[1:])
    configure(json=True)
    try:
        configure_from_env("little-projector")  # traces, where OTEL_* variables ask for them
    except LittleError as exc:  # OTEL_TRACES_EXPORTER names an exporter little lacks
        structlog.get_logger("little.projector").error("projector_failed_to_start", error=str(exc))
        sys.exit(1)
    sys.exit(serve(ProjectorServiceSettings()))


if __name__ == "__main__":
    main()
