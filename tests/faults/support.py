"""Helpers of the fault tests: a broker of the module's own that can be SIGKILLed and
restarted on its data dir, child processes that run workflows or services, and checks of a
run's stream read back from the log alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import little
from little.events import LoggedEvent, RunClaimed
from little.log import RUN_INDEX_TOPIC, RUNS_TOPIC, SNAPSHOTS_TOPIC, TopicNames
from tests.kafka_broker import KAFKA_SH, PrivateBroker

REPO = Path(__file__).resolve().parents[2]


class OwnBroker(PrivateBroker):
    """The local JVM broker on free ports with its own data dir; ``kill`` is a real SIGKILL
    of its JVM, ``start`` again reuses the data dir (topics, offsets, producer state)."""

    def __init__(self, data_dir: Path, **env: str) -> None:
        super().__init__(data_dir)
        self.env.update(env)
        self.marker = f"-Dlittle.local.kafka.data={data_dir.resolve()}/"

    def jvm_pids(self) -> list[int]:
        out = subprocess.run(["ps", "-ww", "-eo", "pid=,args="], capture_output=True, text=True)
        pids = []
        for line in out.stdout.splitlines():
            pid, _, args = line.strip().partition(" ")
            if f" {self.marker} " in f" {args} ":
                pids.append(int(pid))
        return pids

    def kill(self) -> None:
        pids = self.jvm_pids()
        assert pids, "the broker is not running"
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not self.jvm_pids(), 30, "the broker JVM to die")

    def tool(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(KAFKA_SH), *args], capture_output=True, text=True, timeout=120, env=self.env
        )


def wait_until(
    predicate: Callable[[], bool],
    timeout: float,
    what: str,
    detail: Callable[[], str] | None = None,
) -> None:
    """Wait for ``predicate``; past ``timeout`` fail naming ``what`` (and ``detail()``, e.g.
    the tail of a child's log, to show why)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            shown = f":\n{detail()}" if detail is not None else ""
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{shown}")
        time.sleep(0.05)


def child_env(settings: dict[str, str], **extra: str) -> dict[str, str]:
    """A clean environment for a child: no LITTLE_* of the test process but ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LITTLE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env.update(settings)
    env.update(extra)
    return env


def spawn_runner(args: list[str], env: dict[str, str], stderr: Path) -> subprocess.Popen[str]:
    with stderr.open("a") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.faults.runner", *args],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )


def result_of(stdout: str) -> dict[str, Any]:
    for line in reversed(stdout.splitlines()):
        if line.startswith("RESULT "):
            found: dict[str, Any] = json.loads(line[len("RESULT ") :])
            return found
    raise AssertionError(f"the child printed no result:\n{stdout[-2000:]}")


def log_lines(path: Path, event: str) -> list[dict[str, Any]]:
    """The JSON log lines of ``event`` in a child's stderr file."""
    out = []
    if path.exists():
        for line in path.read_text(errors="replace").splitlines():
            if f'"{event}"' in line:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
    return out


def lines_of(path: Path | None) -> int:
    if path is None or not path.exists():
        return 0
    return len(path.read_text().splitlines())


@contextmanager
def world_of(settings: dict[str, str]) -> Iterator[little.World]:
    """The test process's own view of the world the children use (no env involved)."""
    topics = TopicNames(
        runs=settings["LITTLE_RUNS_TOPIC"],
        snapshots=settings["LITTLE_SNAPSHOTS_TOPIC"],
        runs_index=settings["LITTLE_RUNS_INDEX_TOPIC"],
    )
    world = little.kafka_world(
        settings["LITTLE_KAFKA_BOOTSTRAP"],
        topics=topics,
        artifacts_dir=settings["LITTLE_ARTIFACTS_DIR"],
    )
    try:
        yield world
    finally:
        world.close()


def check_stream(events: list[LoggedEvent]) -> None:
    """Nothing duplicated in the accepted stream: every record a distinct event, the
    accepted seqs contiguous from 0, one claim per epoch."""
    ids = [e.event.event_id for e in events]
    assert len(ids) == len(set(ids)), "an event was written twice"
    seqs = [e.event.seq for e in events if not isinstance(e.event, RunClaimed)]
    assert seqs == list(range(len(seqs))), f"seqs not contiguous: {seqs}"
    epochs = [e.event.epoch for e in events if isinstance(e.event, RunClaimed)]
    assert epochs == sorted(set(epochs)), f"claims: {epochs}"


__all__ = [
    "RUNS_TOPIC",
    "RUN_INDEX_TOPIC",
    "SNAPSHOTS_TOPIC",
    "OwnBroker",
    "check_stream",
    "child_env",
    "lines_of",
    "log_lines",
    "result_of",
    "spawn_runner",
    "wait_until",
    "world_of",
]
