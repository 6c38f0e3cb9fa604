"""The resume coordinator on a real broker: commands, cancellation, leases, SIGTERM, the CLI.

One coordinator process (the Dockerfile's command) serves the module, on fresh topics and its
own group, with a short lease (1.5 s) so stalls are found quickly. The SIGTERM test runs two
coordinators one after the other on topics of its own.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from little.commands import CancelRun, CommandPublisher, StartRun
from little.events import (
    ModelCalled,
    ModelResponded,
    RunClaimed,
    RunCompleted,
    RunParked,
    RunStarted,
    StepStarted,
    Usage,
)
from little.log import partition_for
from little.log.kafka import KafkaCursorStore
from tests.cli import little_cli
from tests.integration.coordinator_support import (
    OUTSIDE_WRITER,
    TURNS,
    CoordinatorProcess,
    RunsWatcher,
    accepted,
    claims,
    invocations,
    make_topics,
    metric_value,
    open_world,
    spawn_coordinator,
    spawn_writer,
    wait_ready,
    wait_until,
)

pytestmark = pytest.mark.kafka

PARTITIONS = 4
LEASE = 1.5


class Solo:
    def __init__(self, bootstrap: str, topics: dict[str, str], workdir: Path) -> None:
        self.bootstrap = bootstrap
        self.topics = topics
        self.workdir = workdir
        self.calls = workdir / "calls"
        self.coordinator: CoordinatorProcess | None = None
        self.watcher = RunsWatcher(bootstrap, topics["runs"])
        self.publisher = CommandPublisher(bootstrap, topic=topics["commands"])

    @property
    def name(self) -> str:
        assert self.coordinator is not None
        return self.coordinator.name

    def send(self, *commands: StartRun | CancelRun) -> None:
        self.publisher.send(list(commands))

    def events(self, run_id: str) -> list[object]:
        return [e.event for e in self.watcher.runs.get(run_id, [])]

    def wait_status(self, run_id: str, status: str, timeout: float = 30) -> None:
        self.watcher.wait(lambda w: w.status(run_id) == status, timeout, f"{run_id} {status}")


@pytest.fixture(scope="module")
def solo(kafka_bootstrap_servers: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Solo]:
    workdir = tmp_path_factory.mktemp("solo")
    tag = uuid.uuid4().hex[:10]
    topics = make_topics(kafka_bootstrap_servers, tag, PARTITIONS)
    env = Solo(kafka_bootstrap_servers, topics, workdir)
    env.coordinator = spawn_coordinator(
        f"solo-{tag}",
        bootstrap=kafka_bootstrap_servers,
        topics=topics,
        group=f"solo-{tag}",
        workdir=workdir,
        lease_seconds=LEASE,
    )
    try:
        wait_ready([env.coordinator], PARTITIONS)
        yield env
    finally:
        env.coordinator.stop()
        env.publisher.close()
        env.watcher.close()


def turn_usages(events: list[object]) -> list[Usage]:
    return [e.usage for e in events if isinstance(e, ModelResponded)]


def test_start_run_completes_and_is_healthy(solo: Solo, unique: str) -> None:
    run_id = f"start-{unique}"
    solo.send(StartRun.of(run_id, "coordinator.chat", {"latency": 0.05}))
    solo.wait_status(run_id, "completed")
    assert solo.watcher.state(run_id).accepted_claims == 1
    assert invocations(solo.calls, run_id) == dict.fromkeys(range(1, TURNS + 1), 1)
    assert solo.coordinator is not None
    assert solo.coordinator.get("/healthz")[0] == 200
    status, metrics = solo.coordinator.get("/metrics")
    assert status == 200
    assert 'little_coordinator_executions_total{reason="start"}' in metrics
    # the run's calls, counted from the runs topic by the coordinator's tail, which may be a
    # moment behind the watcher (the module's other runs may add to them)
    coordinator = solo.coordinator
    wanted = sum(u.output_tokens for u in turn_usages(solo.events(run_id)))

    def counted() -> bool:
        text = coordinator.get("/metrics")[1]
        try:
            return (
                metric_value(text, "little_coordinator_calls_total", kind="model") >= TURNS
                and metric_value(text, "little_coordinator_calls_total", kind="tool") >= 1
                and metric_value(text, "little_coordinator_tokens_total", kind="output") >= wanted
            )
        except AssertionError:  # not counted yet: no sample
            return False

    wait_until(counted, 30, "the run's calls in /metrics")


def test_start_run_with_replay_from_reuses_the_recorded_calls(solo: Solo, unique: str) -> None:
    """``little submit --replay-from``: a StartRun naming a recorded run is executed as a
    replay of it; the unchanged stages are answered from the record, only the edited one
    calls its model."""
    from little.events import AgentCallSettled, ModelCalled
    from little.runtime import run
    from tests.little.runtime import replay_workflows as rw

    source = f"src-{unique}"
    with open_world(solo.bootstrap, solo.topics, solo.workdir / "data" / "artifacts") as world:
        recorded = asyncio.run(run(world, rw.version(f"coord-{unique}"), "Kafka", run_id=source))
    assert recorded.status == "completed"
    replay = f"replay-{unique}"
    solo.send(StartRun.of(replay, rw.NAME, "Kafka", replay_from=source))
    solo.wait_status(replay, "completed")
    events = solo.events(replay)
    marks = [
        (e.ordinal, e.replayed, e.miss_reason) for e in events if isinstance(e, AgentCallSettled)
    ]
    assert marks == [(0, True, None), (1, True, None), (2, False, "key-mismatch")]
    assert [e.session_id for e in events if isinstance(e, ModelCalled)] == ["write#write"]
    assert solo.watcher.state(replay).replay_source_run_id == source


def test_start_run_in_strict_replay_mode_refuses_a_changed_source(solo: Solo, unique: str) -> None:
    """``little submit --replay-from R --replay-mode strict``: the coordinator's version of
    the workflow is not the one R recorded, so reuse is refused (``source-changed``) and the
    run executes fresh, every call of it."""
    from little.events import AgentCallSettled, RunStarted
    from little.runtime import run
    from tests.little.runtime import replay_workflows as rw

    source = f"src-strict-{unique}"
    with open_world(solo.bootstrap, solo.topics, solo.workdir / "data" / "artifacts") as world:
        recorded = asyncio.run(run(world, rw.version(f"coord-{unique}"), "Kafka", run_id=source))
    assert recorded.status == "completed"
    replay = f"replay-strict-{unique}"
    solo.send(StartRun.of(replay, rw.NAME, "Kafka", replay_from=source, replay_mode="strict"))
    solo.wait_status(replay, "completed")
    events = solo.events(replay)
    (started,) = [e for e in events if isinstance(e, RunStarted)]
    assert (started.replay_mode, started.replay_refused_reason) == ("strict", "source-changed")
    assert [e.replayed for e in events if isinstance(e, AgentCallSettled)] == [False] * 3


def test_unknown_workflow_parks_that_run_not_the_service(solo: Solo, unique: str) -> None:
    """A deployment mistake (a workflow this coordinator lacks) parks the run, recorded with
    why, instead of failing it (issue 17: it used to write RunFailed, and the run was lost)."""
    bad, good = f"unknown-{unique}", f"after-unknown-{unique}"
    solo.send(
        StartRun.of(bad, "no.such.workflow", {"x": 1}),
        StartRun.of(good, "coordinator.chat", {"latency": 0.05}),
    )
    solo.watcher.wait(lambda w: w.state(bad).parked_reason is not None, 30, f"{bad} parked")
    solo.wait_status(good, "completed")
    state = solo.watcher.state(bad)
    assert state.status == "pending"  # not failed: a coordinator that has it can start it
    assert state.parked_reason is not None
    assert state.parked_reason.startswith("workflow 'no.such.workflow' is not registered")
    assert "coordinator.chat" in state.parked_reason  # names what is known
    assert solo.name in state.parked_reason  # and where
    (parked,) = [e for e in solo.events(bad) if isinstance(e, RunParked)]
    assert (parked.workflow, parked.workflow_version) == ("no.such.workflow", None)
    assert [c.owner for c in claims(solo.watcher.runs[bad])] == [solo.name]
    assert solo.coordinator is not None
    assert solo.coordinator.proc.poll() is None
    assert solo.coordinator.get("/healthz")[0] == 200
    status, metrics = solo.coordinator.get("/metrics")
    assert status == 200
    assert metric_value(metrics, "little_coordinator_runs_parked") >= 1  # others may park too
    assert bad in [e["run_id"] for e in solo.coordinator.log_events("run_parked")]

    # A StartRun naming an unknown workflow for a run that exists leaves that run alone.
    # (Checked once a later command of the same partition is done: a partition is in order.)
    marker = next(
        f"{good}-{i}"
        for i in range(1000)
        if partition_for(f"{good}-{i}", PARTITIONS) == partition_for(good, PARTITIONS)
    )
    solo.send(
        StartRun.of(good, "no.such.workflow", None),
        StartRun.of(marker, "coordinator.chat", {"latency": 0.05}),
    )
    solo.wait_status(marker, "completed")
    assert solo.watcher.status(good) == "completed"
    assert len(claims(solo.watcher.runs[good])) == 1


def test_a_run_parked_for_a_missing_workflow_is_taken_up_by_a_coordinator_that_has_it(
    kafka_bootstrap_servers: str, tmp_path: Path, unique: str
) -> None:
    """The fix for a forgotten LITTLE_WORKFLOWS is deploying it: the next coordinator reads the
    parked run's StartRun again (it stayed unsettled) and runs it."""
    from tests.integration import late_workflow

    topics = make_topics(kafka_bootstrap_servers, f"late{unique}", 2)
    watcher = RunsWatcher(kafka_bootstrap_servers, topics["runs"])
    publisher = CommandPublisher(kafka_bootstrap_servers, topic=topics["commands"])
    common = {
        "bootstrap": kafka_bootstrap_servers,
        "topics": topics,
        "group": f"late-{unique}",
        "workdir": tmp_path,
        "lease_seconds": LEASE,
    }
    first = spawn_coordinator(f"without-{unique}", **common)  # type: ignore[arg-type]
    second: CoordinatorProcess | None = None
    run_id = f"late-{unique}"
    try:
        wait_ready([first], 2)
        publisher.send([StartRun.of(run_id, late_workflow.NAME, {"who": "operator"})])
        watcher.wait(lambda w: w.state(run_id).parked_reason is not None, 30, "parked")
        first.stop()
        second = spawn_coordinator(
            f"with-{unique}",
            **common,  # type: ignore[arg-type]
            extra_env={"LITTLE_WORKFLOWS": "tests.integration.late_workflow"},
        )
        watcher.wait(lambda w: w.status(run_id) == "completed", 60, "completed")
        state = watcher.state(run_id)
        assert state.parked_reason is None
        assert state.output_json == '"hello operator"'
        assert [c.owner for c in claims(watcher.runs[run_id])] == [first.name, second.name]
    finally:
        for proc in (first, second):
            if proc is not None:
                proc.stop()
        publisher.close()
        watcher.close()


