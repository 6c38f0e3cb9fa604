"""Durable waits through the resume coordinator on a real broker (issue 11): a run that waits
is suspended (it holds no slot), the coordinator wakes it at its due time, a ``SignalRun``
(``little signal``) or ``POST /runs/{id}/signals/{name}`` delivers a signal, ``little approve``
answers an approval; the coordinator is killed with SIGKILL while runs wait, and the one that
takes its partitions over wakes them."""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from little.commands import CommandPublisher, SignalRun, StartRun
from little.events import RunSuspended, SignalSent, WaitEnded, WaitStarted
from tests.cli import little_cli
from tests.integration.coordinator_support import (
    CoordinatorProcess,
    RunsWatcher,
    make_topics,
    spawn_coordinator,
    wait_ready,
)

pytestmark = pytest.mark.kafka

PARTITIONS = 2
TOKEN = "s3cret-token"


class Env:
    def __init__(self, bootstrap: str, workdir: Path) -> None:
        self.bootstrap = bootstrap
        self.workdir = workdir
        self.tag = uuid.uuid4().hex[:10]
        self.topics = make_topics(bootstrap, self.tag, PARTITIONS)
        self.watcher = RunsWatcher(bootstrap, self.topics["runs"])
        self.publisher = CommandPublisher(bootstrap, topic=self.topics["commands"])
        self.coordinators: list[CoordinatorProcess] = []

    def spawn(self, name: str) -> CoordinatorProcess:
        coordinator = spawn_coordinator(
            f"{name}-{self.tag}",
            bootstrap=self.bootstrap,
            topics=self.topics,
            group=f"waits-{self.tag}",
            workdir=self.workdir,
            lease_seconds=1.5,
            extra_env={
                "LITTLE_WORKFLOWS": "tests.little.runtime.waits.flows",
                "LITTLE_WAIT_HOLD_SECONDS": "0",
                "LITTLE_API_TOKEN": TOKEN,
                "LITTLE_TEST_STEP_LOG": str(self.workdir / "steps.jsonl"),
            },
        )
        self.coordinators.append(coordinator)
        return coordinator

    def cli_env(self) -> dict[str, str]:
        return {
            "PATH": "/usr/bin:/bin",
            "LITTLE_KAFKA_BOOTSTRAP": self.bootstrap,
            "LITTLE_COMMANDS_TOPIC": self.topics["commands"],
            "LITTLE_RUNS_TOPIC": self.topics["runs"],
            "LITTLE_RUNS_INDEX_TOPIC": self.topics["index"],
            "LITTLE_SNAPSHOTS_TOPIC": self.topics["snapshots"],
        }

    def little(self, *args: str) -> subprocess.CompletedProcess[str]:
        return little_cli(*args, env=self.cli_env(), timeout=90)

    def events(self, run_id: str, cls: type) -> list[object]:
        return [e.event for e in self.watcher.runs.get(run_id, []) if isinstance(e.event, cls)]

    def wait_status(self, run_id: str, status: str, timeout: float = 60) -> None:
        self.watcher.wait(lambda w: w.status(run_id) == status, timeout, f"{run_id} {status}")

    def steps(self) -> list[str]:
        path = self.workdir / "steps.jsonl"
        if not path.exists():
            return []
        return [json.loads(line)["step"] for line in path.read_text().splitlines()]


@pytest.fixture
def env(kafka_bootstrap_servers: str, tmp_path: Path) -> Iterator[Env]:
    e = Env(kafka_bootstrap_servers, tmp_path)
    try:
        yield e
    finally:
        for c in e.coordinators:
            c.stop()
        e.publisher.close()
        e.watcher.close()


def post(coordinator: CoordinatorProcess, path: str, body: object, token: str | None) -> int:
    request = urllib.request.Request(
        f"http://127.0.0.1:{coordinator.port}{path}",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"}
        | ({"Authorization": f"Bearer {token}"} if token else {}),
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_timers_signals_and_approvals_through_the_coordinator_survive_its_sigkill(
    env: Env,
) -> None:
    first = env.spawn("first")
    wait_ready([first], PARTITIONS)
    nap, order, pay = f"nap-{env.tag}", f"order-{env.tag}", f"pay-{env.tag}"
    env.publisher.send(
        [
            StartRun.of(nap, "waits.nap", {"seconds": 4}),
            StartRun.of(order, "waits.order", None),
            StartRun.of(pay, "waits.pay", None),
        ]
    )
    for run_id in (nap, order, pay):
        env.wait_status(run_id, "waiting")  # suspended: no execution holds them

    # the coordinator that suspended them dies; another takes its partitions over
    first.signal(signal.SIGKILL)
    second = env.spawn("second")
    wait_ready([second], PARTITIONS)

    # a signal over HTTP needs the token; without it nothing is recorded
    assert post(second, f"/runs/{order}/signals/approved", {"by": "ana"}, None) == 401
    assert post(second, f"/runs/{order}/signals/approved", {"by": "ana"}, TOKEN) == 202
    assert post(second, f"/runs/nobody-{env.tag}/signals/approved", 1, TOKEN) == 404
    env.wait_status(order, "completed")
    assert env.watcher.state(order).output_json == '{"decision":{"by":"ana"},"shipped":"ship"}'

    refused = env.little("approve", pay, "no-such-call")
    assert refused.returncode == 1
    assert "asked for no approval of call 'no-such-call'" in refused.stderr
    approved = env.little("approve", pay, "agent#banker/1:t1")
    assert approved.returncode == 0, approved.stderr
    env.wait_status(pay, "completed")
    assert env.watcher.state(pay).output_json == '"done: {\\"sent\\":250}"'

    env.wait_status(nap, "completed")  # woken at its due time by the second coordinator
    (started,) = env.events(nap, WaitStarted)
    (ended,) = env.events(nap, WaitEnded)
    assert isinstance(started, WaitStarted)
    assert started.due_at is not None
    assert isinstance(ended, WaitEnded)
    assert ended.outcome == "fired"
    assert ended.occurred_at >= started.due_at
    assert sorted(env.steps()) == sorted(["before", "after", "placed", "ship", "transfer"])
    assert len(env.events(order, SignalSent)) == 1


def test_a_signal_command_read_twice_is_recorded_once_and_a_bad_one_changes_nothing(
    env: Env,
) -> None:
    coordinator = env.spawn("solo")
    wait_ready([coordinator], PARTITIONS)
    run_id = f"two-{env.tag}"
    env.publisher.send([StartRun.of(run_id, "waits.two_signals", None)])
    env.wait_status(run_id, "waiting")
    again = SignalRun(run_id=run_id, name="item", payload_json='"a"', signal_id=f"s-{env.tag}")
    env.publisher.send([again, again])  # delivered twice (a producer retry, a replayed topic)
    env.publisher.send([SignalRun(run_id=f"ghost-{env.tag}", name="item")])  # no such run
    sent = env.little("signal", run_id, "item", "--data", '"b"')
    assert sent.returncode == 0, sent.stderr
    env.wait_status(run_id, "completed")
    assert env.watcher.state(run_id).output_json == '["a","b"]'
    assert len(env.events(run_id, SignalSent)) == 2
    assert len(env.events(run_id, RunSuspended)) >= 1
    bad = env.little("signal", run_id, "item", "--data", "{nope")
    assert bad.returncode == 1
    assert bad.stderr.startswith("error: --data is not JSON")
    ended = env.little("signal", run_id, "item")
    assert ended.returncode == 1
    assert "has already ended (completed)" in ended.stderr
    assert coordinator.get("/healthz")[0] == 200
