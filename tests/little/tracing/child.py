"""A child process of the tracing tests: start or resume a run of ``traced`` on an embedded
world, with the SDK set up from the OTEL_* environment as the CLI does.

``python -m tests.little.tracing.child DATA_DIR RUN_ID run|resume|replay|failing``; prints ``RESULT <json>``
(``replay``: run RUN_ID, then ``RUN_ID-replay`` with ``replay_from=RUN_ID``)."""

from __future__ import annotations

import asyncio
import json
import sys

import little
import tests.little.tracing.flows
from little.runtime import lookup, resume, run
from little.tracing import configure_from_env

_REGISTERED = tests.little.tracing.flows


def main(argv: list[str]) -> int:
    data_dir, run_id, mode = argv
    configured = configure_from_env("little-tracing-test")
    with little.local_world(data_dir) as world:
        if mode == "run":
            result = asyncio.run(run(world, lookup("traced"), None, run_id=run_id))
        elif mode == "failing":
            result = asyncio.run(run(world, lookup("traced_failing"), None, run_id=run_id))
        elif mode == "replay":
            asyncio.run(run(world, lookup("traced"), None, run_id=run_id))
            result = asyncio.run(
                run(world, lookup("traced"), None, run_id=f"{run_id}-replay", replay_from=run_id)
            )
        else:
            result = asyncio.run(resume(world, run_id))
    print("RESULT " + json.dumps({"status": result.status, "configured": configured}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
