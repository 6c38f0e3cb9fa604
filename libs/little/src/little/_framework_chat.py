"""A framework session's native messages (``little.integrations``), as the chat export reads
them: the request hash chain an adapter logs, rebuilt and checked on JSON alone (no framework
imported), and each native message in little's chat shape.

Pydantic AI (manifest ``format: pydantic-ai``): the chain's first link is the hash of
``{"format", "model", "agent"}`` from the manifest; each request appends the canonical JSON of
the messages sent since the previous request (per-run stamps stripped), or, when the history
was rewritten, ``{"messages": [...], "rewritten_from": k}``. A call served whole from a
recorded run logs no request: its links are rebuilt from the messages its settlement records,
one per answer in them, as the adapter made them.

The OpenAI Agents SDK (manifest ``framework: openai-agents``): a session per runner call, its
first link the hash of ``{"framework", "model"}`` (the starting agent's model); each request
appends a ``little.request_head`` item when the head changed (model, instructions, tools, ...),
a ``little.relink`` item when the history is not an extension (then all of it), and the
Responses-format input items past the previous request's. A call served whole logs no request
in its session, so it has no exchange to export (its source run has them).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from little._canonical import canonical_hash, canonical_json, chain_hash

__all__ = [
    "CHAT_FORMATS",
    "OPENAI_AGENTS",
    "PYDANTIC_AI",
    "PYDANTIC_AI_STAMPS",
    "agents_items",
    "agents_request",
    "appended_messages",
    "first_link",
    "instructions",
    "pydantic_ai_message",
    "replayed_links",
    "stripped",
]

PYDANTIC_AI = "pydantic-ai"
OPENAI_AGENTS = "openai-agents"
PYDANTIC_AI_STAMPS = frozenset(
    {"timestamp", "run_id", "conversation_id", "model_id", "workspace_ref", "history_digest"}
)
"""The adapter's ``STAMPS`` (a test keeps the two equal): never in what is hashed."""

CHAT_FORMATS = (PYDANTIC_AI, OPENAI_AGENTS)
"""The native formats the chat export rebuilds."""

_Message = dict[str, Any]


def stripped(value: Any, stamps: frozenset[str] = PYDANTIC_AI_STAMPS) -> Any:
    if isinstance(value, dict):
        return {k: stripped(v, stamps) for k, v in value.items() if k not in stamps}
    if isinstance(value, list):
        return [stripped(v, stamps) for v in value]
    return value


def first_link(manifest: Mapping[str, Any]) -> str:
    """The chain's first link, as the adapter commits to its session."""
    if manifest.get("framework") == OPENAI_AGENTS:
        starting = (manifest.get("agents") or {}).get(manifest.get("agent")) or {}
        model = str(starting.get("model") or "").partition(":")[2]
        return canonical_hash({"framework": OPENAI_AGENTS, "model": model})
    return canonical_hash(
        {
            "format": manifest.get("format"),
            "model": manifest.get("model"),
            "agent": manifest.get("agent"),
        }
    )


def appended_messages(appended: Any, hashed: Sequence[_Message]) -> list[_Message]:
    """The whole request: the messages hashed before it and what a link appended (a list, or a
    rewrite from a position)."""
    if isinstance(appended, dict):
        k = int(appended["rewritten_from"])
        return [*hashed[:k], *appended["messages"]]
    return [*hashed, *appended]


def replayed_links(
    link: str, hashed: list[_Message], added: Sequence[_Message]
) -> tuple[str, list[_Message]]:
    """The links a served call made over ``added`` (its recorded messages, after the history
    ``hashed``): one request before each answer. Returns the chain's head and the messages it
    has hashed."""
    texts = [canonical_json(m) for m in hashed]
    history = list(hashed)
    for i, message in enumerate(added):
        if message.get("kind") != "response":
            continue
        request = [*history, *(stripped(m) for m in added[:i])]
        new = [canonical_json(m) for m in request]
        common = 0
        for mine, theirs in zip(texts, new, strict=False):
            if mine != theirs:
                break
            common += 1
        if common == len(texts):
            text = "[" + ",".join(new[common:]) + "]"
        else:
            text = '{"messages":[' + ",".join(new[common:]) + f'],"rewritten_from":{common}}}'
        link = chain_hash(link, text)
        texts, hashed = new, request
    return link, hashed


