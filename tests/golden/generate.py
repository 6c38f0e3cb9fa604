"""Write the golden byte vectors: one record per (event type, schema version) in the catalog.

Run ``.venv/bin/python tests/golden/generate.py`` after adding a schema version. Vectors are
immutable once committed: this script only adds missing ones and never overwrites a file, so
bytes written by every release keep being checked by ``tests/golden/test_vectors.py`` forever.

Each vector is a deterministic sample with every field filled (optional ones too), encoded with
fastavro against *that* version's schema under its single-object header (``v<N>.bin``), next to
the event today's codec decodes it to (``v<N>.json``, ``model_dump(mode="json")``).
"""

from __future__ import annotations

import io
import json
import sys
import types
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from fastavro import schemaless_writer

from little.events import EVENT_TYPES, ArtifactRef, Event, EventCodec, Usage, default_catalog
from little.events._catalog import SchemaVersion, schema_json

VECTORS = Path(__file__).resolve().parent / "vectors"

EVENT_ID = "7c0a8f2e-3b51-4d9e-a6c4-1f2e3d4c5b6a"
RUN_ID = "run-golden-0001"
OCCURRED_AT = datetime(2025, 3, 14, 15, 9, 26, 535897, tzinfo=UTC)


def _value(field: str, annotation: Any, n: int) -> Any:
    """A fixed, non-default value for a field (``n`` keeps values distinct between fields)."""
    if get_origin(annotation) in (Union, types.UnionType):
        (inner,) = [a for a in get_args(annotation) if a is not type(None)]
        return _value(field, inner, n)
    if get_origin(annotation) is tuple:
        item = get_args(annotation)[0]
        return (_value(field, item, n), _value(field, item, n + 1))
    if get_origin(annotation) is Literal:
        return get_args(annotation)[-1]
    if annotation is bool:
        return True
    if annotation is int:
        return 40 + n
    if annotation is str:
        if field.endswith("_json"):
            return json.dumps(
                {"field": field, "n": n, "text": "héllo ✓"},
                separators=(",", ":"),
                ensure_ascii=False,
            )
        return f"{field}-{n}"
    if annotation is datetime:
        return OCCURRED_AT
    if annotation is ArtifactRef:
        digest = uuid.uuid5(uuid.NAMESPACE_URL, f"{field}/{n}").hex * 2
        return ArtifactRef(
            run_id=RUN_ID, sha256=digest, size=1000 + n, media_type="application/json"
        )
    if annotation is Usage:
        return Usage(
            input_tokens=1200 + n,
            output_tokens=300 + n,
            cached_input_tokens=64,
            reasoning_tokens=17,
        )
    raise TypeError(f"no golden value for field {field}: {annotation!r}")


def sample(cls: type[Event]) -> Event:
    """The newest model of a type with every field set to a fixed value."""
    values: dict[str, Any] = {}
    for n, (name, info) in enumerate(cls.model_fields.items()):
        values[name] = _value(name, info.annotation, n)
    values.update(
        event_id=EVENT_ID,
        run_id=RUN_ID,
        seq=-1 if cls.event_type in ("RunClaimed", "SignalSent") else 7,
        epoch=0 if cls.event_type == "SignalSent" else 3,
        occurred_at=OCCURRED_AT,
        producer="little/golden host/1",
    )
    return cls.model_validate(values)


def encode_with(version: SchemaVersion, event: Event) -> bytes:
    """``event`` written with ``version``'s schema (fields it lacks are simply not written)."""
    record = event.model_dump()
    record["type"] = event.event_type
    out = io.BytesIO()
    out.write(version.single_object_header)
    schemaless_writer(out, version.parsed, record)
    return out.getvalue()


def main() -> int:
    codec = EventCodec()
    catalog = default_catalog()
    written, skipped, broken = [], [], []
    for event_type in catalog.event_types:
        for version in catalog.versions(event_type):
            folder = VECTORS / event_type
            bin_path = folder / f"v{version.version}.bin"
            json_path = folder / f"v{version.version}.json"
            name = f"{event_type}/v{version.version}"
            if bin_path.exists() and json_path.exists():
                skipped.append(name)
                continue
            if bin_path.exists() or json_path.exists():
                broken.append(name)  # half a vector: a human must look, never regenerate
                continue
            cls = EVENT_TYPES[event_type]
            event = sample(cls)
            data = encode_with(version, event)
            decoded = codec.decode(data)
            written_fields = {f["name"] for f in schema_json(version)["fields"]}
            expected = event.model_copy(
                update={
                    f: i.default for f, i in cls.model_fields.items() if f not in written_fields
                }
            )
            if decoded != expected:  # the codec lost or changed a field: do not enshrine that
                broken.append(f"{name} (decodes to {decoded!r}, expected {expected!r})")
                continue
            folder.mkdir(parents=True, exist_ok=True)
            bin_path.write_bytes(data)
            json_path.write_text(
                json.dumps(decoded.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n",
                "utf-8",
            )
            written.append(name)
    for name in skipped:
        print(f"skipped {name}: vector exists (golden files are immutable)")
    for name in written:
        print(f"wrote   {name}")
    for name in broken:
        print(
            f"ERROR   {name}: not written (half a vector exists, or the sample does not round-trip)",
            file=sys.stderr,
        )
    print(f"{len(written)} written, {len(skipped)} skipped, {len(broken)} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
