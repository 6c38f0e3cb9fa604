"""Commands (StartRun, ResumeRun, CancelRun): Avro single-object bytes, kept out of the event
catalog; golden bytes decode forever; garbage is a CommandDecodeError, nothing else."""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime

import avro.schema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from little.commands import (
    Budgets,
    CancelRun,
    CommandDecodeError,
    ResumeRun,
    SignalRun,
    StartRun,
    command_headers,
    decode_command,
    encode_command,
)
from little.events import EventCodec, RunCancelled, default_catalog
from tests.paths import REPO

SCHEMAS = REPO / "schemas" / "commands"
AT = datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
FIXED = {"command_id": "00000000-0000-4000-8000-000000000001", "issued_at": AT, "issued_by": "t"}

# Written by v1 of each schema; every later release must decode these bytes to these values.
GOLDEN: dict[str, tuple[str, StartRun | ResumeRun | CancelRun | SignalRun]] = {
    "StartRun": (
        "c30110ddb0f0bed8217f4830303030303030302d303030302d343030302d383030302d30303030303030"
        "30303030310a72756e2d31eabc9ba48dac95060274107265736561726368227b22746f706963223a224b"
        "61666b61227d020a00",
        StartRun(
            run_id="run-1",
            workflow="research",
            input_json='{"topic":"Kafka"}',
            budgets=Budgets(max_agent_calls=5, max_tokens=None),
            **FIXED,
        ),
    ),
    "ResumeRun": (
        "c301c56343678e6d677f4830303030303030302d303030302d343030302d383030302d30303030303030"
        "30303030310a72756e2d31eabc9ba48dac95060274",
        ResumeRun(run_id="run-1", **FIXED),
    ),
    "CancelRun": (
        "c301f8c2a2d95871cfc34830303030303030302d303030302d343030302d383030302d30303030303030"
        "30303030310a72756e2d31eabc9ba48dac9506027414757365722061736b6564",
        CancelRun(run_id="run-1", reason="user asked", **FIXED),
    ),
    "SignalRun": (
        "c3014e576c24b95b0c034830303030303030302d303030302d343030302d383030302d30303030303030"
        "30303030310a72756e2d31eabc9ba48dac9506027410617070726f766564167b226f6b223a747275657d"
        "0a7369672d31",
        SignalRun(
            run_id="run-1", name="approved", payload_json='{"ok":true}', signal_id="sig-1", **FIXED
        ),
    ),
}


def test_schemas_are_avro_records_outside_the_event_catalog() -> None:
    names = sorted(p.name for p in SCHEMAS.iterdir())
    assert names == ["CancelRun", "ResumeRun", "SignalRun", "StartRun"]
    for name in names:
        for path in sorted((SCHEMAS / name).glob("v*.avsc")):
            text = path.read_text()
            parsed = avro.schema.parse(text)
            assert isinstance(parsed, avro.schema.RecordSchema)
            assert parsed.namespace == "little.commands"
            assert json.loads(text)["little.type"] == name
        assert name not in default_catalog().event_types


def test_start_run_v2_adds_only_an_optional_replay_source() -> None:
    """v2 is v1 plus ``replay_from`` (null by default): either version reads the other's
    records (BACKWARD and FORWARD), as the event schemas' versions must."""
    v1 = json.loads((SCHEMAS / "StartRun" / "v1.avsc").read_text())
    v2 = json.loads((SCHEMAS / "StartRun" / "v2.avsc").read_text())
    assert v2["fields"][: len(v1["fields"])] == v1["fields"]
    (added,) = v2["fields"][len(v1["fields"]) :]
    assert (added["name"], added["type"], added["default"]) == (
        "replay_from",
        ["null", "string"],
        None,
    )
    old, new = avro.schema.parse(json.dumps(v1)), avro.schema.parse(json.dumps(v2))
    from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

    checker = ReaderWriterCompatibilityChecker()
    for reader, writer in ((new, old), (old, new)):
        result = checker.get_compatibility(reader, writer)
        assert result.compatibility is SchemaCompatibilityType.compatible


