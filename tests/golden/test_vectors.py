"""Golden byte vectors: bytes written by every schema version must decode forever.

The vectors under ``tests/golden/vectors/`` are immutable; ``tests/golden/generate.py`` only
adds the missing ones. A new schema version without a vector fails here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from little.events import EventCodec, default_catalog
from tests.paths import GOLDEN_VECTORS

VECTORS = GOLDEN_VECTORS

CATALOG_VERSIONS = [(v.event_type, v.version) for v in default_catalog().all_versions()]
COMMITTED = sorted(VECTORS.glob("*/v*.bin"))


def test_vectors_exist() -> None:
    assert COMMITTED, f"no golden vectors under {VECTORS}"


@pytest.mark.parametrize(("event_type", "version"), CATALOG_VERSIONS, ids=lambda x: str(x))
def test_every_schema_version_has_a_vector(event_type: str, version: int) -> None:
    stem = VECTORS / event_type / f"v{version}"
    missing = [
        p.name for p in (stem.with_suffix(".bin"), stem.with_suffix(".json")) if not p.exists()
    ]
    assert not missing, (
        f"{event_type} v{version} has no golden vector ({', '.join(missing)} missing): "
        "run `.venv/bin/python tests/golden/generate.py` and commit what it writes"
    )


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_vector_decodes_to_its_json(path: Path) -> None:
    expected = json.loads(path.with_suffix(".json").read_text("utf-8"))
    event = EventCodec().decode(path.read_bytes())
    assert event.event_type == path.parent.name
    assert event.model_dump(mode="json") == expected


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_vector_is_written_with_its_own_version(path: Path) -> None:
    version = int(path.stem[1:])
    (schema,) = [v for v in default_catalog().versions(path.parent.name) if v.version == version]
    assert path.read_bytes().startswith(schema.single_object_header)
