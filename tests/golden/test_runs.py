"""The committed golden runs (issue 15 item 6): today's code, simulated against runs recorded
by earlier code, must do what they did. A change to canonical JSON, the request hash chain or
the agent-call key would make a resume of a recorded run refuse it (or a replay from one
serve nothing): it fails here first. The files under ``tests/golden/runs/`` are immutable;
``tests/golden/generate_runs.py`` only adds the missing ones."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from little.chat import model_exchanges
from little.events import RunStarted, ToolCallSucceeded
from little.examples import research
from little.golden import read_golden
from little.runtime import simulate
from tests.golden import edited
from tests.golden.generate_runs import RECIPES, RUNS

COMMITTED = sorted(RUNS.glob("*.avro"))


def test_every_recipe_has_a_committed_run_and_every_run_a_recipe() -> None:
    assert {p.stem for p in COMMITTED} == set(RECIPES), (
        "run `.venv/bin/python tests/golden/generate_runs.py` and commit what it writes"
    )


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.stem)
def test_todays_code_simulates_a_committed_run_identically_and_invokes_no_model(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls"
    monkeypatch.setenv(research.CALLS_DIR, str(calls))  # the example logs what it invokes
    golden = read_golden(path)
    workflow = RECIPES[path.stem].workflow()
    assert (golden.metadata["little.workflow"], golden.metadata["little.workflow_version"]) == (
        workflow.name,
        workflow.version,
    )
    sim = asyncio.run(simulate(None, workflow, path))
    assert sim.identical, "\n".join(sim.lines())
    assert sim.result is not None
    assert sim.result.status == "completed"
    assert not (calls / "model.jsonl").exists()  # no model was invoked
    # every tool call of the golden run's exchanges ran again (seed 004: in simulation mode)
    # and returned what it recorded; one it made itself is among them (a replay's are inside
    # the exchanges it served)
    log = calls / "tools.jsonl"
    ran = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    assert len(sim.tools_run) == len(ran)
    assert sorted(f"tool {r['tool']} (call {r['call_id']})" for r in ran) == sorted(
        t.split("): ", 1)[1] for t in sim.tools_run
    )
    made = {
        (e.event.tool, e.event.call_id)
        for events in golden.runs.values()
        for e in events
        if isinstance(e.event, ToolCallSucceeded)
    }
    assert made <= {(r["tool"], r["call_id"]) for r in ran}
    assert sim.tools_served == ()
    assert (calls / "steps.jsonl").exists()  # the steps' own code did run


def test_the_demo_run_crashed_and_resumed_rebuilds_the_requests_of_the_uncrashed_run() -> None:
    """The demo's log holds two claims and model turn 2 called twice (the first answer was
    lost with the process): its model exchanges are those of the run that never crashed."""

    def exchanges(name: str) -> list[tuple[object, ...]]:
        golden = read_golden(RUNS / f"{name}.avro")
        blobs = {sha: a.data for sha, a in golden.artifacts.items()}
        return [
            (x.session_id, x.turn, x.system, x.messages, x.tools, x.response, x.request_hash)
            for x in model_exchanges(golden.events, lambda ref: blobs[ref.sha256])
        ]

    crashed = read_golden(RUNS / "research-demo.avro")
    called = [e.event for e in crashed.events if e.event.type == "harness.model.called"]
    assert [e.turn for e in called] == [1, 2, 2, 3]  # turn 2 called again on the resume
    assert exchanges("research-demo") == exchanges("research")
    assert len(exchanges("research")) == len(research.SCRIPT)


def test_a_committed_run_simulates_edited_code_that_does_the_same() -> None:
    """Every committed run was logged before RunStarted v5 (no recorded scan verdict): it is
    still a golden run for edited code, which is what simulation is for. The summarise run,
    simulated by a rewrite of its workflow in another module, is identical."""
    golden = read_golden(RUNS / "summarise.avro")
    (started,) = [e.event for e in golden.events if isinstance(e.event, RunStarted)]
    assert started.source_unsafe_reads is None  # logged before v5
    sim = asyncio.run(simulate(None, edited.summarise, RUNS / "summarise.avro"))
    assert sim.identical, "\n".join(sim.lines())
    assert sim.result is not None
    assert sim.result.output == "Kafka is a log"
