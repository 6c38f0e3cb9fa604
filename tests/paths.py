"""Where the repository and the tests' data are, for test modules at any depth of the tree.

A test names these instead of counting ``Path(__file__).parents``, so moving a test module
to another folder never points it at the wrong directory."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
"""The repository's root (the working directory of the tests' child processes)."""
GOLDEN_VECTORS = REPO / "tests" / "golden" / "vectors"
"""The committed golden byte vectors, one folder per event type."""
