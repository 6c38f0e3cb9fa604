"""Fixtures of the run inspector's browser tests: real runs, a real projector, a real browser.

The runs execute in child processes on an embedded world (``tests.ui.child``), one of them
killed with SIGKILL in the middle of its agent session and resumed by another process; the
projector is the ``little-projector`` service in its own process over that world; the pages
are opened in Debian's headless Chromium, driven by Playwright (never its own browsers).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, sync_playwright

import little
from little.events import LoggedEvent
from little.examples import research
from little.replay import MaterializedRunState, fold_run

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
TOKEN = "inspector-s3cret"
HOSTILE = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">&amp;'
"""A topic a person might paste, or an attacker plant: it must show as text, never run."""

MAIN = "run_inspected"
"""Killed after its model answered turn 2 (before the answer was logged), then resumed."""
REPLAY = "run_inspected_replay"
"""The workflow with its last stage edited, replayed against MAIN's recorded calls."""
LEFT = "run_left_crashed"
"""Killed in its first model call and never resumed: it stays running."""
HOSTILE_RUN = "run_hostile"
CHILD_TIMEOUT = 120.0


def _child(data_dir: Path, calls: Path, *args: str, crash_after_call: int | None = None) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LITTLE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env[research.CALLS_DIR] = str(calls)
    env["LITTLE_LOG_LEVEL"] = "warning"
    if crash_after_call is not None:
        env["LITTLE_CRASH_AFTER_CALL"] = str(crash_after_call)
    proc = subprocess.run(
        [sys.executable, "-m", "tests.ui.child", str(data_dir), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
    )
    if crash_after_call is None and proc.returncode != 0:
        raise AssertionError(f"{args} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return proc.returncode


@dataclass
class Runs:
    """The runs the pages show, and what their logs and invocation logs say."""

    root: Path
    data_dir: Path = field(init=False)
    calls: Path = field(init=False)

    def __post_init__(self) -> None:
        self.data_dir = self.root / "data"
        self.calls = self.root / "calls"

    def create(self) -> None:
        topic = json.dumps({"topic": "Kafka"})
        # killed right after the model answered turn 2, before the answer reached the log (as
        # in `little demo`): the resume serves turn 1 and the search from the log, calls turn 2
        # again
        assert _child(self.data_dir, self.calls, MAIN, "run", topic, crash_after_call=2) == (
            -signal.SIGKILL
        )
        _child(self.data_dir, self.calls, MAIN, "resume")
        _child(self.data_dir, self.root / "replay-calls", REPLAY, "replay", MAIN, topic)
        left = self.root / "left-calls"
        assert _child(self.data_dir, left, LEFT, "run", topic, crash_after_call=0) == (
            -signal.SIGKILL
        )
        hostile = json.dumps({"topic": HOSTILE})
        _child(self.data_dir, self.root / "hostile-calls", HOSTILE_RUN, "run", hostile)

    def fold(self, run_id: str) -> MaterializedRunState:
        with little.local_world(self.data_dir) as world:
            state, _, _ = fold_run(world, run_id, use_snapshot=False)
            return state

    def events(self, run_id: str) -> list[LoggedEvent]:
        with little.local_world(self.data_dir) as world:
            return list(world.read_run(run_id))

    def all_run_ids(self) -> list[str]:
        ids, pending = [], [MAIN, REPLAY, LEFT, HOSTILE_RUN]
        while pending:
            rid = pending.pop()
            ids.append(rid)
            pending += [s.sub_run_id for s in self.fold(rid).sub_runs]
        return ids


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Projector:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def get(self, path: str, token: str | None = TOKEN) -> Any:
        request = urllib.request.Request(self.url + path)
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read())


def _serve(runs: Runs, expected: int) -> Iterator[Projector]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LITTLE_")}
    env.update(
        {
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
            "LITTLE_DATA_DIR": str(runs.data_dir),  # no LITTLE_KAFKA_BOOTSTRAP: embedded
            "LITTLE_HTTP_PORT": str(port),
            "LITTLE_API_TOKEN": TOKEN,
        }
    )
    log = runs.root / "projector.log"
    with log.open("ab") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "little_services.projector"],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    projector = Projector(f"http://127.0.0.1:{port}", proc, log)
    try:
        deadline = time.monotonic() + 60
        seen = -1
        while seen != expected:  # until every run is projected
            assert proc.poll() is None, f"the projector exited:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"{seen} of {expected} runs projected"
            with contextlib.suppress(OSError):  # not serving yet
                seen = len(projector.get("/runs?limit=1000")["runs"])
            time.sleep(0.05)
        yield projector
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    r = Runs(tmp_path_factory.mktemp("inspector"))
    r.create()
    return r


@pytest.fixture(scope="module")
def projector(runs: Runs) -> Iterator[Projector]:
    yield from _serve(runs, len(runs.all_run_ids()))


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(
            f"no Chromium at {CHROMIUM}: `make system-deps` installs Debian's chromium package",
            pytrace=False,
        )
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        yield ctx
    finally:
        ctx.close()


@pytest.fixture
def page(context: BrowserContext, projector: Projector) -> Page:
    """A page logged in through the login form."""
    p = context.new_page()
    p.goto(f"{projector.url}/ui")
    p.fill("#token", TOKEN)
    p.click("button[type=submit]")
    p.wait_for_url(f"{projector.url}/ui")
    return p
