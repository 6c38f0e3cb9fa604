"""The process side of ``bench/lone_run.py --recovery``: a run of durable steps that SIGKILLs
its own process inside a chosen step, and a fresh process that resumes it. Kept apart from
the benchmark so a resume imports what a user's worker imports (little and the workflow's
module), not the benchmark's own tooling.

    python bench/_recovery_flow.py crash <data_dir> <run_id> <marks_file>
    python bench/_recovery_flow.py resume <data_dir> <run_id> <marks_file>

Marks (``time.time()``, one ``name value`` a line, appended): ``killed`` just before the
SIGKILL, ``started`` as the resume process's first line runs, ``imported`` once little is
imported, ``opened`` once the world is open, ``step`` as the next step starts running; ``*_cpu``: the
resume process's CPU time (``time.process_time()``) at those points.
"""

import time

_STARTED = time.time()

import asyncio  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
from typing import Any  # noqa: E402

import little  # noqa: E402
from little.runtime import StepContext, WorkflowContext, execute, resume, workflow  # noqa: E402

_IMPORTED = time.time()
_IMPORTED_CPU = time.process_time()
STEPS = 6
CRASH_IN = 3
MARKS = {"file": ""}


def mark(name: str, value: float | None = None) -> None:
    with open(MARKS["file"], "a") as f:
        f.write(f"{name} {time.time() if value is None else value!r}\n")


async def _step(step: StepContext, i: int) -> str:
    if i == CRASH_IN:
        if os.environ.get("LITTLE_BENCH_CRASH") == "1":
            mark("killed")
            os.kill(os.getpid(), signal.SIGKILL)
        mark("step")
        mark("step_cpu", time.process_time())
    await asyncio.sleep(0.01)
    return f"{i}:" + "x" * 200


@workflow("bench.recovery", version="1")
async def steps(ctx: WorkflowContext, input: Any) -> int:
    for i in range(STEPS):
        await ctx.step(f"s{i}", _step, i)
    return STEPS


async def main(mode: str, data_dir: str, run_id: str) -> None:
    world = little.local_world(data_dir)
    if mode == "crash":
        await execute(world, run_id, steps, None)
        raise SystemExit("the crash did not happen")
    mark("started", _STARTED)
    mark("imported", _IMPORTED)
    mark("imported_cpu", _IMPORTED_CPU)
    mark("opened")
    mark("opened_cpu", time.process_time())
    result = await resume(world, run_id)
    world.close()
    if result.status != "completed" or result.output != STEPS:
        raise SystemExit(f"resume did not complete: {result}")


if __name__ == "__main__":
    MARKS["file"] = sys.argv[4]
    if sys.argv[1] == "crash":
        os.environ["LITTLE_BENCH_CRASH"] = "1"
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
