"""Helpers for the resume coordinator's tests and benchmark: a small workflow, fresh topics,
coordinator processes (the Dockerfile's command), a watcher of the runs topic, and counting.

``chat`` is a three-turn agent session on a ScriptedModel (tool call, tool call, answer) whose
latency comes from the run's input. Every real model invocation is appended to
``$COORDINATOR_TEST_CALLS_DIR/<run id>.jsonl``, so invocations can be counted per (run, turn)
across processes. ``python -m tests.integration.coordinator_support write ...`` executes one run
outside any coordinator (a writer the tests can SIGSTOP).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from little._world import World
from little.artifacts import ArtifactStore
from little.events import (
    Event,
    EventCodec,
    LoggedEvent,
    ModelResponded,
    RunClaimed,
    Usage,
)
from little.harness import ModelResponse, ScriptedModel, ToolCallRequest, ToolContext, tool
from little.harness._model import count_invocations
from little.log import load_topic_specs
from little.log.kafka import KafkaCursorStore, KafkaEventLog, KafkaSnapshotStore, apply_topics
from little.replay import MaterializedRunState, materialize_run_state_from_events
from little.runtime import StepContext, WorkflowContext, workflow

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "services" / "resume_coordinator" / "Dockerfile"
CALLS_DIR = "COORDINATOR_TEST_CALLS_DIR"
LATENCY = "COORDINATOR_TEST_LATENCY"
"""Overrides the model latency of the input in one process (a slow writer to SIGSTOP)."""
WORKFLOWS = "tests.integration.coordinator_support"
COORDINATOR_WORKFLOWS = f"{WORKFLOWS},tests.little.runtime.replay_edited"
"""What the coordinators under test run: this module's workflows and the edited replay pipeline."""
TOPIC_KEYS = {
    "runs": "little.runs.v1",
    "commands": "little.commands.v1",
    "snapshots": "little.snapshots.v1",
    "index": "little.runs.index.v1",
    "dlq": "little.runs.dlq.v1",
}

# -- the workflow --------------------------------------------------------------------------

SCRIPT = (
    ModelResponse(
        tool_calls=(ToolCallRequest("c1", "lookup", {"q": "partitions"}),),
        usage=Usage(input_tokens=100, output_tokens=10),
        finish_reason="tool_calls",
    ),
    ModelResponse(
        tool_calls=(ToolCallRequest("c2", "lookup", {"q": "offsets"}),),
        usage=Usage(input_tokens=150, output_tokens=10),
        finish_reason="tool_calls",
    ),
    ModelResponse(
        content="Partitions order records; offsets track consumers.",
        usage=Usage(input_tokens=200, output_tokens=30),
        finish_reason="stop",
    ),
)
TURNS = len(SCRIPT)


@tool(
    description="Look something up.",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}},
)
def lookup(args: dict[str, Any], ctx: ToolContext) -> str:
    return f"notes on {args['q']}"


def invocation_log(run_id: str) -> Path | None:
    base = os.environ.get(CALLS_DIR)
    if not base:
        return None
    Path(base).mkdir(parents=True, exist_ok=True)
    return Path(base) / f"{run_id}.jsonl"


@workflow("coordinator.chat", version="1")
async def chat(ctx: WorkflowContext, input: dict[str, Any]) -> dict[str, Any]:
    async def converse(step: StepContext) -> str | None:
        model = ScriptedModel(
            SCRIPT,
            provider="openai",
            name="gpt-4o-mini",
            latency=float(os.environ.get(LATENCY) or input.get("latency", 0.1)),
            invocation_log=invocation_log(step.run_id),
        )
        async with step.session("agent", model=model, tools=[lookup]) as agent:
            return await agent.run(str(input.get("question", "How does Kafka work?")))

    answer = await ctx.step("converse", converse)
    return {"answer": answer}


@workflow("coordinator.exchanges", version="1")
async def exchanges(ctx: WorkflowContext, input: dict[str, Any]) -> int:
    """One agent session of ``k`` single-turn exchanges with a ``latency`` s model (the
    coordinator's throughput benchmark)."""

    async def converse(step: StepContext) -> int:
        k = int(input.get("k", 20))
        usage = Usage(input_tokens=10, output_tokens=5)
        model = ScriptedModel(
            [ModelResponse(content="ok", usage=usage, finish_reason="stop")] * k,
            latency=float(input.get("latency", 0.01)),
        )
        async with step.session("agent", model=model) as agent:
            for i in range(k):
                await agent.run(f"question {i}", max_turns=1)
        return k

    return int(await ctx.step("converse", converse))


def invocations(calls_dir: Path, run_id: str) -> dict[int, int]:
    """Per turn, how many times the model was really invoked for ``run_id``."""
    return count_invocations(calls_dir / f"{run_id}.jsonl")


# -- topics and worlds ---------------------------------------------------------------------


