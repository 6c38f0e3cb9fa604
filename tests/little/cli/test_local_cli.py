"""``little run``, ``little resume`` and ``little runs`` on the embedded world (issue 15 item
10): a user starts their own workflow, replays it against a recorded run, resumes a run a
SIGKILL left behind, and lists the world's runs, all from the command line with no service."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.cli import little_cli

FLOWS = """
import os
from little.harness import ModelResponse, ScriptedModel
from little.runtime import workflow


def model(stage):
    log = os.path.join(os.environ["CALLS"], stage + ".jsonl")
    answer = ModelResponse(content=stage + " answer", finish_reason="stop")
    return ScriptedModel((answer,), invocation_log=log)


async def ask(step, stage, prompt):
    async with step.session(stage, model=model(stage)) as agent:
        return await agent.run(prompt)


@workflow("brief")
async def brief(ctx, topic):
    facts = await ctx.step("research", ask, "research", "Facts on " + topic)
    prompt = os.environ.get("WRITE_PROMPT", "Write: ")
    return await ctx.step("write", ask, "write", prompt + str(facts))


@workflow("broken")
async def broken(ctx, value):
    raise ValueError("no luck with " + str(value))


not_a_workflow = 42
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's project directory: their workflow module, and where its models log calls."""
    (tmp_path / "flows.py").write_text(FLOWS)
    (tmp_path / "calls").mkdir()
    return tmp_path


def little(project: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("LITTLE_") or k == "LITTLE_LOG_LEVEL"
    }
    return little_cli(
        *args,
        "--data-dir",
        str(project / "world"),
        cwd=project,
        env={**base, "CALLS": str(project / "calls"), **env},
    )


def invocations(project: Path, stage: str) -> int:
    path = project / "calls" / f"{stage}.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def one_line_error(out: subprocess.CompletedProcess[str], starts: str) -> None:
    assert out.returncode == 1, out.stdout + out.stderr
    assert out.stderr.startswith(f"error: {starts}"), out.stderr
    assert out.stderr.strip().count("\n") == 0, out.stderr
    assert "Traceback" not in out.stderr


