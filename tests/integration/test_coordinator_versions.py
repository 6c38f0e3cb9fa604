"""Workflow versions through the resume coordinator on a real broker (issue 11 item 4): a
coordinator running the old code is SIGKILLed with a run in flight, and a coordinator running
another deploy takes the run over. A deploy that keeps the old version (``resume_only``)
resumes the run on it and starts new runs on the new one; a deploy that dropped it fails the
run with a clear ``RunFailed`` (one claim, no loop), or with ``LITTLE_MISSING_VERSION=park``
parks it for a coordinator that has the version."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from little.commands import CommandPublisher, StartRun
from little.events import ModelCalled, RunFailed, RunParked, RunStarted, StepCompleted
from little.log import partition_for
from tests.integration.coordinator_support import (
    CoordinatorProcess,
    RunsWatcher,
    claims,
    make_topics,
    metric_value,
    spawn_coordinator,
    wait_ready,
)
from tests.integration.versioned_flows import NAME

pytestmark = pytest.mark.kafka

PARTITIONS = 2
V1_OUTPUT = '"v1: kafka offsets / kafka brokers"'
V2_OUTPUT = '"v2: kafka brokers / kafka offsets"'


@dataclass
class Fleet:
    bootstrap: str
    topics: dict[str, str]
    workdir: Path
    group: str
    watcher: RunsWatcher
    publisher: CommandPublisher

    def coordinator(self, name: str, deploy: str, **env: str) -> CoordinatorProcess:
        proc = spawn_coordinator(
            name,
            bootstrap=self.bootstrap,
            topics=self.topics,
            group=self.group,
            workdir=self.workdir,
            lease_seconds=2.0,
            extra_env={"LITTLE_WORKFLOWS": f"tests.integration.{deploy}", **env},
        )
        wait_ready([proc], PARTITIONS)
        return proc

    def start(self, run_id: str) -> None:
        self.publisher.send([StartRun.of(run_id, NAME, {"topic": "kafka", "latency": 0.05})])

    def events(self, run_id: str) -> list[object]:
        return [e.event for e in self.watcher.runs.get(run_id, [])]

    def wait(self, run_id: str, what: str, done: type, timeout: float = 60) -> None:
        self.watcher.wait(
            lambda w: any(isinstance(e, done) for e in self.events(run_id)), timeout, what
        )

    def in_flight_on_old_code(self, run_id: str) -> CoordinatorProcess:
        """``run_id`` started by a coordinator of the old deploy, which is SIGKILLed while
        the run's second step waits for its model."""
        old = self.coordinator(f"old-{run_id}", "deploy_old", COORDINATOR_TEST_LATENCY="600")
        self.start(run_id)
        self.wait(run_id, f"{run_id}'s write step calling its model", ModelCalled)
        old.stop()  # SIGKILL
        (started,) = [e for e in self.events(run_id) if isinstance(e, RunStarted)]
        assert started.workflow_version == "1"
        assert [e.step_id for e in self.events(run_id) if isinstance(e, StepCompleted)] == [
            "research"
        ]
        return old

    def same_partition(self, run_id: str, tag: str) -> str:
        """A new run id in ``run_id``'s partition (its commands come after ``run_id``'s)."""
        return next(
            f"{tag}-{i}"
            for i in range(1000)
            if partition_for(f"{tag}-{i}", PARTITIONS) == partition_for(run_id, PARTITIONS)
        )


@pytest.fixture
def fleet(kafka_bootstrap_servers: str, tmp_path: Path, unique: str) -> Iterator[Fleet]:
    topics = make_topics(kafka_bootstrap_servers, f"ver{unique}", PARTITIONS)
    watcher = RunsWatcher(kafka_bootstrap_servers, topics["runs"])
    publisher = CommandPublisher(kafka_bootstrap_servers, topic=topics["commands"])
    try:
        yield Fleet(kafka_bootstrap_servers, topics, tmp_path, f"ver-{unique}", watcher, publisher)
    finally:
        publisher.close()
        watcher.close()


def sigterm(proc: CoordinatorProcess) -> None:
    proc.signal(signal.SIGTERM)  # leaves the group at once: the next member takes over
    assert proc.proc.wait(timeout=60) == 0, proc.logs()[-3000:]


