"""Trace context across processes on a real broker: ``little submit`` sends a StartRun whose
record carries the W3C ``traceparent`` of its span, and the resume coordinator (a real
``little-resume-coordinator`` process) executes the run as a child of that span; both export
to one OTLP/HTTP receiver on 127.0.0.1."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path

import pytest

from little.events import ModelCalled
from little.log import partition_for
from tests.cli import little_cli
from tests.integration.coordinator_support import (
    TURNS,
    RunsWatcher,
    make_topics,
    open_world,
    spawn_coordinator,
    wait_ready,
)
from tests.little.tracing.receiver import Receiver

pytestmark = pytest.mark.kafka

PARTITIONS = 2


def _submit(
    bootstrap: str, topics: dict[str, str], run_id: str, input: str, otel: dict[str, str]
) -> None:
    submitted = little_cli(
        "submit",
        "coordinator.chat",
        "--input",
        input,
        "--run-id",
        run_id,
        env={
            "PATH": "/usr/bin:/bin",
            "LITTLE_KAFKA_BOOTSTRAP": bootstrap,
            "LITTLE_COMMANDS_TOPIC": topics["commands"],
            **otel,
            "OTEL_SERVICE_NAME": "cli-under-test",
        },
        timeout=60,
    )
    assert submitted.returncode == 0, submitted.stderr


def test_the_coordinator_executes_a_submitted_run_in_the_trace_of_its_start_run(
    kafka_bootstrap_servers: str, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:10]
    topics = make_topics(kafka_bootstrap_servers, tag, PARTITIONS)
    run_id = f"traced-{tag}"
    with Receiver() as receiver:
        otel = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "50",
        }
        coordinator = spawn_coordinator(
            f"traced-{tag}",
            bootstrap=kafka_bootstrap_servers,
            topics=topics,
            group=f"traced-{tag}",
            workdir=tmp_path,
            extra_env={**otel, "OTEL_SERVICE_NAME": "coordinator-under-test"},
        )
        watcher = RunsWatcher(kafka_bootstrap_servers, topics["runs"])
        try:
            wait_ready([coordinator], PARTITIONS)
            _submit(kafka_bootstrap_servers, topics, run_id, '{"latency": 0.01}', otel)
            watcher.wait(lambda w: w.status(run_id) == "completed", 60, f"{run_id} completed")
            (run_span,) = receiver.wait_for(
                lambda s: (
                    s.name == "little.run coordinator.chat"
                    and s.attributes.get("little.run_id") == run_id
                )
            )
            # the CLI exported its span when it exited
            (submit,) = receiver.wait_for(lambda s: s.name == "little.submit coordinator.chat")
            receiver.wait_for(
                lambda s: s.trace_id == run_span.trace_id and s.name == "little.step converse"
            )
            spans = [s for s in receiver.received() if s.trace_id == run_span.trace_id]
            with open_world(kafka_bootstrap_servers, topics, tmp_path / "artifacts") as world:
                started = next(
                    r
                    for r in world.log.read_run(run_id)
                    if r.header("little.type") == b"RunStarted"
                )
        finally:
            coordinator.stop()
            watcher.close()

    assert submit.resource["service.name"] == "cli-under-test"
    assert submit["little.run_id"] == run_id
    assert run_span.resource["service.name"] == "coordinator-under-test"
    assert run_span.trace_id == submit.trace_id
    assert run_span.parent_span_id == submit.span_id
    assert run_span["little.resumed"] is False
    assert run_span["little.status"] == "completed"
    traceparent = (started.header("traceparent") or b"").decode()
    assert traceparent.split("-")[1:3] == [run_span.trace_id, run_span.span_id]
    chats = [s for s in spans if s.name == "chat gpt-4o-mini"]
    assert sorted(s["little.turn"] for s in chats) == list(range(1, TURNS + 1))
    assert all(s["little.served_from_log"] is False for s in chats)
    assert all(s["gen_ai.usage.input_tokens"] > 0 for s in chats)
    assert {s.name for s in spans} >= {"little.step converse", "invoke_agent agent"}


def test_a_run_a_second_coordinator_takes_over_after_a_sigkill_continues_the_trace(
    kafka_bootstrap_servers: str, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:10]
    topics = make_topics(kafka_bootstrap_servers, tag, PARTITIONS)
    with Receiver() as receiver:
        otel = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "50",
        }
        a, b = (
            spawn_coordinator(
                f"{name}-{tag}",
                bootstrap=kafka_bootstrap_servers,
                topics=topics,
                group=f"traced-{tag}",
                workdir=tmp_path,
                lease_seconds=30.0,  # the group's rebalance hands the run over, not a lease
                session_timeout_ms=6000,
                extra_env={**otel, "OTEL_SERVICE_NAME": f"coordinator-{name}"},
            )
            for name in ("a", "b")
        )
        watcher = RunsWatcher(kafka_bootstrap_servers, topics["runs"])
        try:
            wait_ready([a, b], PARTITIONS)
            (owned,) = a.partitions()
            run_id = next(
                r
                for r in (f"failover-{tag}-{i}" for i in range(100))
                if partition_for(r, PARTITIONS) == owned
            )
            _submit(kafka_bootstrap_servers, topics, run_id, '{"latency": 3.0}', otel)
            # A answered turn 1 (its span exported) and is in turn 2, a 3 s model call: its
            # write-ahead record is in the log
            receiver.wait_for(
                lambda s: (
                    s.attributes.get("little.run_id") == run_id
                    and s.name == "chat gpt-4o-mini"
                    and s.attributes.get("little.turn") == 1
                ),
                timeout=60,
            )
            watcher.wait(
                lambda w: any(
                    isinstance(e.event, ModelCalled) and e.event.turn == 2
                    for e in w.runs.get(run_id, [])
                ),
                30,
                "turn 2's write-ahead record",
            )
            a.signal(signal.SIGKILL)
            a.proc.wait(timeout=10)
            watcher.wait(lambda w: w.status(run_id) == "completed", 90, f"{run_id} completed")
            (resumed,) = receiver.wait_for(
                lambda s: (
                    s.name == "little.run coordinator.chat"
                    and s.resource.get("service.name") == "coordinator-b"
                )
            )
            receiver.wait_for(
                lambda s: (
                    s.resource.get("service.name") == "coordinator-b"
                    and s.attributes.get("little.turn") == TURNS
                )
            )
            spans = receiver.received()
            with open_world(kafka_bootstrap_servers, topics, tmp_path / "artifacts") as world:
                started = next(
                    r
                    for r in world.log.read_run(run_id)
                    if r.header("little.type") == b"RunStarted"
                )
        finally:
            a.stop()
            b.stop()
            watcher.close()

    (submit,) = [s for s in spans if s.name == "little.submit coordinator.chat"]
    by_a = [s for s in spans if s.resource.get("service.name") == "coordinator-a"]
    by_b = [s for s in spans if s.resource.get("service.name") == "coordinator-b"]
    # A's execution, step and session spans died with A unfinished; its finished turn 1 and
    # tool call were exported, in the trace of the submit
    a_turn1 = next(s for s in by_a if s.attributes.get("little.turn") == 1)
    assert a_turn1.trace_id == submit.trace_id
    assert a_turn1["little.served_from_log"] is False
    assert not [s for s in by_a if s.name.startswith(("little.run", "little.step"))]
    # RunStarted, written by A, carries A's execution span: B's execution is its child
    _, trace_id, a_run_span, _ = (started.header("traceparent") or b"").decode().split("-")
    assert trace_id == submit.trace_id
    assert resumed.trace_id == submit.trace_id
    assert resumed.parent_span_id == a_run_span
    assert resumed["little.resumed"] is True
    assert resumed["little.epoch"] == 2
    assert resumed["little.status"] == "completed"
    turns = {s["little.turn"]: s for s in by_b if s.name == "chat gpt-4o-mini"}
    assert sorted(turns) == list(range(1, TURNS + 1))
    assert turns[1]["little.served_from_log"] is True
    assert turns[2]["little.served_from_log"] is False
    assert turns[2]["little.reinvoked"] is True
    # every span of the run's execution on B is in that trace (B's HTTP probes are not)
    runs = [s for s in by_b if s.attributes.get("little.run_id") == run_id]
    assert len(runs) >= 2 + 2 * TURNS
    assert [s.name for s in runs if s.trace_id != submit.trace_id] == []
