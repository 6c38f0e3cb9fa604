"""The Agents SDK adapter's helpers: per-run values stripped from what is hashed, the request
hash chain over the SDK's native items (found by prefix, each serialised once), and the test of
little's control exceptions, which the SDK's error handling must never swallow."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from little._canonical import canonical_hash, canonical_json, chain_hash
from little.errors import RunInterrupt, UnsupportedFeatureError
from little.runtime import CONTROL_ERRORS, TurnRequest

__all__ = [
    "RequestChain",
    "in_chain",
    "is_control",
    "latched_refusals",
    "note_refusal",
    "refusal_in",
    "stripped",
]


def is_control(exc: BaseException) -> bool:
    """little's own control flow (a suspension, a stop, a spent budget, a log failure, a branch
    stopped): never a tool's or a model's failure, always re-raised through a framework."""
    return isinstance(exc, (RunInterrupt, *CONTROL_ERRORS))


_REFUSALS: ContextVar[tuple[object, list[UnsupportedFeatureError]] | None] = ContextVar(
    "little_openai_agents_refusals", default=None
)
"""While a recorded function tool runs: its step, and the refusals ``LittleRunner`` met in it
for that step."""


@contextmanager
def latched_refusals(step: object) -> Iterator[list[UnsupportedFeatureError]]:
    """Remember every refusal a ``LittleRunner`` call of ``step`` meets while the block runs (a
    recorded tool's body), whatever the tool does with it after: one it catches and answers
    for is still a refusal, never the tool's result. A sub-run the tool starts has steps of its
    own: what its code refuses and handles is its own."""
    latch: list[UnsupportedFeatureError] = []
    token = _REFUSALS.set((step, latch))
    try:
        yield latch
    finally:
        _REFUSALS.reset(token)


def in_chain(exc: BaseException, wanted: Callable[[BaseException], bool]) -> BaseException | None:
    """The first exception ``wanted`` takes among ``exc`` and what it was raised from or while
    handling (``__cause__``, else ``__context__``), or None."""
    seen: BaseException | None = exc
    visited: set[int] = set()
    while seen is not None and id(seen) not in visited:
        if wanted(seen):
            return seen
        visited.add(id(seen))
        seen = seen.__cause__ or seen.__context__
    return None


def refusal_in(exc: BaseException) -> UnsupportedFeatureError | None:
    """The refusal ``exc`` is, or wraps (``raise ... from`` it, or raised while handling it)."""
    found = in_chain(exc, lambda e: isinstance(e, UnsupportedFeatureError))
    return found if isinstance(found, UnsupportedFeatureError) else None


def note_refusal(exc: BaseException, step: object) -> None:
    """A ``LittleRunner`` call of ``step`` ended by ``exc``: if it is (or wraps) a refusal and
    the call runs inside a recorded tool of that step, the tool's latch keeps it
    (``latched_refusals``)."""
    latched = _REFUSALS.get()
    if latched is not None and latched[0] is step:
        refusal = refusal_in(exc)
        if refusal is not None:
            latched[1].append(refusal)


def stripped(value: Any, drop: Iterable[str] = ()) -> Any:
    """``value`` as JSON data with the keys ``drop`` (per-run values a framework stamps) and
    every None-valued key removed at any depth: a JSON round trip of a framework's objects adds
    unset fields as nulls, which must not change a hash."""
    names = frozenset(drop)

    def walk(v: Any) -> Any:
        if isinstance(v, Mapping):
            return {str(k): walk(x) for k, x in v.items() if x is not None and k not in names}
        if isinstance(v, list | tuple):
            return [walk(x) for x in v]
        return v

    return walk(value)


class RequestChain:
    """The request hash chain of one session over a framework's native messages.

    Each model request is a head (what decides the answer besides the messages: model,
    instructions, tools, settings, output schema) and the messages. The chain's first link
    commits to the session; each request extends the previous request's hash with what it
    appended: the head when it changed (a handoff, dynamic instructions), then the messages past
    the previous request's, found by prefix. A request whose messages do not extend the
    previous one's (a history rewritten) appends a relink marker and all its messages. Each
    message is serialised once (a cache by identity, holding the message), so a long run hashes
    linearly."""

    def __init__(self, origin: Mapping[str, Any], drop: Iterable[str] = ()) -> None:
        self._link = canonical_hash(dict(origin))
        self._drop = tuple(drop)
        self._sent: list[str] = []  # canonical JSON of each message of the previous request
        self._head: str | None = None
        self._cache: dict[int, tuple[Any, str]] = {}
        self.turns = 0
        self._before: tuple[str, list[str], str | None, int] | None = None

    def _json(self, message: Any) -> str:
        hit = self._cache.get(id(message))
        if hit is not None and hit[0] is message:
            return hit[1]
        text = canonical_json(stripped(message, self._drop))
        self._cache[id(message)] = (message, text)
        return text

    def extend(self, head: Mapping[str, Any], messages: list[Any], tools_hash: str) -> TurnRequest:
        """The next request's link (a new turn)."""
        texts = [self._json(m) for m in messages]
        head_json = canonical_json(stripped(head, self._drop))
        appended: list[str] = []
        if head_json != self._head:
            appended.append(canonical_json({"type": "little.request_head", "head": head_json}))
        sent = self._sent
        if len(texts) >= len(sent) and texts[: len(sent)] == sent:
            appended.extend(texts[len(sent) :])
        else:
            appended.append(canonical_json({"type": "little.relink"}))
            appended.extend(texts)
        appended_text = "[" + ",".join(appended) + "]"
        previous = self._link if self.turns else None
        self._before = (self._link, self._sent, self._head, self.turns)
        self._link = chain_hash(self._link, appended_text)
        self._sent, self._head = texts, head_json
        self.turns += 1
        return TurnRequest(
            self.turns, self._link, previous, appended_text, len(messages), tools_hash
        )

    def rewind(self) -> None:
        """Undo the last ``extend``: its call failed, and the framework's retry of the same
        request is a new ``called`` for the same turn, with the same hash."""
        if self._before is not None:
            self._link, self._sent, self._head, self.turns = self._before
            self._before = None
