"""The CLI: the demo works on a fresh directory; failures are one line and exit non-zero."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.cli import little_cli


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return little_cli(*args, cwd=cwd)


def test_demo_crashes_and_resumes_a_run(tmp_path: Path) -> None:
    out = run("demo", "--data-dir", str(tmp_path / "demo"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "was killed with SIGKILL (exit -9)" in text
    assert "plan │ completed │ skip (output from the log)" in text
    assert "investigate │ running │ run" in text
    assert "model turn 1 │ responded │ served from the log" in text
    assert "model turn 2 │ called │ invoke again" in text
    assert "turn 1: 1, turn 2: 2, turn 3: 1 -> only turn 2 ran again" in text
    assert "search(1:c1), search(2:c2), fetch(2:c3) (each once)" in text
    assert "status completed" in text
    assert "avoided: 1 model call(s), 1,200 in / 80 out" in text
    # then the last stage is edited and the workflow re-run against the finished run
    assert "1/1 agent call(s) reused a recorded run (not fresh evidence)" in text
    assert "model and tool invocations during the re-run: 0; billed: 0 model call(s)" in text
    # the served call avoided what the first run paid for it: all three of its model calls
    assert (
        "avoided: 3 model call(s), $0.000922 (the first run paid 3 model call(s), $0.000922)"
        in text
    )
    assert "Output: 'BRIEF: " in text


def test_events_of_unknown_run_is_one_line_and_non_zero(tmp_path: Path) -> None:
    out = run("events", "nope", "--data-dir", str(tmp_path), cwd=tmp_path)
    assert out.returncode == 1
    assert out.stderr.strip().count("\n") == 0
    assert out.stderr.startswith("error: run nope has no events")
    assert "Traceback" not in out.stderr


def test_events_of_a_demo_run_as_json(tmp_path: Path) -> None:
    demo = run("demo", "--data-dir", str(tmp_path / "d"), cwd=tmp_path)
    run_id = demo.stdout.split(" as ")[1].split()[0]
    out = run("events", run_id, "--json", "--data-dir", str(tmp_path / "d"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) > 30
    assert '"type": "RunClaimed"' in lines[0]


def test_unreachable_broker_is_one_line(tmp_path: Path) -> None:
    out = run(
        "topics", "apply", "--bootstrap-servers", "127.0.0.1:1", "--timeout", "2", cwd=tmp_path
    )
    assert out.returncode == 1
    assert "no Kafka broker answered at 127.0.0.1:1" in out.stderr
    assert "Traceback" not in out.stderr


def test_framework_demo_crashes_and_resumes_a_pydantic_ai_agent(tmp_path: Path) -> None:
    out = run(
        "demo", "--framework", "pydantic-ai", "--data-dir", str(tmp_path / "demo"), cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "ran a Pydantic AI agent (under little.integrations.pydantic_ai.durable)" in text
    assert "was killed with SIGKILL (exit -9)" in text
    assert "agent call 0 │ admitted │ run again, its calls:" in text
    assert "model request 1 │ responded │ served from the log" in text
    assert "tool search (1:s1) │ succeeded │ served from the log" in text
    assert "model request 2 │ called │ invoke again" in text
    # counted in the invocation files, across the SIGKILL
    assert "request 1: 1, request 2: 2, request 3: 1 -> only request 2 ran again" in text
    assert "real tool invocations: search('kafka log') (once)" in text
    assert "status completed" in text
    assert "avoided: 1 model call(s), 440 in / 60 out" in text
    # the follow-up edited and re-run against the finished run: the first call served
    assert "1/2 agent call(s) reused a recorded run (not fresh evidence)" in text
    assert "diverged at call 1 (research/researcher#1): key-mismatch" in text
    assert "during the re-run: 1 model request(s) and 0 tool invocation(s) made" in text


def test_framework_demo_of_an_unknown_framework_is_one_line(tmp_path: Path) -> None:
    out = run("demo", "--framework", "crewai", "--data-dir", str(tmp_path / "d"), cwd=tmp_path)
    assert out.returncode == 1
    assert "unknown framework 'crewai' (known: pydantic-ai, openai-agents)" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.slow
def test_framework_demo_crashes_and_resumes_an_openai_agents_sdk_agent(tmp_path: Path) -> None:
    out = run(
        "demo", "--framework", "openai-agents", "--data-dir", str(tmp_path / "d"), cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "ran an OpenAI Agents SDK agent (under little.integrations.openai_agents" in text
    assert "was killed with SIGKILL (exit -9)" in text
    assert "model request 1 │ responded │ served from the log" in text
    assert "tool lookup_order (1:call_1) │ succeeded │ served from the log" in text
    assert "model request 2 │ called │ invoke again" in text
    assert "request 1: 1, request 2: 2, request 3: 1 -> only request 2 ran again" in text
    assert "real tool invocations: lookup_order('A1') (once)" in text
    assert "status completed" in text
    assert "1/2 agent call(s) reused a recorded run (not fresh evidence)" in text
    assert "during the re-run: 1 model request(s) and 0 tool invocation(s) made" in text
