"""The shipped example (``little.examples.pydantic_ai_research``) crashed and resumed through
the ``little`` CLI, as a user would: killed right after the model's second request returned,
the resume asks the model again for that request only; the chat export reads the run."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from tests.cli import little_cli


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_the_example_agent_crashes_and_resumes_asking_only_the_request_in_flight(
    tmp_path: Path,
) -> None:
    calls = tmp_path / "calls"
    env = {**os.environ, "LITTLE_EXAMPLE_CALLS_DIR": str(calls)}
    where = ["--data-dir", str(tmp_path / "d")]
    killed = little_cli(
        "run",
        "little.examples.pydantic_ai_research:brief",
        "--input",
        '"Kafka"',
        "--run-id",
        "ex1",
        *where,
        env={**env, "LITTLE_CRASH_AFTER_CALL": "2"},
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert (_lines(calls / "pyai-model.jsonl"), _lines(calls / "pyai-tool.jsonl")) == (2, 1)

    resumed = little_cli(
        "resume", "ex1", "--workflows", "little.examples.pydantic_ai_research", *where, env=env
    )
    assert resumed.returncode == 0, resumed.stderr
    report = little_cli("report", "ex1", "--json", *where, env=env)
    assert json.loads(report.stdout)["status"] == "completed", report.stdout
    # the search and the first request served from the log; the second asked again; a third
    assert (_lines(calls / "pyai-model.jsonl"), _lines(calls / "pyai-tool.jsonl")) == (4, 1)
    # the chat export rebuilds the session's native messages across the crash, checked
    # against their hashes: one line per answered request (the one called twice, once)
    export = little_cli("export", "ex1", "--format", "chat-jsonl", *where, env=env)
    assert export.returncode == 0, export.stderr
    lines = [json.loads(line) for line in export.stdout.splitlines()]
    assert [len(line["messages"]) for line in lines] == [3, 5, 7]
    assert lines[2]["messages"][-2:] == [
        {"role": "user", "content": "Shorter."},
        {"role": "assistant", "content": "A replicated log."},
    ]
