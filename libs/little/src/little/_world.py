"""Worlds: an event log, an artifact store and a codec that belong together.

``local_world`` (embedded sqlite, no broker) is the default; ``kafka_world`` points the same
API at Kafka or Redpanda. Everything above this module sees only the ``World``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from little.artifacts import ArtifactBackend, ArtifactStore, open_artifact_store
from little.errors import EventDecodeError, LittleError
from little.events import Event, EventCodec, LoggedEvent, event_headers
from little.log import (
    CursorStore,
    EmbeddedCursorStore,
    EmbeddedEventLog,
    EmbeddedSnapshotStore,
    EventLog,
    OutgoingRecord,
    PendingAppend,
    Position,
    StoredRecord,
    TopicNames,
)
from little.redaction import Redactor
from little.snapshots import SnapshotStore
from little.tracing import trace_headers


class RecordDecodeError(LittleError, ValueError):
    """A record in a run's stream did not decode; names the run, the position and the reason.
    Terminal: the record stays as it is."""

    retryable = False

    def __init__(self, record: StoredRecord, cause: EventDecodeError) -> None:
        super().__init__(
            f"run {record.run_id}: record at partition {record.partition} offset "
            f"{record.offset} does not decode ({cause.reason}): {cause.detail}"
        )
        self.record = record
        self.cause = cause


@dataclass(frozen=True)
class World:
    """Where runs live: a log of run events, its group cursors, artifacts and the codec."""

    log: EventLog
    cursors: CursorStore
    artifacts: ArtifactBackend
    codec: EventCodec
    snapshots: SnapshotStore
    description: str = field(default="")
    redact: Redactor | None = field(default=None)
    """Called on prompts, model responses, tool arguments and results before they are
    written (``little.redaction``); None records them as they are."""

    def submit(
        self, events: Sequence[Event], *, after: PendingAppend | None = None
    ) -> PendingAppend:
        """Start a durable append of events of one run, in order (on an event loop); await
        the result for their positions. Submit order is log order for a run; ``after`` (the
        writer's previous append) makes a failed predecessor refuse it (``EventLog.submit``)."""
        run_id, records = self._records(events)
        return self.log.submit(run_id, records, after=after)

    def append(self, events: Sequence[Event]) -> list[Position]:
        """Durably append events of one run, in order, blocking; returns their positions.

        For tooling and bulk paths; code on an event loop awaits ``submit`` instead."""
        run_id, records = self._records(events)
        return self.log.append(run_id, records)

    def _records(self, events: Sequence[Event]) -> tuple[str, list[OutgoingRecord]]:
        if not events:
            return "", []
        run_id = events[0].run_id
        for e in events:
            if e.run_id != run_id:
                raise ValueError(f"one append holds one run: {e.run_id} != {run_id}")
        # the span the records are written in (a run execution, a step, a call), W3C
        traceparent = trace_headers()
        return run_id, [
            OutgoingRecord(self.codec.encode(e), (*event_headers(e), *traceparent)) for e in events
        ]

    def run_ids(self) -> list[str]:
        """Every run id of the log, in the order the runs first appear in it (partition by
        partition). Reads every record once, keeping only its key."""
        seen: dict[str, None] = {}
        for partition, end in sorted(self.log.end_offsets().items()):
            offset = 0
            while offset < end:
                batch = self.log.read_partition(partition, offset, limit=1000)
                for record in batch:
                    seen.setdefault(record.run_id, None)
                # a window of transaction markers or aborted records returns nothing: skip it
                offset = batch[-1].offset + 1 if batch else offset + 1000
        return list(seen)

    def read_run(self, run_id: str, *, after: Position | None = None) -> Iterator[LoggedEvent]:
        """The run's events in log order; an undecodable record raises ``RecordDecodeError``."""
        for record in self.log.read_run(run_id, after=after):
            yield self.decode(record)

    def decode(self, record: StoredRecord) -> LoggedEvent:
        try:
            event = self.codec.decode(record.payload)
        except EventDecodeError as exc:
            raise RecordDecodeError(record, exc) from exc
        return LoggedEvent(event, record.partition, record.offset)

    def close(self) -> None:
        self.log.close()
        self.snapshots.close()
        close = getattr(self.cursors, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> World:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def local_world(
    data_dir: str | Path = ".little",
    *,
    partitions: int = 12,
    synchronous: str = "FULL",
    artifacts_dir: str | Path | None = None,
    artifacts_url: str | None = None,
    redact: Redactor | None = None,
) -> World:
    """The embedded world: an sqlite log under ``data_dir``, and a directory artifact store
    (``<data_dir>/artifacts`` unless ``artifacts_dir`` says otherwise), or the store
    ``artifacts_url`` names (``s3://bucket/prefix``: ``open_artifact_store``)."""
    root = Path(data_dir)
    artifacts = _artifacts(artifacts_url, artifacts_dir or root / "artifacts")
    log = EmbeddedEventLog(root / "log.sqlite3", partitions=partitions, synchronous=synchronous)
    return World(
        log=log,
        cursors=EmbeddedCursorStore(log),
        artifacts=artifacts,
        codec=EventCodec(),
        snapshots=EmbeddedSnapshotStore(root / "log.sqlite3"),
        description=f"embedded:{root}",
        redact=redact,
    )


def kafka_world(
    bootstrap_servers: str,
    *,
    schema_registry_url: str | None = None,
    artifacts_dir: str | Path = ".little/artifacts",
    artifacts_url: str | None = None,
    provision: bool = False,
    producer_profile: str = "latency",
    topics: TopicNames | None = None,
    topic_prefix: str = "",
    redact: Redactor | None = None,
    **librdkafka_config: Any,
) -> World:
    """A world on Kafka or Redpanda.

    Extra keyword arguments are librdkafka settings with ``_`` for ``.`` (``sasl_mechanism``
    becomes ``sasl.mechanism``) and pass through unchanged, so SASL/SSL work as in any client.
    With ``schema_registry_url`` set, events are written in the Confluent wire format.
    ``provision=True`` creates missing topics from ``deploy/topics.yaml`` first.
    ``topics`` names the topics (default: the names in ``topics.yaml``); ``topic_prefix``
    prepends to every name (several worlds on one cluster). ``artifacts_url``
    (``s3://bucket/prefix``) wins over ``artifacts_dir``: the store every host can reach.
    ``redact`` strips secrets before they are written (``little.redaction``). Security
    settings (SASL, TLS) also come from ``LITTLE_KAFKA_*``
    (``little.settings.KafkaClientSettings``); keyword arguments win.
    """
    from little.log import load_topic_specs
    from little.log.kafka import KafkaCursorStore, KafkaEventLog, KafkaSnapshotStore

    artifacts = _artifacts(artifacts_url, artifacts_dir)
    config = {key.replace("_", "."): value for key, value in librdkafka_config.items()}
    names = (topics or TopicNames()).prefixed(topic_prefix)
    if provision:
        from little.log.kafka import apply_topics

        apply_topics(bootstrap_servers, names.specs(load_topic_specs()), config=config)
    runs = names.runs
    registry = None
    if schema_registry_url:
        from confluent_kafka.schema_registry import SchemaRegistryClient

        # new_client gives the in-memory registry for mock:// URLs (tests) and a real one else
        registry = SchemaRegistryClient.new_client({"url": schema_registry_url})
    log = KafkaEventLog(
        bootstrap_servers,
        topic=runs,
        index_topic=names.runs_index,
        config=config,
        producer_profile=producer_profile,
    )
    try:
        codec = EventCodec(registry=registry, topic=runs)
        codec.register_all()  # now, not on the first append of each type (on an event loop)
        return World(
            log=log,
            cursors=KafkaCursorStore(bootstrap_servers, topic=runs, config=config),
            artifacts=artifacts,
            codec=codec,
            snapshots=KafkaSnapshotStore(bootstrap_servers, topic=names.snapshots, config=config),
            description=f"kafka:{bootstrap_servers} topic {runs}",
            redact=redact,
        )
    except BaseException:
        log.close()  # its producer and consumers, when a later part cannot be built
        raise


def _artifacts(url: str | None, directory: str | Path) -> ArtifactBackend:
    return open_artifact_store(url) if url else ArtifactStore(Path(directory))
