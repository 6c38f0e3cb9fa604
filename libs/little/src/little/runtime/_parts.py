"""The bytes of a conversation's image and document parts (``little.harness.content``): stored
in the artifact store before any record names them, loaded again for the model when a request
holds them. One per recorded conversation (``Recorder.parts``).

The record keeps a large part's digest only, so a resume or a replay rebuilds the same
request hash from the log; the model is handed the bytes (``with_data``), read off the event
loop and kept here once read or written.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from little.events import ArtifactRef
from little.harness import Message
from little.harness.content import (
    TOOL_PARTS,
    Blob,
    artifact_digests,
    content_json,
    with_data,
)

if TYPE_CHECKING:
    from little.runtime._execution import Execution

__all__ = ["ConversationParts"]


class ConversationParts:
    """A conversation's part bytes: ``prompt``/``tool_result`` turn content into recorded
    parts (storing the large bytes), ``for_model`` hands a request's messages on with them."""

    __slots__ = ("_at", "_data", "_scanned", "_x")

    def __init__(self, execution: Execution) -> None:
        self._x = execution
        self._data: dict[str, str] = {}
        """Base64 of the bytes stored or loaded so far, by sha256."""
        self._scanned = 0
        """Messages of the conversation looked at for artifact parts so far."""
        self._at: list[int] = []
        """Which of them hold artifact parts."""

    async def prompt(self, prompt: Any, where: str) -> Any:
        """A prompt as recorded: text as it is, a list of parts as part dicts."""
        if isinstance(prompt, str):
            return prompt
        parts, blobs = content_json(prompt, f"{where}: prompt")
        await self._store(blobs)
        return parts

    async def tool_result(self, result: Any, where: str) -> dict[str, Any]:
        """A tool's result that is content, as recorded (``{"$parts": [...]}``)."""
        parts, blobs = content_json(result, where, loose=True)
        await self._store(blobs)
        return {TOOL_PARTS: parts}

    async def _store(self, blobs: Sequence[Blob]) -> None:
        """Each blob durable in the artifact store (off the loop), before a record names it."""
        for blob in blobs:
            if blob.sha256 not in self._data:
                self._data[blob.sha256] = await asyncio.to_thread(self._put, blob)

    def _put(self, blob: Blob) -> str:
        self._x.world.artifacts.put(self._x.run_id, blob.data, blob.media_type)
        return base64.b64encode(blob.data).decode("ascii")

    def reset(self) -> None:
        """The conversation was replaced (a compaction): look at it again from its start."""
        self._scanned = 0
        self._at = []

    async def for_model(self, messages: list[Message]) -> tuple[Message, ...]:
        """``messages`` (the conversation, only ever appended to between ``reset``s) as the
        model is handed them: artifact parts with their bytes. Looks at new messages only."""
        for i in range(self._scanned, len(messages)):
            if artifact_digests(messages[i]):
                self._at.append(i)
        self._scanned = len(messages)
        if not self._at:
            return tuple(messages)
        out = list(messages)
        for i in self._at:
            for sha256, size, media_type in artifact_digests(messages[i]):
                if sha256 not in self._data:
                    ref = ArtifactRef(
                        run_id=self._x.run_id, sha256=sha256, size=size, media_type=media_type
                    )
                    self._data[sha256] = await asyncio.to_thread(self._load, ref)
            out[i] = with_data(messages[i], self._data)
        return tuple(out)

    def _load(self, ref: ArtifactRef) -> str:
        return base64.b64encode(self._x.world.artifacts.get(ref)).decode("ascii")
