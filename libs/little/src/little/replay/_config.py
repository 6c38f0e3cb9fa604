"""A run's configuration: what shapes it besides its input, hashed into ``RunStarted`` v4.

Run-level parts live here (the workflow's name and version, its source identity, its
budgets); session-level parts (model request options, the compaction policy) live in each
session's manifest (``harness.session.started``), whose hash is the session's configuration
hash. Pure: the runtime computes a run's configuration when it starts, and a replay or a
resume compares it with the recorded one (``configuration_changes``), part by part, so a
refusal names what changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from little._canonical import canonical_hash, canonical_json
from little.replay._state import MaterializedRunState

CONFIG_VERSION = 1
"""The shape of ``config_json``: bumped when a part is added (an old run's configuration is
then compared on the parts both versions hold)."""


def run_configuration(
    *,
    workflow: str,
    workflow_version: str,
    source_sha256: str | None,
    source_coverage: str | None,
    max_agent_calls: int | None,
    max_tokens: int | None,
) -> dict[str, Any]:
    """The run-level configuration, as recorded in ``RunStarted.config_json``."""
    return {
        "v": CONFIG_VERSION,
        "workflow": workflow,
        "workflow_version": workflow_version,
        "source_sha256": source_sha256,
        "source_coverage": source_coverage,
        "budgets": {"max_agent_calls": max_agent_calls, "max_tokens": max_tokens},
    }


def configuration_json(config: Mapping[str, Any]) -> tuple[str, str]:
    """``(canonical JSON, sha256)`` of a configuration."""
    text = canonical_json(dict(config))
    return text, canonical_hash(dict(config))


def state_configuration(state: MaterializedRunState) -> dict[str, Any] | None:
    """The run-level configuration a started run ran with, from its folded state (None before
    ``RunStarted``). A run logged before ``RunStarted`` v4 recorded every part of it as a field
    of its own, so its configuration is derived from those fields, exactly."""
    if state.workflow is None:
        return None
    return run_configuration(
        workflow=state.workflow,
        workflow_version=state.workflow_version or "",
        source_sha256=state.source_sha256,
        source_coverage=state.source_coverage,
        max_agent_calls=state.max_agent_calls,
        max_tokens=state.max_tokens,
    )


def configuration_changes(
    before: Mapping[str, Any], after: Mapping[str, Any], prefix: str = ""
) -> tuple[str, ...]:
    """How ``after`` differs from ``before``, one ``"part: before -> after"`` line per leaf
    (dotted names for nested parts, ``v`` left out), in name order."""
    out: list[str] = []
    for key in sorted({*before, *after}):
        if not prefix and key == "v":
            continue
        a, b = before.get(key), after.get(key)
        name = f"{prefix}{key}"
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out.extend(configuration_changes(a, b, f"{name}."))
        elif a != b:
            out.append(f"{name}: {_show(a)} -> {_show(b)}")
    return tuple(out)


def _show(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, str) and len(value) == 64 and value.isalnum():
        return value[:12] + "..."  # a hash
    if isinstance(value, Mapping | list):
        return canonical_json(value)
    return str(value)
