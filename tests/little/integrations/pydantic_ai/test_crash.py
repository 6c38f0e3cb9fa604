"""SIGKILL a process running a Pydantic AI agent under ``durable`` and resume it: the run ends
as an uncrashed one does, and only the call in flight at the kill runs again (real child
processes; invocations are logged to files, so the counts survive the kill)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from little.events import (
    AgentCallSettled,
    ModelCalled,
    ModelFailed,
    ModelResponded,
    ToolCallFailed,
    ToolCallStarted,
    ToolCallSucceeded,
)
from tests.crash.support import REPO, Child, Scenario, each_crash_point, finish
from tests.forkserver import server_for

CHILD = "tests.little.integrations.pydantic_ai.child"
PRELOAD = "little.integrations.pydantic_ai"
EXPECTED = {
    "first": "answer to [Brief me on Kafka] using facts(Brief me on Kafka)",
    "second": "answer to [Shorter.]",
}


def _child(scenario: Scenario, run_id: str, *args: str, **env: str | int) -> Child:
    argv = [str(scenario.data_dir), run_id, *args]
    environment = scenario.env(**env)
    server = server_for(PRELOAD, environment, REPO)
    if server is not None:
        return finish(server.spawn(CHILD, argv, environment, REPO))
    proc = subprocess.Popen(
        [sys.executable, "-m", CHILD, *argv],
        cwd=REPO,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return finish(proc)


def _invocations(scenario: Scenario) -> Counter[str]:
    """Each real invocation, by what it was (a model request by its prompt and place)."""
    seen: Counter[str] = Counter()
    for entry in scenario.calls("model"):
        seen[f"model {entry['prompt']} n={entry['n']}"] += 1
    for entry in scenario.calls("tool"):
        seen[f"tool {entry['tool']} {entry['q']}"] += 1
    return seen


def _crash_and_resume(root: Path, kafka: str | None, **crash: int) -> tuple[Scenario, Child]:
    scenario = Scenario(root, kafka)
    killed = _child(scenario, "r1", "run", json.dumps("Kafka"), **crash)
    assert killed.killed, killed.describe()
    resumed = _child(scenario, "r1", "resume")
    assert resumed.returncode == 0, resumed.describe()
    assert resumed.result == {"status": "completed", "output": EXPECTED}, resumed.describe()
    return scenario, resumed


BASELINE = Counter(
    {
        "model Brief me on Kafka n=1": 1,
        "tool search Brief me on Kafka": 1,
        "model Brief me on Kafka n=3": 1,
        "model Shorter. n=5": 1,
    }
)
IN_ORDER = list(BASELINE)  # the calls in the order an uncrashed run makes them


@pytest.mark.parametrize(
    "n", [0, pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow), 3]
)
def test_a_kill_after_a_call_returned_reruns_only_that_call(tmp_path: Path, n: int) -> None:
    """Killed after the n-th invocation returned, before its answer was recorded: the resume
    serves every call recorded before it from the log and makes that one again."""
    scenario, _ = _crash_and_resume(tmp_path, None, LITTLE_CRASH_AFTER_CALL=n)
    assert _invocations(scenario) == BASELINE + Counter({IN_ORDER[n]: 1})
    events = [e.event for e in scenario.events("r1")]
    settled = [(e.ordinal, e.outcome) for e in events if isinstance(e, AgentCallSettled)]
    assert settled == [(0, "succeeded"), (1, "succeeded")]


def _in_flight(scenario: Scenario, run_id: str) -> int:
    """Model requests and tool calls the log shows started and not ended (a kill's leftovers)."""
    open_calls: set[tuple[str, Any]] = set()
    for event in (e.event for e in scenario.events(run_id)):
        if isinstance(event, ModelCalled):
            open_calls.add(("model", (event.session_id, event.turn)))
        elif isinstance(event, ModelResponded | ModelFailed):
            open_calls.discard(("model", (event.session_id, event.turn)))
        elif isinstance(event, ToolCallStarted):
            open_calls.add(("tool", (event.session_id, event.call_id)))
        elif isinstance(event, ToolCallSucceeded | ToolCallFailed):
            open_calls.discard(("tool", (event.session_id, event.call_id)))
    return len(open_calls)


@pytest.mark.kafka
def test_on_the_broker_a_kill_after_any_event_or_call_reruns_only_the_call_in_flight(
    tmp_path: Path, kafka_bootstrap_servers: str, unique: str
) -> None:
    """The crash matrix on a real broker: one process SIGKILLed after each call (model
    request or tool call) returned and after each event of the run was acked, then resumed by
    another. Every resumed run ends as an uncrashed one; a call killed after it returned is
    made again (only it), and after an event kill at most the call the log shows in flight is
    made again. One topic prefix for the matrix, a run id per point (as runs share a cluster)."""
    kafka = f"{kafka_bootstrap_servers}|pyaim{unique}."
    baseline = Scenario(tmp_path / "baseline", kafka)
    done = _child(baseline, "base", "run", json.dumps("Kafka"))
    assert done.result == {"status": "completed", "output": EXPECTED}, done.describe()
    assert _invocations(baseline) == BASELINE
    n_events = len(baseline.events("base"))
    points = [("call", n) for n in range(len(IN_ORDER))] + [("event", k) for k in range(n_events)]

    def check(point: tuple[str, int]) -> None:
        kind, k = point
        run_id = f"{kind}{k}"
        scenario = Scenario(tmp_path / run_id, kafka)
        crash = {"LITTLE_CRASH_AFTER_CALL" if kind == "call" else "LITTLE_CRASH_AFTER_EVENT": k}
        killed = _child(scenario, run_id, "run", json.dumps("Kafka"), **crash)
        assert killed.killed, (point, killed.describe())
        seen_at_kill = _invocations(scenario)
        in_flight = _in_flight(scenario, run_id)
        # "run" starts or resumes: a kill right after the claim left no RunStarted to resume
        resumed = _child(scenario, run_id, "run", json.dumps("Kafka"))
        assert resumed.result == {"status": "completed", "output": EXPECTED}, (
            point,
            resumed.describe(),
        )
        seen = _invocations(scenario)
        if kind == "call":
            assert seen == BASELINE + Counter({IN_ORDER[k]: 1}), (point, seen)
            assert in_flight == 1, point
        else:
            assert set(seen) == set(BASELINE), (point, seen)
            extra = seen - BASELINE
            assert sum(extra.values()) <= in_flight <= 1, (point, seen, in_flight)
            assert not extra or all(seen_at_kill[c] for c in extra), (point, seen_at_kill)
        # the resumed log holds each call's answer once
        events = [e.event for e in scenario.events(run_id)]
        assert len([e for e in events if isinstance(e, ToolCallSucceeded)]) == 1, point
        assert len([e for e in events if isinstance(e, AgentCallSettled)]) == 2, point

    each_crash_point(points, check)


@pytest.mark.slow
def test_a_kill_after_any_event_resumes_to_the_uncrashed_outcome(tmp_path: Path) -> None:
    """SIGKILL after every event of the run, one process each: the resume completes with the
    uncrashed output, and at most the one call in flight ran twice."""
    baseline = Scenario(tmp_path / "baseline")
    done = _child(baseline, "r1", "run", json.dumps("Kafka"))
    assert done.result == {"status": "completed", "output": EXPECTED}, done.describe()
    events = [e.event for e in baseline.events("r1")]
    assert len([e for e in events if isinstance(e, ModelCalled)]) == 3
    assert len([e for e in events if isinstance(e, ToolCallStarted)]) == 1

    def check(k: int) -> None:
        # the claim is event 0 of the process: k counts from the run's first record
        scenario = Scenario(tmp_path / f"e{k}")
        killed = _child(scenario, "r1", "run", json.dumps("Kafka"), LITTLE_CRASH_AFTER_EVENT=k)
        if not killed.killed:  # past the run's last event: it completed
            assert killed.result["output"] == EXPECTED, killed.describe()
            return
        # "run" starts or resumes: a kill right after the claim left no RunStarted to resume
        resumed = _child(scenario, "r1", "run", json.dumps("Kafka"))
        assert resumed.result == {"status": "completed", "output": EXPECTED}, resumed.describe()
        seen = _invocations(scenario)
        assert set(seen) == set(BASELINE), (k, seen)
        assert sum(seen.values()) - sum(BASELINE.values()) <= 1, (k, seen)

    each_crash_point(range(len(events)), check)


def test_a_kill_while_parallel_tool_calls_run_reruns_only_the_ones_in_flight(
    tmp_path: Path,
) -> None:
    """The model asks two tools at once; killed right after the first of them returned: the
    resume serves the model's request from the log and runs each tool call at most once more
    (only one whose answer had not landed), and ends as an uncrashed run does."""
    scenario = Scenario(tmp_path)
    topic = json.dumps("Kafka and Pulsar")
    killed = _child(scenario, "r1", "run", topic, LITTLE_CRASH_AFTER_CALL=1)
    assert killed.killed, killed.describe()
    resumed = _child(scenario, "r1", "resume")
    assert resumed.result["output"]["first"] == (
        "answer to [Brief me on Kafka and Pulsar] using facts(Kafka) + facts(Pulsar)"
    ), resumed.describe()
    seen = _invocations(scenario)
    assert seen["model Brief me on Kafka and Pulsar n=1"] == 1  # served from the log
    assert 1 <= seen["tool search Kafka"] <= 2
    assert 1 <= seen["tool search Pulsar"] <= 2
    events = [e.event for e in scenario.events("r1")]
    succeeded = [e.call_id for e in events if isinstance(e, ToolCallSucceeded)]
    assert sorted(succeeded) == ["1:call-1-0", "1:call-1-1"]  # each answered once in the log


def test_a_kill_inside_a_nested_agent_reruns_only_its_request(tmp_path: Path) -> None:
    """The lead agent's tool runs the expert agent (both durable); killed right after the
    expert's model returned: the resume serves the lead's first request, runs the tool again
    (it was in flight), serves nothing of the expert it had not recorded, asks the expert's
    model again once, and finishes as an uncrashed run."""
    scenario = Scenario(tmp_path)
    killed = _child(scenario, "r1", "nested", json.dumps("Kafka"), LITTLE_CRASH_AFTER_CALL=1)
    assert killed.killed, killed.describe()
    resumed = _child(scenario, "r1", "resume")
    assert resumed.result == {
        "status": "completed",
        "output": "lead: expert on [About Kafka]",
    }, resumed.describe()
    seen = Counter(f"{e['prompt']} n={e['n']}" for e in scenario.calls("model"))
    assert seen == {
        "lead About Kafka n=1": 1,
        "expert About Kafka n=1": 2,
        "lead About Kafka n=3": 1,
    }
    events = [e.event for e in scenario.events("r1")]
    settled = [(e.session_id, e.ordinal) for e in events if isinstance(e, AgentCallSettled)]
    assert settled == [("research#expert", 1), ("research#lead", 0)]


@pytest.mark.parametrize(
    "n",
    [
        0,
        pytest.param(1, marks=pytest.mark.slow),
        pytest.param(2, marks=pytest.mark.slow),
        pytest.param(3, marks=pytest.mark.slow),
    ],
)
def test_a_kill_after_an_mcp_call_returned_reruns_only_that_call(tmp_path: Path, n: int) -> None:
    """An agent holding an ``MCPToolset`` (a real stdio server), killed after the n-th call
    returned (0: the server's listing, 1: the first request, 2: the server's ``add``, 3: the
    last request), before it was recorded: the resume asks the server and the model only for
    that call again; everything recorded before it is served from the log."""
    scenario = Scenario(tmp_path)
    notes = tmp_path / "notes.jsonl"
    killed = _child(scenario, "r1", "mcp", "{}", LITTLE_CRASH_AFTER_CALL=n, MCP_NOTES_LOG=notes)
    assert killed.killed, killed.describe()
    resumed = _child(scenario, "r1", "resume", MCP_NOTES_LOG=notes)
    assert resumed.result == {"status": "completed", "output": "the sum is 5"}, resumed.describe()
    served = Counter(json.loads(line)["kind"] for line in notes.read_text().splitlines())
    calls = Counter(f"n={e['n']}" for e in scenario.calls("model")) + Counter(
        {"add": served["call"]}
    )
    again = [None, "n=1", "add", "n=3"][n]
    assert calls == Counter({"n=1": 1, "add": 1, "n=3": 1}) + Counter({again: 1} if again else {})
    # the listing the model is told is asked again only when it was the call in flight (n=0);
    # a resumed process that calls a server tool fresh (n<=2) lets the FastMCP client list the
    # tools once more for itself (it reads their output schemas to parse a structured result)
    assert served["list"] == 1 + (n <= 2)
    events = [e.event for e in scenario.events("r1")]
    succeeded = [e.tool for e in events if isinstance(e, ToolCallSucceeded)]
    assert succeeded == ["mcp:notes/tools/list", "mcp:notes/add"]  # each recorded once