def test_a_new_group_starts_at_the_end_of_the_commands_topic(
    kafka_bootstrap_servers: str, tmp_path: Path, unique: str
) -> None:
    """A new coordinator group (or a renamed one) does not replay every retained command: it
    starts at the end, and commits that start at once, so a member that dies before settling
    anything leaves the next one where it began."""
    topics = make_topics(kafka_bootstrap_servers, f"fresh{unique}", 2)
    watcher = RunsWatcher(kafka_bootstrap_servers, topics["runs"])
    publisher = CommandPublisher(kafka_bootstrap_servers, topic=topics["commands"])
    old, new = f"old-{unique}", f"new-{unique}"
    publisher.send([StartRun.of(old, "coordinator.chat", {"latency": 0.01})])
    coordinator = spawn_coordinator(
        f"fresh-{unique}",
        bootstrap=kafka_bootstrap_servers,
        topics=topics,
        group=f"fresh-{unique}",
        workdir=tmp_path,
        lease_seconds=LEASE,
    )
    try:
        wait_ready([coordinator], 2)
        (start,) = coordinator.log_events("commands_start_at_end")
        assert sorted(start["offsets"].items()) == [
            (str(p), 1 if p == partition_for(old, 2) else 0) for p in (0, 1)
        ]
        publisher.send([StartRun.of(new, "coordinator.chat", {"latency": 0.01})])
        watcher.wait(lambda w: w.status(new) == "completed", 60, f"{new} completed")
        assert old not in watcher.runs  # sent before the group existed: not replayed
        received = [e["run_id"] for e in coordinator.log_events("command_received")]
        assert received == [new]
    finally:
        coordinator.stop()
        publisher.close()
        watcher.close()


