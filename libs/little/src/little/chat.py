"""A run's model exchanges rebuilt from its events alone, and written as chat fine-tuning
examples (``little export <run> --format chat-jsonl``).

A session logs each model request as a delta (``harness.model.called``: the messages
appended since its previous request, and the request hash chained over them), its system
prompt and tools once (``harness.session.started``: the prompt from v2 on, the tools in the
manifest), each answer (``harness.model.responded``), and each exchange's messages
(``agent.call.settled``: an exchange served from a recorded run adds its messages without any
model call), and each compaction of its history (``harness.session.compacted``: the history
that replaces the conversation, the next request chaining from its link). ``model_exchanges`` folds those back into the full request of every model call
that was answered, and checks each against the log: the message count, the tools hash, the
system prompt's hash in the manifest and, link by link, the request hash chain, so a rebuilt
request is the one the model was sent (``RuntimeIntegrityError`` otherwise). A turn called
again after a crash is one exchange; a step's new attempt opens its sessions anew (their
earlier answered calls stay exchanges); a fenced writer's events are not history.

``chat_example`` writes one in the chat fine-tuning shape (OpenAI's, which other trainers
read too): ``{"messages": [system, ...request, assistant answer], "tools": [...]}``, tools
only when the request had them, assistant tool calls as ``{"id", "type": "function",
"function": {"name", "arguments": <JSON text>}}``. Provider reasoning blocks kept for the
next turn (``reasoning``) have no place in that shape and are left out. Content of parts
(images, documents: ``little.harness.content``) is a list of chat content parts, ``text``,
``image_url`` and ``file``, bytes written back as ``data:`` URLs (read from the artifact
store where the record names them by digest), in user and tool messages alike.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from little import _framework_chat as native_chat
from little._canonical import canonical_hash, canonical_json, chain_hash, sha256_hex
from little.errors import ConfigurationError, RuntimeIntegrityError
from little.events import (
    AgentCallAdmitted,
    AgentCallSettled,
    ArtifactRef,
    LoggedEvent,
    ModelCalled,
    ModelResponded,
    SessionCompacted,
    SessionStarted,
)
from little.harness import ModelResponse
from little.harness.content import artifact_digests, chat_part, is_parts, with_data
from little.replay import accepted_events

__all__ = ["ModelExchange", "chat_example", "chat_message", "model_exchanges"]

_Message = dict[str, Any]
_UNKNOWN: Any = object()


@dataclass(frozen=True)
class ModelExchange:
    """One answered model call: the full request as the model was sent it, and its answer."""

    run_id: str
    session_id: str
    turn: int
    provider: str
    model: str
    system: str | None
    """The system prompt (None: none)."""
    system_recorded: bool
    """False for a session logged before system prompts were (``harness.session.started``
    v1) that had one: ``system`` is then None though the model was sent a prompt."""
    messages: tuple[_Message, ...]
    tools: tuple[Mapping[str, Any], ...]
    """The tool specs of the request: ``{"name", "description", "parameters"}``."""
    response: _Message
    """The assistant message the model answered with."""
    request_hash: str
    native_format: str | None = None
    """A framework session's message format (its manifest's, e.g. ``pydantic-ai``): its
    native messages were rebuilt and checked, then shown here in little's chat shape."""


@dataclass
class _Session:
    run_id: str
    session_id: str
    model: str = ""
    system: Any = _UNKNOWN
    """The prompt; ``_UNKNOWN`` when not recorded (v1) and not empty."""
    systems: tuple[str | None, ...] = ()
    """What the first link may have hashed: the prompt, or for a v1 session without one
    None or "" (the manifest's hash cannot tell them apart)."""
    tools: list[Mapping[str, Any]] = field(default_factory=list)
    messages: list[_Message] = field(default_factory=list)
    hashed: int = 0
    link: str | None = None
    """The request hash chain as the rebuilt conversation stands (None: not known yet)."""
    starts: dict[int, int] = field(default_factory=dict)
    requests: dict[int, tuple[tuple[_Message, ...], ModelCalled]] = field(default_factory=dict)
    settled: set[int] = field(default_factory=set)
    answered: set[int] = field(default_factory=set)
    native: str | None = None
    """A framework session's message format: ``messages`` holds its native messages."""
    native_first: str = ""
    head: Any = None
    """An Agents SDK session's request head (model, instructions, tools, ...) as it stands."""
    heads: dict[int, Any] = field(default_factory=dict)
    """Each Agents SDK request's head, by turn."""

    @property
    def where(self) -> str:
        return f"run {self.run_id}: session {self.session_id}"

    def first_links(self) -> list[str]:
        if self.native is not None:
            return [self.native_first]
        return [
            canonical_hash({"model": self.model, "system": s, "tools": self.tools})
            for s in self.systems
        ]