def test_run_a_workflow_of_ones_own_then_replay_it_edited(project: Path) -> None:
    out = little(project, "run", "flows:brief", "--input", '"Kafka"', "--run-id", "run_a")
    assert out.returncode == 0, out.stderr
    assert "run run_a: completed" in out.stdout
    assert '"write answer"' in out.stdout
    assert (invocations(project, "research"), invocations(project, "write")) == (1, 1)

    edited = little(
        project,
        "run",
        "flows:brief",
        "--input",
        '"Kafka"',
        "--run-id",
        "run_b",
        "--replay-from",
        "run_a",
        "--json",
        WRITE_PROMPT="Write briefly: ",
    )
    assert edited.returncode == 0, edited.stderr
    result = json.loads(edited.stdout)
    assert (result["run_id"], result["status"], result["output"]) == (
        "run_b",
        "completed",
        "write answer",
    )
    assert result["replay"]["source_run_id"] == "run_a"
    assert (result["replay"]["replayed_calls"], result["replay"]["fresh_calls"]) == (1, 1)
    # research was answered from run_a's record; only the edited stage ran again
    assert (invocations(project, "research"), invocations(project, "write")) == (1, 2)

    # strict mode refuses any change of the source: a comment is one
    with (project / "flows.py").open("a") as f:
        f.write("# edited\n")
    strict = little(
        project,
        "run",
        "flows:brief",
        "--input",
        '"Kafka"',
        "--run-id",
        "run_s",
        "--replay-from",
        "run_a",
        "--replay-mode",
        "strict",
        "--json",
    )
    assert strict.returncode == 0, strict.stderr
    assert json.loads(strict.stdout)["replay"]["refused_reason"] == "source-changed"
    assert (invocations(project, "research"), invocations(project, "write")) == (2, 3)
    one_line_error(
        little(project, "run", "flows:brief", "--replay-mode", "strict"),
        "--replay-mode needs --replay-from",
    )

    listed = little(project, "runs", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {r["run_id"]: r for r in map(json.loads, listed.stdout.splitlines())}
    assert {
        k: (r["workflow"], r["status"], r["agent_calls"], r["replayed_calls"])
        for k, r in rows.items()
    } == {
        "run_a": ("brief", "completed", 2, 0),
        "run_b": ("brief", "completed", 2, 1),
        "run_s": ("brief", "completed", 2, 0),
    }
    assert rows["run_b"]["replay_source_run_id"] == "run_a"
    text = little(project, "runs")
    assert text.returncode == 0, text.stderr
    assert "2 (replayed=1)" in text.stdout
    assert "run_s" in text.stdout
    assert "(more runs than --limit 2)" not in text.stdout
    assert "(more runs than --limit 2)" in little(project, "runs", "--limit", "2").stdout


def test_resume_on_the_embedded_world_continues_a_killed_run_here(project: Path) -> None:
    killed = little(
        project,
        "run",
        "flows:brief",
        "--input",
        '"Kafka"',
        "--run-id",
        "run_c",
        LITTLE_CRASH_AFTER_CALL="1",  # after write's model call, before its record
    )
    assert killed.returncode == -9, killed.stdout + killed.stderr
    running = little(project, "runs", "--status", "running", "--json")
    assert [json.loads(line)["run_id"] for line in running.stdout.splitlines()] == ["run_c"]

    resumed = little(project, "resume", "run_c", "--workflows", "flows")
    assert resumed.returncode == 0, resumed.stderr
    assert "run run_c: completed" in resumed.stdout
    # research came from the log; write, in flight at the kill, was invoked once more
    assert (invocations(project, "research"), invocations(project, "write")) == (1, 2)
    one_line_error(
        little(project, "resume", "run_c", "--workflows", "flows"),
        "run run_c has already ended (completed)",
    )


def test_bad_input_is_one_line_and_records_nothing(project: Path) -> None:
    one_line_error(little(project, "run", "nosuch:flow"), "nosuch:flow: cannot import nosuch")
    one_line_error(
        little(project, "run", "flows:not_a_workflow"),
        "flows:not_a_workflow: flows.not_a_workflow is a int, not a workflow",
    )
    one_line_error(little(project, "run", "flows:missing"), "flows:missing: module flows has no")
    one_line_error(
        little(project, "run", "flows:brief", "--input", "{not json"), "--input is not JSON"
    )
    unknown = little(project, "run", "brief")
    one_line_error(unknown, "workflow 'brief' is not registered in this process")
    assert "name it as MODULE:WORKFLOW, or import its module with --workflows" in unknown.stderr
    one_line_error(little(project, "resume", "run_nope"), "run run_nope has no events")
    # nothing above reached the log
    assert little(project, "runs", "--json").stdout == ""
    failed = little(project, "run", "flows:broken", "--input", "7", "--run-id", "run_f")
    assert failed.returncode == 1
    assert "run run_f: failed" in failed.stdout
    assert failed.stderr.startswith("error: run run_f failed: ValueError: no luck with 7")


VERSIONED = FLOWS.replace(
    '@workflow("brief")\nasync def brief(', "{keep}\nasync def brief_v1("
).replace(
    '@workflow("broken")',
    """@workflow("brief", version="2")
async def brief(ctx, topic):
    facts = await ctx.step("research", ask, "research", "Facts on " + topic)
    return "v2: " + await ctx.step("write", ask, "write", "Write briefly: " + str(facts))


@workflow("broken")""",
)
"""flows.py after the deploy of v2 of brief: v1 kept as it was, under ``{keep}``."""


def test_resume_after_a_deploy_of_a_new_version_runs_the_version_the_run_started_on(
    project: Path,
) -> None:
    for run_id in ("run_v", "run_gone"):
        killed = little(
            project, "run", "flows:brief", "--input", '"Kafka"', "--run-id", run_id,
            LITTLE_CRASH_AFTER_CALL="1",
        )  # fmt: skip
        assert killed.returncode == -9, killed.stdout + killed.stderr
    running = little(project, "runs", "--status", "running", "--json")
    rows = [json.loads(line) for line in running.stdout.splitlines()]
    # what an operator asks before dropping v1: which runs in flight started on it
    assert [(r["run_id"], r["workflow_version"]) for r in rows] == [
        ("run_v", "1"),
        ("run_gone", "1"),
    ]
    assert "brief v1" in little(project, "runs").stdout
    keep = '@workflow("brief", version="1", resume_only=True)'
    (project / "flows.py").write_text(VERSIONED.replace("{keep}", keep))
    resumed = little(project, "resume", "run_v", "--workflows", "flows", "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["output"] == "write answer"  # v1's: no "v2: "
    fresh = little(project, "run", "brief", "--workflows", "flows", "--input", '"Kafka"')
    assert fresh.returncode == 0, fresh.stderr
    assert '"v2: write answer"' in fresh.stdout

    (project / "flows.py").write_text(VERSIONED.replace("{keep}", ""))  # v1 dropped
    one_line_error(
        little(project, "resume", "run_gone", "--workflows", "flows"),
        "run run_gone was started by workflow brief v1, which is not registered in this "
        "process (registered versions: 2); keep that version registered",
    )
