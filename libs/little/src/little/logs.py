"""Logging set-up for the CLI (console) and the services (JSON), with structlog.

The library itself never configures logging; entry points call ``configure``.
``LITTLE_LOG_LEVEL`` (debug, info, warning, error) and ``LITTLE_LOG_JSON=1`` override.
"""

from __future__ import annotations

import logging
import os
import sys

import structlog


def configure(*, json: bool | None = None, level: str | None = None) -> None:
    level_name = (level or os.environ.get("LITTLE_LOG_LEVEL") or "info").upper()
    as_json = json if json is not None else os.environ.get("LITTLE_LOG_JSON") == "1"
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer()
        if as_json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso" if as_json else "%H:%M:%S", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping().get(level_name, logging.INFO)
        ),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )


def quiet_default() -> None:
    """Unless the application configured structlog, log warnings and errors only, to stderr.

    Called when ``little`` is imported: a library should not print its debug lines into an
    application's stdout.
    """
    if not structlog.is_configured():
        structlog.configure(
            wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
            logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        )
