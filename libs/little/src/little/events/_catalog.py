"""The schema catalog: every version of every event schema bundled with the package.

Schemas are read from ``little/schemas/<type>/v<N>.avsc`` (the repository's ``schemas/``
folder). Old versions are kept forever so bytes written by any release still decode.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache, cached_property
from importlib import resources
from importlib.abc import Traversable
from typing import Any

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form

from little.errors import ConfigurationError
from little.events._fingerprints import KNOWN_FINGERPRINTS

SINGLE_OBJECT_MAGIC = b"\xc3\x01"
_VERSION_FILE = re.compile(r"^v(\d+)\.avsc$")


@dataclass(frozen=True)
class SchemaVersion:
    """One version of one event type's schema.

    ``parsed``, ``read_parsed`` and ``fingerprint`` are worked out on first use: a process
    opening a world (a resume) uses a few of the bundled versions, and parsing all of them and
    computing their fingerprints (fastavro's CRC-64-AVRO is a Python loop over every byte of
    the canonical form) was most of the time to open one.
    """

    event_type: str
    version: int
    full_name: str
    text: str = field(repr=False)
    raw: Any = field(repr=False, compare=False)
    """The schema's JSON, as read."""

    @cached_property
    def parsed(self) -> Any:
        return fastavro.parse_schema(self.raw, named_schemas={})

    @cached_property
    def fingerprint(self) -> bytes:
        """CRC-64-AVRO of the parsing canonical form, in single-object byte order (known
        ahead for the bundled schemas: ``little.events._fingerprints``)."""
        known = KNOWN_FINGERPRINTS.get(hashlib.sha256(self.text.encode()).hexdigest())
        if known is not None:
            return bytes.fromhex(known)
        return computed_fingerprint(self.parsed)

    @cached_property
    def read_parsed(self) -> Any:
        """The same schema for decoding, with ``uuid`` logical types read as plain strings: the
        bytes are identical, and the models want text (a UUID object per event, turned back
        into text, was ~15% of decoding)."""
        return fastavro.parse_schema(_without_uuid_logical_type(self.raw), named_schemas={})

    @property
    def single_object_header(self) -> bytes:
        return SINGLE_OBJECT_MAGIC + self.fingerprint


def computed_fingerprint(parsed: Any) -> bytes:
    """CRC-64-AVRO of a parsed schema's parsing canonical form, in single-object byte order."""
    return bytes.fromhex(fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO"))


class SchemaCatalog:
    """Looks schemas up by event type, by fingerprint, or by record full name."""

    def __init__(self, versions: list[SchemaVersion]) -> None:
        by_type: dict[str, list[SchemaVersion]] = {}
        for v in versions:
            by_type.setdefault(v.event_type, []).append(v)
        self._by_type = {t: tuple(sorted(vs, key=lambda v: v.version)) for t, vs in by_type.items()}
        self._by_fingerprint = {v.fingerprint: v for v in versions}
        self._type_by_name = {v.full_name: v.event_type for v in versions}

    @property
    def event_types(self) -> tuple[str, ...]:
        return tuple(sorted(self._by_type))

    def versions(self, event_type: str) -> tuple[SchemaVersion, ...]:
        return self._by_type[event_type]

    def latest(self, event_type: str) -> SchemaVersion:
        return self._by_type[event_type][-1]

    def by_fingerprint(self, fp: bytes) -> SchemaVersion | None:
        return self._by_fingerprint.get(fp)

    def type_for_record(self, full_name: str) -> str | None:
        return self._type_by_name.get(full_name)

    def all_versions(self) -> tuple[SchemaVersion, ...]:
        return tuple(v for t in self.event_types for v in self._by_type[t])


def load_schema_version(event_type: str, version: int, text: str) -> SchemaVersion:
    raw = json.loads(text)
    declared = raw.get("little.type")
    if declared != event_type:
        raise ConfigurationError(
            f"schema {event_type}/v{version}.avsc declares little.type={declared!r}"
        )
    return SchemaVersion(
        event_type=event_type,
        version=version,
        full_name=f"{raw.get('namespace', '')}.{raw['name']}".lstrip("."),
        text=text,
        raw=raw,
    )


def _without_uuid_logical_type(node: Any) -> Any:
    if isinstance(node, dict):
        if node.get("logicalType") == "uuid":
            return {k: v for k, v in node.items() if k != "logicalType"}
        return {k: _without_uuid_logical_type(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_without_uuid_logical_type(v) for v in node]
    return node


def load_catalog(root: Traversable | None = None) -> SchemaCatalog:
    """Read every ``<type>/v<N>.avsc`` under ``root`` (default: the bundled schemas).

    Schemas under a ``root`` given are parsed now, so one that is not valid Avro is refused
    here, naming its file; the bundled ones (checked by the tests) on first use."""
    base = root if root is not None else resources.files("little") / "schemas"
    versions: list[SchemaVersion] = []
    for type_dir in base.iterdir():
        if not type_dir.is_dir():
            continue
        for entry in type_dir.iterdir():
            m = _VERSION_FILE.match(entry.name)
            if m:
                version = load_schema_version(
                    type_dir.name, int(m.group(1)), entry.read_text("utf-8")
                )
                if root is not None:
                    try:
                        version.parsed, version.read_parsed  # noqa: B018
                    except Exception as exc:
                        raise ConfigurationError(
                            f"schema {type_dir.name}/{entry.name} under {base} is not valid "
                            f"Avro: {exc}"
                        ) from exc
                versions.append(version)
    if not versions:
        raise ConfigurationError(f"no event schemas found under {base}")
    return SchemaCatalog(versions)


@cache
def default_catalog() -> SchemaCatalog:
    """The catalog bundled with this package (parsed once per process)."""
    return load_catalog()


def schema_json(v: SchemaVersion) -> Mapping[str, Any]:
    return json.loads(v.text)  # type: ignore[no-any-return]
