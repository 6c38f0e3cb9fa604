"""``import little`` configures no logging; the library's records follow the application's set-up."""

from __future__ import annotations

import subprocess
import sys


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )


def test_importing_little_configures_neither_structlog_nor_logging() -> None:
    out = _python(
        "import logging, structlog, little, little.runtime, little.log, little.replay\n"
        "print(structlog.is_configured(), logging.root.handlers,"
        " logging.getLogger('little').handlers, logging.getLogger('little.runtime').handlers)"
    )
    assert out.stdout.strip() == "False [] [] []"


def test_unconfigured_a_warning_reaches_stderr_and_a_debug_line_nowhere() -> None:
    out = _python(
        "from little.logs import get_logger\n"
        "log = get_logger('little.runtime')\n"
        "log.debug('run_claimed', run_id='r-1')\n"
        "log.warning('replay_from_ignored', run_id='r-2', reason='a resume')\n"
    )
    assert out.stdout == ""
    assert out.stderr == "replay_from_ignored run_id='r-2' reason='a resume'\n"


def test_an_application_that_configured_logging_gets_little_records_there() -> None:
    out = _python(
        "import logging, sys\n"
        "logging.basicConfig(stream=sys.stdout, level=logging.DEBUG, format='%(name)s|%(levelname)s|%(message)s')\n"
        "from little.logs import get_logger\n"
        "get_logger('little.runtime').debug('run_claimed', run_id='r-1', epoch=2)\n"
    )
    assert out.stdout == "little.runtime|DEBUG|run_claimed run_id='r-1' epoch=2\n"


def test_once_structlog_is_configured_little_logs_through_it() -> None:
    out = _python(
        "import sys, structlog\n"
        "from little.logs import get_logger\n"
        "log = get_logger('little.runtime')\n"
        "structlog.configure(processors=[structlog.processors.JSONRenderer(sort_keys=True)],"
        " logger_factory=structlog.PrintLoggerFactory(sys.stdout))\n"
        "log.info('run_executing', run_id='r-1')\n"
    )
    assert out.stdout == '{"event": "run_executing", "run_id": "r-1"}\n'
    assert out.stderr == ""
