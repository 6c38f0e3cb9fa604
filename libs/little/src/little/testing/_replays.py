"""``assert_replays``: a golden run as a regression test of a workflow (the role of
Temporal's ``Replayer``), for users' CI."""

from __future__ import annotations

import asyncio
from typing import Any

from little import World
from little.runtime import Simulation, Workflow, simulate


def assert_replays(world: World, golden_run_id: str, workflow: Workflow[..., Any]) -> Simulation:
    """Simulate ``workflow`` against the golden run ``golden_run_id`` of ``world`` (every call
    served from its record, no model invoked) and fail with the first divergence unless the
    two runs did the same: same steps in the same order, branch sets, decision targets,
    request keys and outcome. From a synchronous test; an async one awaits
    ``little.runtime.simulate`` itself."""
    sim = asyncio.run(simulate(world, workflow, golden_run_id))
    if not sim.identical:
        raise AssertionError("\n".join(sim.lines()))
    return sim
