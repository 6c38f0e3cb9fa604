"""The schema folder: every file parses, matches its model, and evolves compatibly (DESIGN §3)."""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import re
import types
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import avro.schema
import fastavro
import pytest
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType
from fastavro.schema import fingerprint, to_parsing_canonical_form

from little.errors import ConfigurationError
from little.events import (
    EVENT_TYPES,
    ArtifactRef,
    Usage,
    default_catalog,
    load_catalog,
    load_schema_version,
)
from little.events._fingerprints import KNOWN_FINGERPRINTS
from tests.paths import REPO

SCHEMAS = REPO / "schemas"
SCHEMA_FILES = sorted(SCHEMAS.glob("*/*.avsc"))
# schemas/snapshots/ holds the snapshot record (see test_replay.py) and schemas/commands/ the
# coordinator's commands (test_commands.py): neither is an event type
TYPES = sorted(
    p.name for p in SCHEMAS.iterdir() if p.is_dir() and p.name not in ("snapshots", "commands")
)


def _versions(event_type: str) -> list[tuple[int, str]]:
    """(version, text) of every ``v<N>.avsc`` of a type, oldest first."""
    found = []
    for path in (SCHEMAS / event_type).glob("*.avsc"):
        m = re.fullmatch(r"v(\d+)\.avsc", path.name)
        assert m, f"{path} is not named v<N>.avsc"
        found.append((int(m.group(1)), path.read_text("utf-8")))
    return sorted(found)


def _compatibility(
    reader: str | dict[str, Any], writer: str | dict[str, Any]
) -> SchemaCompatibilityType:
    def parse(s: str | dict[str, Any]) -> avro.schema.Schema:
        return avro.schema.parse(s if isinstance(s, str) else json.dumps(s))

    checker = ReaderWriterCompatibilityChecker()  # type: ignore[no-untyped-call]
    return checker.get_compatibility(reader=parse(reader), writer=parse(writer)).compatibility


# -- files ---------------------------------------------------------------------------------


def test_the_folder_is_found() -> None:
    assert len(SCHEMA_FILES) >= len(EVENT_TYPES)


