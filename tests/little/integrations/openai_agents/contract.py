"""The contract with the pinned Agents SDK: the stripped requests (what little hashes) of the
reference run, over Chat Completions and over Responses, as the golden files under
``golden/`` hold them, one per SDK version (major.minor).

Run ``.venv/bin/python -m tests.little.integrations.openai_agents.contract`` after pinning a
new SDK version: it writes that version's file if it is missing and never overwrites one, so
``test_contract.py`` keeps checking today's SDK against the requests earlier versions built.
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
from little.events import AgentCallAdmitted, ModelCalled
from little.runtime import run
from tests.little.integrations.openai_agents import agents_support as s

GOLDEN = Path(__file__).parent / "golden"
TICKET = {"ticket": "Where is my order A1?", "followup": "Thanks, and when does it arrive?"}


def sdk_version() -> str:
    """The installed SDK's major.minor (the pin is a range within one)."""
    return ".".join(version("openai-agents").split(".")[:2])


def golden_path(sdk: str) -> Path:
    return GOLDEN / f"requests-openai-agents-{sdk}.json"


def reference_requests() -> dict[str, Any]:
    """Per API: each agent call's request key, each model request's hash and what it
    appended to the chain (the head when it changed, the stripped input items)."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as d, little.local_world(d) as world:
        for api in ("chat", "responses"):
            result = asyncio.run(run(world, s.triage, {**TICKET, "api": api}))
            assert result.status == "completed", result.error
            logged = [x.event for x in world.read_run(result.run_id)]
            out[api] = {
                "request_keys": [e.request_key for e in logged if isinstance(e, AgentCallAdmitted)],
                "requests": [
                    {
                        "session": e.session_id,
                        "turn": e.turn,
                        "request_hash": e.request_hash,
                        "appended": json.loads(e.appended_messages_json or "null"),
                    }
                    for e in logged
                    if isinstance(e, ModelCalled)
                ],
            }
    return out


def main() -> int:
    path = golden_path(sdk_version())
    if path.exists():
        print(f"{path} exists: golden files are never overwritten")
        return 0
    GOLDEN.mkdir(exist_ok=True)
    path.write_text(json.dumps(reference_requests(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
