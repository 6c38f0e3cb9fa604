"""Message content made of parts: text, images and documents, by URL or by their bytes.

A prompt (``agent.run(["Describe it.", Image(data, "image/png")])``) or a tool's result may be
a list of parts. In a message they are JSON (``content`` a list of part dicts, below), so a
conversation still hashes canonically and replays byte for byte: bytes of ``INLINE_BYTES``
or fewer are base64 in the part, larger ones are named by their digest (``artifact``) and
kept by the runtime in the artifact store. Pure: no I/O (the runtime stores and loads the
bytes; the adapters translate the parts to each provider's form).

A part as a message holds it::

    {"type": "text", "text": "..."}
    {"type": "image", "url": "https://..."}
    {"type": "image", "media_type": "image/png", "data": "<base64>"}
    {"type": "image", "media_type": "image/png", "artifact": {"sha256": "...", "size": 123}}
    {"type": "document", "url": "https://...", "name": "report.pdf"}        (name optional)
    {"type": "document", "media_type": "application/pdf", "data" | "artifact": ..., "name": ...}

A model is handed every ``artifact`` part with its ``data`` too (``with_data``); the record
keeps the digest only.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import mimetypes
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from little._canonical import canonical_json
from little.errors import ConfigurationError

__all__ = [
    "INLINE_BYTES",
    "TOOL_PARTS",
    "Blob",
    "Content",
    "Document",
    "DocumentUrl",
    "Image",
    "ImageUrl",
    "Part",
    "Text",
    "artifact_digests",
    "chat_part",
    "content_json",
    "data_url",
    "document_name",
    "is_content",
    "is_parts",
    "part_data",
    "stored_part",
    "tool_content",
    "tool_text",
    "with_data",
]

INLINE_BYTES = 8 * 1024
"""Bytes of a part up to this size are base64 in the message itself; larger ones go to the
artifact store and the message names them by sha256 (docs/architecture.md, "Images and
documents")."""

TOOL_PARTS = "$parts"
"""A tool's result that is content, as recorded: ``{"$parts": [part, ...]}``."""


class Part:
    """A part of a message's content: ``Text``, ``Image``, ``ImageUrl``, ``Document`` or
    ``DocumentUrl`` (the classes a prompt or a tool's result may hold)."""

    __slots__ = ()


@dataclass(frozen=True)
class Text(Part):
    """A text part."""

    text: str


@dataclass(frozen=True)
class ImageUrl(Part):
    """An image the provider fetches from ``url`` (a ``data:`` URL is taken as its bytes)."""

    url: str


@dataclass(frozen=True, repr=False)
class Image(Part):
    """An image given as its bytes and media type (``image/png``, ``image/jpeg``, ...)."""

    data: bytes
    media_type: str

    @classmethod
    def from_path(cls, path: str | Path, media_type: str | None = None) -> Image:
        """The image in file ``path``, its media type guessed from the name unless given."""
        p = Path(path)
        return cls(p.read_bytes(), media_type or _guess(p, "image"))

    def __repr__(self) -> str:
        return f"Image({len(self.data)} bytes, {self.media_type!r})"


@dataclass(frozen=True)
class DocumentUrl(Part):
    """A document (a PDF) the provider fetches from ``url``, where the provider does
    (Anthropic; OpenAI's Chat Completions takes documents as bytes only)."""

    url: str
    name: str | None = None


@dataclass(frozen=True, repr=False)
class Document(Part):
    """A document given as its bytes: a PDF (``application/pdf``, the default) or plain text
    (``text/plain``). ``name`` is the file name the provider is told, if any."""

    data: bytes
    media_type: str = "application/pdf"
    name: str | None = None

    @classmethod
    def from_path(cls, path: str | Path, media_type: str | None = None) -> Document:
        """The document in file ``path``, named by it, its media type guessed unless given."""
        p = Path(path)
        return cls(p.read_bytes(), media_type or _guess(p, "application"), p.name)

    def __repr__(self) -> str:
        name = f", name={self.name!r}" if self.name else ""
        return f"Document({len(self.data)} bytes, {self.media_type!r}{name})"


Content = str | Sequence[str | Part]
"""A prompt: text, or a list of parts (a string in it is a text part)."""

_PARTS = (Text, ImageUrl, Image, DocumentUrl, Document)
_TYPES = frozenset({"text", "image", "document"})


def _guess(path: Path, kind: str) -> str:
    guessed, _ = mimetypes.guess_type(path.name)
    if guessed is None or (kind == "image" and not guessed.startswith("image/")):
        raise ConfigurationError(
            f"{path}: cannot tell its media type from its name; pass media_type="
        )
    return guessed


@dataclass(frozen=True)
class Blob:
    """Bytes of a part larger than ``INLINE_BYTES``: the runtime stores them under
    ``sha256`` before any record names them."""

    sha256: str
    data: bytes
    media_type: str


def is_content(value: Any) -> bool:
    """Whether a tool's result is content: a part, or a list or tuple holding at least one
    (a list of plain values stays a JSON result, as it always was)."""
    if isinstance(value, _PARTS):
        return True
    return isinstance(value, list | tuple) and any(isinstance(v, _PARTS) for v in value)


def content_json(
    value: Any, where: str, *, loose: bool = False
) -> tuple[list[dict[str, Any]], list[Blob]]:
    """``value`` (a part, or a list of parts and strings) as the parts of a message, and the
    bytes it names by digest (to store). ``loose`` (a tool's result): a value that is neither
    a string nor a part is a text part of its canonical JSON; else it is refused."""
    items = [value] if isinstance(value, _PARTS) else value
    if isinstance(value, str | bytes) or not isinstance(items, list | tuple) or not items:
        raise ConfigurationError(
            f"{where}: content is a string or a non-empty list of parts (str, "
            f"little.harness.Text, Image, ImageUrl, Document, DocumentUrl), not {value!r:.200}"
        )
    parts: list[dict[str, Any]] = []
    blobs: list[Blob] = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            parts.append({"type": "text", "text": item})
        elif isinstance(item, Text):
            parts.append({"type": "text", "text": _text(item.text, f"{where}: part {i}")})
        elif isinstance(item, ImageUrl | DocumentUrl):
            parts.append(_url_part(item, f"{where}: part {i}", blobs))
        elif isinstance(item, Image | Document):
            parts.append(_bytes_part(item, f"{where}: part {i}", blobs))
        elif loose:
            parts.append({"type": "text", "text": canonical_json(item)})
        else:
            hint = (
                " (give bytes as Image(data, media_type) or Document(data, media_type))"
                if isinstance(item, bytes | bytearray)
                else ""
            )
            raise ConfigurationError(
                f"{where}: part {i} is a {type(item).__name__}, not a string, "
                f"little.harness.Text, Image, ImageUrl, Document or DocumentUrl{hint}"
            )
    return parts, blobs


def _text(text: Any, where: str) -> str:
    if not isinstance(text, str):
        raise ConfigurationError(f"{where}: a Text part holds a str, not {type(text).__name__}")
    return text


def _url_part(item: ImageUrl | DocumentUrl, where: str, blobs: list[Blob]) -> dict[str, Any]:
    kind = "image" if isinstance(item, ImageUrl) else "document"
    url = item.url
    if not isinstance(url, str) or not url:
        raise ConfigurationError(f"{where}: an {type(item).__name__} needs a URL, not {url!r}")
    name = getattr(item, "name", None)
    if url.startswith("data:"):  # its bytes are given: a part of bytes, stored as such
        media_type, data = _parse_data_url(url, where)
        if kind == "image":
            return _bytes_part(Image(data, media_type), where, blobs)
        return _bytes_part(Document(data, media_type, name), where, blobs)
    part: dict[str, Any] = {"type": kind, "url": url}
    if name:
        part["name"] = name
    return part


def _parse_data_url(url: str, where: str) -> tuple[str, bytes]:
    head, comma, payload = url[5:].partition(",")
    media_type, _, encoding = head.partition(";")
    if not comma or encoding != "base64" or not media_type:
        raise ConfigurationError(
            f"{where}: a data: URL is taken as data:<media type>;base64,<data>, not {url[:60]!r}"
        )
    try:
        return media_type, base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ConfigurationError(
            f"{where}: the data: URL's base64 does not decode: {exc}"
        ) from None


def _bytes_part(item: Image | Document, where: str, blobs: list[Blob]) -> dict[str, Any]:
    kind = "image" if isinstance(item, Image) else "document"
    data, media_type = item.data, item.media_type
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ConfigurationError(
            f"{where}: {type(item).__name__}.data holds bytes, not {type(data).__name__}"
        )
    data = bytes(data)
    if not isinstance(media_type, str) or "/" not in media_type:
        raise ConfigurationError(
            f"{where}: {type(item).__name__} needs a media type such as "
            f"{'image/png' if kind == 'image' else 'application/pdf'}, not {media_type!r}"
        )
    if kind == "image" and not media_type.startswith("image/"):
        raise ConfigurationError(f"{where}: an Image's media type is image/*, not {media_type!r}")
    part: dict[str, Any] = {"type": kind, "media_type": media_type}
    if len(data) <= INLINE_BYTES:
        part["data"] = base64.b64encode(data).decode("ascii")
    else:
        digest = hashlib.sha256(data).hexdigest()
        part["artifact"] = {"sha256": digest, "size": len(data)}
        blobs.append(Blob(digest, data, media_type))
    name = getattr(item, "name", None)
    if name:
        part["name"] = str(name)
    return part


def is_parts(value: Any) -> TypeGuard[list[dict[str, Any]]]:
    """Whether ``value`` is a list of part dicts (a message's content as parts)."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(p, dict) and p.get("type") in _TYPES for p in value)
    )


_TOOL_PREFIX = '{"' + TOOL_PARTS + '":['


def tool_content(text: str | None) -> str | list[dict[str, Any]] | None:
    """A tool message's content from its recorded result text: the parts of a result that
    is content (``{"$parts": [...]}``), else the text as it is."""
    if text is None or not text.startswith(_TOOL_PREFIX):
        return text
    value = json.loads(text)
    parts = value.get(TOOL_PARTS) if len(value) == 1 else None
    return parts if is_parts(parts) else text


def tool_text(content: Any) -> str | None:
    """``tool_content``'s inverse: the recorded text of a tool message's content."""
    if isinstance(content, list):
        return canonical_json({TOOL_PARTS: content})
    return None if content is None else str(content)


_SHA256 = re.compile(r"[0-9a-f]{64}")


def stored_part(value: Any) -> tuple[str, int, str] | None:
    """``(sha256, size, media_type)`` if ``value`` is an image or document part whose bytes
    are in the artifact store, else None (any other value, a user's dict of that shape too)."""
    if not isinstance(value, dict) or value.get("type") not in ("image", "document"):
        return None
    ref, media_type = value.get("artifact"), value.get("media_type")
    if not isinstance(ref, dict) or not isinstance(media_type, str):
        return None
    sha256, size = ref.get("sha256"), ref.get("size")
    if isinstance(sha256, str) and _SHA256.fullmatch(sha256) and isinstance(size, int):
        return sha256, size, media_type
    return None


def artifact_digests(message: Mapping[str, Any]) -> list[tuple[str, int, str]]:
    """``(sha256, size, media_type)`` of every part of ``message`` whose bytes are in the
    artifact store."""
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [found for part in content if (found := stored_part(part)) is not None]


def with_data(message: Mapping[str, Any], data: Mapping[str, str]) -> dict[str, Any]:
    """A copy of ``message`` whose artifact parts hold their bytes too (``data``: base64 by
    sha256), as a model is handed it."""
    parts = []
    for part in message["content"]:
        ref = part.get("artifact") if isinstance(part, dict) else None
        parts.append({**part, "data": data[ref["sha256"]]} if isinstance(ref, dict) else part)
    return {**message, "content": parts}


def data_url(part: Mapping[str, Any]) -> str:
    """``data:<media type>;base64,<data>`` of a part whose bytes are loaded."""
    return f"data:{part.get('media_type')};base64,{part_data(part)}"


def part_data(part: Mapping[str, Any]) -> str:
    """The base64 of a part's bytes (loaded: inline, or handed to a model)."""
    data = part.get("data")
    if not isinstance(data, str):
        ref = part.get("artifact") or {}
        raise ConfigurationError(
            f"a {part.get('type')} part's bytes are in the artifact store (sha256 "
            f"{ref.get('sha256')}) and were not loaded (a session loads them before it asks "
            "its model)"
        )
    return data


_EXTENSIONS = {"application/pdf": ".pdf", "text/plain": ".txt"}


def document_name(part: Mapping[str, Any]) -> str:
    """The file name a document part is sent under: its own, else ``document`` with the
    extension of its media type (the same on every machine)."""
    name = part.get("name")
    return str(name) if name else "document" + _EXTENSIONS.get(str(part.get("media_type")), "")


def chat_part(part: Mapping[str, Any]) -> dict[str, Any]:
    """A part in the chat (OpenAI Chat Completions) shape: ``text``, ``image_url`` (a URL, or
    the bytes as a ``data:`` URL) or ``file`` (the bytes as a ``data:`` URL in ``file_data``
    with a ``filename``; a document by URL as ``file_url``, which Chat Completions does not
    take: the OpenAI adapter refuses it, the chat export writes it)."""
    kind = part.get("type")
    if kind == "text":
        return {"type": "text", "text": part.get("text", "")}
    url = part.get("url")
    if kind == "image":
        return {"type": "image_url", "image_url": {"url": url if url else data_url(part)}}
    if url:
        file: dict[str, Any] = {"file_url": url}
        if part.get("name"):
            file["filename"] = part["name"]
        return {"type": "file", "file": file}
    return {"type": "file", "file": {"filename": document_name(part), "file_data": data_url(part)}}
