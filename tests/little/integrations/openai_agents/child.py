"""A child process for the crash tests: ``python -m tests.little.integrations.openai_agents.child
DATA_DIR RUN_ID run WORKFLOW INPUT_JSON`` starts (or resumes) a run of a workflow of
``agents_support`` on an embedded world (or on Kafka, when ``$LITTLE_CRASH_TEST_KAFKA`` names a
``bootstrap|topic_prefix``, as for ``tests.crash.runner``); ``... RUN_ID resume`` resumes it. The crash hooks come
from the environment; the result is printed as one JSON line after ``RESULT``."""

from __future__ import annotations

import asyncio
import json
import sys

from little.runtime import lookup, resume, run
from tests.crash.runner import open_world
from tests.little.integrations.openai_agents import agents_support

RESULT = "RESULT "
_REGISTERED = agents_support  # imported for its workflows


def main(argv: list[str]) -> int:
    data_dir, run_id, mode, *rest = argv
    with open_world(data_dir) as world:
        if mode == "run":
            name, input_json = rest
            result = asyncio.run(run(world, lookup(name), json.loads(input_json), run_id=run_id))
        else:
            result = asyncio.run(resume(world, run_id))
    print(RESULT + json.dumps({"status": result.status, "output": result.output}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
