"""Running the ``little`` CLI as a user does: a fresh interpreter, its output captured."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

LITTLE = [sys.executable, "-c", "from little.cli import main; main()"]


def little_cli(
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """``little *args``; ``env`` replaces the environment when given (but for PYTHONPATH, kept
    unless ``env`` sets it: the CLI under test is the one these tests import)."""
    if env is not None:
        env = dict(env)
        if "PYTHONPATH" in os.environ:
            env.setdefault("PYTHONPATH", os.environ["PYTHONPATH"])
    return subprocess.run(
        [*LITTLE, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
    )
