"""SIGKILL an Agents SDK run (two runner calls, each with two tool calls run in parallel) at
every event it appends and after every model or tool call it
makes, resume it in a new process: the same output, and only the call in flight when the
process died runs again (invocations counted in files, which survive the kill)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from little.events import (
    ModelCalled,
    ModelResponded,
    ToolCallFailed,
    ToolCallStarted,
    ToolCallSucceeded,
)
from little.replay import fold_run
from tests.crash.runner import WORLD_ENV, open_world
from tests.forkserver import server_for
from tests.little.integrations.openai_agents import agents_support as s
from tests.little.integrations.openai_agents.child import RESULT
from tests.paths import REPO

_CRASH = ("LITTLE_CRASH_AFTER_EVENT", "LITTLE_CRASH_AFTER_CALL")


CHILD = "tests.little.integrations.openai_agents.child"
TICKET = {"ticket": "Where are my orders A1 and B2?", "followup": "And B2 again?"}
"""Two orders: each runner call's first response asks for two tool calls, run in parallel."""


def child(
    root: Path,
    workflow: str = "oa.triage",
    input: Any = None,
    kafka: str | None = None,
    **crash: int,
) -> tuple[int, dict[str, Any] | None]:
    env = {k: v for k, v in os.environ.items() if k not in _CRASH}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env[s.CALLS_ENV] = str(root / "calls")
    env.update({k: str(v) for k, v in crash.items()})
    if kafka:
        env[WORLD_ENV] = kafka
    argv = [str(root / "data"), "oa-run", "run", workflow, json.dumps(input or TICKET)]
    server = server_for(CHILD, env, REPO)
    proc: Any = (
        server.spawn(CHILD, argv, env, REPO)
        if server is not None
        else subprocess.Popen(
            [sys.executable, "-m", CHILD, *argv],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    )
    out, err = proc.communicate(timeout=120)
    for line in reversed(out.splitlines()):
        if line.startswith(RESULT):
            return proc.returncode, json.loads(line[len(RESULT) :])
    assert proc.returncode == -signal.SIGKILL, f"{proc.returncode}\n{err[-3000:]}"
    return proc.returncode, None


def invocations(root: Path) -> Counter[str]:
    found: Counter[str] = Counter()
    for entry in s.calls(root / "calls", "model"):
        found[f"model:{entry['messages']}"] += 1
    for entry in s.calls(root / "calls", "tool"):
        found[f"tool:{entry['tool']}:{entry['order']}"] += 1
    return found


def scenario(
    root: Path, kafka: str | None = None, **crash: int
) -> tuple[dict[str, Any], Counter[str], Any]:
    (root / "calls").mkdir(parents=True)
    code, result = child(root, kafka=kafka, **crash)
    if result is None:
        code, result = child(root, kafka=kafka)  # starts it again, or resumes it
    assert code == 0
    assert result is not None
    with open_world(str(root / "data"), kafka) as world:
        state, _, _ = fold_run(world, "oa-run", use_snapshot=False)
        events = [x.event for x in world.read_run("oa-run")]
    return result, invocations(root), (state, events)


def check_point(
    root: Path,
    point: tuple[str, int],
    baseline: dict[str, Any],
    calls: Counter[str],
    events: list[Any],
    kafka: str | None = None,
) -> None:
    """Crash at ``point``, resume: the baseline's output, only what was in flight again."""
    name, at = point
    result, seen, (folded, logged) = scenario(root, kafka, **{name: at})
    assert result == baseline, point
    again = seen - calls
    assert set(seen) == set(calls), point
    # only what was in flight runs again: one model request, or a turn's parallel tool
    # calls (a result returned while its sibling runs is durable only once flushed)
    tools_only = all(key.startswith("tool:") for key in again)
    assert sum(again.values()) <= (2 if tools_only else 1), (point, again)
    if name == "LITTLE_CRASH_AFTER_CALL":
        assert sum(again.values()) >= 1, (point, seen)  # that call was in flight
    # every call made again was announced again, write-ahead; no more than what was in
    # flight (one model request, or the two parallel tool calls) was announced again
    for kind, prefix, limit in ((ModelCalled, "model", 1), (ToolCallStarted, "tool", 2)):
        announced = sum(isinstance(e, kind) for e in logged) - sum(
            isinstance(e, kind) for e in events
        )
        made = sum(n for key, n in again.items() if key.startswith(prefix))
        assert made <= announced <= limit, (point, kind.__name__, announced, made)
    assert folded.usage.input_tokens >= sum(
        e.usage.input_tokens for e in events if isinstance(e, ModelResponded)
    )


@pytest.mark.slow
def test_a_crash_at_any_event_or_call_resumes_running_only_the_call_in_flight(
    tmp_path: Path,
) -> None:
    baseline, calls, (_, events) = scenario(tmp_path / "baseline")
    assert baseline["status"] == "completed"
    assert sum(calls.values()) == 8  # four model requests, four tool calls (two in parallel)
    assert len(events) == 29, "the reference run appends 29 events: a crash point each"
    appended = len(events)  # the events the one process appended (claim included)

    def crashed(point: tuple[str, int]) -> None:
        check_point(tmp_path / f"{point[0]}-{point[1]}", point, baseline, calls, events)

    points = [("LITTLE_CRASH_AFTER_EVENT", k) for k in range(appended)]
    points += [("LITTLE_CRASH_AFTER_CALL", n) for n in range(8)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(crashed, points))


@pytest.mark.slow  # a crash matrix: make test runs it, make test-fast leaves it out
def test_a_streamed_run_resumed_after_a_crash_replays_the_served_turns_as_events(
    tmp_path: Path,
) -> None:
    """Killed after its last model request streamed (before its response was recorded): the
    resume serves the first request from the log, its events synthesised, and streams the
    last one live again; the consumer sees the same deltas as a run that never crashed."""
    ticket = {"ticket": "Where is my order A1?"}
    (tmp_path / "calm" / "calls").mkdir(parents=True)
    code, calm = child(tmp_path / "calm", "oa.stream", ticket)
    assert code == 0
    assert calm is not None
    root = tmp_path / "killed"
    (root / "calls").mkdir(parents=True)
    # calls: the first model request (0), the tool (1), the last model request (2)
    code, result = child(root, "oa.stream", ticket, LITTLE_CRASH_AFTER_CALL=2)
    assert result is None
    code, result = child(root, "oa.stream", ticket)
    assert code == 0
    assert result == calm
    assert [e["stream"] for e in s.calls(root / "calls", "model")] == [True, True, True]
    assert len(s.calls(root / "calls", "tool")) == 1


@pytest.mark.kafka
def test_a_spread_of_crash_points_on_kafka(
    tmp_path: Path, kafka_bootstrap_servers: str, unique: str
) -> None:
    """The same checks on a real broker (fresh topics per point): event crash points spread
    over the run, a parallel tool call's and a model request's return."""
    kafka = f"{kafka_bootstrap_servers}|oa{unique}b."
    baseline, calls, (_, events) = scenario(tmp_path / "baseline", kafka)
    n = len(events)
    points = [("LITTLE_CRASH_AFTER_EVENT", k) for k in (n // 4, n // 2, 3 * n // 4, n - 2)]
    points += [("LITTLE_CRASH_AFTER_CALL", 1), ("LITTLE_CRASH_AFTER_CALL", 4)]
    for i, point in enumerate(points):
        kafka = f"{kafka_bootstrap_servers}|oa{unique}p{i}."
        check_point(tmp_path / f"p{i}", point, baseline, calls, events, kafka)


def test_a_kill_inside_an_agent_used_as_a_tool_reruns_only_its_call_in_flight(
    tmp_path: Path,
) -> None:
    """The lead's tool runs the expert agent through ``LittleRunner``; killed right after the
    expert's own tool returned (before its result was recorded): the resume serves the lead's
    and the expert's first requests, runs the lead's tool again (it was in flight), and inside
    it only the expert's tool call again."""
    ticket = {"ticket": "Where is my order A1?"}
    (tmp_path / "calls").mkdir()
    code, _ = child(tmp_path, "oa.delegation", ticket, LITTLE_CRASH_AFTER_CALL=2)
    assert code == -signal.SIGKILL
    code, result = child(tmp_path, "oa.delegation", ticket)
    assert code == 0
    assert result == {
        "status": "completed",
        "output": "order A1 shipped (re: Where is order A1?) (re: Where is my order A1?)",
    }
    seen = invocations(tmp_path)
    # requests by messages sent: the lead's and the expert's first (2), their second (4)
    assert seen == {
        "model:2": 2,
        "model:4": 2,
        "tool:lookup_order:A1": 2,
        "tool:ask_expert:A1": 2,
    }, seen


def test_a_kill_inside_an_agent_as_tool_reruns_only_its_call_in_flight(tmp_path: Path) -> None:
    """The lead's tool is the SDK's ``expert.as_tool()``; killed right after the expert's own
    tool returned (before its result was recorded): the resume serves the lead's and the
    expert's first requests, runs the lead's tool again (it was in flight), and inside it only
    the expert's tool call again."""
    ticket = {"ticket": "Where is my order A1?"}
    (tmp_path / "calls").mkdir()
    code, _ = child(tmp_path, "oa.as_tool", ticket, LITTLE_CRASH_AFTER_CALL=2)
    assert code == -signal.SIGKILL
    code, result = child(tmp_path, "oa.as_tool", ticket)
    assert code == 0
    assert result == {
        "status": "completed",
        "output": "order A1 shipped (re: Where is order A1?) (re: Where is my order A1?)",
    }
    seen = invocations(tmp_path)
    # requests by messages sent: the lead's and the expert's first (2), their second (4)
    assert seen == {"model:2": 2, "model:4": 2, "tool:lookup_order:A1": 2}, seen


def test_a_kill_after_an_agent_as_tool_refused_resumes_to_the_same_refusal(
    tmp_path: Path,
) -> None:
    """The lead's ``expert.as_tool(session=...)`` is refused; killed after each event from the
    lead's tool call on, the resume refuses again: the refusal is never on the log as the tool
    call's answer (a result or a failure), which the resume would serve the lead's model."""
    ticket = {"ticket": "Where is my order A1?", "refuse": "session"}
    (tmp_path / "calm" / "calls").mkdir(parents=True)
    code, calm = child(tmp_path / "calm", "oa.as_tool", ticket)
    assert code == 0
    assert calm == {"status": "failed", "output": None}
    with open_world(str(tmp_path / "calm" / "data")) as world:
        logged = [x.event for x in world.read_run("oa-run")]
    first = next(i for i, e in enumerate(logged) if isinstance(e, ToolCallStarted))
    points = range(first, len(logged) - 1)  # the last one ends the run: nothing to resume
    assert len(points) >= 3
    for k in points:
        root = tmp_path / f"k{k}"
        (root / "calls").mkdir(parents=True)
        code, _ = child(root, "oa.as_tool", ticket, LITTLE_CRASH_AFTER_EVENT=k)
        assert code == -signal.SIGKILL, k
        code, result = child(root, "oa.as_tool", ticket)
        assert code == 0
        assert result == calm, k
        with open_world(str(root / "data")) as world:
            answers = [
                type(x.event).__name__
                for x in world.read_run("oa-run")
                if isinstance(x.event, ToolCallSucceeded | ToolCallFailed)
            ]
        assert answers == [], k
        # the lead was never asked with an answer of its tool; the expert never ran
        assert [c["messages"] for c in s.calls(root / "calls", "model")] == [2], k
