"""Docs that run: every Python block of the README executes as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


BLOCKS = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.S)


def test_the_readme_shows_how_to_use_the_library() -> None:
    assert BLOCKS, "the README shows how to use the library"


# One test per block, each in a directory of its own: the two test workers share them.
@pytest.mark.parametrize("i", range(len(BLOCKS)), ids=lambda i: f"block-{i}")
def test_readme_python_blocks_run(i: int, tmp_path: Path) -> None:
    block = BLOCKS[i]
    out = subprocess.run(
        [sys.executable, "-c", block],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        # the repository, then the code under test (not whatever is installed)
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        },
        timeout=120,
    )
    assert out.returncode == 0, f"README python block {i} failed:\n{out.stderr}"
    if "print(result.status, result.output)" in block:
        assert out.stdout.splitlines()[0] == "completed 42"
    if "durable(step, researcher)" in block:  # the Pydantic AI agent: 2 calls, 2 requests
        assert out.stdout.splitlines() == ["completed Kafka is a log (answer 2)", "2 2"]


def test_readme_shows_the_two_commands() -> None:
    text = (REPO / "README.md").read_text()
    assert "make demo" in text
    assert "make test" in text
