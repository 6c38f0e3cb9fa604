"""Redaction: a deployment's hook that strips secrets from what a run records.

A ``Redactor`` is called as ``redactor(where, value)`` with a JSON value (``where`` is one of
``WHERE``) before it is written, and returns the value to record: the same value, or a copy
with secrets replaced by ``REDACTED``. The marker stays in the recorded JSON at the place of
each secret, so the event itself says which fields were redacted (``redacted_paths``) and
``little report`` lists them. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

__all__ = [
    "REDACTED",
    "WHERE",
    "Redactor",
    "redact_keys",
    "redact_values",
    "redacted_paths",
]

REDACTED = "[redacted]"
"""What a redacted value (or the redacted part of a string) becomes."""

WHERE = (
    "system",
    "prompt",
    "model_response",
    "model_error",
    "tool_arguments",
    "tool_result",
    "tool_error",
)
"""What a redactor is asked about: a session's system prompt, a prompt given to
``agent.run``, a model's response (its text and the tool calls it asks for), the message of a
failed model call (a provider's error may quote part of a key), a tool call's arguments as
recorded, a tool's result, and the message of a tool's error (a string)."""

Redactor = Callable[[str, Any], Any]
"""``(where, value) -> value``: the value to record in place of ``value``. It must be
idempotent (a redacted value redacted again is unchanged): a resume rebuilds the
conversation from what was recorded and redacts it again."""


def redact_keys(*names: str) -> Redactor:
    """A redactor that replaces the value under any object key named like one of ``names``
    (case-insensitive; ``api_key`` also matches ``API-Key``), at any depth."""
    wanted = {_norm(n) for n in names}

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: REDACTED if _norm(str(k)) in wanted else walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    def redact(where: str, value: Any) -> Any:
        return walk(value)

    return redact


def redact_values(*secrets: str, also: Redactor | None = None) -> Redactor:
    """A redactor that replaces every occurrence of each secret string (an API key, a token)
    inside any string of the value, then applies ``also`` if given."""
    found = [s for s in secrets if s]
    pattern = re.compile("|".join(re.escape(s) for s in sorted(found, key=len, reverse=True)))

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return pattern.sub(REDACTED, value) if found else value
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    def redact(where: str, value: Any) -> Any:
        out = walk(value)
        return also(where, out) if also is not None else out

    return redact


def redacted_paths(value: Any, prefix: str = "") -> list[str]:
    """The paths (``a.b[2].c``) of the strings in a recorded JSON value that hold
    ``REDACTED``: the fields a redactor stripped."""
    return list(_paths(value, prefix))


def _paths(value: Any, at: str) -> Iterator[str]:
    if isinstance(value, str):
        if REDACTED in value:
            yield at or "(value)"
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, f"{at}.{k}" if at else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, f"{at}[{i}]")


def _norm(name: str) -> str:
    return re.sub(r"[-_ ]", "", name).lower()
