"""The embedded log stores a record's headers as the text ``json.dumps`` writes for them (files
written before read the same): built without the encoder for plain keys, the same text."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from little.events import AgentCallSettled, event_headers
from little.log._embedded import _decode_headers, _encode_headers

_KEYS = st.text(st.characters(exclude_categories=()), max_size=12) | st.sampled_from(
    ["little.type", "traceparent", 'a"b', "a\\b", "é", "\n", ""]
)
_HEADERS = st.lists(st.tuples(_KEYS, st.binary(max_size=40)), max_size=8)


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(_HEADERS)
def test_any_headers_are_stored_as_json_dumps_writes_them(headers: list[tuple[str, bytes]]) -> None:
    text = _encode_headers(headers)
    assert text == json.dumps([[k, v.hex()] for k, v in headers])
    assert _decode_headers(text) == tuple(headers)


def test_an_events_headers() -> None:
    event = AgentCallSettled(
        run_id="run-1", seq=3, ordinal=0, outcome="ok", step_path="agent", session_id="s"
    )
    headers = [*event_headers(event), ("traceparent", b"00-ab-cd-01")]
    for _ in range(2):  # the keys' check is kept after the first time
        assert _encode_headers(headers) == json.dumps([[k, v.hex()] for k, v in headers])
