"""A child process for the crash tests: run or resume one run on an embedded world.

``python -m tests.crash.runner DATA_DIR RUN_ID run WORKFLOW INPUT_JSON`` starts (or resumes)
a run; ``python -m tests.crash.runner DATA_DIR RUN_ID resume`` resumes one by the workflow
name in its log; ``... PREFIX many N`` starts (or resumes) the runs ``PREFIX-0..N-1`` of the
``busy`` workflow all at once in this one process; ``... replay-pipeline VERSION EDITS_JSON INPUT_JSON [SOURCE_RUN_ID]`` starts
or resumes a run of the recorded-call replay tests' pipeline (``tests.little.runtime``), and
``... replay-parent ...`` (the same arguments) of their parent with a sub-run; ``... changes
FORM WORKFLOW INPUT_JSON`` registers one deploy of the code-change tests' pipeline
(``tests.crash.changes``) and starts or resumes a run of WORKFLOW on it; ``... panel VERSION EDITS_JSON INPUT_JSON [SOURCE_RUN_ID]`` the
same for the panel tests' workflow (research, then a panel of three judges); ``... compaction POLICY INPUT_JSON`` starts or
resumes the compaction tests' conversation under the ``trim`` or ``summary`` policy; ``... integrity
FORM VERSION EDITS_JSON INPUT_JSON [SOURCE_RUN_ID]`` the same for the integrity tests' ``guarded``
or ``panel`` workflow (``tests.crash.integrity_workflows``). The crash hooks (``LITTLE_CRASH_AFTER_EVENT`` / ``LITTLE_CRASH_AFTER_CALL``)
come from the environment; the result is printed as one JSON line after ``RESULT``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import little
import little.examples.research
import tests.crash.agent_feature_workflows
import tests.crash.harness_workflows
import tests.crash.workflows
from little.runtime import lookup, resume, run

RESULT = "RESULT "

WORLD_ENV = "LITTLE_CRASH_TEST_KAFKA"


def open_world(data_dir: str, kafka: str | None = None) -> little.World:
    """The embedded world in ``data_dir``, or Kafka when ``kafka`` (or the env) names one."""
    kafka = kafka or os.environ.get(WORLD_ENV)
    if kafka:
        bootstrap, prefix = kafka.split("|")
        return little.kafka_world(
            bootstrap, topic_prefix=prefix, provision=True, artifacts_dir=f"{data_dir}/artifacts"
        )
    return little.local_world(data_dir)


__all__ = ["RESULT", "WORLD_ENV", "main", "open_world"]

_REGISTERED = (
    little.examples.research,
    tests.crash.workflows,
    tests.crash.harness_workflows,
    tests.crash.agent_feature_workflows,
)  # import for registration


def main(argv: list[str]) -> int:
    data_dir, run_id, mode, *rest = argv
    with open_world(data_dir) as world:
        if mode == "run":
            name, input_json = rest
            result = asyncio.run(run(world, lookup(name), json.loads(input_json), run_id=run_id))
        elif mode == "resume":
            result = asyncio.run(resume(world, run_id))
        elif mode == "many":  # RUN_ID is a prefix; N runs of ``busy`` at once
            results = asyncio.run(_many(world, run_id, int(rest[0])))
            print(RESULT + json.dumps({"statuses": [r.status for r in results]}))
            return 0
        elif mode == "changes":  # FORM WORKFLOW INPUT_JSON: start or resume on that deploy
            from tests.crash import changes

            form, name, input_json = rest
            changes.deploy(form)
            result = asyncio.run(run(world, lookup(name), json.loads(input_json), run_id=run_id))
        elif mode == "replay-pipeline":  # VERSION EDITS_JSON INPUT_JSON [SOURCE_RUN_ID]
            from tests.little.runtime import replay_workflows

            version, edits, input_json, *source = rest
            wf = replay_workflows.version(version, **json.loads(edits))
            result = asyncio.run(
                run(
                    world,
                    wf,
                    json.loads(input_json),
                    run_id=run_id,
                    replay_from=source[0] if source else None,
                )
            )
        elif mode == "replay-parent":  # VERSION EDITS_JSON INPUT_JSON [SOURCE_RUN_ID]
            from tests.little.runtime import replay_workflows

            version, edits, input_json, *source = rest
            wf = replay_workflows.parent(version, **json.loads(edits))
            result = asyncio.run(
                run(
                    world,
                    wf,
                    json.loads(input_json),
                    run_id=run_id,
                    replay_from=source[0] if source else None,
                )
            )
        elif mode == "panel":  # VERSION EDITS_JSON INPUT_JSON [SOURCE_RUN_ID]
            from tests.little.runtime import panel_workflows

            version, edits, input_json, *source = rest
            wf = panel_workflows.panel_flow("tests.crash.panel", version, **json.loads(edits))
            result = asyncio.run(
                run(
                    world,
                    wf,
                    json.loads(input_json),
                    run_id=run_id,
                    replay_from=source[0] if source else None,
                )
            )
        elif mode == "integrity":  # FORM VERSION EDITS_JSON INPUT_JSON [SOURCE_RUN_ID]
            from tests.crash import integrity_workflows

            form, version, edits, input_json, *source = rest
            register = integrity_workflows.panel if form == "panel" else integrity_workflows.guarded
            result = asyncio.run(
                run(
                    world,
                    register(version, **json.loads(edits)),
                    json.loads(input_json),
                    run_id=run_id,
                    replay_from=source[0] if source else None,
                )
            )
        elif mode == "compaction":  # POLICY INPUT_JSON: the compaction tests' conversation
            from tests.little.runtime import compaction_workflows

            policy, input_json = rest
            compaction_workflows.POLICY["policy"] = (
                compaction_workflows.summarising()
                if policy == "summary"
                else compaction_workflows.trim()
            )
            result = asyncio.run(
                run(world, compaction_workflows.conversation, json.loads(input_json), run_id=run_id)
            )
        else:
            raise SystemExit(f"unknown mode {mode!r}")
    out = {"status": result.status, "output": result.output, "error": result.error}
    if mode in (
        "replay-pipeline",
        "replay-parent",
    ):  # and its replay envelope, as the run's result carries it
        out["replay"] = None if result.replay is None else result.replay.to_json()
    print(RESULT + json.dumps(out))
    return 0


async def _many(world: little.World, prefix: str, n: int) -> list[Any]:
    wf = lookup("busy")
    return list(
        await asyncio.gather(*(run(world, wf, {"i": i}, run_id=f"{prefix}-{i}") for i in range(n)))
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