@pytest.mark.parametrize(
    "command",
    [
        StartRun.of("r", "wf", {"a": [1, 2]}, budgets=Budgets(max_tokens=10)),
        StartRun(run_id="r", workflow="wf"),
        StartRun.of("r", "wf", None, replay_from="run-recorded"),
        StartRun.of("r", "wf", None, replay_from="run-recorded", replay_mode="strict"),
        ResumeRun(run_id="r"),
        CancelRun(run_id="r", reason="because"),
        CancelRun(run_id="r"),
        SignalRun(run_id="r", name="approved", payload_json='{"ok":[1,"é"]}'),
        SignalRun(run_id="r", name="approval:call-1"),
    ],
    ids=lambda c: c.type,
)
def test_round_trip(command: StartRun | ResumeRun | CancelRun | SignalRun) -> None:
    data = encode_command(command)
    assert data[:2] == b"\xc3\x01"
    assert decode_command(data) == command


@settings(max_examples=200, deadline=None)
@given(
    run_id=st.text(min_size=1, max_size=40),
    workflow=st.text(min_size=1, max_size=20),
    value=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=10),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
        max_leaves=8,
    ),
    calls=st.none() | st.integers(min_value=0, max_value=2**40),
)
def test_start_run_round_trips(
    run_id: str, workflow: str, value: object, calls: int | None
) -> None:
    command = StartRun.of(run_id, workflow, value, budgets=Budgets(max_agent_calls=calls))
    decoded = decode_command(encode_command(command))
    assert decoded == command
    assert isinstance(decoded, StartRun)
    assert decoded.input == value


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_bytes_decode_forever(name: str) -> None:
    vector, command = GOLDEN[name]
    assert decode_command(bytes.fromhex(vector)) == command
    if name != "StartRun":  # StartRun is written in v2 now (GOLDEN_V2 below)
        assert encode_command(command).hex() == vector  # writers still write v1, byte for byte


# Written by v2 of StartRun (replay_from added); decodes forever, and writers write it so.
GOLDEN_V2_START = StartRun(
    run_id="run-1",
    workflow="research",
    input_json='{"topic":"Kafka"}',
    budgets=Budgets(max_agent_calls=5, max_tokens=None),
    replay_from="run-0",
    **FIXED,
)


GOLDEN_V2_START_HEX = (
    "c3019a8fdfb6e9ffb5304830303030303030302d303030302d343030302d383030302d303030303030303030"
    "3030310a72756e2d31eabc9ba48dac95060274107265736561726368227b22746f706963223a224b61666b61"
    "227d020a00020a72756e2d30"
)


def test_start_run_v2_golden_bytes() -> None:
    assert decode_command(bytes.fromhex(GOLDEN_V2_START_HEX)) == GOLDEN_V2_START
    # a v1 reader's view: the same bytes minus the field it does not know
    assert bytes.fromhex(GOLDEN_V2_START_HEX)[10:].startswith(
        bytes.fromhex(GOLDEN["StartRun"][0])[10:]
    )


# Written by v3 of StartRun (replay_mode added); decodes forever, and writers write it so.
GOLDEN_V3_START = GOLDEN_V2_START.model_copy(update={"replay_mode": "strict"})
GOLDEN_V3_START_HEX = (
    "c301e9a45478d6405a7a4830303030303030302d303030302d343030302d383030302d303030303030303030"
    "3030310a72756e2d31eabc9ba48dac95060274107265736561726368227b22746f706963223a224b61666b61"
    "227d020a00020a72756e2d30020c737472696374"
)


def test_start_run_v3_golden_bytes() -> None:
    assert decode_command(bytes.fromhex(GOLDEN_V3_START_HEX)) == GOLDEN_V3_START
    assert encode_command(GOLDEN_V3_START).hex() == GOLDEN_V3_START_HEX
    # a v2 reader's view: the same bytes minus the field it does not know
    assert bytes.fromhex(GOLDEN_V3_START_HEX)[10:].startswith(
        bytes.fromhex(GOLDEN_V2_START_HEX)[10:]
    )
    # v2 bytes decode with the default mode (null: repairable)
    assert decode_command(bytes.fromhex(GOLDEN_V2_START_HEX)).replay_mode is None  # type: ignore[union-attr]


