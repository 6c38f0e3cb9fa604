"""Logging: the library's loggers, and the set-up of the CLI (console) and services (JSON).

``import little`` configures nothing. The library logs through ``get_logger``: once the
application has configured structlog (as the CLI and the services do with ``configure``),
through structlog; until then through the standard library's ``logging`` under the same
name (``little.runtime``, ...), so an application that never configured logging sees
warnings and errors on stderr (Python's last-resort handler) and one that configured
``logging`` gets little's records where it sends its own.
``LITTLE_LOG_LEVEL`` (debug, info, warning, error) and ``LITTLE_LOG_JSON=1`` override
``configure``.

structlog is imported by ``configure``, not by ``import little`` (importing it pulls in its
console renderer and rich, a sizeable part of the import): an application that configured
structlog has imported it, so a logger that finds it absent from ``sys.modules`` knows it is
not configured without importing it.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import structlog

__all__ = ["LibraryLogger", "configure", "get_logger"]


def configure(*, json: bool | None = None, level: str | None = None) -> None:
    import structlog

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
            *([structlog.processors.format_exc_info] if as_json else []),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping().get(level_name, logging.INFO)
        ),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )


class LibraryLogger:
    """A library logger: structlog once the application configured it, else ``logging``."""

    __slots__ = ("_name", "_stdlib", "_structlog")

    def __init__(self, name: str) -> None:
        self._name = name
        self._stdlib = logging.getLogger(name)
        self._structlog: Any = None

    def debug(self, event: str, *, exc_info: BaseException | None = None, **fields: object) -> None:
        self._log(logging.DEBUG, "debug", event, fields, exc_info)

    def info(self, event: str, *, exc_info: BaseException | None = None, **fields: object) -> None:
        self._log(logging.INFO, "info", event, fields, exc_info)

    def warning(
        self, event: str, *, exc_info: BaseException | None = None, **fields: object
    ) -> None:
        self._log(logging.WARNING, "warning", event, fields, exc_info)

    def error(self, event: str, *, exc_info: BaseException | None = None, **fields: object) -> None:
        self._log(logging.ERROR, "error", event, fields, exc_info)

    def _log(
        self,
        level: int,
        method: str,
        event: str,
        fields: dict[str, object],
        exc_info: BaseException | None,
    ) -> None:
        configured = sys.modules.get("structlog")
        if configured is not None and configured.is_configured():
            if self._structlog is None:
                self._structlog = configured.get_logger(self._name)
            if exc_info is not None:
                fields = {**fields, "exc_info": exc_info}
            getattr(self._structlog, method)(event, **fields)
        elif self._stdlib.isEnabledFor(level):
            detail = " ".join(f"{k}={v!r}" for k, v in fields.items())
            self._stdlib.log(
                level, "%s %s", event, detail, extra={"little": fields}, exc_info=exc_info
            )


def get_logger(name: str) -> LibraryLogger:
    """The logger library modules use (``name`` is the module's area, e.g. little.runtime)."""
    return LibraryLogger(name)
