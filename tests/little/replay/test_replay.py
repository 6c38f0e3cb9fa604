"""replay_run on the embedded world: read-only, idempotent, immutable, snapshot-aware, and
clear about broken logs and artifacts."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

import little
from little._canonical import canonical_json
from little.events import (
    ArtifactRef,
    LoggedEvent,
    RunClaimed,
    RunStarted,
    StepCompleted,
    StepStarted,
    SubRunReserved,
)
from little.log import EventLog, OutgoingRecord, Position
from little.replay import (
    ArtifactMismatchError,
    ParallelBranchMismatchError,
    Snapshot,
    StreamIntegrityError,
    assert_completed_parallel_replay_matches_input,
    assert_completed_step_artifacts_valid,
    assert_harness_manifest_consistent,
    branch_set_hash,
    encode_snapshot,
    replay_run,
)
from little.replay._state import MaterializedRunState
from tests.paths import REPO
from tests.sample_runs import first_writer, second_writer


class WatchedLog(EventLog):
    """The real embedded log, recording which runs are read and refusing every write."""

    def __init__(self, inner: EventLog) -> None:
        self.inner = inner
        self.topic = inner.topic
        self.partitions = inner.partitions
        self.runs_read: list[str] = []

    def _start(self, run_id: str, records: Any, pending: Any, after: Any) -> None:
        raise AssertionError(f"replay wrote to the log (run {run_id})")

    def read_run(self, run_id: str, *, after: Position | None = None) -> Iterator[Any]:
        self.runs_read.append(run_id)
        return self.inner.read_run(run_id, after=after)

    def read_partition(self, partition: int, offset: int, **kw: Any) -> Any:
        return self.inner.read_partition(partition, offset, **kw)

    def end_offsets(self) -> dict[int, int]:
        return self.inner.end_offsets()

    def first_offset(self, run_id: str) -> int | None:
        return self.inner.first_offset(run_id)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[little.World]:
    with little.local_world(tmp_path / "w") as w:
        yield w


def crashed_and_resumed(world: little.World, run_id: str = "run-1") -> None:
    world.append(first_writer(run_id))
    observed = 9
    world.append([RunClaimed(run_id=run_id, epoch=2, owner="w2", observed_seq=observed)])
    world.append(second_writer(run_id, observed))


def test_replay_is_read_only_and_reads_only_the_run_itself(world: little.World) -> None:
    crashed_and_resumed(world)
    world.append(
        [
            SubRunReserved(
                run_id="run-1", seq=14, epoch=2, sub_run_id="sub-1", workflow="child", step_path="x"
            )
        ]
    )
    world.append([RunStarted(run_id="sub-1", seq=0, workflow="child", workflow_version="1")])
    watched = WatchedLog(world.log)
    result = replay_run(dataclasses.replace(world, log=watched), "run-1")
    assert watched.runs_read == ["run-1"]
    assert [s.sub_run_id for s in result.state.sub_runs] == ["sub-1"]


def test_replay_plan_and_state(world: little.World) -> None:
    world.append(first_writer("run-1"))
    result = replay_run(world, "run-1")
    assert result.completed_step_paths == ("plan",)
    assert result.pending_step_paths == ("research",)
    plan = {s.step_path: s for s in result.steps}
    assert plan["plan"].should_run is False
    assert plan["plan"].output == ["search", "summarise"]
    assert plan["research"].status == "running"
    session = result.state.session("research#agent")
    assert session is not None
    assert [(t.turn, t.status) for t in session.turns] == [(1, "responded"), (2, "called")]
    assert [(c.call_id, c.status) for c in session.tool_calls] == [("c1", "succeeded")]


def test_two_replays_are_equal_and_deeply_immutable(world: little.World) -> None:
    crashed_and_resumed(world)
    a, b = replay_run(world, "run-1"), replay_run(world, "run-1")
    assert a == b
    with pytest.raises(Exception, match="frozen"):
        a.state.status = "failed"  # type: ignore[misc]
    with pytest.raises(Exception, match="frozen"):
        a.steps[0].should_run = True  # type: ignore[misc]
    assert isinstance(a.steps, tuple)
    assert isinstance(a.state.steps, tuple)
    output = a.steps[0].output
    output.append("mutated")
    assert a.steps[0].output == ["search", "summarise"]
    assert a == b


def test_artifacts_are_hydrated_and_verified(world: little.World, tmp_path: Path) -> None:
    payload = canonical_json({"report": "long text"}).encode()
    ref = world.artifacts.put("run-a", payload, "application/json")
    extra = world.artifacts.put("run-a", b"\x89PNG...", "image/png")
    world.append(
        [
            RunClaimed(run_id="run-a", owner="me", observed_seq=-1),
            RunStarted(run_id="run-a", seq=0, workflow="wf", workflow_version="1"),
            StepStarted(run_id="run-a", seq=1, step_path="s", step_id="s"),
            StepCompleted(
                run_id="run-a",
                seq=2,
                step_path="s",
                step_id="s",
                output_ref=ref,
                artifact_refs=(extra,),
            ),
        ]
    )
    result = replay_run(world, "run-a")
    assert {(a.name, a.payload) for a in result.artifacts} == {
        ("output", payload),
        ("artifact[0]", b"\x89PNG..."),
    }
    assert_completed_step_artifacts_valid(result.state, world.artifacts.get)

    world.artifacts.path_for(ref.sha256).write_bytes(b"tampered")
    with pytest.raises(ArtifactMismatchError, match=r"run run-a: artifact output of step s"):
        replay_run(world, "run-a")
    with pytest.raises(ArtifactMismatchError, match=r"step s \(StepCompleted .* offset 3\)"):
        assert_completed_step_artifacts_valid(result.state, world.artifacts.get)


def test_artifact_of_another_run_is_refused(world: little.World) -> None:
    foreign = world.artifacts.put("other-run", b"x")
    state = little.replay.materialize_run_state_from_events(
        [
            RunClaimed(run_id="r", owner="me", observed_seq=-1),
            StepCompleted(run_id="r", seq=0, step_path="s", step_id="s", output_ref=foreign),
        ]
    )
    with pytest.raises(ArtifactMismatchError, match="of run other-run"):
        assert_completed_step_artifacts_valid(state, world.artifacts.get)


def test_inline_output_must_match_its_artifact(world: little.World) -> None:
    ref = world.artifacts.put("r", b'"a"')
    state = little.replay.materialize_run_state_from_events(
        [
            RunClaimed(run_id="r", owner="me", observed_seq=-1),
            StepCompleted(
                run_id="r", seq=0, step_path="s", step_id="s", output_json='"b"', output_ref=ref
            ),
        ]
    )
    with pytest.raises(ArtifactMismatchError, match="differs from the output recorded inline"):
        assert_completed_step_artifacts_valid(state, world.artifacts.get)


def test_parallel_and_manifest_checks() -> None:
    from little.events import ParallelBranchScheduled
    from tests.sample_runs import MANIFEST, SESSION

    events = [
        *first_writer("r"),
        ParallelBranchScheduled(
            run_id="r",
            seq=10,
            step_path="fanout",
            branches=("a", "b"),
            branch_set_hash=branch_set_hash(["a", "b"]),
        ),
    ]
    state = little.replay.materialize_run_state_from_events(events)
    assert_completed_parallel_replay_matches_input(state, "fanout", ["a", "b"])
    assert_completed_parallel_replay_matches_input(state, "never-scheduled", ["z"])
    with pytest.raises(
        ParallelBranchMismatchError,
        match=r"recorded branches \['a', 'b'\] but resolves to \['a', 'c'\]",
    ):
        assert_completed_parallel_replay_matches_input(state, "fanout", ["a", "c"])
    assert_harness_manifest_consistent(state, SESSION, MANIFEST)
    with pytest.raises(little.CapabilityDriftError, match=f"session {SESSION}"):
        assert_harness_manifest_consistent(
            state, SESSION, {**MANIFEST, "tools": ["search", "shell"]}
        )
    assert issubclass(ParallelBranchMismatchError, little.RuntimeIntegrityError)
    assert issubclass(ArtifactMismatchError, little.RuntimeIntegrityError)


def test_snapshot_folds_only_what_follows_and_equals_a_full_fold(world: little.World) -> None:
    world.append(first_writer("run-1"))
    early = replay_run(world, "run-1").state
    world.snapshots.put("run-1", encode_snapshot(Snapshot.of(early)))
    world.append([RunClaimed(run_id="run-1", epoch=2, owner="w2", observed_seq=9)])
    world.append(second_writer("run-1", 9))
    full = replay_run(world, "run-1", use_snapshot=False)
    late = replay_run(world, "run-1")
    assert late.from_snapshot == early.last_position
    assert late.events_folded == 5  # the claim and writer 2's four events
    assert full.events_folded == 16
    assert late.state == full.state


@pytest.mark.parametrize(
    "damage", ["garbage", "truncated", "foreign-event", "other-run", "old-version"]
)
def test_bad_snapshot_is_ignored_with_a_warning(world: little.World, damage: str) -> None:
    crashed_and_resumed(world)
    state = replay_run(world, "run-1", use_snapshot=False).state
    good = encode_snapshot(Snapshot.of(state))
    if damage == "garbage":
        payload = b"not a snapshot"
    elif damage == "truncated":
        payload = good[:-20]
    elif damage == "foreign-event":
        payload = encode_snapshot(Snapshot.of(state.model_copy(update={"last_event_id": "nope"})))
    elif damage == "other-run":
        payload = encode_snapshot(Snapshot.of(state.model_copy(update={"run_id": "run-2"})))
    else:
        payload = encode_snapshot(Snapshot.of(state.model_copy(update={"state_version": 0})))
    world.snapshots.put("run-1", payload)
    with structlog.testing.capture_logs() as logs:
        result = replay_run(world, "run-1")
    assert result.from_snapshot is None
    assert result.state == state
    assert [(e["event"], e["log_level"]) for e in logs] == [("snapshot_ignored", "warning")]
    assert logs[0]["run_id"] == "run-1"


def test_seq_gap_names_run_seq_event_and_offset(world: little.World) -> None:
    world.append(
        [
            RunClaimed(run_id="g", owner="me", observed_seq=-1),
            RunStarted(run_id="g", seq=0, workflow="wf", workflow_version="1"),
            StepStarted(run_id="g", seq=2, step_path="s", step_id="s"),
        ]
    )
    with pytest.raises(StreamIntegrityError) as err:
        replay_run(world, "g")
    msg = str(err.value)
    assert "run g" in msg
    assert "expected seq 1, found 2" in msg
    assert "StepStarted" in msg
    assert "offset 2" in msg


def test_undecodable_record_is_a_clear_error_and_nothing_is_modified(world: little.World) -> None:
    world.append([RunClaimed(run_id="u", owner="me", observed_seq=-1)])
    bad = world.log.append("u", [OutgoingRecord(b"\x00\x00\x00\x00\x07garbage")])[0]
    before = world.log.end_offsets()
    with pytest.raises(
        little.RecordDecodeError,
        match=rf"run u: record at partition {bad.partition} offset {bad.offset}",
    ):
        replay_run(world, "u")
    assert world.log.end_offsets() == before


def test_logged_events_and_plain_events_fold_alike(world: little.World) -> None:
    events = first_writer("r")
    plain = little.replay.materialize_run_state_from_events(events)
    logged = little.replay.materialize_run_state_from_events(
        LoggedEvent(e, 0, i) for i, e in enumerate(events)
    )
    assert logged.last_position is not None
    assert logged.last_position.offset == len(events) - 1
    assert logged.model_dump(exclude={"last_position", "steps"}) == plain.model_dump(
        exclude={"last_position", "steps"}
    )
    assert [s.model_dump(exclude={"completed_position"}) for s in logged.steps] == [
        s.model_dump(exclude={"completed_position"}) for s in plain.steps
    ]


def test_state_round_trips_through_json() -> None:
    state = little.replay.materialize_run_state_from_events(first_writer("r"))
    assert MaterializedRunState.model_validate_json(state.model_dump_json()) == state


def test_replay_package_imports_without_the_kafka_client() -> None:
    code = (
        "import sys; sys.modules['confluent_kafka'] = None; "
        "import little.replay; from little.replay import replay_run, materialize_run_state_from_events; "
        "assert 'sqlite3' not in sys.modules or True; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_replay_source_imports_no_io_module() -> None:
    import ast

    forbidden = {
        "confluent_kafka",
        "sqlite3",
        "socket",
        "httpx",
        "requests",
        "fastapi",
        "little.log",
        "little._world",
    }
    root = Path(little.replay.__file__).parent
    for path in root.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert not any(name == f or name.startswith(f + ".") for f in forbidden), (
                    f"{path.name} imports {name}"
                )


def test_snapshot_header_in_schemas_folder() -> None:
    import json

    repo = REPO
    schema = json.loads((repo / "schemas" / "snapshots" / "RunSnapshot" / "v1.avsc").read_text())
    assert schema["name"] == "RunSnapshot"
    assert "state_json" in {f["name"] for f in schema["fields"]}


def test_artifact_ref_type_is_shared() -> None:
    assert ArtifactRef.model_fields.keys() >= {"run_id", "sha256", "size", "media_type"}