def test_cancel_stops_a_running_run_at_its_next_event_boundary(solo: Solo, unique: str) -> None:
    run_id = f"cancel-running-{unique}"
    solo.send(StartRun.of(run_id, "coordinator.chat", {"latency": 1.0}))
    solo.watcher.wait(
        lambda w: any(isinstance(e.event, ModelCalled) for e in w.runs.get(run_id, [])),
        30,
        "the first model call",
    )
    solo.send(CancelRun(run_id=run_id, reason="user asked"))
    solo.wait_status(run_id, "cancelled")
    state = solo.watcher.state(run_id)
    assert state.error == "cancelled: user asked"
    assert state.accepted_claims == 1  # cancelled by its own writer, not by a new claim
    events = solo.events(run_id)
    # The call in flight when the cancel came was answered and recorded, then nothing new began.
    assert [type(e) for e in events[-3:]][:2] == [ModelCalled, ModelResponded]
    assert sum(isinstance(e, ModelCalled) for e in events) == 1
    assert invocations(solo.calls, run_id) == {1: 1}


def test_cancel_claims_and_cancels_a_run_nobody_executes(solo: Solo, unique: str) -> None:
    run_id = f"cancel-idle-{unique}"
    with open_world(solo.bootstrap, solo.topics, solo.workdir / "data" / "artifacts") as world:
        # A writer claimed and started the run, then vanished before doing anything.
        world.append([RunClaimed(run_id=run_id, epoch=1, owner="vanished", observed_seq=-1)])
        world.append(
            [
                RunStarted(
                    run_id=run_id,
                    seq=0,
                    epoch=1,
                    workflow="coordinator.chat",
                    workflow_version="1",
                    input_json='{"latency":0.05}',
                )
            ]
        )
    solo.send(CancelRun(run_id=run_id, reason="abandoned"))
    solo.wait_status(run_id, "cancelled")
    events = solo.events(run_id)
    assert [c.owner for c in claims(solo.watcher.runs[run_id])] == ["vanished", solo.name]
    assert not any(isinstance(e, StepStarted) for e in events)  # never executed, only cancelled
    assert invocations(solo.calls, run_id) == {}


