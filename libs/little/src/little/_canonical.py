"""Canonical JSON and hashing: the one definition every hash in the log is computed with.

Pure: no I/O. Changing anything here changes every request, manifest and branch-set hash
ever recorded, so it is frozen like a schema.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

# One encoder for every call: ``json.dumps`` with these options builds a new one each time.
# An encoder holds no per-call state (``encode`` makes its own), so sharing it is safe.
_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def canonical_json(value: Any) -> str:
    """Sorted keys, no insignificant whitespace, UTF-8 kept as is, no NaN."""
    return _ENCODER.encode(value)


def sha256_hex(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def canonical_hash(value: Any) -> str:
    """sha256 of the canonical JSON of ``value``."""
    return sha256_hex(canonical_json(value))


def chain_hash(previous: str, appended_json: str) -> str:
    """Extend a hash chain: sha256 of the previous link and the canonical JSON of what was
    appended (the caller serialises it once, and records the same text). Hashing a growing
    conversation this way costs the new messages only, while the last link still commits to
    everything before it."""
    return sha256_hex(f"{previous}\n{appended_json}")