@pytest.mark.parametrize("path", SCHEMA_FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_parses_with_fastavro_and_avro(path: Path) -> None:
    text = path.read_text("utf-8")
    fastavro.parse_schema(json.loads(text), named_schemas={})
    parsed = avro.schema.parse(text)
    assert isinstance(parsed, avro.schema.RecordSchema)
    assert parsed.namespace == "little.events"


@pytest.mark.parametrize("path", SCHEMA_FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_little_type_matches_its_folder(path: Path) -> None:
    assert json.loads(path.read_text("utf-8"))["little.type"] == path.parent.name


@pytest.mark.parametrize("path", SCHEMA_FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_envelope_fields_come_first(path: Path) -> None:
    names = [f["name"] for f in json.loads(path.read_text("utf-8"))["fields"]]
    envelope = [
        "event_id",
        "run_id",
        "seq",
        "epoch",
        "type",
        "occurred_at",
        "producer",
        "step_path",
        "session_id",
    ]
    assert names[: len(envelope)] == envelope


def test_every_event_type_has_a_schema_and_vice_versa() -> None:
    assert set(TYPES) == set(EVENT_TYPES)
    assert set(default_catalog().event_types) == set(EVENT_TYPES)


@pytest.mark.parametrize("event_type", TYPES)
def test_versions_are_contiguous_from_one(event_type: str) -> None:
    numbers = [n for n, _ in _versions(event_type)]
    assert numbers == list(range(1, len(numbers) + 1))
    assert [v.version for v in default_catalog().versions(event_type)] == numbers


@pytest.mark.parametrize("event_type", TYPES)
def test_record_name_is_stable_across_versions(event_type: str) -> None:
    names = {json.loads(text)["name"] for _, text in _versions(event_type)}
    assert len(names) == 1, f"{event_type} changed its record name ({names}): a new subject"


# -- evolution -----------------------------------------------------------------------------

VERSION_PAIRS = [
    pytest.param(t, old, new, id=f"{t}-v{old[0]}-v{new[0]}")
    for t in TYPES
    for old, new in itertools.combinations(_versions(t), 2)
]


@pytest.mark.parametrize(("event_type", "old", "new"), VERSION_PAIRS)
def test_every_version_is_backward_and_forward_compatible_with_every_earlier_one(
    event_type: str, old: tuple[int, str], new: tuple[int, str]
) -> None:
    assert _compatibility(reader=new[1], writer=old[1]) is SchemaCompatibilityType.compatible, (
        f"{event_type} v{new[0]} cannot read v{old[0]} (not BACKWARD compatible)"
    )
    assert _compatibility(reader=old[1], writer=new[1]) is SchemaCompatibilityType.compatible, (
        f"{event_type} v{old[0]} cannot read v{new[0]} (not FORWARD compatible)"
    )


def test_there_is_at_least_one_evolved_type() -> None:
    assert VERSION_PAIRS, "no type has two versions: the compatibility test checks nothing"


def _latest_json(event_type: str) -> dict[str, Any]:
    latest: dict[str, Any] = json.loads(_versions(event_type)[-1][1])
    return latest


def test_checker_catches_a_new_field_without_default() -> None:
    old = _latest_json("harness.model.responded")
    new = copy.deepcopy(old)
    new["fields"].append({"name": "provider_request_id", "type": "string"})
    assert _compatibility(reader=new, writer=old) is SchemaCompatibilityType.incompatible
    assert _compatibility(reader=old, writer=new) is SchemaCompatibilityType.compatible
    new["fields"][-1]["default"] = ""
    assert _compatibility(reader=new, writer=old) is SchemaCompatibilityType.compatible


def test_checker_catches_a_removed_field_without_default() -> None:
    old = _latest_json("harness.model.called")
    new = copy.deepcopy(old)
    new["fields"] = [f for f in new["fields"] if f["name"] != "request_hash"]
    assert _compatibility(reader=old, writer=new) is SchemaCompatibilityType.incompatible


def test_checker_catches_a_type_change() -> None:
    old = _latest_json("StepStarted")
    new = copy.deepcopy(old)
    (attempt,) = [f for f in new["fields"] if f["name"] == "attempt"]
    attempt["type"] = "string"
    attempt["default"] = "1"
    assert _compatibility(reader=new, writer=old) is SchemaCompatibilityType.incompatible
    assert _compatibility(reader=old, writer=new) is SchemaCompatibilityType.incompatible


# -- models --------------------------------------------------------------------------------


def _nullable(avro_type: Any) -> bool:
    return isinstance(avro_type, list) and "null" in avro_type


def _optional(annotation: Any) -> bool:
    return get_origin(annotation) in (Union, types.UnionType) and type(None) in get_args(annotation)


@pytest.mark.parametrize("event_type", TYPES)
def test_model_has_exactly_the_fields_of_the_newest_schema(event_type: str) -> None:
    cls = EVENT_TYPES[event_type]
    schema_fields = {f["name"]: f for f in _latest_json(event_type)["fields"]}
    assert cls.event_type == event_type
    assert "type" not in cls.model_fields  # the envelope's type is the ClassVar event_type
    assert set(cls.model_fields) == set(schema_fields) - {"type"}
    for name, info in cls.model_fields.items():
        assert _optional(info.annotation) == _nullable(schema_fields[name]["type"]), (
            f"{event_type}.{name}: model and schema disagree on whether it may be null"
        )


@pytest.mark.parametrize(("model", "record"), [(ArtifactRef, "ArtifactRef"), (Usage, "Usage")])
def test_nested_records_match_their_models(model: type[ArtifactRef | Usage], record: str) -> None:
    seen = 0
    for path in SCHEMA_FILES:
        for f in json.loads(path.read_text("utf-8"))["fields"]:
            branches = f["type"] if isinstance(f["type"], list) else [f["type"]]
            for t in branches:
                if isinstance(t, dict) and t.get("name") == record:
                    assert {x["name"] for x in t["fields"]} == set(model.model_fields), path
                    seen += 1
    assert seen


# -- fingerprints --------------------------------------------------------------------------

NULL_FINGERPRINT64 = 7195948357588979594  # Avro spec test vector (Java SchemaNormalization)


def _single_object_fingerprint(schema: Any) -> bytes:
    canonical = to_parsing_canonical_form(fastavro.parse_schema(schema, named_schemas={}))
    return bytes.fromhex(fingerprint(canonical, "CRC-64-AVRO"))


def test_fingerprint_matches_the_spec_vector_in_single_object_byte_order() -> None:
    assert _single_object_fingerprint("null") == NULL_FINGERPRINT64.to_bytes(8, "little")


def test_fingerprint_matches_the_reference_implementation() -> None:
    # No logical types: the avro package keeps logicalType in its canonical form (a divergence
    # from the spec), so it would disagree on our schemas for a reason that is not ours.
    text = json.dumps(
        {
            "type": "record",
            "name": "Probe",
            "namespace": "little.events",
            "doc": "docs are not part of the canonical form",
            "fields": [
                {"name": "a", "type": "long"},
                {"name": "b", "type": ["null", "string"], "default": None},
                {"name": "c", "type": {"type": "array", "items": "int"}, "default": []},
            ],
        }
    )
    assert _single_object_fingerprint(json.loads(text)) == avro.schema.parse(text).fingerprint()


def test_catalog_fingerprints_are_the_single_object_fingerprints() -> None:
    for v in default_catalog().all_versions():
        assert v.fingerprint == _single_object_fingerprint(json.loads(v.text))
        assert v.single_object_header == b"\xc3\x01" + v.fingerprint
    fps = [v.fingerprint for v in default_catalog().all_versions()]
    assert len(set(fps)) == len(fps)


def test_every_bundled_schema_has_its_fingerprint_known_ahead_and_only_those() -> None:
    """The fingerprints the catalog takes from ``little.events._fingerprints`` instead of
    computing them are fastavro's, for every schema file (events, commands, the snapshot)."""
    expected = {}
    for path in sorted(SCHEMAS.rglob("*.avsc")):
        text = path.read_text("utf-8")
        fp = _single_object_fingerprint(json.loads(text)).hex()
        expected[hashlib.sha256(text.encode()).hexdigest()] = (fp, path.relative_to(SCHEMAS))
    entries = "\n".join(f'    "{k}": "{fp}",  # {p}' for k, (fp, p) in expected.items())
    assert {k: fp for k, (fp, _) in expected.items()} == KNOWN_FINGERPRINTS, (
        f"little/events/_fingerprints.py is out of date; its entries are:\n{entries}"
    )


def test_a_schema_not_known_ahead_has_its_fingerprint_computed() -> None:
    text = json.dumps({"type": "record", "name": "Probe", "little.type": "Probe", "fields": []})
    version = load_schema_version("Probe", 1, text)
    assert hashlib.sha256(text.encode()).hexdigest() not in KNOWN_FINGERPRINTS
    assert version.fingerprint == _single_object_fingerprint(json.loads(text))


def test_a_catalog_read_from_a_folder_refuses_a_schema_that_is_not_avro(tmp_path: Path) -> None:
    """The bundled schemas are parsed on first use; a folder's are parsed as it is read, so a
    bad one is refused there, naming its file."""
    (tmp_path / "Probe").mkdir()
    (tmp_path / "Probe" / "v1.avsc").write_text(
        json.dumps(
            {
                "type": "record",
                "name": "Probe",
                "little.type": "Probe",
                "fields": [{"name": "a", "type": "no_such_type"}],
            }
        )
    )
    with pytest.raises(ConfigurationError, match=r"Probe/v1\.avsc .* is not valid Avro"):
        load_catalog(tmp_path)
