"""Fuzz suites: hostile bytes and streams against the decoders and the fold.

Each runs a fixed, derandomized number of inputs: its full count in ``make test``; in
``make test-fast`` (``LITTLE_TEST_FUZZ_SCALE=0.2``) the first fifth of the same inputs, the
quick loop's share, since the full count is most of that loop's CPU.
"""

from __future__ import annotations

import os


def examples(full: int) -> int:
    """How many inputs a fuzz test runs: ``full`` scaled by ``LITTLE_TEST_FUZZ_SCALE``
    (default 1, the whole count), never fewer than 50."""
    scale = float(os.environ.get("LITTLE_TEST_FUZZ_SCALE", "1"))
    return max(50, round(full * scale))
