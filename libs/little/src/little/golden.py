"""Golden run files: a finished run as a standard Avro object container file.

``write_golden(world, run_id, path)`` writes the run's events, in log order and with their
partition and offset, then the artifacts they name (large inputs, outputs, requests and
results), into one file any Avro tool reads with its fields (``fastavro.reader``, the
reference ``avro`` package, ``avro-tools tojson``). ``read_golden(path)`` reads it back into
today's event models; ``little.runtime.simulate`` and ``little.testing.assert_replays`` accept
the file in place of a run id.

The file's schema is a union of two records:

* ``little.golden.LoggedEvent`` ``{partition: int, offset: long, event: <union of every event
  type's newest record schema>}``: the event exactly as the log holds it, re-encoded with the
  newest schema version of its type (the one its decoded model mirrors). A reader resolves
  the file's schemas against its own by Avro's rules, the ones every event schema version is
  checked for, so a file written by an older little reads into the newer models.
* ``little.golden.Artifact`` ``{sha256: string, media_type: string, data: bytes}``: one blob of
  the artifact store that an event of the file names (after every event).

The header holds ``little.format`` (``golden-run``), ``little.format_version``, the run id,
workflow and version, its status, the little version that wrote it, the fold's state
version, the schema version of every event type, and how many events (per run) and artifacts
the file holds: a file cut short at a block boundary still has a valid layout, and these
counts catch it. A sub-run is a run of its own, but it is part of what its parent did: the
file holds every sub-run's stream too, after the run's own, so the whole tree can be
simulated.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import IO, Any

import fastavro
from pydantic import ValidationError

from little._world import World
from little.errors import ConfigurationError, EventValidationError, LittleError
from little.events import (
    EVENT_TYPES,
    ArtifactRef,
    Event,
    LoggedEvent,
    RunStarted,
    SubRunReserved,
    default_catalog,
)
from little.harness.content import stored_part

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "GoldenArtifact",
    "GoldenFileError",
    "GoldenRun",
    "container_schema",
    "golden_tree",
    "read_golden",
    "write_golden",
]

FORMAT = "golden-run"
FORMAT_VERSION = "1"
_NAMESPACE = "little.golden"
_EVENT_RECORD = f"{_NAMESPACE}.LoggedEvent"
_ARTIFACT_RECORD = f"{_NAMESPACE}.Artifact"
_NAMED = ("record", "enum", "fixed")


class GoldenFileError(LittleError, ValueError):
    """A golden run file cannot be read or written: not there, not Avro, not a golden run,
    truncated or corrupt (the message names the file and, where known, the record). Terminal."""

    retryable = False


@dataclass(frozen=True)
class GoldenArtifact:
    """One blob of a golden file (its sha256 checked when the file was read)."""

    sha256: str
    media_type: str
    data: bytes = field(repr=False)


@dataclass(frozen=True)
class GoldenRun:
    """A golden run as read from a file (or gathered from a world): the run's own events and
    those of its sub-runs, in log order, and the artifacts they name."""

    run_id: str
    runs: Mapping[str, tuple[LoggedEvent, ...]]
    """Every run of the file by id, the golden run first, then its sub-runs."""
    artifacts: Mapping[str, GoldenArtifact]
    """By sha256."""
    metadata: Mapping[str, str] = field(default_factory=dict)
    """The file's header (``little.*`` keys); empty for a run gathered from a world."""
    path: Path | None = None

    @property
    def events(self) -> tuple[LoggedEvent, ...]:
        """The golden run's own events."""
        return self.runs[self.run_id]

    @property
    def workflow(self) -> str | None:
        started = next((e.event for e in self.events if isinstance(e.event, RunStarted)), None)
        return None if started is None else started.workflow

    @property
    def workflow_version(self) -> str | None:
        started = next((e.event for e in self.events if isinstance(e.event, RunStarted)), None)
        return None if started is None else started.workflow_version

    @property
    def where(self) -> str:
        """How messages name it: the file, else the run."""
        return f"golden file {self.path}" if self.path is not None else f"run {self.run_id}"


# -- the schema ------------------------------------------------------------------------------


def _full_name(node: Mapping[str, Any], namespace: str) -> tuple[str, str]:
    name = str(node["name"])
    if "." in name:
        return name, name.rsplit(".", 1)[0]
    ns = str(node.get("namespace", namespace))
    return (f"{ns}.{name}" if ns else name), ns


def _without_docs(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_docs(v) for k, v in node.items() if k != "doc"}
    if isinstance(node, list):
        return [_without_docs(v) for v in node]
    return node


