"""A child process of the fault tests: start or resume one run on the world the settings name.

``python -m tests.faults.runner run RUN_ID WORKFLOW INPUT_JSON`` or ``... resume RUN_ID``.
The world comes from ``LITTLE_*`` settings (``LittleSettings().world()``: Kafka bootstrap,
topics and ``LITTLE_KAFKA_*`` security), as in a deployment; logs are JSON lines on stderr.
The result is one JSON line after ``RESULT`` on stdout.
"""

from __future__ import annotations

import asyncio
import json
import sys

import tests.faults.workflows
from little.logging_setup import configure
from little.runtime import lookup, resume, run
from little.settings import LittleSettings

RESULT = "RESULT "
_REGISTERED = (tests.faults.workflows,)


def main(argv: list[str]) -> int:
    configure(json=True)
    mode, run_id, *rest = argv
    with LittleSettings().world() as world:
        if mode == "run":
            name, input_json = rest
            result = asyncio.run(run(world, lookup(name), json.loads(input_json), run_id=run_id))
        elif mode == "resume":
            result = asyncio.run(resume(world, run_id))
        else:
            raise SystemExit(f"unknown mode {mode!r}")
    print(RESULT + json.dumps({"status": result.status, "output": result.output}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
