"""Replay-aware restart checks (seed 000): the runtime calls them before it resumes a run.

If the log is intact and consistent, replay can stand in for the original run; if not, these
raise a ``RuntimeIntegrityError`` subclass and the runtime refuses to proceed silently.
Pure apart from loading artifacts through the loader it is given.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from little._canonical import canonical_hash
from little.errors import ArtifactError, CapabilityDriftError, RuntimeIntegrityError
from little.events import ArtifactRef
from little.replay._replay import ArtifactMismatchError
from little.replay._state import LogPosition, MaterializedRunState


class ParallelBranchMismatchError(RuntimeIntegrityError):
    """A parallel group's recomputed branch set differs from the one the run recorded."""


def _where(position: LogPosition | None) -> str:
    return f" at partition {position.partition} offset {position.offset}" if position else ""


def branch_set_hash(branches: Iterable[str]) -> str:
    """The hash recorded in ParallelBranchScheduled for a resolved branch set (order kept)."""
    return canonical_hash(list(branches))


def manifest_hash(manifest: Mapping[str, Any]) -> str:
    """The hash recorded in harness.session.started for a session manifest."""
    return canonical_hash(dict(manifest))


def assert_completed_step_artifacts_valid(
    state: MaterializedRunState, load: Callable[[ArtifactRef], bytes]
) -> None:
    """Every committed step's artifacts exist, hash right, belong to this run and match the
    persisted output."""
    for step in state.steps:
        if step.status != "completed":
            continue
        where = f"step {step.step_path} (StepCompleted {step.completed_event_id}{_where(step.completed_position)})"
        refs = ([step.output_ref] if step.output_ref else []) + list(step.artifact_refs)
        for ref in refs:
            if ref.run_id != state.run_id:
                raise ArtifactMismatchError(
                    f"run {state.run_id}: {where} references artifact {ref.sha256[:12]}... of "
                    f"run {ref.run_id}"
                )
            try:
                payload = load(ref)
            except ArtifactError as exc:
                raise ArtifactMismatchError(f"run {state.run_id}: {where}: {exc}") from exc
            inline = step.output_json
            if ref is step.output_ref and inline is not None and payload != inline.encode():
                raise ArtifactMismatchError(
                    f"run {state.run_id}: {where}: output artifact {ref.sha256[:12]}... "
                    "differs from the output recorded inline"
                )


def assert_completed_parallel_replay_matches_input(
    state: MaterializedRunState, group_path: str, branches: Iterable[str]
) -> None:
    """The recomputed branch set of a parallel group equals its ParallelBranchScheduled."""
    recorded = state.parallel_group(group_path)
    if recorded is None:
        return  # never scheduled: nothing to compare, the group runs fresh
    now = tuple(branches)
    if branch_set_hash(now) != recorded.branch_set_hash:
        raise ParallelBranchMismatchError(
            f"run {state.run_id}: parallel group {group_path} recorded branches "
            f"{list(recorded.branches)} but resolves to {list(now)} now; the workflow or its "
            "input changed since the run started: start a new run instead of resuming"
        )


def assert_harness_manifest_consistent(
    state: MaterializedRunState, session_id: str, manifest: Mapping[str, Any]
) -> None:
    """The recomputed manifest of a session equals the one its run committed."""
    session = state.session(session_id)
    if session is None:
        return  # not started yet: it will start with this manifest
    now = manifest_hash(manifest)
    if now != session.manifest_hash:
        try:
            then = json.loads(session.manifest_json)
        except ValueError:
            then = {}
        keys = sorted(k for k in {*then, *manifest} if then.get(k) != manifest.get(k))
        changed = ", ".join(keys) if keys else "model, tools or system prompt"
        raise CapabilityDriftError(
            f"run {state.run_id}: harness session {session_id} (step {session.step_path}) "
            f"started with manifest {session.manifest_hash[:12]}... but the current one is "
            f"{now[:12]}... (changed: {changed}); resuming would mix answers of two different "
            "agents: start a new run"
        )
