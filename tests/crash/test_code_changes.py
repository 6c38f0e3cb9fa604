"""A deploy of changed workflow code does not strand in-flight runs (issue 11 item 4), with
real processes and real SIGKILLs: a run started on the old code is killed after its first
step, then resumed in a new process on a deploy of the change, guarded either by
``ctx.patched`` (same version) or by a new version that keeps the old one registered.

Which steps really ran, in which process, comes from the steps' own log
(``steps.jsonl``, tests/crash/changes.py); the path a run took is in its output (the change
sorts the facts) and its committed steps."""

from __future__ import annotations

import json
from pathlib import Path

from little.events import PatchMarked, RunStarted, StepCompleted
from tests.crash.changes import PATCHED, VERSIONED
from tests.crash.support import Child, Scenario, child

TOPIC = json.dumps("kafka")
OLD_OUTPUT = "kafka offsets / kafka logs / kafka brokers"
NEW_OUTPUT = "kafka brokers / kafka logs / kafka offsets"  # ranked
AFTER_FIRST_STEP = 3
"""A run's events acked by its first process: its claim (0), RunStarted (1), the first
step's StepStarted and StepCompleted (2, 3): killed right after the first step commits."""


def on(scenario: Scenario, form: str, run_id: str, workflow: str, **crash: int) -> Child:
    return child(
        scenario.data_dir, run_id, "changes", form, workflow, TOPIC, env=scenario.env(**crash)
    )


def killed_after_search(scenario: Scenario, run_id: str, workflow: str) -> None:
    killed = on(scenario, "old", run_id, workflow, LITTLE_CRASH_AFTER_EVENT=AFTER_FIRST_STEP)
    assert killed.killed, killed.describe()
    assert committed(scenario, run_id) == ["search"]


def committed(scenario: Scenario, run_id: str) -> list[str]:
    return [x.event.step_id for x in scenario.events(run_id) if isinstance(x.event, StepCompleted)]


def marks(scenario: Scenario, run_id: str) -> list[str]:
    return [x.event.patch_id for x in scenario.events(run_id) if isinstance(x.event, PatchMarked)]


def ran(scenario: Scenario, run_id: str) -> list[str]:
    return [c["step"] for c in scenario.calls("steps") if c["run"] == run_id]


def completed(done: Child, output: str) -> None:
    assert done.returncode == 0, done.describe()
    assert done.result == {"status": "completed", "output": output, "error": None}


def test_a_run_killed_on_the_old_code_keeps_the_old_path_after_the_patch_is_deployed(
    tmp_path: Path,
) -> None:
    scenario = Scenario(tmp_path)
    killed_after_search(scenario, "run-old", PATCHED)

    # the deploy: the change, behind `if ctx.patched("rank-facts")` asked before the first step
    completed(on(scenario, "patched-first", "run-old", PATCHED), OLD_OUTPUT)
    assert ran(scenario, "run-old") == ["search", "summarize"]  # search once, no rank
    assert committed(scenario, "run-old") == ["search", "summarize"]
    assert marks(scenario, "run-old") == []

    # a run started on the new code takes the new path, and keeps it through a SIGKILL
    # (its events: claim, RunStarted, then PatchMarked rides with the first step's)
    new = on(scenario, "patched-first", "run-new", PATCHED, LITTLE_CRASH_AFTER_EVENT=4)
    assert new.killed, new.describe()
    assert (committed(scenario, "run-new"), marks(scenario, "run-new")) == (
        ["search"],
        ["rank-facts"],
    )
    completed(on(scenario, "patched-first", "run-new", PATCHED), NEW_OUTPUT)
    assert ran(scenario, "run-new") == ["search", "rank", "summarize"]
    assert marks(scenario, "run-new") == ["rank-facts"]  # recorded once


def test_a_run_killed_before_reaching_the_patch_takes_the_new_path(tmp_path: Path) -> None:
    scenario = Scenario(tmp_path)
    killed_after_search(scenario, "run-old", PATCHED)
    # the change is guarded where it happens, after search: the run never went past it
    completed(on(scenario, "patched-later", "run-old", PATCHED), NEW_OUTPUT)
    assert ran(scenario, "run-old") == ["search", "rank", "summarize"]
    assert marks(scenario, "run-old") == ["rank-facts"]


def test_a_new_version_deployed_beside_the_old_one_resumes_each_run_on_its_own(
    tmp_path: Path,
) -> None:
    scenario = Scenario(tmp_path)
    killed_after_search(scenario, "run-old", VERSIONED)
    killed_after_search(scenario, "run-gone", VERSIONED)

    # a deploy that dropped v1: refused before anything is written, naming what is missing
    before = len(scenario.events("run-gone"))
    gone = on(scenario, "v2-only", "run-gone", VERSIONED)
    assert gone.returncode == 1, gone.describe()
    assert (
        f"WorkflowVersionError: run run-gone was started by workflow {VERSIONED} v1, not "
        f"{VERSIONED} v2, and v1 is not registered in this process (registered versions: 2)"
    ) in gone.stderr
    assert len(scenario.events("run-gone")) == before

    # the deploy that keeps v1 (resume_only) beside v2
    completed(on(scenario, "versioned", "run-old", VERSIONED), OLD_OUTPUT)
    completed(on(scenario, "versioned", "run-gone", VERSIONED), OLD_OUTPUT)
    completed(on(scenario, "versioned", "run-new", VERSIONED), NEW_OUTPUT)
    versions = {
        run_id: [
            x.event.workflow_version
            for x in scenario.events(run_id)
            if isinstance(x.event, RunStarted)
        ]
        for run_id in ("run-old", "run-gone", "run-new")
    }
    assert versions == {"run-old": ["1"], "run-gone": ["1"], "run-new": ["2"]}
    assert ran(scenario, "run-old") == ["search", "summarize"]
    assert ran(scenario, "run-new") == ["search", "rank", "summarize"]
