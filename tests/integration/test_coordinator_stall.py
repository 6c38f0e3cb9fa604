"""A broker stall, injected for real: the broker process is SIGSTOPped while a coordinator has
runs in flight, then SIGCONTed.

While it is stopped the coordinator's appends wait: /readyz turns 503 and says the log is
stalled, /healthz stays 200 ("degraded": restarting the process would not bring the broker
back), and the metrics show the oldest append's age. Once the broker runs again every run
completes in the execution it was in: one accepted claim each, nothing fenced, no call
invoked twice. The broker is the test's own (``PrivateBroker``), so no other test feels it.
"""

from __future__ import annotations

import os
import re
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from little.commands import CommandPublisher, StartRun
from tests.integration.coordinator_support import (
    TURNS,
    RunsWatcher,
    invocations,
    make_topics,
    spawn_coordinator,
    wait_ready,
    wait_until,
)
from tests.kafka_broker import PrivateBroker

pytestmark = pytest.mark.kafka

PARTITIONS = 3
RUNS = 12
STALL_SECONDS = 1.0


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[PrivateBroker]:
    own = PrivateBroker(tmp_path / "broker")
    own.start()
    try:
        yield own
    finally:
        with_pid = (own.data_dir / "broker.pid").exists()
        if with_pid:
            os.kill(own.pid, signal.SIGCONT)  # never leave it stopped
        own.stop()


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.MULTILINE)
    assert match, f"{name} not in /metrics"
    return float(match.group(1))


def test_a_broker_stall_shows_in_readiness_and_metrics_and_runs_carry_on(
    broker: PrivateBroker, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:8]
    topics = make_topics(broker.bootstrap, tag, PARTITIONS)
    coordinator = spawn_coordinator(
        f"stall-{tag}",
        bootstrap=broker.bootstrap,
        topics=topics,
        group=f"stall-{tag}",
        workdir=tmp_path,
        # the stall must not outlast the group session or the leases: those are other faults
        session_timeout_ms=45_000,
        lease_seconds=60.0,
        extra_env={"LITTLE_APPEND_STALL_SECONDS": str(STALL_SECONDS)},
    )
    watcher = RunsWatcher(broker.bootstrap, topics["runs"])
    publisher = CommandPublisher(broker.bootstrap, topic=topics["commands"])
    run_ids = [f"stall-{tag}-{i}" for i in range(RUNS)]
    try:
        wait_ready([coordinator], PARTITIONS)
        # model turns of 0.4 s: every run is mid-session when the broker stops
        publisher.send([StartRun.of(r, "coordinator.chat", {"latency": 0.4}) for r in run_ids])
        watcher.wait(
            lambda w: all(w.state(r).status == "running" for r in run_ids),
            60,
            "every run to have started",
        )
        status, ready = coordinator.get("/readyz")
        assert status == 200
        assert ready["log"]["stalled"] is False

        os.kill(broker.pid, signal.SIGSTOP)
        try:

            def stalled() -> bool:
                status, body = coordinator.get("/readyz")
                return status == 503 and body["log"]["stalled"] is True

            wait_until(stalled, 30, "/readyz to report the stalled log")
            status, health = coordinator.get("/healthz")
            assert status == 200
            assert health["status"] == "degraded"
            assert health["log"]["appends_waiting"] > 0
            _, metrics = coordinator.get("/metrics")
            assert metric(metrics, "little_coordinator_oldest_append_seconds") > STALL_SECONDS
            assert metric(metrics, "little_coordinator_appends_in_flight") > 0
            assert coordinator.proc.poll() is None
            wait_until(lambda: bool(coordinator.log_events("log_stalled")), 10, "log_stalled")
        finally:
            os.kill(broker.pid, signal.SIGCONT)

        watcher.wait(
            lambda w: all(w.state(r).status == "completed" for r in run_ids),
            90,
            "every run to complete after the broker came back",
        )
        wait_until(lambda: coordinator.get("/readyz")[0] == 200, 30, "/readyz to recover")
        for run_id in run_ids:
            state = watcher.state(run_id)
            assert state.accepted_claims == 1, run_id  # the execution it was in finished it
            assert state.fenced_events == 0, run_id
            assert invocations(tmp_path / "calls", run_id) == dict.fromkeys(range(1, TURNS + 1), 1)
        wait_until(lambda: bool(coordinator.log_events("log_recovered")), 10, "log_recovered")
    finally:
        coordinator.stop()
        publisher.close()
        watcher.close()
