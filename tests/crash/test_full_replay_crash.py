"""A full replay killed with SIGKILL while its named model answers (issue 15 item 5): a new
process resumes it with the model its RunStarted names, the answered turn and the served
receipt come from its own log, only the call in flight is asked again, and no tool runs."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import little
from little.events import ModelCalled, ToolCallFailed, ToolCallSucceeded
from little.runtime import run
from tests.cli import LITTLE, little_cli
from tests.little.runtime import full_replay_workflows as fw

MODEL = "tests.little.runtime.full_replay_workflows:hanging_calls"


def test_a_killed_full_replay_resumes_with_its_model_and_runs_no_tool(tmp_path: Path) -> None:
    data = tmp_path / "world"
    calls = tmp_path / "calls"
    calls.mkdir()
    with little.local_world(data) as world:
        source = asyncio.run(run(world, fw.research, "kafka")).run_id
    env = {
        **{k: v for k, v in os.environ.items() if k != "LITTLE_KAFKA_BOOTSTRAP"},
        "LITTLE_DATA_DIR": str(data),
        fw.CALLS_DIR: str(calls),
    }
    flows = ["--workflows", "tests.little.runtime.full_replay_workflows"]
    args = ["replay", source, "--mode", "full", "--model", MODEL, "--run-id", "full-k", *flows]
    proc = subprocess.Popen(
        [*LITTLE, *args], env={**env, fw.HANG_AT: "2"}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:  # polling the log for the event, not standing in for it
            with little.local_world(data) as world:
                turns = [
                    x.event for x in world.read_run("full-k") if isinstance(x.event, ModelCalled)
                ]
            log = calls / "model.jsonl"
            asked = log.read_text().splitlines() if log.exists() else []
            # turn 2 is in flight once it is recorded AND the model was asked it (its
            # invocation line): killed between the two, the model was never asked twice
            if any(e.turn == 2 for e in turns) and any(
                json.loads(line).get("turn") == 2 for line in asked if line.strip()
            ):
                break
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the full replay never reached turn 2"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    resumed = little_cli("resume", "full-k", *flows, "--json", env=env)  # no model named: the log's
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["status"] == "completed"

    invoked = [json.loads(line) for line in (calls / "model.jsonl").read_text().splitlines()]
    by_turn = Counter(i["turn"] for i in invoked)
    assert by_turn == {1: 1, 2: 2, 3: 1}  # only the call in flight was asked again
    assert len({i["pid"] for i in invoked if i["turn"] == 2}) == 2
    assert not (calls / "lookups.jsonl").exists()  # no tool ran, in either process
    with little.local_world(data) as world:
        log = [x.event for x in world.read_run("full-k")]
        report = little.replay_run(world, "full-k").state
    served = [e for e in log if isinstance(e, ToolCallSucceeded)]
    assert [(e.tool, e.replayed_from_run_id) for e in served] == [("lookup", source)]
    failed = [e for e in log if isinstance(e, ToolCallFailed)]
    assert [e.error_type for e in failed] == ["ToolNotRecorded"]
    assert report.replay_mode == "full"
    assert report.interrupted_model_calls == 1  # the provider may have billed it
