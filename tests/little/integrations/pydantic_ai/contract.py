"""The adapter's contract with a pinned Pydantic AI: what it hashes, committed per framework
version under ``golden/`` (``pydantic-ai-slim-<version>.json``): the reference agent's session
manifest, its agent calls' request keys, and each model request as recorded (the stripped
messages appended, and the request hash). ``test_contract.py`` checks today's framework against
every committed file, so an upgrade that changes what is hashed (a new per-run stamp, another
message shape) fails CI, not a production resume or replay.

``.venv/bin/python -m tests.little.integrations.pydantic_ai.contract`` records the installed
version's file if it is missing; it never overwrites one.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path
from typing import Any

import little
from little.events import AgentCallAdmitted, ModelCalled, SessionStarted
from little.runtime import run
from tests.little.integrations.pydantic_ai import workflows as wf

GOLDEN = Path(__file__).parent / "golden"
FRAMEWORK = "pydantic-ai-slim"


def capture() -> dict[str, Any]:
    """What the reference agent (``workflows.research``, two runs, a tool call) hashes today."""
    with tempfile.TemporaryDirectory() as tmp, little.local_world(Path(tmp) / "w") as world:
        result = asyncio.run(run(world, wf.version("1"), "Kafka", run_id="contract"))
        assert result.status == "completed", result.error
        events = [r.event for r in world.read_run(result.run_id)]
    (started,) = [e for e in events if isinstance(e, SessionStarted)]
    return {
        "manifest": json.loads(started.manifest_json),
        "manifest_hash": started.manifest_hash,
        "request_keys": [e.request_key for e in events if isinstance(e, AgentCallAdmitted)],
        "requests": [
            {
                "turn": e.turn,
                "appended": json.loads(e.appended_messages_json or "null"),
                "request_hash": e.request_hash,
                "previous_request_hash": e.previous_request_hash,
                "tools_hash": e.tools_hash,
            }
            for e in events
            if isinstance(e, ModelCalled)
        ],
    }


def path_for(framework_version: str) -> Path:
    return GOLDEN / f"{FRAMEWORK}-{framework_version}.json"


def main() -> int:
    installed = version(FRAMEWORK)
    path = path_for(installed)
    if path.exists():
        print(f"{path} exists: golden requests are never overwritten")
        return 0
    data = {"framework": FRAMEWORK, "version": installed, **capture()}
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
