"""A run's replay plan read from its projected state, without reading the log.

The projection is a snapshot of each run with its cursor, so the plan ``replay_run`` would
give is the stored state's plan: steps with ``should_run``, completed and pending paths.
Artifacts are not hydrated (use ``replay_run`` on the world for that). Pure.
"""

from __future__ import annotations

from little.replay import MaterializedRunState, ReplayPlanStep, ReplayResult


def replay_from_state(state: MaterializedRunState) -> ReplayResult:
    """The ``ReplayResult`` of a projected state: from its position, no event folded after."""
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
    return ReplayResult(
        run_id=state.run_id,
        state=state,
        steps=steps,
        completed_step_paths=tuple(s.step_path for s in steps if not s.should_run),
        pending_step_paths=tuple(s.step_path for s in steps if s.should_run),
        artifacts=(),
        from_snapshot=state.last_position,
        events_folded=0,
    )
