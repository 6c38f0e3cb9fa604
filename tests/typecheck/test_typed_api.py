"""The typed public-API file runs as well as type-checks; a workflow keeps its signature."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path

import pytest

from little.errors import ConfigurationError
from little.runtime import Workflow, WorkflowContext, register, registered, workflow
from tests.typecheck.public_api import brief, main


def test_the_typed_public_api_file_runs(tmp_path: Path) -> None:
    state = asyncio.run(main(tmp_path))
    assert state.status == "completed"
    assert state.workflow == "typed_brief"


def test_a_workflow_keeps_its_functions_signature_and_calls_it() -> None:
    assert inspect.signature(brief) == inspect.signature(brief.fn)
    assert (
        str(inspect.signature(brief))
        == "(ctx: 'WorkflowContext', topic: 'str') -> 'dict[str, Any]'"
    )


def test_the_registry_is_read_only_and_a_clash_is_named() -> None:
    view = registered()
    assert view["typed_brief"] is brief
    with pytest.raises(TypeError):
        view["typed_brief"] = brief  # type: ignore[index]

    async def other(ctx: WorkflowContext, topic: str) -> dict[str, str]:
        return {}

    clash = Workflow("typed_brief", "1", other)
    with pytest.raises(ConfigurationError, match="workflow typed_brief v1 is registered twice"):
        register(clash)
    assert registered()["typed_brief"] is brief

    @workflow("typed_brief_other", version="1")
    async def again(ctx: WorkflowContext, topic: str) -> str:
        return topic

    assert registered()["typed_brief_other"] is again
