"""Golden runs as files (issue 15 item 6): ``write_golden`` / ``little export --golden`` write a
finished run, its sub-runs and the artifacts they name as a standard Avro object container file
that any Avro reader reads with its fields; ``read_golden`` reads it back (older schema
versions included); a file that is not one gets one error naming it and the record."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import avro.datafile
import avro.io
import fastavro
import pytest

import little
from little.events import (
    EVENT_TYPES,
    RunClaimed,
    RunStarted,
    default_catalog,
)
from little.events._catalog import schema_json
from little.examples import research
from little.golden import GoldenFileError, read_golden, write_golden
from little.runtime import run, simulate

TOPIC = {"topic": "Kafka"}


@pytest.fixture
def world(tmp_path: Path) -> Iterator[little.World]:
    with little.local_world(tmp_path / "world") as w:
        yield w


def recorded(world: little.World, value: object = TOPIC) -> str:
    result = asyncio.run(run(world, research.research, value))
    assert result.status == "completed", result.error
    return result.run_id


def test_the_file_holds_the_run_and_its_sub_run_and_any_avro_reader_reads_its_fields(
    world: little.World, tmp_path: Path
) -> None:
    run_id = recorded(world)
    path = tmp_path / "research.avro"
    written = write_golden(world, run_id, path)
    own = list(world.read_run(run_id))
    sub_id = f"{run_id}~start_workflow/summarise.1/sub1"
    sub = list(world.read_run(sub_id))
    assert list(written.runs) == [run_id, sub_id]

    with path.open("rb") as f:  # fastavro, knowing nothing of little
        reader = fastavro.reader(f)
        records = list(reader)
        header = reader.metadata
    assert len(records) == len(own) + len(sub)
    first = records[0]
    assert (first["partition"], first["offset"]) == (own[0].partition, own[0].offset)
    assert first["event"]["type"] == "RunClaimed"
    assert [r["event"]["type"] for r in records] == [e.event.type for e in own + sub]
    started = records[1]["event"]
    assert (started["workflow"], json.loads(started["input_json"])) == ("research", TOPIC)
    assert header["little.format"] == "golden-run"
    assert header["little.run_id"] == run_id
    assert (header["little.workflow"], header["little.workflow_version"]) == ("research", "1")
    assert header["little.status"] == "completed"
    assert header["little.version"] == little.__version__
    assert json.loads(header["little.runs"]) == {run_id: len(own), sub_id: len(sub)}
    catalog = default_catalog()
    assert json.loads(header["little.schemas"]) == {
        t: catalog.latest(t).version for t in catalog.event_types
    }
    assert header["avro.codec"] == "deflate"

    with path.open("rb") as f:  # the reference implementation reads it too
        reference = list(avro.datafile.DataFileReader(f, avro.io.DatumReader()))
    assert [r["event"]["event_id"] for r in reference] == [e.event.event_id for e in own + sub]

    back = read_golden(path)
    assert back.run_id == run_id
    assert back.runs == {run_id: tuple(own), sub_id: tuple(sub)}  # events and positions
    assert back.workflow == "research"


def test_artifacts_travel_in_the_file_so_it_simulates_without_its_world(
    world: little.World, tmp_path: Path
) -> None:
    big = {"topic": "Kafka " * 12_000}  # input, plan and requests over the inline limit
    run_id = recorded(world, big)
    path = tmp_path / "big.avro"
    written = write_golden(world, run_id, path)
    refs = {
        ref.sha256
        for events in written.runs.values()
        for e in events
        for ref in (getattr(e.event, f) for f in type(e.event).model_fields)
        if isinstance(ref, little.ArtifactRef)
    }
    assert refs
    assert set(written.artifacts) == refs
    world.close()
    shutil.rmtree(tmp_path / "world")  # nothing but the file is left

    sim = asyncio.run(simulate(None, research.research, path))
    assert sim.identical, sim.lines()
    assert sim.lines() == [
        f"identical to {run_id} (golden file {path})",
        "3 tool call(s) ran again and returned what the golden run recorded",
    ]


def test_a_file_of_older_schema_versions_reads_into_todays_models(
    world: little.World, tmp_path: Path
) -> None:
    """A file an older little wrote holds older versions of the event schemas: read_golden
    resolves them to today's by Avro's rules (the fields they lack take their defaults)."""
    from little.golden import _write

    golden = write_golden(world, recorded(world), tmp_path / "new.avro")
    catalog = default_catalog()
    old = {t: 1 for t in catalog.event_types}
    assert any(catalog.latest(t).version > 1 for t in old)
    _write(golden, tmp_path / "old.avro", old)
    with (tmp_path / "old.avro").open("rb") as f:
        assert json.loads(fastavro.reader(f).metadata["little.schemas"]) == old

    back = read_golden(tmp_path / "old.avro")
    for run_id, events in golden.runs.items():
        for before, after in zip(events, back.runs[run_id], strict=True):
            cls = EVENT_TYPES[before.event.type]
            (v1,) = [v for v in catalog.versions(before.event.type) if v.version == 1]
            kept = {f["name"] for f in schema_json(v1)["fields"]}
            lost = {f: i.default for f, i in cls.model_fields.items() if f not in kept}
            assert after.event == before.event.model_copy(update=lost)
            assert (after.partition, after.offset) == (before.partition, before.offset)
    started = next(e.event for e in back.events if isinstance(e.event, RunStarted))
    assert started.source_sha256 is None  # RunStarted v1 had no source identity


def _cut_at_a_block(source: Path, target: Path) -> None:
    """A file whose layout is whole but that lost its last records (a copy cut at a block
    boundary): the header of the original, fewer records."""
    with source.open("rb") as f:
        reader = fastavro.reader(f)
        schema, meta, records = reader.writer_schema, reader.metadata, list(reader)
    meta = {k: v for k, v in meta.items() if not k.startswith("avro.")}
    with target.open("wb") as f:
        fastavro.writer(f, schema, records[:-3], metadata=meta)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("missing", r"golden file {path} cannot be read: No such file or directory"),
        ("empty", r"golden file {path} is not an Avro object container file \(.+\)"),
        ("text", r"golden file {path} is not an Avro object container file \(.+\)"),
        ("other-avro", r"golden file {path} is an Avro file but not a little golden run .+"),
        ("truncated", r"golden file {path}: record 0 cannot be read: the file is truncated .+"),
        (
            "corrupt",
            r"golden file {path}: record \d+ (cannot be read|does not decode|is not a valid event)\b.+",
        ),
        ("cut-at-block", r"golden file {path} holds \d+ event\(s\) of run \S+ but its header .+"),
        ("future", r"golden file {path} is golden-run format '9'; this little reads format 1 .+"),
    ],
)
def test_a_bad_file_gets_one_error_naming_it_and_the_record(
    world: little.World, tmp_path: Path, damage: str, message: str
) -> None:
    good = tmp_path / "good.avro"
    write_golden(world, recorded(world), good)
    data = good.read_bytes()
    path = tmp_path / f"{damage}.avro"
    if damage == "empty":
        path.write_bytes(b"")
    elif damage == "text":
        path.write_text('{"not": "avro"}\n')
    elif damage == "other-avro":
        schema = {"type": "record", "name": "Row", "fields": [{"name": "n", "type": "long"}]}
        with path.open("wb") as f:
            fastavro.writer(f, schema, [{"n": 1}])
    elif damage == "truncated":
        path.write_bytes(data[: len(data) - 200])  # the one block loses its end
    elif damage == "corrupt":
        middle = len(data) - 400
        path.write_bytes(
            data[:middle] + bytes(b ^ 0xFF for b in data[middle : middle + 8]) + data[middle + 8 :]
        )
    elif damage == "cut-at-block":
        _cut_at_a_block(good, path)
    elif damage == "future":
        with good.open("rb") as f:
            reader = fastavro.reader(f)
            schema, meta, records = reader.writer_schema, reader.metadata, list(reader)
        meta = {k: v for k, v in meta.items() if not k.startswith("avro.")}
        with path.open("wb") as f:
            fastavro.writer(f, schema, records, metadata={**meta, "little.format_version": "9"})
    with pytest.raises(GoldenFileError) as caught:
        read_golden(path)
    text = str(caught.value)
    assert "\n" not in text
    assert re.fullmatch(message.format(path=re.escape(str(path))), text), text
    with pytest.raises(GoldenFileError, match=re.escape(str(path))):
        asyncio.run(simulate(None, research.research, path))


def test_only_a_finished_run_with_events_is_written(world: little.World, tmp_path: Path) -> None:
    with pytest.raises(GoldenFileError, match=r"run nope has no events in embedded:"):
        write_golden(world, "nope", tmp_path / "nope.avro")
    world.append(
        [
            RunClaimed(run_id="open", epoch=1, owner="me", observed_seq=-1),
            RunStarted(run_id="open", seq=0, workflow="research", workflow_version="1"),
        ]
    )
    with pytest.raises(GoldenFileError, match=r"run open has not ended \(running\)"):
        write_golden(world, "open", tmp_path / "open.avro")
    assert not (tmp_path / "open.avro").exists()
    assert not list(tmp_path.glob(".*.tmp"))  # nothing half written is left


def test_assert_replays_takes_a_golden_file(world: little.World, tmp_path: Path) -> None:
    from little.testing import assert_replays

    path = tmp_path / "research.avro"
    write_golden(world, recorded(world), path)
    assert assert_replays(str(path), research.research).identical
    assert assert_replays(read_golden(path), research.research).identical
    with pytest.raises(AssertionError, match=r'got:      completed with "BRIEF: '):
        assert_replays(path, research.RESEARCH_BRIEF)
    with pytest.raises(GoldenFileError, match=r"golden file \S+nothing.avro cannot be read"):
        assert_replays(tmp_path / "nothing.avro", research.research)