def test_a_stalled_writer_is_fenced_and_its_run_resumed(solo: Solo, unique: str) -> None:
    run_id = f"stalled-{unique}"
    writer = spawn_writer(
        run_id, bootstrap=solo.bootstrap, topics=solo.topics, workdir=solo.workdir, latency=3.0
    )
    try:
        solo.watcher.wait(
            lambda w: any(isinstance(e.event, ModelCalled) for e in w.runs.get(run_id, [])),
            30,
            "the outside writer's first model call",
        )
        writer.send_signal(signal.SIGSTOP)  # hung mid-call: no event within the lease
        stopped_at = time.time()
        solo.wait_status(run_id, "completed", timeout=30)
        run_claims = claims(solo.watcher.runs[run_id])
        assert [(c.owner, c.epoch) for c in run_claims] == [(OUTSIDE_WRITER, 1), (solo.name, 2)]
        assert run_claims[1].occurred_at.timestamp() - stopped_at >= LEASE - 0.2
        assert solo.coordinator is not None
        assert any(e.get("run_id") == run_id for e in solo.coordinator.log_events("run_stalled"))

        writer.send_signal(signal.SIGCONT)  # the zombie wakes up and carries on writing
        assert writer.wait(timeout=60) == 0
    finally:
        if writer.poll() is None:
            writer.kill()
    solo.watcher.poll(1.0)
    events = solo.watcher.runs[run_id]
    state = solo.watcher.state(run_id)
    assert state.status == "completed"
    assert state.fenced_events > 0  # the zombie's events are in the log, and ignored
    completions = [e for e in accepted(events) if isinstance(e, RunCompleted)]
    assert [c.epoch for c in completions] == [2]
    assert any(isinstance(e.event, RunCompleted) and e.event.epoch == 1 for e in events)