def model_exchanges(
    events: Iterable[LoggedEvent], load: Callable[[ArtifactRef], bytes]
) -> list[ModelExchange]:
    """Every answered model call of a run's events, in the order of their answers, with its
    full request rebuilt from the logged deltas (``load`` reads an artifact a record names).
    Raises ``RuntimeIntegrityError`` where the log does not hold together."""
    sessions: dict[str, _Session] = {}
    out: list[ModelExchange] = []
    loaded = _PartBytes(load)

    def text(inline: str | None, ref: ArtifactRef | None) -> str | None:
        return load(ref).decode() if ref is not None else inline

    def session(e: Any) -> _Session:
        sid = str(e.session_id)
        if sid not in sessions:
            sessions[sid] = _Session(e.run_id, sid)
        return sessions[sid]

    for item in accepted_events(events):
        e = item.event
        if e.session_id is None:
            continue
        if isinstance(e, SessionStarted):
            # logged once per session: again only when a new attempt of its step opens it
            # anew (a resume does not), and then it starts over, as in the fold
            sessions.pop(str(e.session_id), None)
            _started(session(e), e, text(e.system_json, e.system_ref))
        elif isinstance(e, SessionCompacted):
            _compacted(session(e), e, text(e.history_json, e.history_ref))
        elif isinstance(e, AgentCallAdmitted):
            s = session(e)
            s.starts.setdefault(e.ordinal, len(s.messages))
        elif isinstance(e, ModelCalled):
            _called(session(e), e, text(e.appended_messages_json, e.appended_messages_ref))
        elif isinstance(e, ModelResponded):
            s = session(e)
            if e.turn in s.answered:
                continue
            s.answered.add(e.turn)
            if e.turn not in s.requests:
                raise RuntimeIntegrityError(
                    f"{s.where}: seq {e.seq} answers turn {e.turn}, which has no "
                    "harness.model.called before it"
                )
            request, called = s.requests[e.turn]
            raw = text(e.response_json, e.response_ref) or "{}"
            if s.native is not None:
                out.append(_native_exchange(s, e, request, called, raw))
                continue
            out.append(
                ModelExchange(
                    s.run_id,
                    s.session_id,
                    e.turn,
                    e.provider,
                    e.model,
                    None if s.system is _UNKNOWN else s.system,
                    s.system is not _UNKNOWN,
                    loaded.request(request, s.run_id),
                    tuple(s.tools),
                    ModelResponse.from_json(raw, e.usage).as_message(),
                    called.request_hash,
                )
            )
        elif isinstance(e, AgentCallSettled) and e.outcome is not None:
            _settled(session(e), e, text(e.result_json, e.result_ref))
    return out


class _PartBytes:
    """A request's messages as the model was sent them: the parts whose bytes the record
    names by digest (``little.harness.content``) with their bytes, each blob read once."""

    def __init__(self, load: Callable[[ArtifactRef], bytes]) -> None:
        self._load = load
        self._data: dict[str, str] = {}
        self._done: dict[int, tuple[_Message, _Message]] = {}
        """A message given its bytes, by the id of the recorded one (kept alive here)."""

    def request(self, messages: tuple[_Message, ...], run_id: str) -> tuple[_Message, ...]:
        return tuple(self._message(m, run_id) for m in messages)

    def _message(self, message: _Message, run_id: str) -> _Message:
        digests = artifact_digests(message)
        if not digests:
            return message
        done = self._done.get(id(message))
        if done is not None and done[0] is message:
            return done[1]
        for sha256, size, media_type in digests:
            if sha256 not in self._data:
                ref = ArtifactRef(run_id=run_id, sha256=sha256, size=size, media_type=media_type)
                self._data[sha256] = base64.b64encode(self._load(ref)).decode("ascii")
        given = with_data(message, self._data)
        self._done[id(message)] = (message, given)
        return given


def _native_exchange(
    s: _Session,
    e: ModelResponded,
    request: tuple[_Message, ...],
    called: ModelCalled,
    raw: str,
) -> ModelExchange:
    """A framework session's answered call: its native request (checked link by link when it
    was rebuilt) and answer in little's chat shape; the manifest's tools where they are the
    very tools of the request (its tools hash), else none."""
    if s.native == native_chat.OPENAI_AGENTS:
        return _agents_exchange(s, e, request, called, raw)
    messages = tuple(m for message in request for m in native_chat.pydantic_ai_message(message))
    (response,) = native_chat.pydantic_ai_message(json.loads(raw))
    verified = called.tools_hash is not None and canonical_hash(s.tools) == called.tools_hash
    tools = tuple(
        {
            "name": t.get("name"),
            "description": t.get("description"),
            "parameters": t.get("parameters"),
        }
        for t in (s.tools if verified else ())
    )
    return ModelExchange(
        s.run_id,
        s.session_id,
        e.turn,
        e.provider,
        e.model,
        native_chat.instructions(request),
        True,
        messages,
        tools,
        response,
        called.request_hash,
        s.native,
    )


