"""``replay_run``: a run's state and plan from its log, read-only and idempotent.

It reads the requested run's stream only (never a sub-run's), starts from the newest snapshot
that matches the log, folds the rest with the one fold, and hydrates the run's artifacts with
their hashes verified. It never writes and never calls a model or a tool.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from little.errors import ArtifactError, RuntimeIntegrityError
from little.events import ArtifactRef, LoggedEvent
from little.logging_setup import get_logger
from little.replay._fold import materialize_run_state_from_events
from little.replay._snapshot import Snapshot, SnapshotError, decode_snapshot
from little.replay._state import LogPosition, MaterializedRunState, StepStatus

log = get_logger("little.replay")


class ReplayWorld(Protocol):
    """What replay needs of a world: read a run, load artifacts, find a snapshot."""

    def read_run(self, run_id: str, *, after: Any = None) -> Iterator[LoggedEvent]: ...

    @property
    def artifacts(self) -> Any: ...

    @property
    def snapshots(self) -> Any: ...


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)  # built on first use


class ReplayPlanStep(_Frozen):
    """Scheduling view of one step: no usage (that lives on ``state.steps``)."""

    step_path: str
    status: StepStatus
    should_run: bool
    output_json: str | None = None
    output_ref: ArtifactRef | None = None
    artifact_refs: tuple[ArtifactRef, ...] = ()

    @property
    def output(self) -> Any:
        """The step's inline output, decoded afresh on every access (results stay immutable)."""
        return None if self.output_json is None else json.loads(self.output_json)


class HydratedArtifact(_Frozen):
    """An artifact's manifest (ref, name, step) and its payload, hash verified."""

    ref: ArtifactRef
    name: str
    step_path: str | None
    payload: bytes


class ReplayResult(_Frozen):
    run_id: str
    state: MaterializedRunState
    steps: tuple[ReplayPlanStep, ...]
    completed_step_paths: tuple[str, ...]
    pending_step_paths: tuple[str, ...]
    artifacts: tuple[HydratedArtifact, ...]
    from_snapshot: LogPosition | None = None
    events_folded: int = 0

    @classmethod
    def of(
        cls,
        state: MaterializedRunState,
        *,
        artifacts: tuple[HydratedArtifact, ...] = (),
        from_snapshot: LogPosition | None = None,
        events_folded: int = 0,
    ) -> ReplayResult:
        """The result for a folded state: its step plan (a step runs unless completed)."""
        steps = tuple(
            ReplayPlanStep(
                step_path=s.step_path,
                status=s.status,
                should_run=s.status != "completed",
                output_json=s.output_json,
                output_ref=s.output_ref,
                artifact_refs=s.artifact_refs,
            )
            for s in state.steps
        )
        return cls(
            run_id=state.run_id,
            state=state,
            steps=steps,
            completed_step_paths=tuple(s.step_path for s in steps if not s.should_run),
            pending_step_paths=tuple(s.step_path for s in steps if s.should_run),
            artifacts=artifacts,
            from_snapshot=from_snapshot,
            events_folded=events_folded,
        )

    @property
    def found(self) -> bool:
        """Did the run exist: was any event folded, or a snapshot used?"""
        return self.events_folded > 0 or self.from_snapshot is not None


class ArtifactMismatchError(RuntimeIntegrityError):
    """A committed artifact is missing, corrupt, of another run, or differs from its output."""


def load_snapshot(world: ReplayWorld, run_id: str) -> Snapshot | None:
    """The run's stored snapshot if it decodes and belongs to the run; else None (warned)."""
    payload = world.snapshots.get(run_id)
    if payload is None:
        return None
    try:
        snapshot = decode_snapshot(payload)
    except SnapshotError as exc:
        log.warning("snapshot_ignored", run_id=run_id, reason=str(exc))
        return None
    if snapshot.run_id != run_id:
        log.warning("snapshot_ignored", run_id=run_id, reason=f"belongs to {snapshot.run_id}")
        return None
    return snapshot


def fold_run(
    world: ReplayWorld, run_id: str, *, use_snapshot: bool = True
) -> tuple[MaterializedRunState, LogPosition | None, int]:
    """Fold a run from its newest valid snapshot (or from the start).

    Returns the state, the snapshot position used (None for a full fold) and how many events
    were folded. A snapshot whose position does not hold the event it names is ignored.
    """
    snapshot = load_snapshot(world, run_id) if use_snapshot else None
    if snapshot is not None:
        pos = snapshot.position
        after = LogPosition(partition=pos.partition, offset=pos.offset - 1)
        stream = world.read_run(run_id, after=after)
        first = next(stream, None)
        if (
            first is not None
            and first.offset == pos.offset
            and first.partition == pos.partition
            and first.event.event_id == snapshot.last_event_id
        ):
            counted = _Counted(stream)
            state = materialize_run_state_from_events(counted, start=snapshot.state)
            return state, pos, counted.count
        log.warning(
            "snapshot_ignored",
            run_id=run_id,
            reason=f"the log has no event {snapshot.last_event_id} at offset {pos.offset}",
        )
    counted = _Counted(world.read_run(run_id))
    state = materialize_run_state_from_events(counted, run_id=run_id)
    return state, None, counted.count


def replay_run(world: ReplayWorld, run_id: str, *, use_snapshot: bool = True) -> ReplayResult:
    """Replay one run: its state, its step plan and its hydrated artifacts.

    Pure with respect to the world: reads only, never appends. Two calls on an unchanged log
    return equal results.
    """
    state, from_snapshot, folded = fold_run(world, run_id, use_snapshot=use_snapshot)
    return ReplayResult.of(
        state,
        artifacts=_hydrate(world, state),
        from_snapshot=from_snapshot,
        events_folded=folded,
    )


def _hydrate(world: ReplayWorld, state: MaterializedRunState) -> tuple[HydratedArtifact, ...]:
    wanted: dict[str, tuple[ArtifactRef, str, str | None]] = {}
    for step in state.steps:
        if step.status != "completed":
            continue
        if step.output_ref is not None:
            wanted.setdefault(step.output_ref.sha256, (step.output_ref, "output", step.step_path))
        for i, ref in enumerate(step.artifact_refs):
            wanted.setdefault(ref.sha256, (ref, f"artifact[{i}]", step.step_path))
    for committed in state.artifacts:
        wanted[committed.ref.sha256] = (committed.ref, committed.name, committed.step_path)
    out: list[HydratedArtifact] = []
    for ref, name, step_path in wanted.values():
        try:
            payload = world.artifacts.get(ref)
        except ArtifactError as exc:
            raise ArtifactMismatchError(
                f"run {state.run_id}: artifact {name} of step {step_path} ({ref.sha256[:12]}...) "
                f"cannot be used: {exc}"
            ) from exc
        out.append(HydratedArtifact(ref=ref, name=name, step_path=step_path, payload=payload))
    return tuple(out)


class _Counted:
    def __init__(self, inner: Iterator[LoggedEvent]) -> None:
        self.inner = inner
        self.count = 0

    def __iter__(self) -> Iterator[LoggedEvent]:
        for item in self.inner:
            self.count += 1
            yield item
