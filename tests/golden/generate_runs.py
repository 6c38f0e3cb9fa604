"""Write the committed golden runs: one recorded run per recipe, as a golden file
(``little export --golden``) under ``tests/golden/runs/``.

Run ``.venv/bin/python tests/golden/generate_runs.py`` after adding a recipe. Like the byte
vectors (``generate.py``), golden runs are immutable once committed: this script only adds
missing files and never overwrites one, so ``tests/golden/test_runs.py`` keeps simulating
today's code against runs recorded by earlier code. A change to canonical JSON, the request
hash chain or the agent-call key that would break recorded runs (a resume of one, or a replay
from one) fails there.

The recipes are the example workflows (``little.examples.research``) and the demo's run:
``little demo`` kills the run with SIGKILL in the middle of its agent session and resumes it
in a second process, so its log holds two claims and a model turn called twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: import the repository's tests package
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import little
from little.examples import research
from little.golden import write_golden
from little.runtime import Workflow, run

RUNS = Path(__file__).resolve().parent / "runs"
TOPIC = {"topic": "Kafka"}


@dataclass(frozen=True)
class Recipe:
    """How a committed golden run was recorded, and the workflow it is simulated against."""

    about: str
    workflow: Callable[[], Workflow[..., Any]]
    record: Callable[[Path], str]
    """Record the run in an embedded world at the given directory; return its run id."""


def _run(workflow: Workflow[..., Any], value: Any, replay_from: str | None = None) -> Any:
    def record(data_dir: Path) -> str:
        with little.local_world(data_dir) as world:
            result = asyncio.run(run(world, workflow, value, replay_from=replay_from))
        if result.status != "completed":
            raise RuntimeError(f"{workflow.name}: {result.status}: {result.error}")
        return result.run_id

    return record


def _demo(data_dir: Path) -> str:
    from rich.console import Console

    from little.cli._demo import run_demo

    with contextlib.redirect_stdout(io.StringIO()):  # the demo's report
        return run_demo(data_dir, Console(file=io.StringIO()))


def _demo_replay(data_dir: Path) -> str:
    """The demo's last act: the edited workflow re-run against the demo's crashed-and-resumed
    run (its agent call served from the record)."""
    source = _demo(data_dir)
    return _run(research.RESEARCH_BRIEF, TOPIC, replay_from=source)(data_dir)


RECIPES: dict[str, Recipe] = {
    "research": Recipe(
        "the reference research workflow: a parallel group, an agent session with three model "
        "turns and three tool calls, a sub-run",
        lambda: research.research,
        _run(research.research, TOPIC),
    ),
    "research-demo": Recipe(
        "little demo's run: killed with SIGKILL after model turn 2, resumed in a new process",
        lambda: research.research,
        _demo,
    ),
    "research-brief-replay": Recipe(
        "the demo's replay: the last stage edited, re-run against the demo's run",
        lambda: research.RESEARCH_BRIEF,
        _demo_replay,
    ),
    "summarise": Recipe(
        "the example sub-run workflow on its own (no agent call)",
        lambda: research.summarise,
        _run(research.summarise, "Kafka is a log; it has partitions"),
    ),
}


def main() -> int:
    written, skipped = [], []
    for name, recipe in RECIPES.items():
        path = RUNS / f"{name}.avro"
        if path.exists():
            skipped.append(name)
            continue
        with tempfile.TemporaryDirectory(prefix="little-golden-") as d:
            run_id = recipe.record(Path(d) / "world")
            with little.local_world(Path(d) / "world") as world:
                write_golden(world, run_id, path)
        written.append(name)
    for name in skipped:
        print(f"skipped {name}: the file exists (golden runs are immutable)")
    for name in written:
        print(f"wrote   {name}: {RUNS / name}.avro")
    print(f"{len(written)} written, {len(skipped)} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