def make_topics(bootstrap: str, tag: str, partitions: int = 12) -> dict[str, str]:
    """Fresh topics for one test (the bundled specs under new names), ready to use."""
    specs = load_topic_specs(partitions=partitions, replication_factor=1, min_insync_replicas=1)
    names = {key: f"test.{tag}.{topic}" for key, topic in TOPIC_KEYS.items()}
    apply_topics(bootstrap, [replace(specs[t], name=names[k]) for k, t in TOPIC_KEYS.items()])
    return names


def open_world(bootstrap: str, topics: dict[str, str], artifacts: Path) -> World:
    return World(
        log=KafkaEventLog(bootstrap, topic=topics["runs"], index_topic=topics["index"]),
        cursors=KafkaCursorStore(bootstrap, topic=topics["runs"]),
        artifacts=ArtifactStore(artifacts),
        codec=EventCodec(topic=topics["runs"]),
        snapshots=KafkaSnapshotStore(bootstrap, topic=topics["snapshots"]),
    )


def topic_env(bootstrap: str, topics: dict[str, str]) -> dict[str, str]:
    return {
        "LITTLE_KAFKA_BOOTSTRAP": bootstrap,
        "LITTLE_RUNS_TOPIC": topics["runs"],
        "LITTLE_COMMANDS_TOPIC": topics["commands"],
        "LITTLE_SNAPSHOTS_TOPIC": topics["snapshots"],
        "LITTLE_RUNS_INDEX_TOPIC": topics["index"],
        "LITTLE_DLQ_TOPIC": topics["dlq"],
    }


# -- coordinator processes -----------------------------------------------------------------


def dockerfile_command() -> list[str]:
    """The coordinator's command, as the Dockerfile's CMD (exec form) declares it."""
    text = DOCKERFILE.read_text()
    match = re.search(r"^CMD\s+(\[.*\])\s*$", text, re.MULTILINE)
    assert match, f"{DOCKERFILE} has no exec-form CMD"
    command: list[str] = json.loads(match.group(1))
    return command


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class CoordinatorProcess:
    """A real ``little-resume-coordinator`` process."""

    name: str
    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def get(self, path: str, timeout: float = 2.0) -> tuple[int, Any]:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.port}{path}", timeout=timeout
            ) as r:
                return r.status, _body(r.read())
        except urllib.error.HTTPError as exc:
            return exc.code, _body(exc.read())

    def readyz(self) -> dict[str, Any] | None:
        try:
            status, body = self.get("/readyz")
        except OSError:
            return None
        return body if status == 200 and isinstance(body, dict) else None

    def partitions(self) -> list[int]:
        ready = self.readyz()
        return list(ready["partitions"]) if ready else []

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_events(self, event: str) -> list[dict[str, Any]]:
        out = []
        for line in self.logs().splitlines():
            if f'"{event}"' in line:
                with contextlib.suppress(ValueError):
                    out.append(json.loads(line))
        return out

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


def _body(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


def pythonpath() -> str:
    """The repository, then the PYTHONPATH of the tests: a child process runs the code under
    test (the one these tests import), not whatever the interpreter has installed."""
    return os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))


def spawn_coordinator(
    name: str,
    *,
    bootstrap: str,
    topics: dict[str, str],
    group: str,
    workdir: Path,
    lease_seconds: float = 5.0,
    session_timeout_ms: int = 6000,
    stop_grace_seconds: float = 10.0,
    extra_env: dict[str, str] | None = None,
) -> CoordinatorProcess:
    """Start the Dockerfile's command with settings from the environment, as a container would."""
    port = free_port()
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/tmp"),
        "PYTHONPATH": pythonpath(),
        **topic_env(bootstrap, topics),
        "LITTLE_COORDINATOR_GROUP": group,
        "LITTLE_COORDINATOR_ID": name,
        "LITTLE_WORKFLOWS": COORDINATOR_WORKFLOWS,
        "LITTLE_DATA_DIR": str(workdir / "data"),
        "LITTLE_LEASE_SECONDS": str(lease_seconds),
        "LITTLE_SESSION_TIMEOUT_MS": str(session_timeout_ms),
        "LITTLE_STOP_GRACE_SECONDS": str(stop_grace_seconds),
        "LITTLE_HTTP_HOST": "127.0.0.1",
        "LITTLE_HTTP_PORT": str(port),
        "LITTLE_LOG_LEVEL": "info",
        CALLS_DIR: str(workdir / "calls"),
        **(extra_env or {}),
    }
    command = dockerfile_command()
    executable = Path(sys.executable).parent / command[0]
    log_path = workdir / f"{name}.log"
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            [str(executable), *command[1:]],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=workdir,
        )
    return CoordinatorProcess(name, port, proc, log_path)


