"""Events to bytes and back: Avro bodies (fastavro) in one of two framings.

* Avro single-object encoding (``C3 01`` + 8-byte CRC-64-AVRO fingerprint) against the bundled
  catalog: the default, needs nothing but this package.
* Confluent wire format (``00`` + 4-byte schema id) when a schema registry is configured;
  subjects follow TopicRecordNameStrategy (``<topic>-<record full name>``).

The reader accepts both and resolves any known writer version to the newest reader version.
Whatever the input, decoding either returns an event or raises ``EventDecodeError``.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Sequence
from threading import Lock
from typing import TYPE_CHECKING, Any

from fastavro import schemaless_reader, schemaless_writer
from pydantic import ValidationError

from little._uuid_prefix import starts_like_a_uuid_string
from little.errors import EventDecodeError, EventValidationError
from little.events._catalog import (
    SINGLE_OBJECT_MAGIC,
    SchemaCatalog,
    SchemaVersion,
    default_catalog,
    load_schema_version,
)
from little.events._models import EVENT_TYPES, Event
from little.events._writer import BodyWriter, NotCompiled, compile_writer

if TYPE_CHECKING:
    from confluent_kafka.schema_registry import SchemaRegistryClient

CONFLUENT_MAGIC = 0
RUNS_TOPIC = "little.runs.v1"

Header = tuple[str, bytes]


def event_headers(event: Event) -> list[Header]:
    """The envelope mirrored as Kafka headers, for routing and filtering without decoding."""
    headers: list[Header] = [
        ("little.type", event.event_type.encode()),
        ("little.run_id", event.run_id.encode()),
        ("little.seq", str(event.seq).encode()),
        ("little.epoch", str(event.epoch).encode()),
        ("little.event_id", event.event_id.encode()),
    ]
    if event.step_path is not None:
        headers.append(("little.step_path", event.step_path.encode()))
    if event.session_id is not None:
        headers.append(("little.session_id", event.session_id.encode()))
    return headers


class EventCodec:
    """Encodes events in one framing and decodes either framing.

    With ``registry`` set, writes the Confluent wire format (registering the newest schema of a
    type under ``<topic>-<record full name>`` on first use); otherwise single-object encoding.
    """

    def __init__(
        self,
        catalog: SchemaCatalog | None = None,
        *,
        registry: SchemaRegistryClient | None = None,
        topic: str = RUNS_TOPIC,
    ) -> None:
        self.catalog = catalog or default_catalog()
        self.registry = registry
        self.topic = topic
        self._ids: dict[str, int] = {}
        self._by_id: dict[int, SchemaVersion] = {}
        self._lock = Lock()

    @property
    def framing(self) -> str:
        return "confluent" if self.registry is not None else "single-object"

    # -- encoding ------------------------------------------------------------------------

    def encode(self, event: Event) -> bytes:
        event_type = event.event_type
        schema = self.catalog.latest(event_type)
        writer = _compiled(schema)
        if writer is not None:
            out = bytearray(self._header(schema))
            try:
                writer(event.__dict__, event_type, out)
            except NotCompiled:  # a value it does not take as is: fastavro writes it
                return self.encode_with_fastavro(event)
            return bytes(out)
        return self.encode_with_fastavro(event)

    def encode_with_fastavro(self, event: Event) -> bytes:
        """The reference encoding (fastavro's generic writer): ``encode`` writes the same
        bytes, faster, with a writer compiled per schema (``little.events._writer``)."""
        schema = self.catalog.latest(event.event_type)
        record = event.model_dump()
        record["type"] = event.event_type
        out = io.BytesIO()
        out.write(self._header(schema))
        schemaless_writer(out, schema.parsed, record)
        return out.getvalue()

    def encode_many(self, events: Sequence[Event]) -> list[bytes]:
        return [self.encode(e) for e in events]

    def register_all(self) -> None:
        """Register the newest schema of every event type now (with a registry; blocking).

        A world does it when it opens, so no append on an event loop waits for the registry's
        HTTP round trip the first time it writes an event type."""
        if self.registry is None:
            return
        for event_type in EVENT_TYPES:
            if event_type not in self._ids:
                self._register(self.catalog.latest(event_type))

    def _header(self, schema: SchemaVersion) -> bytes:
        if self.registry is None:
            return schema.single_object_header
        schema_id = self._ids.get(schema.event_type)
        if schema_id is None:
            schema_id = self._register(schema)
        return struct.pack(">bI", CONFLUENT_MAGIC, schema_id)

    def _register(self, schema: SchemaVersion) -> int:
        from confluent_kafka.schema_registry import Schema

        assert self.registry is not None
        subject = f"{self.topic}-{schema.full_name}"
        with self._lock:
            schema_id = int(self.registry.register_schema(subject, Schema(schema.text, "AVRO")))
            self._ids[schema.event_type] = schema_id
            self._by_id[schema_id] = schema
        return schema_id

    # -- decoding ------------------------------------------------------------------------

    def decode(self, data: bytes) -> Event:
        """Decode one record value. Raises ``EventDecodeError`` and nothing else."""
        try:
            writer, body_start = self._writer_for(data)
            return self._decode_body(writer, memoryview(data)[body_start:])
        except EventDecodeError:
            raise
        except Exception as exc:  # a defect in a dependency must not escape as anything else
            raise EventDecodeError(
                EventDecodeError.MALFORMED, f"{type(exc).__name__}: {exc}"
            ) from exc

    def _writer_for(self, data: bytes) -> tuple[SchemaVersion, int]:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise EventDecodeError(
                EventDecodeError.NOT_AVRO_FRAMING, f"expected bytes, got {type(data).__name__}"
            )
        if data[:2] == SINGLE_OBJECT_MAGIC:
            if len(data) < 10:
                raise EventDecodeError(
                    EventDecodeError.TRUNCATED,
                    f"single-object header needs 10 bytes, got {len(data)}",
                )
            fp = bytes(data[2:10])
            schema = self.catalog.by_fingerprint(fp)
            if schema is None:
                raise EventDecodeError(
                    EventDecodeError.UNKNOWN_FINGERPRINT,
                    f"no bundled schema has fingerprint {fp.hex()}",
                )
            return schema, 10
        if data[:1] == b"\x00":
            if len(data) < 5:
                raise EventDecodeError(
                    EventDecodeError.TRUNCATED,
                    f"Confluent header needs 5 bytes, got {len(data)}",
                )
            (schema_id,) = struct.unpack(">I", bytes(data[1:5]))
            return self._schema_by_id(schema_id), 5
        raise EventDecodeError(
            EventDecodeError.NOT_AVRO_FRAMING,
            f"starts with {bytes(data[:2]).hex() or 'nothing'}; expected c301 (single-object) "
            "or 00 (Confluent wire format)",
        )

    def _schema_by_id(self, schema_id: int) -> SchemaVersion:
        known = self._by_id.get(schema_id)
        if known is not None:
            return known
        if self.registry is None:
            raise EventDecodeError(
                EventDecodeError.UNKNOWN_SCHEMA_ID,
                f"Confluent-framed record (schema id {schema_id}) but no schema registry is "
                "configured",
            )
        try:
            registered = self.registry.get_schema(schema_id)
        except Exception as exc:
            raise EventDecodeError(
                EventDecodeError.UNKNOWN_SCHEMA_ID,
                f"schema id {schema_id} not found in the registry: {exc}",
            ) from exc
        schema_str = registered.schema_str or ""
        try:
            raw = json.loads(schema_str)
        except ValueError as exc:
            raise EventDecodeError(
                EventDecodeError.UNKNOWN_TYPE, f"schema id {schema_id} is not JSON Avro"
            ) from exc
        event_type = raw.get("little.type") if isinstance(raw, dict) else None
        if event_type not in EVENT_TYPES:
            raise EventDecodeError(
                EventDecodeError.UNKNOWN_TYPE,
                f"schema id {schema_id} is not a little event schema ({event_type!r})",
            )
        version = load_schema_version(event_type, 0, schema_str)
        self._by_id[schema_id] = version
        return version

    def _decode_body(self, writer: SchemaVersion, body: memoryview) -> Event:
        cls = EVENT_TYPES.get(writer.event_type)
        if cls is None:
            raise EventDecodeError(EventDecodeError.UNKNOWN_TYPE, f"type {writer.event_type!r}")
        _check_event_id_prefix(writer, body)
        reader = self.catalog.latest(writer.event_type)
        stream = io.BytesIO(body)
        try:
            record: Any = schemaless_reader(
                stream,
                writer.read_parsed,
                None if reader.fingerprint == writer.fingerprint else reader.read_parsed,
            )
        except (EOFError, StopIteration, struct.error, IndexError) as exc:
            # fastavro raises IndexError, not EOFError, when a body ends inside a varint; an
            # IndexError with bytes left over is a bad union branch, i.e. malformed.
            if isinstance(exc, IndexError) and stream.tell() < len(body):
                raise
            raise EventDecodeError(
                EventDecodeError.TRUNCATED,
                f"{writer.event_type} v{writer.version} body ends early ({type(exc).__name__})",
            ) from exc
        if stream.tell() != len(body):
            raise EventDecodeError(
                EventDecodeError.MALFORMED,
                f"{writer.event_type} v{writer.version}: {len(body) - stream.tell()} trailing "
                "bytes after the record",
            )
        if not isinstance(record, dict):
            raise EventDecodeError(EventDecodeError.MALFORMED, "body is not a record")
        declared = record.pop("type", None)
        if declared != writer.event_type:
            raise EventDecodeError(
                EventDecodeError.UNKNOWN_TYPE,
                f"record says type {declared!r} but its schema is {writer.event_type!r}",
            )
        try:
            return cls.model_validate(record)
        except (ValidationError, EventValidationError) as exc:
            raise EventDecodeError(
                EventDecodeError.INVALID, f"{writer.event_type}: {exc}".replace("\n", " ")
            ) from exc


_WRITERS: dict[bytes, BodyWriter | None] = {}
"""Compiled body writers by schema fingerprint (a schema's writer is compiled once)."""


def _compiled(schema: SchemaVersion) -> BodyWriter | None:
    try:
        return _WRITERS[schema.fingerprint]
    except KeyError:
        writer = _WRITERS[schema.fingerprint] = compile_writer(schema.parsed)
        return writer


def _check_event_id_prefix(writer: SchemaVersion, body: memoryview) -> None:
    """Tell a garbage body from a cut one before decoding: a body that does not start with its
    event id (a uuid string) is ``malformed-body`` whatever its length; one that starts with a
    whole or partial event id and then ends early is left to the decoder (``truncated-body``).
    Without this, random bytes behind a valid header mostly read as a huge string length and
    were reported as truncated."""
    if _first_field(writer) != "event_id" or starts_like_a_uuid_string(body):
        return
    raise EventDecodeError(
        EventDecodeError.MALFORMED,
        f"{writer.event_type} v{writer.version}: the body does not start with an event id "
        f"(first bytes {bytes(body[:8]).hex() or 'none'})",
    )


def _first_field(writer: SchemaVersion) -> str | None:
    parsed: Any = writer.read_parsed
    fields = parsed.get("fields") if isinstance(parsed, dict) else None
    return fields[0].get("name") if fields else None