def _once(node: Any, namespace: str, defined: dict[str, Any]) -> Any:
    """``node`` with every named type defined once across the union: each event schema
    defines the records it shares with others (``ArtifactRef``, ``Usage``) itself, and a
    union may define a name only once, so a later definition becomes a reference by name
    (after checking it is the same type)."""
    if isinstance(node, list):
        return [_once(n, namespace, defined) for n in node]
    if not isinstance(node, dict):
        return node
    kind = node.get("type")
    if kind in _NAMED:
        full, ns = _full_name(node, namespace)
        if full in defined:
            if _without_docs(defined[full]) != _without_docs(node):
                raise ConfigurationError(
                    f"event schemas define {full} in two ways: a golden file's union of them "
                    "cannot hold both (give one of them another name)"
                )
            return full
        defined[full] = node
        out = dict(node)
        if kind == "record":
            out["fields"] = [
                {**f, "type": _once(f["type"], ns, defined)} for f in node.get("fields", ())
            ]
        return out
    if kind == "array":
        return {**node, "items": _once(node["items"], namespace, defined)}
    if kind == "map":
        return {**node, "values": _once(node["values"], namespace, defined)}
    if isinstance(kind, dict | list):
        return {**node, "type": _once(kind, namespace, defined)}
    return node


def container_schema(versions: Mapping[str, int] | None = None) -> list[dict[str, Any]]:
    """The schema of a golden file: ``[LoggedEvent, Artifact]``, the events' union holding
    one schema version of every event type: the newest (what this little writes), or those
    ``versions`` names (what an older little wrote, for tests of reading its files)."""
    catalog = default_catalog()
    defined: dict[str, Any] = {}
    chosen = dict(versions or {})
    events = []
    for t in catalog.event_types:
        (version,) = [
            v for v in catalog.versions(t) if v.version == chosen.get(t, catalog.latest(t).version)
        ]
        events.append(_once(json.loads(version.text), "", defined))
    return [
        {
            "type": "record",
            "name": "LoggedEvent",
            "namespace": _NAMESPACE,
            "doc": "One event of a run, as its log holds it, and where it was in the log.",
            "fields": [
                {"name": "partition", "type": "int"},
                {"name": "offset", "type": "long"},
                {"name": "event", "type": events},
            ],
        },
        {
            "type": "record",
            "name": "Artifact",
            "namespace": _NAMESPACE,
            "doc": "A blob of the artifact store that an event of the file names.",
            "fields": [
                {"name": "sha256", "type": "string"},
                {"name": "media_type", "type": "string"},
                {"name": "data", "type": "bytes"},
            ],
        },
    ]


@cache
def _schema() -> Any:
    return fastavro.parse_schema(container_schema(), named_schemas={})


@cache
def _record_names() -> dict[str, str]:
    catalog = default_catalog()
    return {t: catalog.latest(t).full_name for t in catalog.event_types}


# -- writing ---------------------------------------------------------------------------------


def golden_tree(world: World, run_id: str) -> dict[str, list[LoggedEvent]]:
    """The run's events and those of its sub-runs (theirs too, depth first), by run id, the
    run first; a sub-run reserved but never started (no events) is left out. Blocking."""
    out: dict[str, list[LoggedEvent]] = {}
    todo = [run_id]
    while todo:
        current = todo.pop(0)
        if current in out:
            continue
        events = list(world.read_run(current))
        if not events:
            continue
        out[current] = events
        todo[:0] = [
            e.event.sub_run_id
            for e in _accepted(events)
            if isinstance(e.event, SubRunReserved) and e.event.sub_run_id not in out
        ]
    return out


def _accepted(events: Iterable[LoggedEvent]) -> list[LoggedEvent]:
    from little.replay import accepted_events

    return accepted_events(events)


def _refs(event: Event) -> Iterator[ArtifactRef]:
    for name in type(event).model_fields:
        value = getattr(event, name)
        if isinstance(value, ArtifactRef):
            yield value
        elif isinstance(value, tuple):
            yield from (v for v in value if isinstance(v, ArtifactRef))