def _agents_exchange(
    s: _Session,
    e: ModelResponded,
    request: tuple[_Message, ...],
    called: ModelCalled,
    raw: str,
) -> ModelExchange:
    """An Agents SDK session's answered call: the head (in the hashed link) gives its
    instructions and tools."""
    head = s.heads.get(e.turn) or {}
    answer = native_chat.agents_items(json.loads(raw).get("output") or [])
    response = answer[0] if answer else {"role": "assistant", "content": ""}
    tools = tuple(
        {
            "name": t.get("name"),
            "description": t.get("description"),
            "parameters": t.get("parameters"),
        }
        for t in head.get("tools") or ()
    )
    instructions = head.get("instructions")
    return ModelExchange(
        s.run_id,
        s.session_id,
        e.turn,
        e.provider,
        e.model,
        None if instructions is None else str(instructions),
        True,
        tuple(native_chat.agents_items(request)),
        tools,
        response,
        called.request_hash,
        s.native,
    )


def _started(s: _Session, e: SessionStarted, system_json: str | None) -> None:
    manifest = json.loads(e.manifest_json)
    native = manifest.get("format") or manifest.get("framework")
    if native in native_chat.CHAT_FORMATS:  # a framework's session: its native messages
        s.native, s.model = str(native), e.model
        s.tools = list(manifest.get("tools") or [])
        s.system, s.systems = None, ()
        s.native_first = s.link = native_chat.first_link(manifest)
        return
    if native is not None:  # a framework's session (little.integrations): not chat messages
        raise ConfigurationError(
            f"{s.where} records {native} messages (its manifest's format), which the "
            "chat export does not rebuild yet: read them with `little events --json`"
        )
    s.model = e.model
    s.tools = list(manifest.get("tools") or [])
    prompt_hash = manifest.get("system_prompt_hash")
    if system_json is not None:
        system = json.loads(system_json)
        if prompt_hash is not None and sha256_hex(system or "") != prompt_hash:
            raise RuntimeIntegrityError(
                f"{s.where}: the recorded system prompt does not hash to its manifest's "
                "system_prompt_hash"
            )
        s.system, s.systems = system, (system,)
    elif prompt_hash == sha256_hex(""):
        s.system, s.systems = None, (None, "")
    else:
        s.system, s.systems = _UNKNOWN, ()
    links = s.first_links()
    s.link = links[0] if len(links) == 1 else None


def _compacted(s: _Session, e: SessionCompacted, history_json: str | None) -> None:
    """The history that replaces the conversation (``harness.session.compacted``): the next
    request chains from its link, and holds it in place of what it replaced."""
    if history_json is None:
        raise RuntimeIntegrityError(f"{s.where}: seq {e.seq} (a compaction) has no history")
    if sha256_hex(canonical_json(s.messages)) != e.replaced_hash:
        raise RuntimeIntegrityError(
            f"{s.where}: seq {e.seq} compacts a conversation that is not the one rebuilt "
            "from the log before it"
        )
    history = list(json.loads(history_json))
    text = canonical_json({"compacted": e.policy_hash, "history": history})
    links = [e.previous_request_hash] if e.previous_request_hash is not None else s.first_links()
    if links and e.history_hash not in {chain_hash(link, text) for link in links}:
        raise RuntimeIntegrityError(
            f"{s.where}: seq {e.seq}'s compacted history does not hash to its history_hash "
            f"{e.history_hash[:12]}...: the record was altered or the chain changed"
        )
    if e.previous_request_hash is not None and s.link not in (None, e.previous_request_hash):
        raise RuntimeIntegrityError(
            f"{s.where}: seq {e.seq} compacts after request {e.previous_request_hash[:12]}... "
            f"but the conversation rebuilt from the log is at {str(s.link)[:12]}..."
        )
    s.messages = history
    s.hashed = len(history)
    s.link = e.history_hash


