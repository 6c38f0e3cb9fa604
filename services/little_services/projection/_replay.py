"""A run's replay plan read from its projected state, without reading the log.

The projection is a snapshot of each run with its cursor, so the plan ``replay_run`` would
give is the stored state's plan: steps with ``should_run``, completed and pending paths.
Artifacts are not hydrated (use ``replay_run`` on the world for that). Pure.
"""

from __future__ import annotations

from little.replay import MaterializedRunState, ReplayResult


def replay_from_state(state: MaterializedRunState) -> ReplayResult:
    """The ``ReplayResult`` of a projected state: from its position, no event folded after."""
    return ReplayResult.of(state, from_snapshot=state.last_position)