def _part_refs(run_id: str, text: str | bytes) -> Iterator[ArtifactRef]:
    """The image and document parts a JSON field names by digest (messages, tool results,
    agent calls: ``little.harness.content``): their blobs belong in the golden file too."""
    marked = b'"artifact"' in text if isinstance(text, bytes) else '"artifact"' in text
    if not marked:
        return
    try:
        value = json.loads(text)
    except ValueError:
        return
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            found = stored_part(item)
            if found is not None:
                sha256, size, media_type = found
                yield ArtifactRef(run_id=run_id, sha256=sha256, size=size, media_type=media_type)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def write_golden(world: World, run_id: str, path: str | os.PathLike[str]) -> GoldenRun:
    """Write the finished run ``run_id`` of ``world`` (its sub-runs too) to ``path`` as a
    golden file, replacing it atomically; returns what was written. Blocking (reads the log
    and the artifact store): call it off the event loop."""
    from little._version import __version__
    from little.replay import STATE_VERSION, materialize_run_state_from_events

    runs = golden_tree(world, run_id)
    if run_id not in runs:
        raise GoldenFileError(f"run {run_id} has no events in {world.description}")
    state = materialize_run_state_from_events(runs[run_id], run_id=run_id)
    if state.workflow is None:
        raise GoldenFileError(
            f"run {run_id} has no RunStarted in {world.description}: nothing to keep as golden"
        )
    if not state.terminal:
        raise GoldenFileError(
            f"run {run_id} has not ended ({state.status}) in {world.description}: a golden "
            "run is a finished one (resume it, or wait for it to end)"
        )
    artifacts: dict[str, GoldenArtifact] = {}
    for events in runs.values():
        for item in events:
            event = item.event
            refs = list(_refs(event))
            for name in type(event).model_fields:
                value = getattr(event, name)
                if name.endswith("_json") and isinstance(value, str):
                    refs.extend(_part_refs(event.run_id, value))
            while refs:
                ref = refs.pop()
                if ref.sha256 in artifacts:
                    continue
                try:
                    data = world.artifacts.get(ref)
                except LittleError as exc:
                    raise GoldenFileError(
                        f"run {event.run_id}: seq {event.seq} "
                        f"({event.type}) names an artifact the store cannot give: {exc}"
                    ) from exc
                artifacts[ref.sha256] = GoldenArtifact(ref.sha256, ref.media_type, data)
                if ref.media_type == "application/json":  # a payload too large to be inline
                    refs.extend(_part_refs(event.run_id, data))
    metadata = {
        "little.format": FORMAT,
        "little.format_version": FORMAT_VERSION,
        "little.run_id": run_id,
        "little.workflow": state.workflow,
        "little.workflow_version": state.workflow_version or "",
        "little.status": state.status,
        "little.version": __version__,
        "little.state_version": str(STATE_VERSION),
    }
    golden = GoldenRun(run_id, {r: tuple(e) for r, e in runs.items()}, artifacts, metadata)
    target = Path(path)
    _write(golden, target)
    return dataclasses.replace(golden, path=target)


def _write(golden: GoldenRun, target: Path, versions: Mapping[str, int] | None = None) -> None:
    """Write ``golden`` to ``target`` atomically, with its header's counts and schema
    versions; ``versions``: write those schema versions (an older little's file, in tests)."""
    catalog = default_catalog()
    chosen = {t: (versions or {}).get(t, catalog.latest(t).version) for t in catalog.event_types}
    metadata = {
        **golden.metadata,
        "little.schemas": json.dumps(chosen, sort_keys=True),
        "little.runs": json.dumps({r: len(events) for r, events in golden.runs.items()}),
        "little.artifacts": str(len(golden.artifacts)),
    }
    names = _record_names()
    schema = (
        _schema()
        if versions is None
        else fastavro.parse_schema(container_schema(versions), named_schemas={})
    )

    def records() -> Iterator[tuple[str, dict[str, Any]]]:
        for events in golden.runs.values():
            for item in events:
                body = item.event.model_dump()
                body["type"] = item.event.event_type
                event = (names[item.event.event_type], body)
                yield (
                    _EVENT_RECORD,
                    {"partition": item.partition, "offset": item.offset, "event": event},
                )
        for a in golden.artifacts.values():
            yield _ARTIFACT_RECORD, {"sha256": a.sha256, "media_type": a.media_type, "data": a.data}

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.{uuid.uuid4().hex}.tmp"
    # os.open, not mkstemp: the file gets the umask's mode, as any file a command writes
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            fastavro.writer(f, schema, records(), codec="deflate", metadata=metadata)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# -- reading ---------------------------------------------------------------------------------


def _event_of(record: Mapping[str, Any]) -> Event:
    # uuid fields (the envelope's event_id) as text, as the codec reads them: fastavro reads
    # the writer's logical type even against a reader schema without it
    body = {k: str(v) if isinstance(v, uuid.UUID) else v for k, v in record.items()}
    event_type = body.pop("type", None)
    cls = EVENT_TYPES.get(str(event_type))
    if cls is None:
        raise ValueError(f"unknown event type {event_type!r}")
    return cls.model_validate(body)


