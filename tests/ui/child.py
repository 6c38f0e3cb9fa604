"""A child process of the run inspector's browser tests: one process of a research run.

``python -m tests.ui.child RUN_ID run INPUT_JSON`` starts (or resumes) a run of the reference
research workflow on the world the ``LITTLE_*`` environment names (the embedded one under
``LITTLE_DATA_DIR``, or Kafka at ``LITTLE_KAFKA_BOOTSTRAP``); ``... resume`` resumes it;
``... replay SOURCE_RUN_ID INPUT_JSON`` re-runs the workflow with its last stage edited against
a recorded run (recorded-call replay). Crashes are real SIGKILLs from the runtime's fault
injection (``LITTLE_CRASH_AFTER_CALL`` in the environment).
"""

from __future__ import annotations

import asyncio
import json
import sys

from little.examples import research
from little.runtime import resume, run
from little.settings import LittleSettings


def main(argv: list[str]) -> int:
    run_id, mode, *rest = argv
    with LittleSettings().world() as world:
        if mode == "run":
            result = asyncio.run(run(world, research.research, json.loads(rest[0]), run_id=run_id))
        elif mode == "resume":
            result = asyncio.run(resume(world, run_id))
        elif mode == "replay":
            source, input_json = rest
            result = asyncio.run(
                run(
                    world,
                    research.RESEARCH_BRIEF,
                    json.loads(input_json),
                    run_id=run_id,
                    replay_from=source,
                )
            )
        else:
            raise SystemExit(f"unknown mode {mode!r}")
    print(json.dumps({"status": result.status, "error": result.error}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
