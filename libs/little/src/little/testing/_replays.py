"""``assert_replays``: a golden run as a regression test of a workflow (the role of
Temporal's ``Replayer``), for users' CI."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any, overload

from little import World
from little.errors import ConfigurationError
from little.golden import GoldenRun
from little.runtime import Simulation, Workflow, simulate


@overload
def assert_replays(
    golden: str | os.PathLike[str] | GoldenRun, workflow: Workflow[..., Any], /
) -> Simulation: ...


@overload
def assert_replays(
    world: World, golden_run_id: str, workflow: Workflow[..., Any], /
) -> Simulation: ...


def assert_replays(
    first: World | str | os.PathLike[str] | GoldenRun,
    second: Workflow[..., Any] | str,
    third: Workflow[..., Any] | None = None,
    /,
) -> Simulation:
    """Simulate a workflow against a golden run (every call served from its record, no model
    invoked) and fail with the first divergence unless the two runs did the same: same steps
    in the same order, branch sets, decision targets, request keys and hashes, sub-runs and
    outcome.

    ``assert_replays("tests/golden/runs/research.avro", workflow)``: the golden run is a file
    (``little export <run> --golden FILE``; a path, as a string or a ``Path``), or a
    ``GoldenRun`` read already. ``assert_replays(world, golden_run_id, workflow)``: a run of a
    world. From a synchronous test; an async one awaits ``little.runtime.simulate`` itself.
    A golden file that cannot be read raises ``little.golden.GoldenFileError``."""
    if isinstance(first, World):
        if not isinstance(second, str) or third is None:
            raise ConfigurationError(
                "assert_replays(world, golden_run_id, workflow): a world needs a run id and "
                "a workflow"
            )
        sim = asyncio.run(simulate(first, third, second))
    else:
        if isinstance(second, str) or third is not None:
            raise ConfigurationError(
                "assert_replays(golden_file, workflow): a golden file and a workflow, or "
                "assert_replays(world, golden_run_id, workflow)"
            )
        golden = first if isinstance(first, GoldenRun) else Path(first)
        sim = asyncio.run(simulate(None, second, golden))
    if not sim.identical:
        raise AssertionError("\n".join(sim.lines()))
    return sim
