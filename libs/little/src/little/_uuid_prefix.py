"""Telling a garbage Avro body from a cut one: events and commands both start with a uuid.

Every event's first field is ``event_id`` and every command's is ``command_id``, a uuid in its
36-character text form: as an Avro string, the length 36 (zigzag varint ``0x48``) and then hex
digits and dashes. Pure: no I/O.
"""

from __future__ import annotations

import re

_WHOLE = re.compile(
    rb"\x48[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\Z"
)
_SHAPE = b"xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
_HEX = frozenset(b"0123456789abcdefABCDEF")

ENCODED_UUID_BYTES = 37


def starts_like_a_uuid_string(body: bytes | memoryview) -> bool:
    """``body`` starts with an Avro-encoded uuid string, or is shorter and a prefix of one."""
    head = bytes(body[:ENCODED_UUID_BYTES])
    if len(head) == ENCODED_UUID_BYTES:
        return _WHOLE.match(head) is not None
    if not head:
        return True
    if head[0] != 0x48:
        return False
    for byte, shape in zip(head[1:], _SHAPE, strict=False):
        if (byte != shape) if shape == ord("-") else (byte not in _HEX):
            return False
    return True
