"""A child process for the adapter's crash tests: start or resume one run of the research
workflow (``workflows.NAME``, version 1) on the embedded world (or Kafka, as
``tests.crash.runner`` opens it).

``python -m tests.little.integrations.pydantic_ai.child DATA_DIR RUN_ID run INPUT_JSON`` starts
(or resumes) the run; ``... nested INPUT_JSON`` the same for the nested agents' workflow
(``workflows.NESTED``), ``... mcp INPUT_JSON`` for the MCP toolset's (``test_mcp.mcp_flow``);
``... resume`` resumes any. The crash hooks come from the environment; the
result is printed as one JSON line after ``RESULT``.
"""

from __future__ import annotations

import asyncio
import json
import sys

from little.runtime import resume, run
from tests.crash.runner import RESULT, open_world
from tests.little.integrations.pydantic_ai import workflows


def main(argv: list[str]) -> int:
    data_dir, run_id, mode, *rest = argv
    with open_world(data_dir) as world:
        if mode == "mcp":
            from tests.little.integrations.pydantic_ai import test_mcp

            result = asyncio.run(run(world, test_mcp.mcp_flow, json.loads(rest[0]), run_id=run_id))
        elif mode in ("run", "nested"):
            wf = workflows.nested if mode == "nested" else workflows.version("1")
            result = asyncio.run(run(world, wf, json.loads(rest[0]), run_id=run_id))
        else:
            if "tests.little.integrations.pydantic_ai.test_mcp" not in sys.modules:
                from tests.little.integrations.pydantic_ai import test_mcp

            result = asyncio.run(resume(world, run_id))
    print(RESULT + json.dumps({"status": result.status, "output": result.output}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