def test_a_long_model_call_does_not_look_stalled(solo: Solo, unique: str) -> None:
    run_id = f"long-call-{unique}"
    solo.send(StartRun.of(run_id, "coordinator.chat", {"latency": 2 * LEASE}))
    solo.wait_status(run_id, "completed", timeout=60)
    assert [c.owner for c in claims(solo.watcher.runs[run_id])] == [solo.name]
    assert invocations(solo.calls, run_id) == dict.fromkeys(range(1, TURNS + 1), 1)
    assert solo.coordinator is not None
    assert not any(e.get("run_id") == run_id for e in solo.coordinator.log_events("run_stalled"))


def test_cli_submit_and_cancel(solo: Solo, unique: str) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "LITTLE_KAFKA_BOOTSTRAP": solo.bootstrap,
        "LITTLE_COMMANDS_TOPIC": solo.topics["commands"],
        "LITTLE_RUNS_TOPIC": solo.topics["runs"],  # cancel checks the run is live first
        "LITTLE_RUNS_INDEX_TOPIC": solo.topics["index"],
        "LITTLE_SNAPSHOTS_TOPIC": solo.topics["snapshots"],
    }

    def little(*args: str) -> subprocess.CompletedProcess[str]:
        return little_cli(*args, env=env, timeout=60)

    submitted = little(
        "submit", "coordinator.chat", "--input", '{"latency": 0.05}', "--run-id", f"cli-{unique}"
    )
    assert submitted.returncode == 0, submitted.stderr
    assert submitted.stdout.strip() == f"cli-{unique}"
    solo.wait_status(f"cli-{unique}", "completed")

    generated = little("submit", "coordinator.chat", "--input", '{"latency": 1.0}')
    assert generated.returncode == 0, generated.stderr
    run_id = generated.stdout.strip()
    assert run_id.startswith("run_")
    solo.watcher.wait(
        lambda w: any(isinstance(e.event, ModelCalled) for e in w.runs.get(run_id, [])),
        30,
        "the first model call",
    )
    cancelled = little("cancel", run_id, "--reason", "from the cli")
    assert cancelled.returncode == 0, cancelled.stderr
    solo.wait_status(run_id, "cancelled")
    assert solo.watcher.state(run_id).error == "cancelled: from the cli"


def test_cli_commands_say_whether_they_worked(solo: Solo, unique: str) -> None:
    """resume and cancel refuse a run that does not exist or has ended (naming where they
    looked) instead of sending a command the coordinator would drop; submit --wait waits for
    the run to be started and says by whom, or why not."""
    env = {
        "PATH": "/usr/bin:/bin",
        "LITTLE_KAFKA_BOOTSTRAP": solo.bootstrap,
        "LITTLE_COMMANDS_TOPIC": solo.topics["commands"],
        "LITTLE_RUNS_TOPIC": solo.topics["runs"],
        "LITTLE_RUNS_INDEX_TOPIC": solo.topics["index"],
        "LITTLE_SNAPSHOTS_TOPIC": solo.topics["snapshots"],
    }

    def little(*args: str) -> subprocess.CompletedProcess[str]:
        return little_cli(*args, env=env, timeout=90)

    missing = little("resume", f"nobody-{unique}")
    assert missing.returncode == 1
    assert missing.stderr == (
        f"error: run nobody-{unique} has no events in kafka:{solo.bootstrap} topic "
        f"{solo.topics['runs']}: nothing to resume\n"
    )
    waited = little(
        "submit", "coordinator.chat", "--input", '{"latency": 0.05}', "--run-id", f"w-{unique}",
        "--wait",
    )  # fmt: skip
    assert waited.returncode == 0, waited.stderr
    lines = waited.stdout.splitlines()
    assert lines[0] == f"w-{unique}"
    assert lines[1].startswith(f"w-{unique}: ")
    assert f"(claimed by {solo.name})" in lines[1] or lines[1] == f"w-{unique}: completed"
    solo.wait_status(f"w-{unique}", "completed")
    ended = little("cancel", f"w-{unique}")
    assert ended.returncode == 1
    assert "has already ended (completed)" in ended.stderr
    assert "nothing to cancel" in ended.stderr
    parked = little("submit", "no.such.workflow", "--run-id", f"pw-{unique}", "--wait")
    assert parked.returncode == 1
    assert parked.stderr.startswith(
        f"error: run pw-{unique} is parked: workflow 'no.such.workflow' is not registered"
    )


