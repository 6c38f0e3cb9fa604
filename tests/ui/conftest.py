"""Fixtures of the run inspector's browser tests: real runs, a real projector, a real browser.

The runs execute in child processes (``tests.ui.child``) on an embedded world, or on fresh
topics of the real Kafka broker (``test_run_inspector_kafka``); one of them is killed with
SIGKILL in the middle of its agent session and resumed by another process. The projector is
the ``little-projector`` service in its own process over that world; the pages are opened in
Debian's headless Chromium, driven by Playwright (never its own browsers).
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
from tests.projection_runs import settings_of

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


def _child(
    env: dict[str, str], calls: Path, *args: str, crash_after_call: int | None = None
) -> int:
    full = {k: v for k, v in os.environ.items() if not k.startswith("LITTLE_")}
    full["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    full.update(env)
    full[research.CALLS_DIR] = str(calls)
    full["LITTLE_LOG_LEVEL"] = "warning"
    if crash_after_call is not None:
        full["LITTLE_CRASH_AFTER_CALL"] = str(crash_after_call)
    proc = subprocess.run(
        [sys.executable, "-m", "tests.ui.child", *args],
        cwd=REPO,
        env=full,
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
    kafka: dict[str, str] = field(default_factory=dict)
    """``LITTLE_*`` settings of fresh Kafka topics; none: the embedded world under root."""
    env: dict[str, str] = field(init=False)
    calls: Path = field(init=False)
    run_ids: list[str] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self.env = {"LITTLE_DATA_DIR": str(self.root / "data"), **self.kafka}
        self.calls = self.root / "calls"

    def crash_and_resume(self) -> None:
        """MAIN: killed right after the model answered turn 2, before the answer reached the
        log (as in `little demo`); the resume serves turn 1 and the search from the log and
        calls turn 2 again."""
        topic = json.dumps({"topic": "Kafka"})
        killed = _child(self.env, self.calls, MAIN, "run", topic, crash_after_call=2)
        assert killed == -signal.SIGKILL
        _child(self.env, self.calls, MAIN, "resume")
        self.run_ids.append(MAIN)

    def create_the_rest(self) -> None:
        topic = json.dumps({"topic": "Kafka"})
        _child(self.env, self.root / "replay-calls", REPLAY, "replay", MAIN, topic)
        left = self.root / "left-calls"
        killed = _child(self.env, left, LEFT, "run", topic, crash_after_call=0)
        assert killed == -signal.SIGKILL
        hostile = json.dumps({"topic": HOSTILE})
        _child(self.env, self.root / "hostile-calls", HOSTILE_RUN, "run", hostile)
        self.run_ids += [REPLAY, LEFT, HOSTILE_RUN]

    def world(self) -> little.World:
        return settings_of(self.env).world()  # type: ignore[attr-defined,no-any-return]

    def fold(self, run_id: str) -> MaterializedRunState:
        with self.world() as world:
            state, _, _ = fold_run(world, run_id, use_snapshot=False)
            return state

    def events(self, run_id: str) -> list[LoggedEvent]:
        with self.world() as world:
            return list(world.read_run(run_id))

    def all_run_ids(self) -> list[str]:
        ids, pending = [], list(self.run_ids)
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


def serve(runs: Runs) -> Iterator[Projector]:
    """``little-projector`` over the runs' world, once it has projected every run."""
    expected = len(runs.all_run_ids())
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LITTLE_")}
    env.update(runs.env)  # the embedded world under LITTLE_DATA_DIR, or Kafka
    env.update(
        {
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
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
    r.crash_and_resume()
    r.create_the_rest()
    return r


@pytest.fixture(scope="module")
def projector(runs: Runs) -> Iterator[Projector]:
    yield from serve(runs)


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
