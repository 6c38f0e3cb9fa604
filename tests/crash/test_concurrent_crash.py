"""Many concurrent runs in one process, SIGKILLed in mid-flight, resumed in a new process.

60 runs of ``busy`` (a step, a parallel group of two branches each holding an agent session
with a tool call, a recorded value, a final step) execute at once in one child process, their
appends in flight together; the child is SIGKILLed right after its k-th acked event, at
several k. A second process resumes all 60 at once. Then every run ends exactly as an
uncrashed run of the same input ends, no stream has a gap or a fenced event, and no model or
tool call whose terminal event was in the log at the kill was invoked again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from little.replay import MaterializedRunState, fold_run
from tests.crash.runner import open_world
from tests.crash.support import Child, Scenario, check_integrity, child, diff, essence

RUNS = 60
PREFIX = "busy"
CRASH_AFTER = (150, 900, 1600)


def many(sc: Scenario, **extra: str | int) -> Child:
    return child(sc.data_dir, PREFIX, "many", str(RUNS), env=sc.env(**extra))


def run_ids() -> list[str]:
    return [f"{PREFIX}-{i}" for i in range(RUNS)]


def fold_all(sc: Scenario) -> dict[str, MaterializedRunState]:
    """Every run folded from its log, through one world (opening one per run is slow on Kafka)."""
    with open_world(str(sc.data_dir), sc.kafka) as world:
        return {rid: fold_run(world, rid, use_snapshot=False)[0] for rid in run_ids()}


def settled_at_kill(states: dict[str, MaterializedRunState], kind: str, key: str) -> bool:
    """Whether the call an invocation log line names had its terminal event in the log (or
    belonged to a step already completed, whose calls are compacted away)."""
    if kind == "model":  # run|session|turn
        run_id, session_id, turn = key.split("|")
        step_path = session_id.split("#", 1)[0]
    else:  # the idempotency key: run/step path/call id
        run_id, rest = key.split("/", 1)
        step_path, call_id = rest.rsplit("/", 1)
    state = states[run_id]
    step = state.step(step_path)
    if step is not None and step.status == "completed":
        return True
    for session in state.sessions:
        if kind == "model" and session.session_id == session_id:
            t = session.turn(int(turn))
            return t is not None and t.status == "responded"
        if kind == "tools" and session.step_path == step_path:
            c = session.tool_call(call_id)
            return c is not None and c.status in ("succeeded", "failed")
    return False


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    sc = Scenario(tmp_path_factory.mktemp("reference"))
    done = many(sc)
    assert done.returncode == 0, done.describe()
    assert done.result["statuses"] == ["completed"] * RUNS
    states = fold_all(sc)
    check_integrity(states)
    total_events = sum(s.events_applied for s in states.values())
    assert total_events > max(CRASH_AFTER)  # every crash point falls inside the load
    return {rid: essence(states, rid) for rid in run_ids()}


def crash_and_resume(sc: Scenario, reference: dict[str, Any], crash_after: int) -> None:
    """Kill the process running every run at once after its ``crash_after``-th acked event,
    resume them all in a new one, and check the outcome against the uncrashed runs."""
    crashed = many(sc, LITTLE_CRASH_AFTER_EVENT=crash_after)
    assert crashed.killed, crashed.describe()
    at_kill = fold_all(sc)
    check_integrity(at_kill)
    unfinished = [rid for rid, s in at_kill.items() if not s.terminal]
    assert unfinished, "the kill came after every run had finished"
    before = {kind: len(sc.calls(kind)) for kind in ("model", "tools")}

    resumed = many(sc)
    assert resumed.returncode == 0, resumed.describe()
    assert resumed.result["statuses"] == ["completed"] * RUNS
    final = fold_all(sc)
    check_integrity(final)
    for rid in run_ids():
        assert diff(essence(final, rid), reference[rid]) == [], rid
    again = [
        (kind, c["key"])
        for kind in ("model", "tools")
        for c in sc.calls(kind)[before[kind] :]
        if settled_at_kill(at_kill, kind, c["key"])
    ]
    assert again == [], f"calls settled before the kill ran again: {again[:5]}"


@pytest.mark.parametrize("crash_after", CRASH_AFTER)
def test_many_concurrent_runs_resume_to_their_uncrashed_outcome(
    tmp_path: Path, reference: dict[str, Any], crash_after: int
) -> None:
    crash_and_resume(Scenario(tmp_path), reference, crash_after)


@pytest.mark.kafka
def test_many_concurrent_runs_on_kafka_resume_to_their_uncrashed_outcome(
    tmp_path: Path, reference: dict[str, Any], kafka_bootstrap_servers: str, unique: str
) -> None:
    """The same on the broker: the delivery pump, every run's first append waiting for its
    index entry, and one producer's batches shared by 60 runs."""
    crash_and_resume(
        Scenario(tmp_path, kafka=f"{kafka_bootstrap_servers}|c{unique}."), reference, 700
    )