def test_sigterm_hands_runs_over_at_an_event_boundary(
    kafka_bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    """SIGTERM: in-flight calls finish and are recorded, runs stop, the process exits 0; the
    next coordinator resumes every run without invoking any model turn a second time."""
    bootstrap = kafka_bootstrap_servers
    topics = make_topics(bootstrap, unique, PARTITIONS)
    group = f"handover-{unique}"

    def coordinator(name: str) -> CoordinatorProcess:
        return spawn_coordinator(
            f"{name}-{unique}",
            bootstrap=bootstrap,
            topics=topics,
            group=group,
            workdir=tmp_path,
            lease_seconds=30.0,
        )

    first = coordinator("first")
    second: CoordinatorProcess | None = None
    watcher = RunsWatcher(bootstrap, topics["runs"])
    try:
        wait_ready([first], PARTITIONS)
        run_ids = [f"handover-{unique}-{i}" for i in range(6)]
        with CommandPublisher(bootstrap, topic=topics["commands"]) as publisher:
            sent = publisher.send(
                [StartRun.of(r, "coordinator.chat", {"latency": 0.8}) for r in run_ids]
            )
        watcher.wait(
            lambda w: all(
                any(isinstance(e.event, ModelCalled) for e in w.runs.get(r, [])) for r in run_ids
            ),
            30,
            "every run in a model call",
        )
        first.signal(signal.SIGTERM)
        assert first.proc.wait(timeout=30) == 0, first.logs()[-3000:]
        watcher.poll(0.5)
        assert all(watcher.status(r) == "running" for r in run_ids)
        for r in run_ids:  # every call that was in flight got its answer recorded
            events = [e.event for e in watcher.runs[r]]
            called = {e.turn for e in events if isinstance(e, ModelCalled)}
            answered = {e.turn for e in events if isinstance(e, ModelResponded)}
            assert called == answered, (r, called, answered)
        released = first.log_events("partitions_released")
        assert sum(e["stopped_runs"] for e in released) == len(run_ids)
        # Every StartRun was committed: each run was claimed, started and snapshotted, so the
        # next owner finds it through the snapshots topic, not through the command again.
        ends: dict[int, int] = {}
        for position in sent:
            ends[position.partition] = max(ends.get(position.partition, 0), position.offset + 1)
        committed = KafkaCursorStore(bootstrap, topic=topics["commands"]).committed(group)
        assert {p: committed.get(p) for p in ends} == ends

        second = coordinator("second")
        watcher.wait(lambda w: all(w.status(r) == "completed" for r in run_ids), 60, "resumes")
        for r in run_ids:
            assert [c.owner for c in claims(watcher.runs[r])] == [first.name, second.name]
            assert invocations(tmp_path / "calls", r) == dict.fromkeys(range(1, TURNS + 1), 1)
        second.signal(signal.SIGTERM)
        assert second.proc.wait(timeout=30) == 0
    finally:
        first.stop()
        if second is not None:
            second.stop()
        watcher.close()


def test_the_coordinator_exits_1_with_one_line_on_bad_settings(tmp_path: Path) -> None:
    from tests.integration.coordinator_support import dockerfile_command

    command = Path(sys.executable).parent / dockerfile_command()[0]
    out = subprocess.run(
        [str(command)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "LITTLE_WORKFLOWS": "no_such_module_here"},
        cwd=tmp_path,
    )
    assert out.returncode == 1
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, out.stderr
    assert "coordinator_failed" in lines[0]
    assert "no_such_module_here" in lines[0]
