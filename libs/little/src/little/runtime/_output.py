"""Structured output: what an agent call's final answer must be (a pydantic model or a JSON
schema), how it is asked for and validated, and what the model is told when it does not fit.

``agent.run(prompt, output=Invoice)`` (or ``step.session(..., output=Invoice)`` for every call
of a session) asks the model for that schema through its adapter's native mechanism
(``ModelRequest.output``), validates the answer and returns the validated object (an
``Invoice``; for a schema dict, the parsed JSON). An answer that does not validate is shown
its error and asked again, each time a recorded turn, at most ``output_retries`` times.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from little._canonical import canonical_json
from little.errors import ConfigurationError
from little.harness import OutputSchema

__all__ = ["DEFAULT_OUTPUT_RETRIES", "Output", "OutputType", "output_of", "retry_prompt"]

OutputType = type[BaseModel] | Mapping[str, Any]
"""What ``output=`` takes: a pydantic model class, or a JSON schema (a dict)."""

DEFAULT_OUTPUT_RETRIES = 2
"""How many times an answer that does not validate is sent back with its error."""


@dataclass(frozen=True)
class Output:
    """One structured output: its schema as the model is asked for it, and its validator."""

    spec: OutputSchema
    model: type[BaseModel] | None
    """The pydantic model validated into (None: a JSON schema, validated with jsonschema)."""

    def as_json(self) -> dict[str, Any]:
        """What a manifest and an agent call's key hold of it."""
        return self.spec.as_json()

    def check(self, text: str | None) -> tuple[Any, str | None]:
        """``(the validated answer, None)`` (a model instance, or the parsed JSON), or
        ``(None, how it does not fit the schema)``."""
        if text is None:
            return None, "the answer has no text; it must be JSON matching the schema"
        if self.model is not None:
            try:
                return self.model.model_validate_json(text), None
            except ValidationError as exc:
                # without pydantic's links: the text is in the conversation (and its hashes),
                # so it must not change with the pydantic version a resume runs on
                return None, "; ".join(
                    f"{'.'.join(str(p) for p in e['loc']) or 'the answer'}: {e['msg']}"
                    for e in exc.errors(include_url=False)
                )
        try:
            value = json.loads(text)
        except ValueError as exc:
            return None, f"the answer is not JSON: {exc}"
        import jsonschema  # type: ignore[import-untyped]

        try:
            jsonschema.validate(value, self.spec.schema)
        except jsonschema.ValidationError as exc:
            where = "/".join(str(p) for p in exc.absolute_path) or "the answer"
            return None, f"{where}: {exc.message}"
        return value, None

    def plain(self, value: Any) -> Any:
        """A validated answer as JSON data."""
        return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


def _name(name: str) -> str:
    """A name both providers take for a schema or tool (letters, digits, ``_``, ``-``; 64)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64] or "output"


def output_of(output: OutputType, where: str) -> Output:
    """The ``Output`` of ``output=``; ``ConfigurationError`` naming ``where`` when it is not
    a pydantic model class or a JSON schema (a dict)."""
    if isinstance(output, type) and issubclass(output, BaseModel):
        schema = output.model_json_schema()
        return Output(OutputSchema(_name(output.__name__), schema), output)
    if isinstance(output, Mapping):
        schema = json.loads(canonical_json(dict(output)))  # JSON data, or it raises
        try:
            import jsonschema
        except ImportError:
            raise ConfigurationError(
                f"{where}: output= a JSON schema is validated with jsonschema: pip install "
                "jsonschema (or pass a pydantic model class)"
            ) from None
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise ConfigurationError(
                f"{where}: output= is not a JSON schema: {exc.message}"
            ) from None
        return Output(OutputSchema(_name(str(schema.get("title") or "output")), schema), None)
    raise ConfigurationError(
        f"{where}: output= takes a pydantic model class or a JSON schema dict, not "
        f"{type(output).__name__}"
    )


def retry_prompt(output: Output, error: str) -> str:
    """What the model is told when its answer does not validate."""
    return (
        f"Your answer does not match the required output schema {output.spec.name!r}: {error}\n"
        "Answer again with only JSON that matches the schema."
    )
