"""``import little`` configures no logging; the library's records follow the application's set-up."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


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
        "from little.logging_setup import get_logger\n"
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
        "from little.logging_setup import get_logger\n"
        "get_logger('little.runtime').debug('run_claimed', run_id='r-1', epoch=2)\n"
    )
    assert out.stdout == "little.runtime|DEBUG|run_claimed run_id='r-1' epoch=2\n"


def test_once_structlog_is_configured_little_logs_through_it() -> None:
    out = _python(
        "import sys, structlog\n"
        "from little.logging_setup import get_logger\n"
        "log = get_logger('little.runtime')\n"
        "structlog.configure(processors=[structlog.processors.JSONRenderer(sort_keys=True)],"
        " logger_factory=structlog.PrintLoggerFactory(sys.stdout))\n"
        "log.info('run_executing', run_id='r-1')\n"
    )
    assert out.stdout == '{"event": "run_executing", "run_id": "r-1"}\n'
    assert out.stderr == ""


def test_a_failed_run_is_logged_as_a_warning_with_its_traceback(tmp_path: Path) -> None:
    """The coordinator's log shows why a workflow failed, not only that it did; RunFailed
    records the exception's type and message."""
    import asyncio

    from structlog.testing import capture_logs

    import little
    from little.events import RunFailed
    from little.runtime import WorkflowContext, run, workflow

    @workflow("tests.logs.fails", version="1")
    async def fails(ctx: WorkflowContext, n: int) -> None:
        raise KeyError(f"no such thing as {n}")

    with little.local_world(tmp_path / "w") as world, capture_logs() as logged:
        result = asyncio.run(run(world, fails, 3, run_id="tests-logs-fails"))
        (failed,) = [
            r.event for r in world.read_run(result.run_id) if isinstance(r.event, RunFailed)
        ]
    assert (failed.error_type, failed.message) == ("KeyError", "'no such thing as 3'")
    (entry,) = [e for e in logged if e["event"] == "run_failed"]
    assert entry["log_level"] == "warning"
    assert (entry["run_id"], entry["error_type"]) == ("tests-logs-fails", "KeyError")
    assert isinstance(entry["exc_info"], KeyError)
