"""A coordinator with no workflows refuses to start: it would fail every run it adopted."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def test_a_coordinator_without_workflows_refuses_to_start_in_one_line() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LITTLE_")}
    env["LITTLE_KAFKA_BOOTSTRAP"] = "127.0.0.1:1"  # never reached: it stops before connecting
    out = subprocess.run(
        [sys.executable, "-m", "little_services.resume_coordinator"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert out.returncode == 1
    lines = [json.loads(line) for line in out.stderr.splitlines() if line.startswith("{")]
    assert [line["event"] for line in lines] == ["coordinator_failed"]
    assert "no workflows are registered: set LITTLE_WORKFLOWS" in lines[0]["error"]


def test_an_unknown_missing_version_policy_is_one_line_naming_it() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LITTLE_")}
    env["LITTLE_KAFKA_BOOTSTRAP"] = "127.0.0.1:1"  # never reached: the settings are refused
    env["LITTLE_WORKFLOWS"] = "little.examples.research"
    env["LITTLE_MISSING_VERSION"] = "retry"
    out = subprocess.run(
        [sys.executable, "-m", "little_services.resume_coordinator"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert out.returncode == 1
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, out.stderr
    failed = json.loads(lines[0])
    assert failed["event"] == "coordinator_failed"
    assert failed["error"] == (
        "bad settings: LITTLE_MISSING_VERSION: Input should be 'fail' or 'park' (got 'retry')"
    )