def _text(content: Any) -> Any:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(c, str) for c in content):
        return "\n".join(content)
    return json.dumps(content, ensure_ascii=False, sort_keys=True)


def pydantic_ai_message(message: Mapping[str, Any]) -> list[_Message]:
    """One Pydantic AI message (its JSON) as little's chat messages: a request's parts each a
    message (system, user, tool); a response one assistant message (its thinking left out)."""
    if message.get("kind") == "response":
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        for part in message.get("parts") or ():
            kind = part.get("part_kind")
            if kind == "text":
                texts.append(str(part.get("content") or ""))
            elif kind == "tool-call":
                args = part.get("args")
                if isinstance(args, str):
                    args = json.loads(args) if args else {}
                calls.append(
                    {
                        "id": part.get("tool_call_id"),
                        "name": part.get("tool_name"),
                        "arguments": args,
                    }
                )
        out: _Message = {"role": "assistant", "content": "".join(texts) if texts else None}
        if calls:
            out["tool_calls"] = calls
        return [out]
    found: list[_Message] = []
    for part in message.get("parts") or ():
        kind = part.get("part_kind")
        if kind == "system-prompt":
            found.append({"role": "system", "content": part.get("content")})
        elif kind == "user-prompt":
            found.append({"role": "user", "content": _text(part.get("content"))})
        elif kind == "tool-return":
            found.append(
                {
                    "role": "tool",
                    "tool_call_id": part.get("tool_call_id"),
                    "content": _text(part.get("content")),
                }
            )
        elif kind == "retry-prompt":
            content = _text(part.get("content"))
            if part.get("tool_name"):
                found.append(
                    {"role": "tool", "tool_call_id": part.get("tool_call_id"), "content": content}
                )
            else:
                found.append({"role": "user", "content": content})
    return found


def instructions(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The system instructions Pydantic AI sends with a request: the latest request's."""
    for message in reversed(messages):
        if message.get("kind") == "request":
            value = message.get("instructions")
            return None if value is None else str(value)
    return None


def agents_request(
    appended: Sequence[Mapping[str, Any]], sent: Sequence[_Message], head: Any
) -> tuple[list[_Message], Any]:
    """An Agents SDK request: the items sent before it and what its link appended (a new head,
    a relink, items); returns the request's items and its head."""
    items = list(sent)
    for item in appended:
        kind = item.get("type")
        if kind == "little.request_head":
            head = json.loads(str(item.get("head")))
        elif kind == "little.relink":
            items = []
        else:
            items.append(dict(item))
    return items, head


def _parts_text(content: Any) -> Any:
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return content


def agents_items(items: Sequence[Mapping[str, Any]]) -> list[_Message]:
    """Responses-format items as little's chat messages: consecutive assistant items (text,
    function calls) one assistant message; a function call's output a tool message; reasoning
    and hosted-tool items left out (no place in the chat shape)."""
    out: list[_Message] = []

    def assistant() -> _Message:
        if not out or out[-1]["role"] != "assistant":
            out.append({"role": "assistant", "content": None})
        return out[-1]

    for item in items:
        kind = item.get("type")
        role = item.get("role")
        if kind == "function_call":
            args = item.get("arguments")
            call = {
                "id": item.get("call_id"),
                "name": item.get("name"),
                "arguments": json.loads(args) if isinstance(args, str) and args else args or {},
            }
            assistant().setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": item.get("call_id"),
                    "content": _text(_parts_text(item.get("output"))),
                }
            )
        elif role == "assistant":
            message = assistant()
            text = _parts_text(item.get("content"))
            message["content"] = (message["content"] or "") + str(text or "")
        elif role in ("user", "system", "developer") and kind in (None, "message"):
            out.append(
                {
                    "role": "system" if role == "developer" else role,
                    "content": _text(_parts_text(item.get("content"))),
                }
            )
    return out
