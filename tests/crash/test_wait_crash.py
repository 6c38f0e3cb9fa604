"""A run killed with SIGKILL while it waits (issue 11): the process hosting the wait (``little
run``, which wakes the run when it can go on) is killed while the run is suspended on a timer,
a signal or an approval; a new process (``little resume``) takes it up. The wake-up happens
once, no earlier than its due time, and nothing before the wait runs again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import little
from little.events import Event, RunSuspended, WaitEnded, WaitStarted
from tests.cli import LITTLE, little_cli
from tests.little.runtime.waits import flows


def env(tmp_path: Path) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k != "LITTLE_KAFKA_BOOTSTRAP"}
    return {
        **base,
        flows.LOG: str(tmp_path / "steps.jsonl"),
        "LITTLE_DATA_DIR": str(tmp_path / "world"),
        "LITTLE_WAIT_HOLD_SECONDS": "0",
    }


def events(tmp_path: Path, run_id: str) -> list[Event]:
    with little.local_world(tmp_path / "world") as world:
        return [x.event for x in world.read_run(run_id)]


def host_until(
    tmp_path: Path, run_id: str, args: list[str], ready: Callable[[list[Event]], bool]
) -> None:
    """Start ``little run`` hosting the run, wait for the log to show ``ready``, SIGKILL it."""
    proc = subprocess.Popen(
        [*LITTLE, "run", *args, "--run-id", run_id],
        env=env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not ready(events(tmp_path, run_id)):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the run never reached its wait"
            time.sleep(0.05)  # polling the log for the event, not standing in for it
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def suspended(log: list[Event]) -> bool:
    return any(isinstance(e, RunSuspended) for e in log)


def steps(tmp_path: Path) -> list[tuple[str, int]]:
    return [(s["step"], s["pid"]) for s in flows.steps(tmp_path / "steps.jsonl")]


def resume(tmp_path: Path, run_id: str) -> dict[str, object]:
    done = little_cli(
        "resume",
        run_id,
        "--workflows",
        "tests.little.runtime.waits.flows",
        "--json",
        env=env(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "completed", result
    return dict(result)


def test_killed_while_sleeping_a_new_process_wakes_it_once_at_its_due_time(tmp_path: Path) -> None:
    run_id = "run_nap_killed"
    host_until(
        tmp_path,
        run_id,
        ["tests.little.runtime.waits.flows:nap", "--input", '{"seconds": 2}'],
        suspended,
    )
    killed_steps = steps(tmp_path)
    assert [s for s, _ in killed_steps] == ["before"]

    result = resume(tmp_path, run_id)
    assert result["output"] == {"slept": 2}
    log = events(tmp_path, run_id)
    (started,) = [e for e in log if isinstance(e, WaitStarted)]
    (ended,) = [e for e in log if isinstance(e, WaitEnded)]
    assert ended.outcome == "fired"
    assert started.due_at is not None
    assert ended.occurred_at >= started.due_at  # woken at its due time, not earlier
    after = steps(tmp_path)
    assert [s for s, _ in after] == ["before", "after"]  # once each, across both processes
    assert after[0][1] != after[1][1]


def test_killed_while_waiting_for_a_signal_the_signal_reaches_it_in_a_new_process(
    tmp_path: Path,
) -> None:
    run_id = "run_order_killed"
    host_until(tmp_path, run_id, ["tests.little.runtime.waits.flows:order"], suspended)
    sent = little_cli("signal", run_id, "approved", "--data", '{"by": "ana"}', env=env(tmp_path))
    assert sent.returncode == 0, sent.stderr
    result = resume(tmp_path, run_id)
    assert result["output"] == {"decision": {"by": "ana"}, "shipped": "ship"}
    assert [s for s, _ in steps(tmp_path)] == ["placed", "ship"]
    received = [e for e in events(tmp_path, run_id) if isinstance(e, WaitEnded)]
    assert [e.outcome for e in received] == ["received"]


def test_killed_while_waiting_for_an_approval_the_tool_runs_once_after_it(tmp_path: Path) -> None:
    run_id = "run_pay_killed"

    def asked(log: list[Event]) -> bool:
        return suspended(log) and any(
            isinstance(e, WaitStarted) and e.kind == "approval" for e in log
        )

    host_until(tmp_path, run_id, ["tests.little.runtime.waits.flows:pay"], asked)
    refused = little_cli("approve", run_id, "no-such-call", env=env(tmp_path))
    assert refused.returncode == 1
    assert "asked for no approval of call 'no-such-call'" in refused.stderr
    approved = little_cli("approve", run_id, "agent#banker/1:t1", env=env(tmp_path))
    assert approved.returncode == 0, approved.stderr
    result = resume(tmp_path, run_id)
    assert result["output"] == 'done: {"sent":250}'
    assert [s for s, _ in steps(tmp_path)] == ["transfer"]
