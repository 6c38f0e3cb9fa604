"""Compaction of a session's history: a policy that trims or summarises the conversation
when it nears a limit, before an exchange (``step.session(..., compact=CompactionPolicy(...))``).

The policy is part of the session's configuration: it is in the session's manifest (so a
resume under another policy is refused, naming ``compaction``, and a replay's request keys
change with it), and its result is recorded (``harness.session.compacted``), so a resume
reuses the recorded history instead of compacting again. A summary is an agent call of its
own (a session ``<session>~compact<exchange>`` with no tools), recorded and served like any
other: a resume or a replay under the same policy answers it from the log, with no model call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from little._canonical import canonical_hash
from little.errors import ConfigurationError
from little.harness import Message, Model

DEFAULT_SUMMARY_PROMPT = (
    "You compact conversations. Summarise the conversation you are given (a JSON list of "
    "chat messages) so that it can replace it: keep every fact, decision, open question and "
    "tool result the rest of the conversation may need. Answer with the summary only."
)
SUMMARY_PREFIX = "Summary of the earlier conversation:\n"
SUMMARY_ACK = "Understood."


@dataclass(frozen=True)
class CompactionPolicy:
    """When and how a session's history is compacted, checked before each exchange.

    It is due when the conversation holds more than ``max_messages`` messages or its canonical
    JSON is longer than ``max_chars`` characters (a rough proxy for tokens, about four
    characters each, which the log reproduces exactly in a resume or a replay: provider
    token counts of served exchanges are not). It keeps the last ``keep_last`` messages, moved
    forward to the first user message among them so no tool result loses the call it answers,
    and replaces the rest: dropped (``summarize=False``, a trim), or replaced by a summary
    written by ``summary_model`` (the session's own model when None) under ``summary_prompt``,
    a recorded agent call.
    """

    max_messages: int | None = None
    max_chars: int | None = None
    keep_last: int = 4
    summarize: bool = False
    summary_model: Model | None = None
    summary_prompt: str = DEFAULT_SUMMARY_PROMPT

    def __post_init__(self) -> None:
        if self.max_messages is None and self.max_chars is None:
            raise ConfigurationError(
                "CompactionPolicy needs a limit: max_messages=, max_chars= or both"
            )
        for name in ("max_messages", "max_chars"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or value < 1):
                raise ConfigurationError(f"CompactionPolicy {name}={value!r}: use 1 or more")
        if isinstance(self.keep_last, bool) or self.keep_last < 0:
            raise ConfigurationError(
                f"CompactionPolicy keep_last={self.keep_last!r}: use 0 or more"
            )

    def as_json(self, session_model: str) -> dict[str, Any]:
        """The policy as configuration (in the session's manifest and the compaction event):
        every field that changes what a compaction produces."""
        config: dict[str, Any] = {
            "max_messages": self.max_messages,
            "max_chars": self.max_chars,
            "keep_last": self.keep_last,
            "summarize": self.summarize,
        }
        if self.summarize:
            model = self.summary_model
            config["summary_model"] = (
                f"{model.provider}:{model.name}" if model is not None else session_model
            )
            config["summary_prompt_hash"] = canonical_hash(self.summary_prompt)
        return config

    def due(self, messages: Sequence[Message], conversation_json: str) -> bool:
        """Whether the conversation (``messages``, whose canonical JSON is
        ``conversation_json``) is over a limit."""
        if self.max_messages is not None and len(messages) > self.max_messages:
            return True
        return self.max_chars is not None and len(conversation_json) > self.max_chars

    def cut(self, messages: Sequence[Message]) -> int:
        """Where the kept messages start: the first user message among the last
        ``keep_last`` (``len(messages)`` when there is none: all are replaced)."""
        start = max(len(messages) - self.keep_last, 0)
        for i in range(start, len(messages)):
            if messages[i].get("role") == "user":
                return i
        return len(messages)
