"""Broker loss, injected for real: the module's own broker is SIGKILLed in the middle of a run
and in the middle of a projection rebuild, then restarted on its data dir.

Checked from the log alone: the run completes, nothing acked is lost, nothing is duplicated
(seq contiguous, no event twice), the projector catches up to a clean fold. While the broker
is down, a writer logs one ``kafka_brokers_down`` line and waits (librdkafka retries up to
``delivery.timeout.ms``); no model or tool call starts, since the write-ahead record that
must come first cannot be acked. The shared broker is never touched.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from little.events import EventCodec, event_headers
from little.log import OutgoingRecord
from little.replay import fold_run
from little_services.projection import SqliteProjectionStore
from little_services.projector._service import EXIT_STALLED
from tests.faults.support import (
    OwnBroker,
    check_stream,
    child_env,
    lines_of,
    log_lines,
    result_of,
    spawn_runner,
    wait_until,
    world_of,
)
from tests.faults.workflows import CALLS_DIR
from tests.projection_runs import clean_fold, fresh_topics, run_events

pytestmark = pytest.mark.kafka

TURNS = 12
LATENCY = 0.3
OUTAGE = 3.0
"""Seconds the broker stays dead after a writer said so: the length of the injected fault."""


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnBroker]:
    own = OwnBroker(tmp_path_factory.mktemp("broker-loss") / "kafka")
    own.start()
    try:
        yield own
    finally:
        own.stop()


@pytest.fixture
def broker(own_broker: OwnBroker) -> OwnBroker:
    """The module's broker, up: a test that failed while its fault held it down leaves it
    dead, and the next test must not fail for that."""
    if not own_broker.jvm_pids():
        own_broker.start()
    return own_broker


def settings_for(broker: OwnBroker, tag: str, root: Path, **extra: str) -> dict[str, str]:
    return {
        **fresh_topics(broker.bootstrap, tag, partitions=3),
        "LITTLE_KAFKA_BOOTSTRAP": broker.bootstrap,
        "LITTLE_DATA_DIR": str(root / "data"),
        "LITTLE_ARTIFACTS_DIR": str(root / "artifacts"),
        "LITTLE_LOG_LEVEL": "info",
        **extra,
    }


def test_a_run_waits_out_a_killed_broker_and_completes_exactly_once(
    broker: OwnBroker, unique: str, tmp_path: Path
) -> None:
    settings = settings_for(
        broker,
        unique,
        tmp_path,
        # the bound of the wait: longer than this outage and the broker's restart
        LITTLE_KAFKA_CLIENT_CONFIG=json.dumps({"delivery.timeout.ms": "180000"}),
    )
    calls = tmp_path / "calls"
    model_log, tool_log = calls / f"r-{unique}.model.jsonl", calls / f"r-{unique}.tools.jsonl"
    stderr = tmp_path / "writer.log"
    run_id = f"r-{unique}"
    proc = spawn_runner(
        ["run", run_id, "faults.chatter", json.dumps({"turns": TURNS, "latency": LATENCY})],
        child_env(settings, **{CALLS_DIR: str(calls)}),
        stderr,
    )
    try:
        wait_until(lambda: lines_of(model_log) >= 3, 60, "the run's third model call")
        assert proc.poll() is None
        broker.kill()
        wait_until(
            lambda: bool(log_lines(stderr, "kafka_brokers_down")),
            30,
            "the down line",
            detail=lambda: stderr.read_text()[-3000:],
        )
        model_calls, tool_calls = lines_of(model_log), lines_of(tool_log)
        assert model_calls < TURNS, "the run ended before the broker died"
        time.sleep(OUTAGE)  # the fault: the broker stays dead this long
        assert proc.poll() is None, "the writer gave up inside its bound"
        assert (lines_of(model_log), lines_of(tool_log)) == (model_calls, tool_calls), (
            "a model or tool call started while its write-ahead record could not be acked"
        )
        broker.start()
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    log = stderr.read_text()
    assert proc.returncode == 0, log[-3000:]
    assert result_of(out)["status"] == "completed"
    assert len(log_lines(stderr, "kafka_brokers_down")) == 1, "one clear line per outage"
    assert log_lines(stderr, "kafka_brokers_back"), "no line said the brokers were back"
    # every call really ran once: the writer waited, nothing was redone
    assert lines_of(model_log) == TURNS
    assert lines_of(tool_log) == TURNS - 1

    with world_of(settings) as world:
        events = list(world.read_run(run_id))
        state, _, _ = fold_run(world, run_id, use_snapshot=False)
    check_stream(events)
    assert state.status == "completed"
    assert state.accepted_claims == 1
    (session,) = state.sessions
    assert (session.turn_count, session.tool_call_count) == (TURNS, TURNS - 1)


def test_past_its_bound_the_writer_stops_unsure_and_a_resume_completes_the_run(
    broker: OwnBroker, unique: str, tmp_path: Path
) -> None:
    settings = settings_for(broker, unique, tmp_path)
    calls = tmp_path / "calls"
    run_id = f"r-{unique}"
    model_log, tool_log = calls / f"{run_id}.model.jsonl", calls / f"{run_id}.tools.jsonl"
    stderr = tmp_path / "writer.log"
    short = child_env(
        settings,
        **{CALLS_DIR: str(calls)},
        LITTLE_KAFKA_CLIENT_CONFIG=json.dumps({"delivery.timeout.ms": "4000"}),
    )
    proc = spawn_runner(
        ["run", run_id, "faults.chatter", json.dumps({"turns": TURNS, "latency": LATENCY})],
        short,
        stderr,
    )
    try:
        wait_until(lambda: lines_of(model_log) >= 3, 60, "the run's third model call")
        broker.kill()
        wait_until(lambda: bool(log_lines(stderr, "kafka_brokers_down")), 30, "the down line")
        model_calls, tool_calls = lines_of(model_log), lines_of(tool_log)
        proc.wait(timeout=60)  # its bound (delivery.timeout.ms) runs out while the broker is dead
        assert (lines_of(model_log), lines_of(tool_log)) == (model_calls, tool_calls), (
            "a model or tool call started while its write-ahead record could not be acked"
        )
    finally:
        if proc.poll() is None:
            proc.kill()
    log = stderr.read_text()
    assert proc.returncode != 0, "the writer carried on past an append it could not settle"
    assert "AppendOutcomeUnknownError" in log, log[-3000:]
    assert len(log_lines(stderr, "kafka_brokers_down")) == 1

    broker.start()
    again = spawn_runner(["resume", run_id], child_env(settings, **{CALLS_DIR: str(calls)}), stderr)
    out, _ = again.communicate(timeout=240)
    assert again.returncode == 0, stderr.read_text()[-3000:]
    assert result_of(out)["status"] == "completed"

    with world_of(settings) as world:
        events = list(world.read_run(run_id))
        state, _, _ = fold_run(world, run_id, use_snapshot=False)
    check_stream(events)
    assert state.status == "completed"
    assert state.accepted_claims == 2
    (session,) = state.sessions
    assert (session.turn_count, session.tool_call_count) == (TURNS, TURNS - 1)
    # at most the one call whose answer the broker never acked was made again
    assert TURNS <= lines_of(model_log) <= TURNS + 1
    assert TURNS - 1 <= lines_of(tool_log) <= TURNS


RUNS, EVENTS = 1_500, 100
CATCH_UP = 300.0
PROJECTOR = (
    "import faulthandler, runpy, signal; faulthandler.register(signal.SIGUSR1, all_threads=True); "
    "runpy.run_module('little_services.projector', run_name='__main__')"
)
"""The projector service (``python -m little_services.projector``) that dumps its threads'
stacks on SIGUSR1, for a failure's report."""