def read_golden(path: str | os.PathLike[str]) -> GoldenRun:
    """Read a golden file written by ``write_golden`` (by this little or an older one).
    Raises ``GoldenFileError`` naming the file, and the record where known, if it is not
    there, not an Avro container file, not a golden run, truncated or corrupt. Blocking."""
    source = Path(path)
    where = f"golden file {source}"
    try:
        f = source.open("rb")
    except OSError as exc:
        raise GoldenFileError(f"{where} cannot be read: {exc.strerror or exc}") from None
    with f:
        return _read(f, source, where)


def _read(f: IO[bytes], source: Path, where: str) -> GoldenRun:
    schema = _schema()
    try:
        reader = fastavro.reader(f, reader_schema=schema)
    except Exception as exc:
        raise GoldenFileError(
            f"{where} is not an Avro object container file ({_why(exc)})"
        ) from None
    meta = {k: v for k, v in reader.metadata.items() if k.startswith("little.")}
    if meta.get("little.format") != FORMAT:
        raise GoldenFileError(
            f"{where} is an Avro file but not a little golden run (its header has no "
            f"little.format={FORMAT})"
        )
    if meta.get("little.format_version") != FORMAT_VERSION:
        raise GoldenFileError(
            f"{where} is golden-run format {meta.get('little.format_version')!r}; this little "
            f"reads format {FORMAT_VERSION} (written by little {meta.get('little.version')})"
        )
    run_id = meta.get("little.run_id", "")
    try:
        expected_runs = json.loads(meta.get("little.runs", ""))
        expected_artifacts = int(meta.get("little.artifacts", ""))
        if not isinstance(expected_runs, dict) or run_id not in expected_runs:
            raise ValueError("little.runs does not name the run")
    except ValueError as exc:
        raise GoldenFileError(f"{where}: its header is damaged ({exc})") from None
    runs: dict[str, list[LoggedEvent]] = {r: [] for r in expected_runs}
    artifacts: dict[str, GoldenArtifact] = {}
    records = iter(reader)
    index = 0
    while True:
        try:
            record = next(records)
        except StopIteration:
            break
        except Exception as exc:  # EOFError, zlib.error, a bad sync marker, a bad varint...
            raise GoldenFileError(
                f"{where}: record {index} cannot be read: the file is truncated or corrupt "
                f"({_why(exc)})"
            ) from None
        try:
            _add(record, runs, artifacts)
        except (ValidationError, EventValidationError) as exc:
            first = str(exc).replace("\n", " ")
            raise GoldenFileError(
                f"{where}: record {index} is not a valid event ({first})"
            ) from None
        except Exception as exc:
            raise GoldenFileError(
                f"{where}: record {index} does not decode ({_why(exc)})"
            ) from None
        index += 1
    for r, count in expected_runs.items():
        if len(runs[r]) != count:
            raise GoldenFileError(
                f"{where} holds {len(runs[r])} event(s) of run {r} but its header says {count}: "
                "the file is truncated or corrupt"
            )
    if len(artifacts) != expected_artifacts:
        raise GoldenFileError(
            f"{where} holds {len(artifacts)} artifact(s) but its header says "
            f"{expected_artifacts}: the file is truncated or corrupt"
        )
    return GoldenRun(
        run_id, {r: tuple(events) for r, events in runs.items()}, artifacts, meta, source
    )


def _add(
    record: Any, runs: dict[str, list[LoggedEvent]], artifacts: dict[str, GoldenArtifact]
) -> None:
    if not isinstance(record, dict):
        raise ValueError(f"not a record ({type(record).__name__})")
    if "event" in record:
        item = LoggedEvent(_event_of(record["event"]), record["partition"], record["offset"])
        events = runs.get(item.event.run_id)
        if events is None:
            raise ValueError(f"an event of run {item.event.run_id}, which the header does not list")
        if artifacts:
            raise ValueError("an event after the artifacts")
        events.append(item)
        return
    data = bytes(record["data"])
    digest = hashlib.sha256(data).hexdigest()
    if digest != record["sha256"]:
        raise ValueError(f"artifact {record['sha256']}: its bytes hash to {digest}")
    artifacts[digest] = GoldenArtifact(digest, record["media_type"], data)


def _why(exc: BaseException) -> str:
    text = str(exc).strip().replace("\n", " ")
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