def test_start_run_v3_adds_only_an_optional_replay_mode() -> None:
    v2 = json.loads((SCHEMAS / "StartRun" / "v2.avsc").read_text())
    v3 = json.loads((SCHEMAS / "StartRun" / "v3.avsc").read_text())
    assert v3["fields"][: len(v2["fields"])] == v2["fields"]
    (added,) = v3["fields"][len(v2["fields"]) :]
    assert (added["name"], added["type"], added["default"]) == (
        "replay_mode",
        ["null", "string"],
        None,
    )
    from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

    checker = ReaderWriterCompatibilityChecker()
    for old in ("v1", "v2"):
        earlier = avro.schema.parse((SCHEMAS / "StartRun" / f"{old}.avsc").read_text())
        new = avro.schema.parse(json.dumps(v3))
        for reader, writer in ((new, earlier), (earlier, new)):
            result = checker.get_compatibility(reader, writer)
            assert result.compatibility is SchemaCompatibilityType.compatible


def test_an_unknown_replay_mode_is_refused_naming_the_field() -> None:
    with pytest.raises(ValidationError, match="replay_mode"):
        StartRun(run_id="r", workflow="wf", replay_from="r0", replay_mode="exact")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("data", "reason", "says"),
    [
        (b"", "not-avro-framing", "starts with nothing"),
        (b"\x00\x00\x00\x00\x01abc", "not-avro-framing", "starts with 0000"),
        (b"\xc3\x01\x00", "truncated-body", "header needs 10 bytes"),
        (b"\xc3\x01" + b"\x00" * 8 + b"x", "unknown-fingerprint", "no command schema has"),
        (b"\xc3\x01" + b"\x00" * 8, "unknown-fingerprint", "an event or a snapshot"),
    ],
)
def test_garbage_is_a_command_decode_error(data: bytes, reason: str, says: str) -> None:
    with pytest.raises(CommandDecodeError, match=says) as info:
        decode_command(data)
    assert info.value.reason == reason


def test_an_event_on_the_commands_topic_is_an_unknown_fingerprint() -> None:
    event = EventCodec().encode(RunCancelled(run_id="r", seq=1, epoch=1, reason="x"))
    with pytest.raises(CommandDecodeError) as info:
        decode_command(event)
    assert info.value.reason == "unknown-fingerprint"


def test_truncated_garbage_and_trailing_bytes_are_told_apart() -> None:
    data = encode_command(CancelRun(run_id="r", reason="x" * 50))
    for end in range(10, len(data)):
        with pytest.raises(CommandDecodeError) as info:
            decode_command(data[:end])
        assert info.value.reason == "truncated-body", end
    with pytest.raises(CommandDecodeError, match="trailing bytes") as info:
        decode_command(data + b"\x00")
    assert info.value.reason == "malformed-body"
    with pytest.raises(CommandDecodeError, match="does not start with a command id") as info:
        decode_command(data[:10] + b"garbage, not a command body at all")
    assert info.value.reason == "malformed-body"


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=64))
def test_any_bytes_decode_or_raise_command_decode_error(data: bytes) -> None:
    for candidate in (data, encode_command(ResumeRun(run_id="r"))[:10] + data):
        with contextlib.suppress(CommandDecodeError):  # anything else fails the test
            decode_command(candidate)


def test_start_run_input_must_be_json() -> None:
    with pytest.raises(ValidationError, match="input_json is not JSON"):
        StartRun(run_id="r", workflow="wf", input_json="{nope")
    with pytest.raises(ValidationError):
        StartRun(run_id="", workflow="wf")
    with pytest.raises(ValidationError):
        Budgets(max_tokens=-1)


def test_signal_run_payload_must_be_json_and_the_signal_named() -> None:
    with pytest.raises(ValidationError, match="payload_json is not JSON"):
        SignalRun(run_id="r", name="go", payload_json="{nope")
    with pytest.raises(ValidationError):
        SignalRun(run_id="r", name="")
    a, b = SignalRun(run_id="r", name="go"), SignalRun(run_id="r", name="go")
    assert a.signal_id != b.signal_id  # each signal its own id: a re-read is known by it


def test_headers_carry_type_and_run_id() -> None:
    command = CancelRun(run_id="run-9", reason="x")
    headers = dict(command_headers(command))
    assert headers["little.command"] == b"CancelRun"
    assert headers["little.run_id"] == b"run-9"
    assert headers["little.command_id"] == command.command_id.encode()
