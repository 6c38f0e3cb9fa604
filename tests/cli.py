"""Running the ``little`` CLI as a user does: a fresh interpreter, its output captured."""

from __future__ import annotations

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
    """``little *args``; ``env`` replaces the environment when given."""
    return subprocess.run(
        [*LITTLE, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=None if env is None else dict(env),
        timeout=timeout,
    )