@pytest.mark.timeout(600)
def test_the_projector_catches_up_after_the_broker_dies_mid_rebuild(
    broker: OwnBroker, unique: str, tmp_path: Path
) -> None:
    settings = settings_for(
        broker,
        unique,
        tmp_path,
        LITTLE_PRODUCER_PROFILE="throughput",
        LITTLE_SNAPSHOT_EVERY="50",
        LITTLE_PROJECTOR_BATCH="200",
        LITTLE_PROJECTOR_INSTANCE_ID=f"loss-{unique}",
        LITTLE_PROJECTOR_SESSION_TIMEOUT_MS="10000",
        LITTLE_PROJECTOR_STALL_SECONDS="30",  # the default 150 s would only slow the test
    )
    codec = EventCodec()
    with world_of(settings) as world:
        records = {
            f"run-{i:04d}": [
                OutgoingRecord(codec.encode(e), tuple(event_headers(e)))
                for e in run_events(f"run-{i:04d}", EVENTS)
            ]
            for i in range(RUNS)
        }
        for run_id, recs in records.items():
            world.log.append(run_id, recs)
        ends = world.log.end_offsets()
        assert sum(ends.values()) == RUNS * EVENTS
        expected = clean_fold(world)

    # the projector starts on a fresh group and store: it rebuilds the projection from offset 0
    group = f"little-projector-{unique}"
    stderr = tmp_path / "projector.log"
    port = _free_port()
    env = child_env(
        settings,
        LITTLE_PROJECTOR_GROUP=group,
        LITTLE_HTTP_PORT=str(port),
        LITTLE_HTTP_HOST="127.0.0.1",
    )

    def start() -> subprocess.Popen[bytes]:
        with stderr.open("ab") as err:
            return subprocess.Popen(
                [sys.executable, "-c", PROJECTOR], env=env, stdout=subprocess.DEVNULL, stderr=err
            )

    proc = start()
    restarts = 0
    try:
        with world_of(settings) as world:

            def committed() -> int:
                return sum(world.cursors.committed(group).values())

            wait_until(lambda: committed() > 0, 120, "the rebuild to commit something")
            at_kill = committed()
        broker.kill()
        assert at_kill < RUNS * EVENTS, "the rebuild was over before the broker died"
        wait_until(lambda: bool(log_lines(stderr, "kafka_brokers_down")), 30, "the down line")
        time.sleep(OUTAGE)  # the fault: the broker stays dead this long
        assert proc.poll() is None, "the projector exited while the broker was down"
        broker.start()
        with world_of(settings) as world:
            deadline = time.monotonic() + CATCH_UP
            while world.cursors.committed(group) != ends:
                if proc.poll() is not None:
                    # a supervisor's restart (Restart=on-failure), for the one exit that asks
                    # for it: a transaction stuck in librdkafka (ProjectorStalledError)
                    assert proc.returncode == EXIT_STALLED, stderr.read_text()[-4000:]
                    restarts += 1
                    assert restarts <= 2, stderr.read_text()[-4000:]
                    proc = start()
                if time.monotonic() > deadline:
                    proc.send_signal(signal.SIGUSR1)  # its threads' stacks, into its log
                    time.sleep(1)
                    raise AssertionError(stderr.read_text()[-12000:])
                time.sleep(0.2)
        wait_until(lambda: _serves(port) or proc.poll() is not None, 60, "the projector's HTTP")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, stderr.read_text()[-4000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert len(log_lines(stderr, "kafka_brokers_down")) == 1
    assert len(log_lines(stderr, "projector_stalled")) == restarts
    with SqliteProjectionStore(tmp_path / "data" / "projection.sqlite3") as store:
        held = store.get_many(expected)
        assert {r: rec.state for r, rec in held.items()} == expected
        assert store.count_by_status() == {"completed": RUNS}
    print(
        f"broker killed with {at_kill} of {RUNS * EVENTS} records committed; "
        f"projector restarts after a stuck transaction: {restarts}"
    )


def _serves(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
