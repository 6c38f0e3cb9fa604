"""What every framework adapter needs, whatever the framework: per-run stamps stripped from what
is hashed, the request hash chain over a framework's resent history (found by prefix over a
per-message canonical-JSON cache, so a long run hashes linearly), JSON values for manifests, and
the one-line refusal of a feature a replay cannot reproduce.

Framework-neutral: nothing here imports a framework; an adapter hands in its own encoder.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from little._canonical import canonical_hash, canonical_json, chain_hash
from little.errors import UnsupportedFeatureError

__all__ = [
    "Link",
    "MessageChain",
    "UnsupportedFeatureError",
    "json_value",
    "refuse",
    "strip_stamps",
]


def refuse(framework: str, feature: str, why: str) -> UnsupportedFeatureError:
    """The one-line error naming the refused ``feature`` of ``framework`` and why."""
    return UnsupportedFeatureError(
        f"little.integrations.{framework}: {feature} is refused under little: {why}"
    )


def strip_stamps(value: Any, stamps: frozenset[str]) -> Any:
    """``value`` (JSON data) without the keys in ``stamps``, at any depth: the per-run values a
    framework writes into its messages (a timestamp, a run id) must never reach a hash, or a
    resume would build other requests than the ones it recorded."""
    if isinstance(value, dict):
        return {k: strip_stamps(v, stamps) for k, v in value.items() if k not in stamps}
    if isinstance(value, list):
        return [strip_stamps(v, stamps) for v in value]
    return value


def json_value(value: Any) -> Any:
    """``value`` as JSON data for a manifest: what JSON cannot hold (an SDK object, a function)
    is named by its type, so the manifest stays hashable and stable across processes."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, Mapping):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    return f"<{type(value).__module__}.{type(value).__qualname__}>"


@dataclass(frozen=True, slots=True)
class Link:
    """One model request's link in the chain: what ``TurnRequest`` records of it."""

    request_hash: str
    previous_hash: str | None
    appended_text: str
    """Canonical JSON of the messages appended since the previous request (or, when the history
    was rewritten, ``{"rewritten_from": k, "messages": [...]}``: what replaced it from k on)."""
    message_count: int


class MessageChain:
    """The request hash chain of one conversation whose framework resends its whole history on
    every request. Each request's link extends the previous one with what was appended since;
    the appended part is found by prefix against the messages already hashed, each serialised
    once (by identity while the framework hands the same objects back, else by its canonical
    JSON), so a run of n requests costs its new messages, not n times the history."""

    def __init__(self, first: Mapping[str, Any], encode: Callable[[Any], Any]) -> None:
        self._chain = canonical_hash(dict(first))
        self._encode = encode
        """A framework message -> its JSON data, stamps stripped."""
        self._objects: list[Any] = []
        self._texts: list[str] = []
        self._started = False

    def text_of(self, message: Any) -> str:
        return canonical_json(self._encode(message))

    def texts(self, messages: Sequence[Any]) -> list[str]:
        """The canonical JSON of each message, reusing the cache along the hashed prefix."""
        out: list[str] = []
        for i, message in enumerate(messages):
            if i < len(self._objects) and self._objects[i] is message and i < len(messages) - 1:
                out.append(self._texts[i])  # the same object, not the newest: unchanged
            else:
                out.append(self.text_of(message))
        return out

    def link(self, messages: Sequence[Any]) -> Link:
        """Extend the chain with the request of ``messages`` (the whole history sent)."""
        texts = self.texts(messages)
        common = 0
        for mine, theirs in zip(self._texts, texts, strict=False):
            if mine != theirs:
                break
            common += 1
        if common == len(self._texts):
            appended_text = "[" + ",".join(texts[common:]) + "]"
        else:  # the history was rewritten (trimmed, edited): the link says from where
            appended_text = (
                '{"messages":[' + ",".join(texts[common:]) + f'],"rewritten_from":{common}}}'
            )
        previous = self._chain if self._started else None
        self._chain = chain_hash(self._chain, appended_text)
        self._started = True
        self._objects = list(messages)
        self._texts = texts
        return Link(self._chain, previous, appended_text, len(messages))

    @property
    def head(self) -> str:
        return self._chain
