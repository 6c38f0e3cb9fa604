"""The contract test: today's framework hashes the reference agent's requests exactly as every
committed golden file recorded them (``contract.py``)."""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.little.integrations.pydantic_ai import contract

FILES = sorted(contract.GOLDEN.glob(f"{contract.FRAMEWORK}-*.json"))


def test_the_pinned_framework_version_has_its_golden_requests() -> None:
    installed = version(contract.FRAMEWORK)
    assert contract.path_for(installed).exists(), (
        f"no golden requests for {contract.FRAMEWORK} {installed}: check test_contract passes "
        "against the older files, then record them with "
        "`.venv/bin/python -m tests.little.integrations.pydantic_ai.contract`"
    )


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_what_is_hashed_is_what_the_golden_file_recorded(path: Path) -> None:
    golden = json.loads(path.read_text())
    now = contract.capture()
    assert now["manifest"] == golden["manifest"]
    assert now["manifest_hash"] == golden["manifest_hash"]
    assert [r["appended"] for r in now["requests"]] == [r["appended"] for r in golden["requests"]]
    assert now["requests"] == golden["requests"]
    assert now["request_keys"] == golden["request_keys"]
