"""`little report`: the replayed run as a table or JSON; broken logs are one line, exit 1."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import little
from little.events import RunClaimed, RunStarted, StepStarted
from little.log import OutgoingRecord
from tests.cli import little_cli
from tests.sample_runs import first_writer, second_writer


def write_resumed_run(data: Path) -> None:
    with little.local_world(data) as world:
        world.append(first_writer("run-1"))
        world.append([RunClaimed(run_id="run-1", epoch=2, owner="w2", observed_seq=9)])
        world.append(second_writer("run-1", 9))


def test_report_json_has_steps_billed_and_avoided_with_decimal_dollars(tmp_path: Path) -> None:
    write_resumed_run(tmp_path)
    out = little_cli("report", "run-1", "--json", "--data-dir", str(tmp_path))
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["status"] == "completed"
    assert [(s["step_path"], s["status"], s["visits"]) for s in report["steps"]] == [
        ("plan", "completed", 1),
        ("research", "completed", 1),
    ]
    assert report["billed"]["calls"] == 2
    assert report["avoided"]["calls"] == 1
    assert report["avoided"]["input_tokens"] == 1_200
    billed = Decimal(report["billed"]["cost_usd"])  # a decimal string, never a float
    assert billed > 0
    assert report["epoch"] == 2
    assert report["accepted_claims"] == 2


def test_report_table(tmp_path: Path) -> None:
    write_resumed_run(tmp_path)
    out = little_cli("report", "run-1", "--data-dir", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "status completed" in out.stdout
    assert "billed:  2 model call(s)" in out.stdout
    assert "avoided: 1 model call(s)" in out.stdout


def test_unpriced_model_is_shown_as_unpriced(tmp_path: Path) -> None:
    from little.events import ModelCalled, ModelResponded, SessionStarted, Usage

    with little.local_world(tmp_path) as world:
        world.append(
            [
                RunClaimed(run_id="u", owner="me", observed_seq=-1),
                RunStarted(run_id="u", seq=0, workflow="wf", workflow_version="1"),
                SessionStarted(
                    run_id="u",
                    seq=1,
                    session_id="s",
                    session_name="a",
                    model="x:y",
                    manifest_json="{}",
                    manifest_hash="h",
                ),
                ModelCalled(
                    run_id="u",
                    seq=2,
                    session_id="s",
                    turn=1,
                    provider="acme",
                    model="secret-model",
                    request_hash="r",
                    message_count=1,
                ),
                ModelResponded(
                    run_id="u",
                    seq=3,
                    session_id="s",
                    turn=1,
                    provider="acme",
                    model="secret-model",
                    request_hash="r",
                    usage=Usage(input_tokens=10, output_tokens=5),
                ),
            ]
        )
    out = little_cli("report", "u", "--data-dir", str(tmp_path))
    assert "unpriced (1 call)" in out.stdout
    report = json.loads(little_cli("report", "u", "--json", "--data-dir", str(tmp_path)).stdout)
    assert report["billed"]["cost_usd"] is None
    assert report["billed"]["unpriced_calls"] == 1


def test_seq_gap_is_one_line_naming_run_event_and_offset(tmp_path: Path) -> None:
    with little.local_world(tmp_path) as world:
        world.append(
            [
                RunClaimed(run_id="g", owner="me", observed_seq=-1),
                RunStarted(run_id="g", seq=0, workflow="wf", workflow_version="1"),
                StepStarted(run_id="g", seq=5, step_path="s", step_id="s"),
            ]
        )
    out = little_cli("report", "g", "--data-dir", str(tmp_path))
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("error: run g: seq gap: expected seq 1, found 5 (StepStarted event")
    assert "offset 2" in lines[0]
    verbose = little_cli("--verbose", "report", "g", "--data-dir", str(tmp_path))
    assert verbose.returncode == 1
    assert "Traceback" in verbose.stderr


def test_undecodable_record_is_one_line(tmp_path: Path) -> None:
    with little.local_world(tmp_path) as world:
        world.append([RunClaimed(run_id="d", owner="me", observed_seq=-1)])
        pos = world.log.append("d", [OutgoingRecord(b"\xc3\x01" + b"\xff" * 8)])[0]
    out = little_cli("report", "d", "--data-dir", str(tmp_path))
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1
    assert (
        f"run d: record at partition {pos.partition} offset {pos.offset} does not decode"
        in out.stderr
    )
    assert "unknown-fingerprint" in out.stderr


def test_tampered_artifact_is_one_line(tmp_path: Path) -> None:
    from little.events import StepCompleted

    with little.local_world(tmp_path) as world:
        ref = world.artifacts.put("a", b'"big output"', "application/json")
        world.append(
            [
                RunClaimed(run_id="a", owner="me", observed_seq=-1),
                StepCompleted(run_id="a", seq=0, step_path="s", step_id="s", output_ref=ref),
            ]
        )
        world.artifacts.path_for(ref.sha256).write_bytes(b"changed")
    out = little_cli("report", "a", "--data-dir", str(tmp_path))
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1
    assert "error: run a: artifact output of step s" in out.stderr