def metric_value(text: str, name: str, **labels: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    raise AssertionError(f"no sample {name} {labels} in /metrics")


def wait_until(
    predicate: Callable[[], bool], timeout: float, what: str, every: float = 0.1
) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


def wait_ready(
    coordinators: Iterable[CoordinatorProcess], partitions: int, timeout: float = 60.0
) -> None:
    """Until every coordinator is ready, owns some partition, and together they own all."""
    group = list(coordinators)

    def covered() -> bool:
        for c in group:
            if c.proc.poll() is not None:
                raise AssertionError(f"{c.name} exited {c.proc.returncode}:\n{c.logs()[-4000:]}")
        owned = [c.partitions() for c in group]
        return all(owned) and sorted(p for ps in owned for p in ps) == list(range(partitions))

    wait_until(covered, timeout, "the coordinators to own every partition")


# -- the runs topic, watched -----------------------------------------------------------------


@dataclass
class RunsWatcher:
    """Reads every event of the runs topic (all partitions, from the start) as it arrives."""

    bootstrap: str
    topic: str
    runs: dict[str, list[LoggedEvent]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._codec = EventCodec()
        self._consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"watch-{uuid.uuid4()}",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 50,
            }
        )
        meta = self._consumer.list_topics(self.topic, timeout=10).topics[self.topic]
        self._consumer.assign([TopicPartition(self.topic, p, 0) for p in meta.partitions])

    def poll(self, seconds: float = 0.2) -> None:
        deadline = time.monotonic() + seconds
        while True:
            batch = self._consumer.consume(num_messages=5000, timeout=0.05)
            for msg in batch:
                if msg.error() is not None:
                    continue
                event = self._codec.decode(msg.value() or b"")
                logged = LoggedEvent(event, msg.partition() or 0, msg.offset() or 0)
                self.runs.setdefault(event.run_id, []).append(logged)
            if time.monotonic() >= deadline:
                return

    def catch_up(self, timeout: float = 30.0) -> None:
        """Read until every partition's end as it is now: whatever was acked before this call
        has then been seen."""
        ends = {}
        for tp in self._consumer.assignment():
            _low, high = self._consumer.get_watermark_offsets(tp, timeout=10, cached=False)
            ends[tp.partition] = high
        deadline = time.monotonic() + timeout
        while True:
            positions = {
                tp.partition: tp.offset
                for tp in self._consumer.position(self._consumer.assignment())
            }
            if all(positions.get(p, -1) >= end for p, end in ends.items() if end > 0):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the runs topic was not read to {ends} in {timeout:.0f}s")
            self.poll(0.1)

    def state(self, run_id: str) -> MaterializedRunState:
        return materialize_run_state_from_events(self.runs.get(run_id, []), run_id=run_id)

    def wait(self, predicate: Callable[[RunsWatcher], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate(self):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
            self.poll()

    def status(self, run_id: str) -> str:
        return self.state(run_id).status

    def close(self) -> None:
        self._consumer.close()


def accepted(events: Iterable[LoggedEvent]) -> list[Event]:
    """The events the fold accepts, by DESIGN §4's rules (claims by epoch; zombies dropped)."""
    epoch = 0
    out: list[Event] = []
    for logged in events:
        e = logged.event
        if isinstance(e, RunClaimed):
            if e.epoch > epoch:
                epoch = e.epoch
                out.append(e)
        elif e.epoch == epoch:
            out.append(e)
    return out


def responded_turns(events: Iterable[LoggedEvent], before: float | None = None) -> set[int]:
    """Turns whose model response is in the log (written before wall time ``before``)."""
    return {
        e.event.turn
        for e in events
        if isinstance(e.event, ModelResponded)
        and (before is None or e.event.occurred_at.timestamp() < before)
    }


def claims(events: Iterable[LoggedEvent]) -> list[RunClaimed]:
    return [e.event for e in events if isinstance(e.event, RunClaimed)]


# -- a writer outside any coordinator --------------------------------------------------------


OUTSIDE_WRITER = "outside-writer"


async def _write(run_id: str) -> None:
    from little.runtime import execute

    topics = json.loads(os.environ["COORDINATOR_TEST_TOPICS"])
    world = open_world(
        os.environ["LITTLE_KAFKA_BOOTSTRAP"],
        topics,
        Path(os.environ["LITTLE_DATA_DIR"]) / "artifacts",
    )
    with world:
        # The input says 0.1 s (what a resume uses); this process's own latency comes from env.
        result = await execute(world, run_id, chat, {"latency": 0.1}, owner=OUTSIDE_WRITER)
    print(json.dumps({"status": result.status}), flush=True)


def spawn_writer(
    run_id: str, *, bootstrap: str, topics: dict[str, str], workdir: Path, latency: float
) -> subprocess.Popen[bytes]:
    """Execute ``run_id`` (a chat run) in a process of its own, outside any coordinator."""
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "PYTHONPATH": pythonpath(),
        "LITTLE_KAFKA_BOOTSTRAP": bootstrap,
        "LITTLE_DATA_DIR": str(workdir / "data"),
        "COORDINATOR_TEST_TOPICS": json.dumps(topics),
        CALLS_DIR: str(workdir / "calls"),
        LATENCY: str(latency),
    }
    log = (workdir / f"writer-{run_id}.log").open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", WORKFLOWS, "write", run_id],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=workdir,
    )


def main(argv: list[str]) -> None:
    if argv[:1] == ["write"]:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        asyncio.run(_write(argv[1]))
        return
    raise SystemExit(f"usage: python -m {WORKFLOWS} write RUN_ID")


if __name__ == "__main__":
    main(sys.argv[1:])
