"""Running the ``little`` CLI as a user does: a fresh interpreter, its output captured."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from tests.forkserver import server_for
from tests.paths import REPO

LITTLE = [sys.executable, "-c", "from little.cli import main; main()"]


def little_cli(
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """``little *args``; ``env`` replaces the environment when given (but for PYTHONPATH, kept
    unless ``env`` sets it: the CLI under test is the one these tests import).

    The process is forked from a server that has imported the CLI's third-party dependencies
    under the same start-up environment (``tests/forkserver.py``); it imports ``little``
    itself, as a fresh interpreter does. Off Linux it is a fresh interpreter."""
    if env is not None:
        env = dict(env)
        if "PYTHONPATH" in os.environ:
            env.setdefault("PYTHONPATH", os.environ["PYTHONPATH"])
    full = dict(os.environ if env is None else env)
    server = server_for("little.cli", full, REPO)
    if server is None:
        return subprocess.run(
            [*LITTLE, *args],
            capture_output=True,
            text=True,
            cwd=cwd,
            env=env,
            timeout=timeout,
        )
    child = server.spawn(None, list(args), full, cwd or Path.cwd(), code=LITTLE[2])
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        raise
    assert child.returncode is not None
    return subprocess.CompletedProcess([*LITTLE, *args], child.returncode, out, err)
