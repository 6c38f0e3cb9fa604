"""The redaction hook, end to end on the embedded world, across a real crash (SIGKILL after
the second model call returns) and a resume in a new process.

Secrets in the prompt, in a tool call's arguments and in a tool's result are never written
(not in the log, the artifacts or the processes' logs), the live tool call still gets the
argument the model gave it, the resume rebuilds the same requests from what was recorded (no
divergence), each event says which of its fields were redacted, and ``little report`` shows it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import little
from little.events import ModelCalled, ToolCallStarted, ToolCallSucceeded
from little.redaction import REDACTED, redact_keys, redact_values, redacted_paths
from little.replay import fold_run
from little.report import redactions
from tests.cli import little_cli
from tests.faults.support import check_stream, child_env, result_of, spawn_runner
from tests.faults.workflows import CALLS_DIR

PROMPT_SECRET, KEY, TOKEN = "4111-1111-1111-1111", "sk-live-KEY-3c9f0a", "tok-RESULT-77ab12"


def test_secrets_are_stripped_before_they_are_written_across_a_crash(tmp_path: Path) -> None:
    settings = {"LITTLE_DATA_DIR": str(tmp_path / "data"), "LITTLE_LOG_LEVEL": "debug"}
    calls = tmp_path / "calls"
    env = child_env(
        settings,
        **{CALLS_DIR: str(calls)},
        FAULTS_SECRETS=f"{PROMPT_SECRET},{KEY},{TOKEN}",
        LITTLE_REDACTOR="tests.faults.redactors:secrets",
    )
    log = tmp_path / "children.log"
    first = spawn_runner(
        ["run", "r1", "faults.secretive", "{}"], {**env, "LITTLE_CRASH_AFTER_CALL": "2"}, log
    )
    first.communicate(timeout=120)
    assert first.returncode == -9, log.read_text()[-3000:]  # killed after turn 2's answer
    again = spawn_runner(["resume", "r1"], env, log)
    out, _ = again.communicate(timeout=120)
    assert again.returncode == 0, log.read_text()[-3000:]
    assert result_of(out)["status"] == "completed"

    # the live tool calls got the real key; the model was asked turn 2 twice (the crash)
    tool_args = [
        json.loads(line)["args"] for line in (calls / "r1.tools.jsonl").read_text().splitlines()
    ]
    assert [a["api_key"] for a in tool_args] == [KEY, KEY]
    assert len((calls / "r1.model.jsonl").read_text().splitlines()) == 4

    # nothing written holds a secret: log, artifacts, the processes' logs
    written = [p for p in (tmp_path / "data").rglob("*") if p.is_file()] + [log]
    for path in written:
        data = path.read_bytes()
        for secret in (PROMPT_SECRET, KEY, TOKEN):
            assert secret.encode() not in data, f"{path} holds {secret}"

    with little.local_world(tmp_path / "data") as world:
        events = list(world.read_run("r1"))
        state, _, _ = fold_run(world, "r1", use_snapshot=False)
    check_stream(events)
    assert state.status == "completed"
    started = [e.event for e in events if isinstance(e.event, ToolCallStarted)]
    assert [json.loads(e.arguments_json)["api_key"] for e in started] == [REDACTED, REDACTED]
    succeeded = [e.event for e in events if isinstance(e.event, ToolCallSucceeded)]
    assert all(json.loads(e.result_json or "{}")["token"] == REDACTED for e in succeeded)
    first_call = next(e.event for e in events if isinstance(e.event, ModelCalled))
    assert redacted_paths(json.loads(first_call.appended_messages_json or "[]")) == ["[0].content"]

    found = {(r.event_type, r.field) for r in redactions(events)}
    assert ("harness.tool_call.started", "arguments.api_key") in found
    assert ("harness.tool_call.succeeded", "result.token") in found
    assert ("harness.model.called", "messages[0].content") in found

    report = little_cli("report", "r1", "--data-dir", str(tmp_path / "data"))
    assert report.returncode == 0, report.stderr
    assert "redacted:" in report.stdout
    assert "arguments.api_key" in report.stdout
    as_json = little_cli("report", "r1", "--json", "--data-dir", str(tmp_path / "data"))
    fields = {r["field"] for r in json.loads(as_json.stdout)["redacted"]}
    assert {"arguments.api_key", "result.token", "messages[0].content"} <= fields


@pytest.mark.parametrize(
    ("redactor", "value", "expected"),
    [
        (
            redact_keys("api_key"),
            {"API-Key": "x", "q": [{"api_key": 1}]},
            {"API-Key": REDACTED, "q": [{"api_key": REDACTED}]},
        ),
        (redact_values("s3"), {"a": "xs3y", "b": ["s3"]}, {"a": f"x{REDACTED}y", "b": [REDACTED]}),
        (redact_values("zz"), {"a": 1, "b": None}, {"a": 1, "b": None}),
    ],
)
def test_redactors_are_idempotent(
    redactor: little.redaction.Redactor, value: object, expected: object
) -> None:
    once = redactor("tool_arguments", value)
    assert once == expected
    assert redactor("tool_arguments", once) == once


def test_a_redactor_setting_that_names_nothing_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from little.settings import LittleSettings

    monkeypatch.setenv("LITTLE_REDACTOR", "tests.faults.redactors:nope")
    with pytest.raises(little.ConfigurationError, match="LITTLE_REDACTOR"):
        LittleSettings().world()
