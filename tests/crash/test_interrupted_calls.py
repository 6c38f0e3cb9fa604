"""Calls in flight at a crash are accounted for (issue 15 item 9): a model call whose
write-ahead record has no response before a resume called it again was paid for (the
provider billed it) but the log holds no usage for it. The report says so instead of nothing:
killed twice in the middle of one call, the pipeline's models are invoked 5 times, 3 are
billed in the log, and the report names the 2 it cannot price."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli import little_cli
from tests.crash.support import Child, Scenario, child

RUN = "run_interrupted"
INPUT = json.dumps("Kafka")


def pipeline(scenario: Scenario, **crash: int) -> Child:
    return child(
        scenario.data_dir, RUN, "replay-pipeline", "1", "{}", INPUT, env=scenario.env(**crash)
    )


def invoked(scenario: Scenario) -> int:
    return sum(len(scenario.calls(f"replay-{s}")) for s in ("research", "outline", "write"))


def test_calls_in_flight_at_two_crashes_are_reported_not_silently_dropped(
    tmp_path: Path,
) -> None:
    scenario = Scenario(tmp_path)
    # killed after outline's model call returned, before its record
    assert pipeline(scenario, LITTLE_CRASH_AFTER_CALL=1).killed
    # the resume calls outline again first, and is killed the same way
    assert pipeline(scenario, LITTLE_CRASH_AFTER_CALL=0).killed
    # this resume is killed right after its claim, before it calls anything: no call is lost
    assert pipeline(scenario, LITTLE_CRASH_AFTER_EVENT=0).killed
    done = pipeline(scenario)
    assert done.returncode == 0, done.describe()
    assert done.result["status"] == "completed"

    state = scenario.fold(RUN)
    assert invoked(scenario) == 5  # research, outline three times, write
    assert state.usage.calls == 3  # what the log can price
    assert state.interrupted_model_calls == 2
    assert state.accepted_claims == 4

    env = scenario.env()
    out = little_cli("report", RUN, "--data-dir", str(scenario.data_dir), env=env)
    assert out.returncode == 0, out.stderr
    assert "2 model call(s) cut off by a crash or a cancel: cost not recorded" in " ".join(
        out.stdout.split()
    )
    data = json.loads(
        little_cli("report", RUN, "--json", "--data-dir", str(scenario.data_dir), env=env).stdout
    )
    assert data["interrupted"] == {"model_calls": 2, "tool_calls": 0, "in_flight": 0}


def test_a_run_killed_mid_call_says_its_call_is_in_flight(tmp_path: Path) -> None:
    scenario = Scenario(tmp_path)
    assert pipeline(scenario, LITTLE_CRASH_AFTER_CALL=0).killed
    out = little_cli("report", RUN, "--data-dir", str(scenario.data_dir), env=scenario.env())
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "1 model call(s) in flight now (or at a crash not resumed)" in text
    assert "cut off by a crash" not in text
