"""Trace context across processes on a real broker: ``little submit`` sends a StartRun whose
record carries the W3C ``traceparent`` of its span, and the resume coordinator (a real
``little-resume-coordinator`` process) executes the run as a child of that span; both export
to one OTLP/HTTP receiver on 127.0.0.1."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.cli import little_cli
from tests.integration.coordinator_support import (
    TURNS,
    RunsWatcher,
    make_topics,
    open_world,
    spawn_coordinator,
    wait_ready,
)
from tests.tracing.receiver import Receiver

pytestmark = pytest.mark.kafka

PARTITIONS = 2


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
            submitted = little_cli(
                "submit",
                "coordinator.chat",
                "--input",
                '{"latency": 0.01}',
                "--run-id",
                run_id,
                env={
                    "PATH": "/usr/bin:/bin",
                    "LITTLE_KAFKA_BOOTSTRAP": kafka_bootstrap_servers,
                    "LITTLE_COMMANDS_TOPIC": topics["commands"],
                    **otel,
                    "OTEL_SERVICE_NAME": "cli-under-test",
                },
                timeout=60,
            )
            assert submitted.returncode == 0, submitted.stderr
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