def _called(s: _Session, e: ModelCalled, appended: str | None) -> None:
    if e.turn in s.requests:  # called again after a crash: the same request
        if s.requests[e.turn][1].request_hash != e.request_hash:
            raise RuntimeIntegrityError(
                f"{s.where}: turn {e.turn} was called twice with two requests "
                f"({s.requests[e.turn][1].request_hash[:12]}..., {e.request_hash[:12]}...)"
            )
        return
    if appended is None:
        raise RuntimeIntegrityError(f"{s.where}: seq {e.seq} (turn {e.turn}) has no messages")
    links = [e.previous_request_hash] if e.previous_request_hash is not None else s.first_links()
    if links and e.request_hash not in {chain_hash(link, appended) for link in links}:
        raise RuntimeIntegrityError(
            f"{s.where}: turn {e.turn}'s appended messages do not hash to its request_hash "
            f"{e.request_hash[:12]}...: the record was altered or the chain changed"
        )
    if e.previous_request_hash is not None and s.link not in (None, e.previous_request_hash):
        raise RuntimeIntegrityError(
            f"{s.where}: turn {e.turn} follows request {e.previous_request_hash[:12]}... but "
            f"the conversation rebuilt from the log is at {str(s.link)[:12]}...: the session's "
            "records do not hold together"
        )
    if s.native is not None:  # a framework's request: its native messages
        if s.native == native_chat.OPENAI_AGENTS:  # the head when it changed, a relink, items
            messages, s.head = native_chat.agents_request(
                json.loads(appended), s.messages[: s.hashed], s.head
            )
            s.heads[e.turn] = s.head
        else:  # Pydantic AI: what was appended, or a rewrite from a position
            messages = native_chat.appended_messages(json.loads(appended), s.messages[: s.hashed])
        if len(messages) != e.message_count:
            raise RuntimeIntegrityError(
                f"{s.where}: turn {e.turn} rebuilds {len(messages)} message(s) but its record "
                f"says the request held {e.message_count}"
            )
        s.messages, s.hashed, s.link = messages, len(messages), e.request_hash
        s.requests[e.turn] = (tuple(messages), e)
        return
    if e.tools_hash is not None and canonical_hash(s.tools) != e.tools_hash:
        raise RuntimeIntegrityError(
            f"{s.where}: turn {e.turn}'s tools hash is not that of the session's tools"
        )
    messages = s.messages[: s.hashed] + list(json.loads(appended))
    if len(messages) != e.message_count:
        raise RuntimeIntegrityError(
            f"{s.where}: turn {e.turn} rebuilds {len(messages)} message(s) but its record "
            f"says the request held {e.message_count}"
        )
    s.messages = messages
    s.hashed = len(messages)
    s.link = e.request_hash
    s.requests[e.turn] = (tuple(messages), e)


def _settled(s: _Session, e: AgentCallSettled, result: str | None) -> None:
    if e.ordinal in s.settled:
        return
    s.settled.add(e.ordinal)
    added: list[_Message] = list((json.loads(result or "{}") or {}).get("messages") or [])
    if s.native is not None:
        # the framework resends its whole history: the chain already holds a fresh call's
        # messages; a served one logged no request, so its links are rebuilt from its record
        if e.replayed and s.link is not None:
            s.link, s.messages = native_chat.replayed_links(s.link, s.messages[: s.hashed], added)
            s.hashed = len(s.messages)
        return
    if e.replayed:
        # served from a recorded run: its messages are added as the session adds them, one
        # link of the chain per answer in them, with no model call of this run
        for message in added:
            if message.get("role") == "assistant":
                if s.link is not None:
                    s.link = chain_hash(s.link, canonical_json(s.messages[s.hashed :]))
                s.hashed = len(s.messages)
            s.messages.append(message)
        return
    start = s.starts.get(e.ordinal)
    if start is not None:
        s.messages = s.messages[:start] + added


def chat_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """One of little's messages (``little.harness``'s chat shape) in the fine-tuning shape."""
    role = message.get("role")
    if role == "assistant":
        out: dict[str, Any] = {"role": "assistant"}
        if message.get("content") is not None:
            out["content"] = message["content"]
        calls = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": canonical_json(c.get("arguments"))},
            }
            for c in message.get("tool_calls") or ()
        ]
        if calls:
            out["tool_calls"] = calls
        elif "content" not in out:
            out["content"] = ""
        return out
    content = message.get("content")
    if is_parts(content):  # images and documents (bytes as data: URLs) in the chat shape
        content = [chat_part(p) for p in content]
    if role == "tool":
        return {
            "role": "tool",
            "tool_call_id": message.get("tool_call_id"),
            "content": content or "",
        }
    return {"role": role, "content": content}


def chat_example(exchange: ModelExchange) -> dict[str, Any]:
    """``exchange`` as one line of chat fine-tuning JSONL: ``{"messages": [...], "tools":
    [...]}`` (``tools`` only when the request had some)."""
    messages = [chat_message(m) for m in exchange.messages]
    if exchange.system is not None:
        messages.insert(0, {"role": "system", "content": exchange.system})
    example: dict[str, Any] = {"messages": [*messages, chat_message(exchange.response)]}
    if exchange.tools:
        example["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.get("name"),
                    "description": t.get("description"),
                    "parameters": t.get("parameters"),
                },
            }
            for t in exchange.tools
        ]
    return example