def test_a_run_whose_version_is_gone_fails_with_a_clear_reason_and_no_loop(
    fleet: Fleet, unique: str
) -> None:
    run_id = f"gone-{unique}"
    old = fleet.in_flight_on_old_code(run_id)
    new = fleet.coordinator(f"v2only-{unique}", "deploy_v2_only")
    try:
        fleet.wait(run_id, f"{run_id} failed", RunFailed)
        state = fleet.watcher.state(run_id)
        assert state.status == "failed"
        assert state.error == (
            f"WorkflowVersionError: run {run_id} was started by workflow {NAME} v1, which is "
            f"not registered in resume coordinator {new.name} (registered versions: 2): the "
            f"code it started on is gone. Keep that version registered (@workflow({NAME!r}, "
            "version='1', resume_only=True)) until its runs end (LITTLE_MISSING_VERSION=park "
            "parks such runs instead)"
        )
        # no loop: a later command of the same partition is done, and the run was claimed
        # once by the old coordinator and once by the new one, which is healthy and runs v2
        after = fleet.same_partition(run_id, f"after-{unique}")
        fleet.start(after)
        fleet.watcher.wait(lambda w: w.status(after) == "completed", 60, f"{after} completed")
        assert fleet.watcher.state(after).output_json == V2_OUTPUT
        assert [c.owner for c in claims(fleet.watcher.runs[run_id])] == [old.name, new.name]
        assert fleet.watcher.status(run_id) == "failed"
        assert new.proc.poll() is None
        status, metrics = new.get("/metrics")
        assert status == 200
        assert metric_value(metrics, "little_coordinator_runs_failed_version_missing_total") == 1
        assert [e["run_id"] for e in new.log_events("run_failed")] == [run_id]
    finally:
        new.stop()


def test_parked_for_a_missing_version_then_resumed_on_it_by_the_deploy_that_keeps_it(
    fleet: Fleet, unique: str
) -> None:
    run_id = f"kept-{unique}"
    old = fleet.in_flight_on_old_code(run_id)
    parking = fleet.coordinator(f"park-{unique}", "deploy_v2_only", LITTLE_MISSING_VERSION="park")
    keeping: CoordinatorProcess | None = None
    try:
        fleet.wait(run_id, f"{run_id} parked", RunParked)
        state = fleet.watcher.state(run_id)
        assert state.status == "running"  # not failed: a coordinator with v1 can resume it
        assert state.parked_reason is not None
        assert state.parked_reason.startswith(
            f"run {run_id} was started by workflow {NAME} v1, which is not registered in "
            f"resume coordinator {parking.name} (registered versions: 2)"
        )
        assert state.parked_reason.endswith(
            "parked (LITTLE_MISSING_VERSION=park) for a coordinator that has it"
        )
        (parked,) = [e for e in fleet.events(run_id) if isinstance(e, RunParked)]
        assert (parked.workflow, parked.workflow_version) == (NAME, "1")
        sigterm(parking)

        # the deploy that keeps v1 beside v2: the run resumes on v1, a new run starts on v2
        keeping = fleet.coordinator(f"keep-{unique}", "deploy_new")
        fleet.watcher.wait(lambda w: w.status(run_id) == "completed", 60, f"{run_id} completed")
        state = fleet.watcher.state(run_id)
        assert (state.output_json, state.workflow_version) == (V1_OUTPUT, "1")
        assert [e.step_id for e in fleet.events(run_id) if isinstance(e, StepCompleted)] == [
            "research",
            "write",
        ]  # research was not run again; no rank step: the old path
        assert [c.owner for c in claims(fleet.watcher.runs[run_id])] == [
            old.name,
            parking.name,
            keeping.name,
        ]
        new_run = f"new-{unique}"
        fleet.start(new_run)
        fleet.watcher.wait(lambda w: w.status(new_run) == "completed", 60, f"{new_run} done")
        new_state = fleet.watcher.state(new_run)
        assert (new_state.output_json, new_state.workflow_version) == (V2_OUTPUT, "2")
    finally:
        parking.stop()
        if keeping is not None:
            keeping.stop()
