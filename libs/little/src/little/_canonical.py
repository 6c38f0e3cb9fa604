"""Canonical JSON and hashing: the one definition every hash in the log is computed with.

Pure: no I/O. Changing anything here changes every request, manifest and branch-set hash
ever recorded, so it is frozen like a schema.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

import orjson

# The definition: the stdlib encoder with these options. orjson writes the same text faster
# for the values most calls pass (``_plain``); any other value goes to this encoder.
# One encoder for every call: ``json.dumps`` with these options builds a new one each time.
# An encoder holds no per-call state (``encode`` makes its own), so sharing it is safe.
_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def canonical_json(value: Any) -> str:
    """Sorted keys, no insignificant whitespace, UTF-8 kept as is, no NaN."""
    try:
        plain = _plain(value)
    except RecursionError:  # (nested deeper than this walk goes, or circular)
        plain = False
    if plain:
        try:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
        except orjson.JSONEncodeError:  # text with a lone surrogate, nesting past 254
            pass
    return _ENCODER.encode(value)


_SAFE_INT = 2**53
"""Integers within this (either sign) go to orjson; it refuses integers past 64 bits, and
nothing is gained by trusting its formatting of the few between."""


def _plain(value: Any) -> bool:
    """Whether ``value`` holds only what orjson writes byte for byte as ``_ENCODER`` does:
    dicts with ``str`` keys, lists, tuples, ``str``, ``bool``, ``None`` and ``int`` within
    2**53 (exact types: no subclass, no float, whose text the two encoders write apart).
    orjson would also write UUIDs, enums, dataclasses and times the stdlib encoder refuses."""
    kind = type(value)
    items: Iterable[Any]
    if kind is dict:
        if any(type(key) is not str for key in value):
            return False
        items = value.values()
    elif kind is list or kind is tuple:
        items = value
    else:
        return (
            kind is str
            or value is None
            or kind is bool
            or (kind is int and -_SAFE_INT <= value <= _SAFE_INT)
        )
    for item in items:  # the leaves checked here, not by a call each: the common case
        item_kind = type(item)
        if item_kind is str or item is None or item_kind is bool:
            continue
        if item_kind is int:
            if -_SAFE_INT <= item <= _SAFE_INT:
                continue
            return False
        if not _plain(item):
            return False
    return True


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
