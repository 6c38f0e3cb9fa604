"""Contract with the pinned Agents SDK: today's SDK builds, for the reference run, exactly the
stripped requests (and so the request hashes and agent-call keys) that every committed golden
file holds. An SDK upgrade that changes what is hashed fails here, not in a production resume
(whose recorded turns would no longer be served) or replay."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.little.integrations.openai_agents import contract
from tests.little.integrations.openai_agents.test_runner import calls_dir

__all__ = ["calls_dir"]  # fixtures


def test_the_installed_sdk_version_has_a_golden_file() -> None:
    path = contract.golden_path(contract.sdk_version())
    assert path.exists(), (
        f"no golden requests for openai-agents {contract.sdk_version()}: run "
        "`python -m tests.little.integrations.openai_agents.contract` and review the diff"
    )


@pytest.mark.parametrize("golden", sorted(contract.GOLDEN.glob("requests-*.json")), ids=str)
def test_the_sdk_builds_the_golden_requests(golden: Path, calls_dir: Path) -> None:
    recorded = json.loads(golden.read_text())
    built = contract.reference_requests()
    for api in ("chat", "responses"):
        for want, got in zip(recorded[api]["requests"], built[api]["requests"], strict=True):
            assert got == want, f"{golden.name} {api}: the SDK builds another request"
        assert built[api]["request_keys"] == recorded[api]["request_keys"], golden.name
