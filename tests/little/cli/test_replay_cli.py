"""``little replay <run>`` (issue 15 items 1-3, the modes built so far): inference-skipping
rebuilds the run from its log; partial folds from a cursor and says, event by event, what
each changed. Both only read."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

import little
from little.events import ModelResponded
from little.replay import replay_run, state_changes, step_through
from little.runtime import run
from tests.cli import little_cli
from tests.little.runtime import replay_workflows as rw

_versions = itertools.count()


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[Path, str, int]:
    """A completed pipeline run, and the seq of its last model response (the write stage)."""
    with little.local_world(tmp_path) as world:
        result = asyncio.run(run(world, rw.version(f"replay-cli-{next(_versions)}"), "Kafka"))
        assert result.status == "completed"
        responded = [
            x.event.seq
            for x in world.read_run(result.run_id)
            if isinstance(x.event, ModelResponded)
        ]
    return tmp_path, result.run_id, responded[-1]


def replay(data_dir: Path, *args: str) -> tuple[int, str, str]:
    out = little_cli("replay", *args, "--data-dir", str(data_dir))
    return out.returncode, out.stdout, out.stderr


def test_partial_steps_through_a_range_saying_what_each_event_changed(
    recorded: tuple[Path, str, int],
) -> None:
    data_dir, run_id, seq = recorded
    code, out, err = replay(
        data_dir,
        run_id,
        "--mode",
        "partial",
        "--from-seq",
        str(seq),
        "--to-seq",
        str(seq),
        "--step",
    )
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"seq {seq} harness.model.responded (")
    changes = [line.strip() for line in lines[1:-1]]
    assert "sessions[write#write].turns[1].status: 'called' -> 'responded'" in changes
    assert "usage.calls: 2 -> 3" in changes
    assert "steps[write].usage.calls: 0 -> 1" in changes
    assert lines[-1].startswith(
        f"partial from seq {seq}: 1 event(s) applied, seq {seq} to {seq}; status running"
    )

    code, out, err = replay(data_dir, run_id, "--mode", "partial", "--from-seq", str(seq), "--json")
    assert code == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert rows[0]["seq"] == seq
    assert rows[-1]["type"] == "RunCompleted"
    assert "status: 'running' -> 'completed'" in rows[-1]["changes"]


def test_inference_skipping_rebuilds_the_run_from_its_log(recorded: tuple[Path, str, int]) -> None:
    data_dir, run_id, _ = recorded
    code, out, err = replay(data_dir, run_id)
    assert code == 0, err
    assert out.startswith("inference-skipping: rebuilt from the log; no model or tool was invoked")
    assert "status completed" in out
    code, out, err = replay(data_dir, run_id, "--json")
    assert code == 0, err
    assert json.loads(out)["billed"]["calls"] == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--mode", "partial", "--from-seq", "5", "--to-seq", "2"],
            "--to-seq 2 is before --from-seq 5",
        ),
        (["--mode", "partial", "--from-seq", "500"], "no event from seq 500 (its last is seq "),
        (
            ["--step"],
            "--from-seq, --from-offset, --from-snapshot, --to-seq and --step are for --mode partial",
        ),
        (
            ["--mode", "partial", "--from-seq", "2", "--from-offset", "3"],
            "choose one cursor: --from-seq, --from-offset or --from-snapshot",
        ),
        (["--mode", "partial", "--from-snapshot"], "has no usable snapshot"),
        (["--model", "openai:gpt-4o"], "--model, --live-tools and --run-id are for --mode full"),
        (["--all"], "--all replaces the run id (projection-only)"),
        (
            ["--mode", "projection-only", "--rebuild"],
            "--rebuild is for --mode projection-only --all",
        ),
    ],
)
def test_bad_ranges_are_one_line(
    recorded: tuple[Path, str, int], args: list[str], message: str
) -> None:
    data_dir, run_id, _ = recorded
    code, _, err = replay(data_dir, run_id, *args)
    assert code == 1
    assert message in err
    assert err.strip().count("\n") == 0


def test_state_changes_name_items_by_their_key(tmp_path: Path) -> None:
    with little.local_world(tmp_path) as world:
        result = asyncio.run(run(world, rw.version(f"replay-cli-{next(_versions)}"), "Kafka"))
        events = list(world.read_run(result.run_id))
        folded = replay_run(world, result.run_id, use_snapshot=False).state
    applied = list(step_through(events, result.run_id))
    assert applied[-1].state == folded
    started = next(a for a in applied if a.event.event.type == "StepStarted")
    assert started.changes == ("+ steps[research]",)
    assert state_changes(applied[-1].state, applied[-1].state) == []


def test_the_range_is_bounded_by_accepted_events_not_by_a_zombies(tmp_path: Path) -> None:
    """A writer fenced by a newer claim goes on writing seqs the new writer writes too: the
    range starts and ends at the accepted events, and a claim after the last is not in it."""
    from little.events import LoggedEvent, RunClaimed, RunStarted, StepCompleted, StepStarted

    run_id = "run_zombie"

    def at(offset: int, event: Any) -> LoggedEvent:
        return LoggedEvent(event, 0, offset)

    events = [
        at(0, RunClaimed(run_id=run_id, epoch=1, owner="w1", observed_seq=-1)),
        at(1, RunStarted(run_id=run_id, seq=0, epoch=1, workflow="wf", workflow_version="1")),
        at(2, StepStarted(run_id=run_id, seq=1, epoch=1, step_path="s", step_id="s")),
        at(3, RunClaimed(run_id=run_id, epoch=2, owner="w2", observed_seq=1)),
        at(4, StepCompleted(run_id=run_id, seq=2, epoch=1, step_path="s", step_id="s")),
        at(5, StepStarted(run_id=run_id, seq=2, epoch=2, step_path="t", step_id="t")),
        at(6, RunClaimed(run_id=run_id, epoch=3, owner="w3", observed_seq=2)),
    ]
    applied = list(step_through(events, run_id, from_seq=1, to_seq=2))
    assert [(a.event.offset, a.accepted) for a in applied] == [
        (2, True),
        (3, True),
        (4, False),
        (5, True),
    ]  # not the claim at offset 6, after the range's last event
    assert applied[2].changes == ("fenced_events: 0 -> 1",)
    assert "+ steps[t]" in applied[3].changes
    # a range starting at seq 2 starts at the accepted seq 2, not the zombie's
    (only,) = step_through(events, run_id, from_seq=2, to_seq=2)
    assert only.event.offset == 5
    assert (only.before.epoch, only.before.fenced_events) == (2, 1)


def test_partial_from_a_partition_offset_starts_at_the_runs_event_there(
    recorded: tuple[Path, str, int],
) -> None:
    data_dir, run_id, seq = recorded
    with little.local_world(data_dir) as world:
        (row,) = [x for x in world.read_run(run_id) if x.event.seq == seq]
    code, out, err = replay(
        data_dir, run_id, "--mode", "partial", "--from-offset", str(row.offset), "--step"
    )
    assert code == 0, err
    lines = out.strip().splitlines()
    assert lines[0] == f"seq {seq} harness.model.responded ({row.partition}:{row.offset})"
    assert lines[-1].startswith(f"partial from offset {row.offset}: ")


def test_partial_from_the_snapshot_folds_only_what_came_after_it(
    recorded: tuple[Path, str, int],
) -> None:
    from little.replay import Snapshot, encode_snapshot, materialize_run_state_from_events

    data_dir, run_id, seq = recorded
    with little.local_world(data_dir) as world:
        rows = list(world.read_run(run_id))
        cut = next(i for i, x in enumerate(rows) if x.event.seq == seq)
        before = materialize_run_state_from_events(rows[:cut], run_id=run_id)
        world.snapshots.put(run_id, encode_snapshot(Snapshot.of(before)))
        api = asyncio.run(little.replay_in_mode(world, run_id, mode="partial", from_snapshot=True))
        whole = replay_run(world, run_id, use_snapshot=False).state
    assert api.cursor.startswith(f"snapshot at {rows[cut - 1].partition}:{rows[cut - 1].offset}")
    assert next(a.event.event.seq for a in api.applied) == seq  # nothing before the snapshot
    assert len(api.applied) == len(rows) - cut
    assert api.state == whole  # the snapshot and what came after it make the whole run
    code, out, err = replay(data_dir, run_id, "--mode", "partial", "--from-snapshot")
    assert code == 0, err
    assert out.startswith(f"partial from {api.cursor}: {len(rows) - cut} event(s) applied")


def test_projection_only_folds_one_run_or_every_run_and_executes_nothing(
    recorded: tuple[Path, str, int],
) -> None:
    data_dir, run_id, _ = recorded
    with little.local_world(data_dir) as world:
        second = asyncio.run(run(world, rw.version(f"replay-cli-{next(_versions)}"), "Raft"))
        events = {r: len(list(world.read_run(r))) for r in (run_id, second.run_id)}
        one = asyncio.run(little.replay_in_mode(world, run_id, mode="projection-only"))
        every = asyncio.run(little.replay_in_mode(world, None, mode="projection-only"))
        expected = {r: replay_run(world, r).state for r in (run_id, second.run_id)}
    assert one.states == (expected[run_id],)
    assert {s.run_id: s for s in every.states} == expected
    assert every.unreadable == ()
    code, out, err = replay(data_dir, run_id, "--mode", "projection-only")
    assert code == 0, err
    assert out.startswith("projection-only: folded from the log; nothing was executed")
    assert f"run {run_id}" in out
    code, out, err = replay(data_dir, "--mode", "projection-only", "--all", "--json")
    assert code == 0, err
    rows = {r["run_id"]: r for r in map(json.loads, out.splitlines())}
    assert {r: rows[r]["status"] for r in rows} == {run_id: "completed", second.run_id: "completed"}
    code, out, err = replay(data_dir, "--mode", "projection-only", "--all")  # read-only
    assert code == 0, err
    assert f"projections folded from embedded:{data_dir}" in out
    assert not (data_dir / "projection.sqlite3").exists()  # no store was written
    # the projector's rebuild, through the same command (little-services is installed here)
    code, out, err = replay(data_dir, "--mode", "projection-only", "--all", "--rebuild")
    assert code == 0, err
    assert "projection rebuilt from the earliest offsets" in out
    assert "2 completed" in out
    with little.local_world(data_dir) as world:  # it read the runs, and wrote none
        assert {r: len(list(world.read_run(r))) for r in events} == events
