"""Shared helpers for benchmarks: finding the broker, timing, printing ratio tables."""

from __future__ import annotations

import asyncio
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

CALL_RECORD = bytes(300)
"""A recorded call's record as the raw paths write it (ours are ~240-450 bytes of Avro)."""
CALL_HEADERS = [(f"little.h{i}", bytes(22)) for i in range(7)]
"""Its headers as the raw paths write them: seven, ~200 bytes in all (ours mirror the envelope)."""


def settle_once(done: asyncio.Future[Any], err: Any) -> None:
    """A raw path's delivery report on the loop: the first of an append's (an error report,
    then another record's) completes its future."""
    if not done.done():
        done.set_result(err)


def bootstrap() -> str:
    env = os.environ.get("LITTLE_BENCH_KAFKA_BOOTSTRAP") or os.environ.get(
        "LITTLE_TEST_KAFKA_BOOTSTRAP"
    )
    if env:
        return env
    sh = REPO / "deploy" / "local-kafka" / "kafka.sh"
    subprocess.run([str(sh), "start"], check=True)
    return subprocess.run(
        [str(sh), "bootstrap"], check=True, capture_output=True, text=True
    ).stdout.strip()


def machine() -> str:
    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores, {mem_gb:.0f} GB, {platform.system()} {platform.machine()}"


def stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d")


def percentiles(samples: list[float]) -> tuple[float, float]:
    qs = statistics.quantiles(samples, n=100, method="inclusive")
    return qs[49], qs[98]


def busy(seconds: float) -> None:
    """CPU work for ``seconds`` (a busy-wait): what precedes an append in a real session."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def table(title: str, header: list[str], rows: list[list[str]]) -> str:
    lines = [f"### {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)
