"""Garbage-collector settings for long-lived processes that host runs or fold logs.

CPython's default thresholds (700, 10, 10) start a young collection every 700 container
allocations and walk the whole heap every ~70,000: a process holding thousands of run states,
or an agent session building events, messages and records on every call, pays for that again
and again (about 7% of a projection rebuild, and a visible share of every recorded model
call, measured). Folding and recording make few reference cycles, so collecting less often
costs little memory. Entry points (the projector and resume coordinator services, ``little
projections rebuild``) call ``tune_gc`` once after start-up; the library never changes the
collector on its own, so an application embedding little keeps its own settings (and may call
``little.tune_gc()`` itself in a worker process).
"""

from __future__ import annotations

import gc


def tune_gc() -> None:
    """Move what start-up allocated out of the collector's way, and collect less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
